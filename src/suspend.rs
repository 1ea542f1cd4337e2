//! Suspended apps: `berth suspend APP` (or `suspend = true` in the app's configuration)
//! stops berth from syncing the app — `berth run` sees it within a second (a watch on the
//! markers), with no reload, and `berth sync` says so and leaves it — until `berth resume APP`; its
//! objects stay as they are. A suspension is a file, `state_dir/suspended/<app>` (or
//! `state_dir/suspended-sets/<set>` for every app of a set, present and future), holding
//! one line (who suspended it, and when), so that it outlives restarts.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::config::AppConfig;

/// The longest note read back (the file is read no further).
const MAX_NOTE: u64 = 1024;

/// What a suspension applies to: one app, or an app set — every app it makes, now and
/// later (a folder added to a suspended set is suspended from its first listing).
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// One app, by name.
    App(&'a str),
    /// An app set, by name.
    Set(&'a str),
}

/// Suspends `target`, noting who did and when.
///
/// # Errors
/// `state_dir` cannot be written.
pub fn suspend(state_dir: &Path, target: Target<'_>, by: &str) -> std::io::Result<()> {
    let path = path(state_dir, target);
    if let Some(folder) = path.parent() {
        crate::state::private_dir(folder)?;
    }
    let note = format!(
        "by {by} at {}",
        jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_default()
    );
    crate::state::write_private(&path, note.as_bytes())
}

/// Resumes `target`; `false` when `berth suspend` had not suspended it.
///
/// # Errors
/// The file cannot be removed.
pub fn resume(state_dir: &Path, target: Target<'_>) -> std::io::Result<bool> {
    let path = path(state_dir, target);
    let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
    let removed = if is_dir {
        std::fs::remove_dir_all(&path)
    } else {
        std::fs::remove_file(&path)
    };
    match removed {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Why `app` is suspended (`in the configuration`, `by root@host at …`, or its set's),
/// if it is. A marker that is there but not one — a link, a folder, not text, unreadable
/// — suspends too, and says so: a freeze is never lifted by a damaged file.
pub fn suspended(state_dir: &Path, app: &AppConfig) -> Option<String> {
    if app.suspend {
        return Some("in the configuration".to_string());
    }
    if let Some(why) = marker(&path(state_dir, Target::App(&app.name))) {
        return Some(why);
    }
    let set = app.set.as_deref()?;
    let why = marker(&path(state_dir, Target::Set(set)))?;
    Some(format!("with its app set {set} {why}"))
}

/// The note of the marker at `path`, when there is one (see [`suspended`]).
fn marker(path: &Path) -> Option<String> {
    let damaged = |what: &str| {
        Some(format!(
            "(its marker {} {what}: taken as suspended; berth resume removes it)",
            path.display()
        ))
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return damaged(&format!("cannot be read ({e})")),
        Ok(meta) if !meta.file_type().is_file() => return damaged("is not a plain file"),
        Ok(_) => {}
    }
    let mut note = Vec::new();
    let read = crate::state::open_state(path).and_then(|f| f.take(MAX_NOTE).read_to_end(&mut note));
    if let Err(e) = read {
        return damaged(&format!("cannot be read ({e})"));
    }
    let Ok(note) = std::str::from_utf8(&note) else {
        return damaged("is not text");
    };
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

fn path(state_dir: &Path, target: Target<'_>) -> PathBuf {
    let [apps, sets] = folders(state_dir);
    match target {
        Target::App(app) => apps.join(app),
        Target::Set(set) => sets.join(set),
    }
}

/// The folders of the apps' markers and of the sets'.
pub fn folders(state_dir: &Path) -> [PathBuf; 2] {
    [
        state_dir.join("suspended"),
        state_dir.join("suspended-sets"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, extra: &str) -> AppConfig {
        crate::config::test_app(&format!(
            "name = \"{name}\"\nrepo = \"/srv/git/r\"\n{extra}"
        ))
    }

    #[test]
    fn a_suspension_is_kept_until_resumed_and_says_who() {
        let state = tempfile::tempdir().unwrap();
        let web = app("web", "");
        assert_eq!(suspended(state.path(), &web), None);
        suspend(state.path(), Target::App("web"), "ops@host").unwrap();
        let why = suspended(state.path(), &web).unwrap();
        assert!(why.starts_with("by ops@host at 20"), "{why}");
        assert_eq!(suspended(state.path(), &app("api", "")), None);
        assert!(resume(state.path(), Target::App("web")).unwrap());
        assert!(!resume(state.path(), Target::App("web")).unwrap());
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

    #[test]
    fn a_marker_that_is_not_one_suspends_and_says_so() {
        let state = tempfile::tempdir().unwrap();
        let folder = state.path().join("suspended");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("target"), "by ops").unwrap();
        std::os::unix::fs::symlink(folder.join("target"), folder.join("link")).unwrap();
        std::fs::create_dir(folder.join("dir")).unwrap();
        std::fs::write(folder.join("bytes"), [0xff, 0xfe, b'\n']).unwrap();
        for (name, said) in [
            ("link", "is not a plain file"),
            ("dir", "is not a plain file"),
            ("bytes", "is not text"),
        ] {
            let why = suspended(state.path(), &app(name, "")).expect(name);
            assert!(
                why.contains(said) && why.contains("taken as suspended"),
                "{name}: {why}"
            );
            assert!(resume(state.path(), Target::App(name)).unwrap());
            assert_eq!(suspended(state.path(), &app(name, "")), None, "{name}");
        }
    }

    #[test]
    fn a_suspended_set_suspends_its_apps_present_and_future() {
        let state = tempfile::tempdir().unwrap();
        suspend(state.path(), Target::Set("addons"), "ops@host").unwrap();
        let mut later = app("addons-new-east", "");
        assert_eq!(suspended(state.path(), &later), None, "a written app");
        later.set = Some("addons".into());
        let why = suspended(state.path(), &later).unwrap();
        assert!(
            why.starts_with("with its app set addons by ops@host"),
            "{why}"
        );
        assert!(resume(state.path(), Target::Set("addons")).unwrap());
        assert_eq!(suspended(state.path(), &later), None);
    }
}
