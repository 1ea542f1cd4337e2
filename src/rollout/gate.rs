//! A running canary as berth's commands see and steer it. The sync driving it keeps where
//! it stands in `state_dir/canaries/<app>.json` (the step, its weight, the pods of each
//! version, what holds it, each check's last measurement) for `berth status`; `berth
//! promote APP` and `berth abort APP` leave a request beside it, `<app>.asked`, naming the
//! version and the step they were given at, which the driver takes within a second — a
//! request for another version or step (one the canary has moved past) is dropped.
//! Both files are read bounded and as untrusted as any file in `state_dir`.

use std::io::Read;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::history::Measurement;

/// The most read of either file.
const MAX_FILE: u64 = 64 * 1024;

/// Where a running canary stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standing {
    /// Its Deployment, as kubectl names it (`deployment.apps/web -n shop`).
    pub deployment: String,
    /// The new version (its pod-template hash).
    pub version: String,
    /// The step it is at, from 1.
    pub step: usize,
    /// How many steps it has.
    pub of: usize,
    /// The step's weight (%).
    pub weight: u8,
    /// Ready pods of the new version once the step stood.
    pub new: i32,
    /// Ready pods of the old version.
    pub old: i32,
    /// What holds the step now (`paused until berth promote`, `analysis errors`); `None`
    /// while its pods are being made to stand.
    pub holding: Option<String>,
    /// Its pause runs: `berth promote` ends it.
    pub paused: bool,
    /// Each check's last measurement at this step.
    pub checks: Vec<LastMeasurement>,
    /// When the step began.
    pub since: Timestamp,
}

/// A check's last measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastMeasurement {
    /// The `[[analysis]]` name.
    pub check: String,
    /// What it read.
    #[serde(flatten)]
    pub measurement: Measurement,
}

/// What `berth promote` or `berth abort` asks of a canary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// End the step's pause.
    Promote,
    /// Abort the canary: the old version back at its full size.
    Abort,
}

/// A request left for the driver.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    /// What is asked.
    pub verb: Verb,
    /// The version it was asked of.
    pub version: String,
    /// The step it was asked at, from 1.
    pub step: usize,
    /// Who asked (`ops@host`).
    pub by: String,
}

fn path(state_dir: &Path, app: &str, ending: &str) -> PathBuf {
    state_dir.join("canaries").join(format!("{app}.{ending}"))
}

fn write(state_dir: &Path, app: &str, ending: &str, value: &impl Serialize) -> std::io::Result<()> {
    let path = path(state_dir, app, ending);
    if let Some(folder) = path.parent() {
        crate::state::private_dir(folder)?;
    }
    let text = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    crate::state::write_private(&path, &text)
}

fn read<T: DeserializeOwned>(state_dir: &Path, app: &str, ending: &str) -> Option<T> {
    let mut text = Vec::new();
    let file = crate::state::open_state(&path(state_dir, app, ending)).ok()?;
    file.take(MAX_FILE).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

fn remove(state_dir: &Path, app: &str, ending: &str) {
    match std::fs::remove_file(path(state_dir, app, ending)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            tracing::warn!(app, error = %e, "cannot remove a canary's file in state_dir");
        }
        _ => {}
    }
}

/// Notes where `app`'s canary stands (a failure to is logged: the canary goes on).
pub fn keep(state_dir: &Path, app: &str, standing: &Standing) {
    if let Err(e) = write(state_dir, app, "json", standing) {
        tracing::warn!(app, error = %e, "cannot note where the canary stands");
    }
}

/// Where `app`'s canary stands, when one runs (or was cut short and is held).
pub fn standing(state_dir: &Path, app: &str) -> Option<Standing> {
    read(state_dir, app, "json")
}

/// Forgets `app`'s canary and any request left for it: it ended.
pub fn clear(state_dir: &Path, app: &str) {
    remove(state_dir, app, "json");
    remove(state_dir, app, "asked");
}

/// Leaves `asked` for `app`'s canary.
///
/// # Errors
/// `state_dir` cannot be written.
pub fn ask(state_dir: &Path, app: &str, asked: &Asked) -> std::io::Result<()> {
    write(state_dir, app, "asked", asked)
}

/// Whether a request is still left for `app`'s canary (the driver has not taken it).
pub fn is_asked(state_dir: &Path, app: &str) -> bool {
    path(state_dir, app, "asked").exists()
}

/// Takes the request left for `app`'s canary at `version`'s step `step`; any other is
/// dropped.
pub fn take(state_dir: &Path, app: &str, version: &str, step: usize) -> Option<Asked> {
    let asked: Option<Asked> = read(state_dir, app, "asked");
    if asked.is_some() || path(state_dir, app, "asked").exists() {
        remove(state_dir, app, "asked");
    }
    asked.filter(|a| a.version == version && a.step == step)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standing() -> Standing {
        Standing {
            deployment: "deployment.apps/web -n shop".into(),
            version: "5f7c9".into(),
            step: 1,
            of: 3,
            weight: 20,
            new: 2,
            old: 8,
            holding: Some("paused until berth promote".into()),
            paused: true,
            checks: Vec::new(),
            since: Timestamp::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_request_is_taken_once_and_only_by_its_own_step() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        keep(state, "web", &standing());
        assert_eq!(super::standing(state, "web"), Some(standing()));
        let asked = |step| Asked {
            verb: Verb::Promote,
            version: "5f7c9".into(),
            step,
            by: "ops@host".into(),
        };
        ask(state, "web", &asked(1)).unwrap();
        assert!(is_asked(state, "web"));
        assert_eq!(take(state, "web", "5f7c9", 1), Some(asked(1)));
        assert_eq!(take(state, "web", "5f7c9", 1), None, "taken once");
        // Asked at step 1, seen at step 2 (the step moved on before it was taken).
        ask(state, "web", &asked(1)).unwrap();
        assert_eq!(take(state, "web", "5f7c9", 2), None);
        assert!(!is_asked(state, "web"), "a stale request is dropped");
        // Junk in the file is no request, and is dropped.
        std::fs::write(path(state, "web", "asked"), b"{\"verb\": \"delete\"}").unwrap();
        assert_eq!(take(state, "web", "5f7c9", 2), None);
        assert!(!is_asked(state, "web"));
        clear(state, "web");
        assert_eq!(super::standing(state, "web"), None);
    }
}
