//! What image updates remember between scans, in `state_dir/images/state.json`: per
//! policy, the tags whose rollout failed and was rolled back (in which app), the fields a
//! person set back by hand (paused), the tag berth wrote last into each field, and the
//! last scan. Read and written under a lock (`berth images resume` writes it beside the
//! agent), bounded. A file that cannot be read is never written over: it holds what keeps
//! a failed tag out of git, so write-backs wait until a person moves it aside.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The most the file may hold: a larger one is not berth's.
const MAX_STATE: u64 = 8 << 20;
/// Failed tags kept per policy and app (the oldest forgotten first).
const MAX_FAILED: usize = 100;

/// Every policy's state.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    #[serde(default)]
    pub policies: BTreeMap<String, PolicyState>,
}

/// One policy's state.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyState {
    /// Tags whose rollout failed in an app and was rolled back: never written again into
    /// that app's fields.
    #[serde(default)]
    pub failed: Vec<Failure>,
    /// Fields (`app:path#n`) a person set to an older tag than berth wrote: the tag they
    /// set. berth leaves them alone until resumed or changed again by hand.
    #[serde(default)]
    pub paused: BTreeMap<String, String>,
    /// The tag berth wrote last into each field.
    #[serde(default)]
    pub written: BTreeMap<String, String>,
    /// The last scan of the registry.
    pub seen: Option<Seen>,
}

/// A tag's failed rollout in one app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub tag: String,
    pub app: String,
    /// The sync record that rolled it back.
    pub record: String,
    pub at: Timestamp,
}

/// A scan of the policy's repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub at: Timestamp,
    /// How many tags the registry listed.
    pub tags: usize,
    /// The newest tag the policy considers (in the apps where it failed, the next one
    /// goes in its place).
    pub latest: Option<String>,
    /// Why the scan failed, when it did.
    pub error: Option<String>,
}

impl PolicyState {
    /// The newest tag the last scan saw, as people read it: the tag, `-` (none), or why
    /// there is none.
    pub fn latest_said(&self) -> String {
        match &self.seen {
            Some(s) if s.error.is_some() => "(registry unreachable)".into(),
            Some(s) => s.latest.clone().unwrap_or_else(|| "-".into()),
            None => "(not scanned yet)".into(),
        }
    }

    /// The failed tags, as [`failed_said`] says them.
    pub fn failed_said(&self) -> String {
        failed_said(&self.failed)
    }

    /// Whether `tag` failed in `app`.
    pub fn failed_in(&self, app: &str, tag: &str) -> bool {
        self.failed.iter().any(|f| f.app == app && f.tag == tag)
    }

    /// Notes a failed rollout (the oldest failure forgotten past the bound); whether it is
    /// new.
    pub fn fail(&mut self, failure: Failure) -> bool {
        if self.failed_in(&failure.app, &failure.tag) {
            return false;
        }
        self.failed.push(failure);
        self.failed.sort_by_key(|f| f.at);
        let over = self.failed.len().saturating_sub(MAX_FAILED);
        self.failed.drain(..over);
        true
    }

    /// Forgets that `tag` failed, in every app; whether it had.
    pub fn forget(&mut self, tag: &str) -> bool {
        let before = self.failed.len();
        self.failed.retain(|f| f.tag != tag);
        self.failed.len() != before
    }
}

impl State {
    /// Notes that berth wrote `tag` into `field` for `policy`.
    pub fn wrote(&mut self, policy: &str, field: &str, tag: &str) {
        let policy = self.policies.entry(policy.to_string()).or_default();
        policy.written.insert(field.to_string(), tag.to_string());
    }

    /// Forgets what it holds of the fields of `apps` that are not in `kept` (a marker
    /// removed, a file renamed): the state holds the fields that exist.
    pub fn keep_fields(&mut self, apps: &[&str], kept: &std::collections::HashSet<&str>) {
        let owned = |field: &str| apps.iter().any(|a| field.starts_with(&format!("{a}:")));
        for policy in self.policies.values_mut() {
            policy
                .written
                .retain(|f, _| !owned(f) || kept.contains(f.as_str()));
            policy
                .paused
                .retain(|f, _| !owned(f) || kept.contains(f.as_str()));
        }
    }
}

/// Failed tags, each with its app (`1.5.0 (shop)`), joined by `,` (`-`: none).
pub fn failed_said(failed: &[Failure]) -> String {
    let said: Vec<String> = (failed.iter())
        .map(|f| format!("{} ({})", f.tag, f.app))
        .collect();
    match said.is_empty() {
        true => "-".into(),
        false => said.join(","),
    }
}

/// The state file of `state_dir`.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("images").join("state.json")
}

/// Reads the state, changes it with `change` and writes it back, under the state's lock:
/// what `change` returns.
///
/// # Errors
/// The folder cannot be made, locked or written.
pub fn update<T>(state_dir: &Path, change: impl FnOnce(&mut State) -> T) -> std::io::Result<T> {
    let file = path(state_dir);
    let dir = file.parent().unwrap_or(state_dir);
    crate::state::private_dir(dir)?;
    let _lock = crate::state::lock(&dir.join("lock"))?;
    let mut state = load(state_dir)?;
    let before = state.clone();
    let out = change(&mut state);
    if state != before {
        let bytes = serde_json::to_vec_pretty(&state).map_err(std::io::Error::other)?;
        crate::state::write_private(&file, &bytes)?;
    }
    Ok(out)
}

/// The state as last written (empty when there is none).
///
/// # Errors
/// The file is there but cannot be read, is too large or is not the state berth writes:
/// the error names it and says what to do.
pub fn load(state_dir: &Path) -> std::io::Result<State> {
    let file = path(state_dir);
    let damaged = |why: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: {why}; it holds the failed tags and the paused fields, so berth writes no image update until it is fixed or moved aside (then every field starts unpaused and no tag is known to have failed)",
                file.display()
            ),
        )
    };
    let bytes = match crate::manifest::read::read_capped(crate::state::open_state(&file), MAX_STATE)
    {
        Ok(bytes) => bytes,
        Err(crate::manifest::read::ReadError::Io(e))
            if e.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(State::default());
        }
        Err(e) => return Err(damaged(e.to_string())),
    };
    serde_json::from_slice(&bytes).map_err(|e| damaged(format!("not berth's state ({e})")))
}

/// The state as last written, for showing (empty when there is none or it cannot be read,
/// with a warning).
pub fn read(state_dir: &Path) -> State {
    load(state_dir).unwrap_or_else(|e| {
        tracing::warn!("the image updates' state is unreadable: {e}");
        State::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(tag: &str, app: &str, at: i64) -> Failure {
        Failure {
            tag: tag.into(),
            app: app.into(),
            record: "r".into(),
            at: Timestamp::from_second(at).unwrap(),
        }
    }

    #[test]
    fn failed_tags_are_per_app_bounded_and_the_oldest_forgotten() {
        let mut state = PolicyState::default();
        assert!(state.fail(failure("1.0.0", "shop", 0)));
        assert!(!state.fail(failure("1.0.0", "shop", 5)));
        assert!(state.failed_in("shop", "1.0.0"));
        assert!(!state.failed_in("cart", "1.0.0"));
        for n in 1..=MAX_FAILED {
            state.fail(failure(&format!("1.0.{n}"), "shop", n as i64));
        }
        assert_eq!(state.failed.len(), MAX_FAILED);
        assert!(!state.failed_in("shop", "1.0.0"));
        assert!(state.forget("1.0.1") && !state.forget("1.0.1"));
    }

    #[test]
    fn the_state_survives_a_round_trip_and_a_damaged_file_is_never_written_over() {
        let dir = tempfile::tempdir().unwrap();
        update(dir.path(), |s| {
            s.policies
                .entry("shop".into())
                .or_default()
                .paused
                .insert("f".into(), "1".into());
        })
        .unwrap();
        assert_eq!(read(dir.path()).policies["shop"].paused["f"], "1");
        for damaged in ["{".into(), "x".repeat(MAX_STATE as usize + 1)] {
            std::fs::write(path(dir.path()), &damaged).unwrap();
            let error = update(dir.path(), |s| s.wrote("shop", "f", "2")).unwrap_err();
            assert!(error.to_string().contains("state.json"), "{error}");
            assert!(error.to_string().contains("moved aside"), "{error}");
            assert_eq!(std::fs::read_to_string(path(dir.path())).unwrap(), damaged);
            assert_eq!(read(dir.path()), State::default());
        }
    }
}
