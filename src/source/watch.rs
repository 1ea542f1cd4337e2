//! Sync triggers from a local repository: a `notify` watch on its refs, so a commit (or a
//! push into it) starts a sync within a second.

use std::path::{Path, PathBuf};

use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Watches the git folder of a local repository and sends `()` when a ref changes.
/// Keep the returned watcher alive for as long as events are wanted.
///
/// # Errors
/// The folder cannot be watched.
pub fn watch_refs(repo: &Path, tx: mpsc::Sender<()>) -> notify::Result<RecommendedWatcher> {
    let git_dir = git_dir(repo);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        if event.is_ok_and(|e| e.paths.iter().any(|p| is_ref(p))) {
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
    fn only_ref_paths_trigger() {
        assert!(is_ref(Path::new("/r/.git/refs/heads/main")));
        assert!(is_ref(Path::new("/r/.git/packed-refs")));
        assert!(!is_ref(Path::new("/r/.git/refs/heads/main.lock")));
        assert!(!is_ref(Path::new("/r/.git/objects/ab/cdef")));
        assert!(!is_ref(Path::new("/r/.git/index")));
    }
}
