//! What every source's cache holds, git's or a registry's: `state_dir/sources/<name>-<hash>/`
//! for each source, with the trees of its recent revisions (`trees/<revision>/`), each
//! written once and read by every app, the unused ones removed.

use std::path::{Path, PathBuf};

use super::CommitInfo;

/// A fetched commit and its tree.
#[derive(Debug, Clone)]
pub struct Checkout {
    /// The commit's tree, written out (shared by every app of the repository: read only).
    pub dir: PathBuf,
    /// The repository's cache (see [`source_dir`]).
    pub source: PathBuf,
    /// The commit.
    pub commit: CommitInfo,
    /// The annotated tag object the ref named (its id), when it names one.
    pub tag: Option<String>,
}

/// `PID.N`, a name no other fetch of this process or another uses at the same time (two
/// apps of one source may fetch the same digest at once).
pub fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}.{n}", std::process::id())
}

/// A source's cache: `state_dir/sources/<name>-<hash>`, the name being the key's (a URL's)
/// last segment and the hash the key's.
pub fn source_dir(state_dir: &Path, key: &str) -> PathBuf {
    let name: String = key
        .trim_end_matches('/')
        .trim_end_matches(".git")
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(40)
        .collect();
    let hex = crate::digest::hex(&crate::digest::sha256(key.as_bytes())[..6]);
    state_dir.join("sources").join(format!("{name}-{hex}"))
}

/// Trees kept whatever their age; older ones go once unused for [`TREE_GRACE`].
const TREES_KEPT: usize = 4;
/// A tree no sync has asked for in this long is removed (unless among the newest).
const TREE_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

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
/// half-written ones (`.REVISION.PID`) that a killed process left for as long: whether any
/// was removed.
pub fn remove_old_trees(trees: &Path) -> bool {
    let mut removed = remove_abandoned(trees, |name| name.starts_with('.'));
    let found = trees_by_age(trees);
    let old = found.len().saturating_sub(TREES_KEPT);
    for (used, dir) in &found[..old] {
        if used.elapsed().is_ok_and(|age| age > TREE_GRACE) {
            removed |= std::fs::remove_dir_all(dir).is_ok();
        }
    }
    removed
}

/// Removes the entries of `dir` whose name `abandoned` accepts and that nobody touched for
/// [`TREE_GRACE`] (what a killed process left half-written): whether any was removed.
pub fn remove_abandoned(dir: &Path, abandoned: impl Fn(&str) -> bool) -> bool {
    let old = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| abandoned(&e.file_name().to_string_lossy()))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > TREE_GRACE))
        });
    let mut removed = false;
    for entry in old {
        let path = entry.path();
        removed |= match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path).is_ok(),
            _ => std::fs::remove_file(&path).is_ok(),
        };
    }
    removed
}
