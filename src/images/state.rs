//! What image updates remember between scans, in `state_dir/images/state.json`: per
//! policy, the tags whose rollout failed and was rolled back, the fields a person set back
//! by hand (paused), the tag berth wrote last into each field, and the last scan. Read and
//! written under a lock (`berth images resume` writes it beside the agent), bounded.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The most the file may hold: a larger one is not berth's, and is started over.
const MAX_STATE: u64 = 8 << 20;
/// Failed tags kept per policy (the oldest forgotten first).
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
    /// Tags whose rollout failed and was rolled back: never written again.
    #[serde(default)]
    pub failed: BTreeMap<String, Failure>,
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

/// A tag's failed rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
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
    /// The newest tag the policy considers, failed ones left out.
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

    /// The failed tags, joined by `,` (`-`: none).
    pub fn failed_said(&self) -> String {
        match self.failed.is_empty() {
            true => "-".into(),
            false => self.failed.keys().cloned().collect::<Vec<_>>().join(","),
        }
    }

    /// The first of `newest` (newest first) that did not fail.
    pub fn latest<'t>(&self, newest: &'t [String]) -> Option<&'t String> {
        newest.iter().find(|t| !self.failed.contains_key(*t))
    }

    /// Notes that `tag`'s rollout failed (the oldest failure forgotten past the bound);
    /// whether it is new.
    pub fn fail(&mut self, tag: &str, failure: Failure) -> bool {
        if self.failed.contains_key(tag) {
            return false;
        }
        self.failed.insert(tag.to_string(), failure);
        while self.failed.len() > MAX_FAILED {
            let oldest = (self.failed.iter())
                .min_by_key(|(_, f)| f.at)
                .map(|(t, _)| t.clone());
            if let Some(oldest) = oldest {
                self.failed.remove(&oldest);
            }
        }
        true
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
    let lock = crate::state::private_file()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))?;
    crate::state::flock(&lock, crate::state::Lock::Exclusive)?;
    let mut state = read(state_dir);
    let before = state.clone();
    let out = change(&mut state);
    if state != before {
        let bytes = serde_json::to_vec_pretty(&state).map_err(std::io::Error::other)?;
        crate::state::write_private(&file, &bytes)?;
    }
    Ok(out)
}

/// The state as last written (empty when there is none, or it cannot be read).
pub fn read(state_dir: &Path) -> State {
    let file = path(state_dir);
    let bytes = crate::manifest::read::read_capped(crate::state::open_state(&file), MAX_STATE);
    match bytes {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(file = %file.display(), error = %e, "the image updates' state is unreadable: starting over");
            State::default()
        }),
        Err(_) => State::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(at: i64) -> Failure {
        Failure {
            app: "shop".into(),
            record: "r".into(),
            at: Timestamp::from_second(at).unwrap(),
        }
    }

    #[test]
    fn failed_tags_are_bounded_and_the_oldest_forgotten() {
        let mut state = PolicyState::default();
        assert!(state.fail("1.0.0", failure(0)));
        assert!(!state.fail("1.0.0", failure(5)));
        for n in 1..=MAX_FAILED {
            state.fail(&format!("1.0.{n}"), failure(n as i64));
        }
        assert_eq!(state.failed.len(), MAX_FAILED);
        assert!(!state.failed.contains_key("1.0.0"));
    }

    #[test]
    fn the_state_survives_a_round_trip_and_a_broken_file_starts_over() {
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
        std::fs::write(path(dir.path()), "{").unwrap();
        assert_eq!(read(dir.path()), State::default());
    }
}
