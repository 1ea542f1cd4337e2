//! What each set listed last, kept in `state_dir/sets/<set>.json`: written when a listing
//! is the commit's, read bounded and without following a link, forgotten with its set.

use std::path::{Path, PathBuf};

use super::{Listed, Listing};
use crate::config::Config;

/// A set's state file is read no further than this (10,000 folders take ~1 MiB; a set
/// makes at most `max_apps`).
const MAX_STATE: u64 = 16 << 20;

pub(super) fn state_path(state_dir: &Path, set: &str) -> PathBuf {
    state_dir.join("sets").join(format!("{set}.json"))
}

/// What `set` listed last; `None` when it never listed, or its state file is not one
/// (said: nothing is removed on its word).
pub fn remembered(state_dir: &Path, set: &str) -> Option<Listed> {
    read_state(state_dir, set).unwrap_or_else(|torn| {
        tracing::warn!(set = %set, "app set {set}: {torn}: nothing is removed on its word");
        None
    })
}

/// A set's state file that is there but not one (torn, damaged, too large, a link).
#[derive(Debug, thiserror::Error)]
#[error("its state file {} is not one ({why})", path.display())]
pub struct TornState {
    /// The file.
    path: PathBuf,
    /// What is wrong with it.
    why: String,
}

/// What `set` listed last (`None`: never listed).
///
/// # Errors
/// Its state file is there but not one.
pub(super) fn read_state(state_dir: &Path, set: &str) -> Result<Option<Listed>, TornState> {
    let path = state_path(state_dir, set);
    let torn = |why: &dyn std::fmt::Display| TornState {
        path: path.clone(),
        why: why.to_string(),
    };
    let file = match crate::state::open_state(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        file => file,
    };
    let text = crate::manifest::read::read_capped(file, MAX_STATE).map_err(|e| torn(&e))?;
    serde_json::from_slice::<Listed>(&text)
        .map(Some)
        .map_err(|e| torn(&e))
}

/// Keeps what `listing` lists, when it is the commit's (a listing with a problem keeps
/// the last one).
pub fn remember(state_dir: &Path, listing: &Listing) {
    if listing.problem.is_some() {
        return;
    }
    let written = serde_json::to_vec(&listing.listed)
        .map_err(std::io::Error::other)
        .and_then(|text| {
            crate::state::private_dir(&state_dir.join("sets"))?;
            crate::state::write_private(&state_path(state_dir, &listing.set), &text)
        });
    if let Err(e) = written {
        tracing::warn!(set = %listing.set, error = %e, "cannot keep what the set listed: its apps are found again at the next listing");
    }
}

/// A set's problem is read no further than this.
const MAX_PROBLEM: u64 = 64 << 10;

fn problem_path(state_dir: &Path, set: &str) -> PathBuf {
    state_dir.join("sets").join(format!("{set}.problem"))
}

/// Keeps why `listing`'s set runs its last apps rather than its commit's — the empty-set
/// guard, a listing that failed — for `berth status` and the page; forgets it when the
/// listing is the commit's.
pub fn note_problem(state_dir: &Path, listing: &Listing) {
    let path = problem_path(state_dir, &listing.set);
    let Some(problem) = &listing.problem else {
        let _ = std::fs::remove_file(&path);
        return;
    };
    let text = problem.to_string();
    if problem_of(state_dir, &listing.set).as_deref() == Some(text.as_str()) {
        return;
    }
    let written = crate::state::private_dir(&state_dir.join("sets"))
        .and_then(|()| crate::state::write_private(&path, text.as_bytes()));
    if let Err(e) = written {
        tracing::warn!(set = %listing.set, error = %e, "cannot keep the set's problem: berth status and the page do not show it");
    }
}

/// Why `set` runs its last apps rather than its commit's, as its last listing said
/// (`None`: that listing was the commit's).
pub fn problem_of(state_dir: &Path, set: &str) -> Option<String> {
    let file = crate::state::open_state(&problem_path(state_dir, set));
    let text = crate::manifest::read::read_capped(file, MAX_PROBLEM).ok()?;
    Some(String::from_utf8_lossy(&text).into_owned())
}

/// Forgets the sets `config` no longer has (their apps were removed with them).
pub fn forget_others(config: &Config) {
    let folder = config.agent.state_dir.join("sets");
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let set = name
            .to_str()
            .and_then(|n| (n.strip_suffix(".json")).or_else(|| n.strip_suffix(".problem")));
        if set.is_some_and(|s| !config.app_sets.iter().any(|c| c.name == s)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
