//! The commits' written-out trees (`trees/<sha>/` in the repository's cache): each written
//! once, atomically, and read by every app; the unused ones removed.
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{Oid, Repository};

use super::commits::commit_info;
use super::{repository, source_dir, Checkout};

/// The tree of commit `sha` from the repository's cache, written out if it is not (a
/// rollback renders the commit the app was last synced to).
pub fn tree_at(state_dir: &Path, repo: &str, sha: &str) -> Option<Checkout> {
    let source = source_dir(state_dir, repo);
    let git = repository(&source).ok()?;
    let commit = git.find_commit(Oid::from_str(sha).ok()?).ok()?;
    let dir = write_tree(&git, &commit, &source.join("trees")).ok()?;
    Some(Checkout {
        dir,
        source,
        commit: commit_info(&commit),
        tag: None,
    })
}

/// Trees kept whatever their age; older ones go once unused for [`TREE_GRACE`].
const TREES_KEPT: usize = 4;
/// A tree no sync has asked for in this long is removed (unless among the newest).
const TREE_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Writes the commit's tree to `trees/<sha>` unless it is there (then marks it used).
/// Written to a temporary folder first, so no reader sees half a tree.
pub(super) fn write_tree(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    trees: &Path,
) -> Result<PathBuf, std::io::Error> {
    let dir = trees.join(commit.id().to_string());
    if dir.is_dir() {
        std::fs::File::open(&dir)?.set_modified(std::time::SystemTime::now())?;
        return Ok(dir);
    }
    let tmp = trees.join(format!(".{}.{}", commit.id(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    // The files in it take the process's umask (see `state::restrict_umask`).
    crate::state::private_dir(&tmp)?;
    let written = repo
        .checkout_tree(
            commit.as_object(),
            Some(
                CheckoutBuilder::new()
                    .force()
                    .update_index(false)
                    .target_dir(&tmp),
            ),
        )
        .map_err(std::io::Error::other)
        .and_then(|()| std::fs::rename(&tmp, &dir));
    match written {
        Ok(()) => Ok(dir),
        Err(e) => {
            // A failed checkout leaves nothing behind; a rename lost to another process
            // that wrote the same tree meanwhile is no failure.
            let _ = std::fs::remove_dir_all(&tmp);
            if dir.is_dir() {
                Ok(dir)
            } else {
                Err(e)
            }
        }
    }
}

/// The written-out trees, oldest use first.
fn trees_by_age(trees: &Path) -> Vec<(std::time::SystemTime, PathBuf)> {
    let mut found: Vec<_> = std::fs::read_dir(trees)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort();
    found
}

/// Removes trees beyond the newest [`TREES_KEPT`] that nobody used for [`TREE_GRACE`], and
/// half-written ones (`.SHA.PID`) that a killed process left for as long.
pub(super) fn prune_trees(trees: &Path) {
    let abandoned = std::fs::read_dir(trees)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > TREE_GRACE))
        });
    for entry in abandoned {
        let _ = std::fs::remove_dir_all(entry.path());
    }
    let found = trees_by_age(trees);
    let old = found.len().saturating_sub(TREES_KEPT);
    for (used, dir) in &found[..old] {
        if used.elapsed().is_ok_and(|age| age > TREE_GRACE) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
