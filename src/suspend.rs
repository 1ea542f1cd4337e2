//! Suspended apps: `berth suspend APP` (or `suspend = true` in the app's configuration)
//! stops berth from syncing the app — `berth run` sees it at the app's next trigger, with
//! no reload, and `berth sync` says so and leaves it — until `berth resume APP`; its
//! objects stay as they are. A suspension is a file, `state_dir/suspended/<app>`, holding
//! one line (who suspended it, and when), so that it outlives restarts.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::config::AppConfig;

/// The longest note read back (the file is read no further).
const MAX_NOTE: u64 = 1024;

/// Suspends `app`, noting who did and when.
///
/// # Errors
/// `state_dir` cannot be written.
pub fn suspend(state_dir: &Path, app: &str, by: &str) -> std::io::Result<()> {
    crate::state::private_dir(&state_dir.join("suspended"))?;
    let note = format!(
        "by {by} at {}",
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_default()
    );
    crate::state::write_private(&path(state_dir, app), note.as_bytes())
}

/// Resumes `app`; `false` when `berth suspend` had not suspended it.
///
/// # Errors
/// The file cannot be removed.
pub fn resume(state_dir: &Path, app: &str) -> std::io::Result<bool> {
    match std::fs::remove_file(path(state_dir, app)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Why `app` is suspended (`in the configuration`, or `by root@host at …`), if it is.
pub fn suspended(state_dir: &Path, app: &AppConfig) -> Option<String> {
    if app.suspend {
        return Some("in the configuration".to_string());
    }
    let mut note = String::new();
    crate::state::open_state(&path(state_dir, &app.name))
        .ok()?
        .take(MAX_NOTE)
        .read_to_string(&mut note)
        .ok()?;
    let line = note.lines().next().unwrap_or_default().trim();
    Some(
        if line.is_empty() {
            "by berth suspend"
        } else {
            line
        }
        .to_string(),
    )
}

fn path(state_dir: &Path, app: &str) -> PathBuf {
    state_dir.join("suspended").join(app)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, extra: &str) -> AppConfig {
        let text = format!("[[app]]\nname = \"{name}\"\nrepo = \"/srv/git/r\"\n{extra}");
        crate::config::parse(&text).unwrap().apps.remove(0)
    }

    #[test]
    fn a_suspension_is_kept_until_resumed_and_says_who() {
        let state = tempfile::tempdir().unwrap();
        let web = app("web", "");
        assert_eq!(suspended(state.path(), &web), None);
        suspend(state.path(), "web", "ops@host").unwrap();
        let why = suspended(state.path(), &web).unwrap();
        assert!(why.starts_with("by ops@host at 20"), "{why}");
        assert_eq!(suspended(state.path(), &app("api", "")), None);
        assert!(resume(state.path(), "web").unwrap());
        assert!(!resume(state.path(), "web").unwrap());
        assert_eq!(suspended(state.path(), &web), None);
    }

    #[test]
    fn the_configuration_suspends_too_and_a_note_is_read_no_further_than_1_kib() {
        let state = tempfile::tempdir().unwrap();
        let why = suspended(state.path(), &app("web", "suspend = true\n"));
        assert_eq!(why.as_deref(), Some("in the configuration"));
        // Written by someone else: a huge line is not taken whole.
        std::fs::create_dir_all(state.path().join("suspended")).unwrap();
        std::fs::write(state.path().join("suspended/web"), "x".repeat(1 << 20)).unwrap();
        let why = suspended(state.path(), &app("web", "")).unwrap();
        assert_eq!(why.len(), 1024);
    }
}
