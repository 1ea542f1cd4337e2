//! Sync triggers from a local repository: a `notify` watch on its refs, so a commit (or a
//! push into it) starts a sync within a second.

use std::path::{Path, PathBuf};

use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Watches the git folder of a local repository and sends `()` when a ref changes.
/// Keep the returned watcher alive for as long as events are wanted.
///
/// # Errors
/// The folder cannot be watched.
pub fn watch_refs(repo: &Path, tx: mpsc::Sender<()>) -> notify::Result<RecommendedWatcher> {
    let git_dir = git_dir(repo);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        if event.is_ok_and(|e| is_change(&e.kind) && e.paths.iter().any(|p| is_ref(p))) {
            // A full channel already holds a trigger: the sync will see this commit too.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(&git_dir, RecursiveMode::Recursive)?;
    Ok(watcher)
}

/// `.git` of a working tree, or the repository itself when it is bare.
fn git_dir(repo: &Path) -> PathBuf {
    let dot_git = repo.join(".git");
    if dot_git.is_dir() {
        dot_git
    } else {
        repo.to_path_buf()
    }
}

/// Only writes count: berth's own fetch *reads* these refs, and inotify reports reads as
/// access events — counting those would make every sync trigger the next.
fn is_change(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
    )
}

/// Paths a new commit touches last: the branch ref, `packed-refs`, `HEAD`.
fn is_ref(path: &Path) -> bool {
    let s = path.to_string_lossy();
    (s.contains("/refs/") && !s.ends_with(".lock"))
        || s.ends_with("/packed-refs")
        || s.ends_with("/HEAD")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_a_ref_is_not_a_change() {
        use notify::event::{AccessKind, CreateKind, ModifyKind};
        assert!(!is_change(&EventKind::Access(AccessKind::Any)));
        assert!(is_change(&EventKind::Create(CreateKind::File)));
        assert!(is_change(&EventKind::Modify(ModifyKind::Any)));
    }

    #[test]
    fn only_ref_paths_trigger() {
        assert!(is_ref(Path::new("/r/.git/refs/heads/main")));
        assert!(is_ref(Path::new("/r/.git/packed-refs")));
        assert!(!is_ref(Path::new("/r/.git/refs/heads/main.lock")));
        assert!(!is_ref(Path::new("/r/.git/objects/ab/cdef")));
        assert!(!is_ref(Path::new("/r/.git/index")));
    }
}
