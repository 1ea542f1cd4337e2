//! The commits' written-out trees (`trees/<sha>/` in the repository's cache): each written
//! once, atomically, and read by every app; the unused ones removed. A file is written once
//! whatever the commits that hold it: the trees' files are hard links to one file per blob
//! (`blobs/<id>`), so a new commit writes its changed files and links the rest, as `git
//! checkout` rewrites only what changed.
use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStrExt;

use git2::{Oid, Repository};

use super::commits::commit_info;
use super::{repository, source_dir, Checkout};
use crate::config::AgentConfig;

/// The tree of commit `sha` from the repository's cache, written out if it is not (a
/// rollback renders the commit the app was last synced to).
pub fn tree_at(state_dir: &Path, repo: &str, sha: &str, limits: TreeLimits) -> Option<Checkout> {
    let source = source_dir(state_dir, repo);
    let git = repository(&source).ok()?;
    let commit = git.find_commit(Oid::from_str(sha).ok()?).ok()?;
    let dir = write_tree(&git, &commit, &source.join("trees"), limits, &[]).ok()?;
    Some(Checkout {
        dir,
        source,
        commit: commit_info(&commit),
        tag: None,
    })
}

/// How much of a commit is written out. A commit is measured from its trees and the
/// objects' headers before anything is written or a blob inflated: more entries than
/// `files`, or more than `bytes` in the files written whole, and nothing is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// The most files and folders (10 × `agent.max_objects`).
    pub files: usize,
    /// The most files under the paths of the app that fetches (`agent.max_objects`):
    /// counted before anything is written.
    pub app_files: usize,
    /// The most bytes of the files written whole (16 × `agent.max_app_size`).
    pub bytes: u64,
    /// A larger blob is never inflated: it is written as a file of its size that holds
    /// nothing on disk (a hole), which a render refuses by its size, as it would the real
    /// one (`agent.max_file_size`).
    pub blob: u64,
}

impl TreeLimits {
    /// The limits that follow from the agent's caps.
    pub fn of(agent: &AgentConfig) -> Self {
        TreeLimits {
            files: agent.max_objects.saturating_mul(10),
            app_files: agent.max_objects,
            bytes: agent.max_app_size.saturating_mul(16),
            blob: agent.max_file_size,
        }
    }
}

/// The longest link target written (Linux's own `PATH_MAX`).
const MAX_LINK: usize = 4096;

impl Default for TreeLimits {
    /// The limits of the agent's default caps.
    fn default() -> Self {
        TreeLimits::of(&AgentConfig::default())
    }
}

/// Why a commit's tree was not written out.
#[derive(Debug)]
pub(super) enum TreeError {
    /// Past a limit, or an entry git itself would not write (nothing was written).
    Refused(String),
    /// The cache or the disk failed.
    Io(std::io::Error),
}

/// One entry to write, found by [`measure`].
enum Item {
    Folder(PathBuf),
    /// A file, its blob, whether it runs, and whether the blob's file is in the store.
    File(PathBuf, Oid, bool, bool),
    /// A blob past [`TreeLimits::blob`]: a hole of its size.
    Hole(PathBuf, u64),
    Link(PathBuf, Oid),
}

/// Writes the commit's tree to `trees/<sha>` unless it is there (then marks it used).
/// Measured first ([`TreeLimits`]), then written to a temporary folder, so no reader sees
/// half a tree.
pub(super) fn write_tree(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    trees: &Path,
    limits: TreeLimits,
    paths: &[String],
) -> Result<PathBuf, TreeError> {
    let tree = commit
        .tree()
        .map_err(|e| TreeError::Io(std::io::Error::other(e)))?;
    count_under(repo, &tree, paths, limits)?;
    let dir = trees.join(commit.id().to_string());
    if dir.is_dir() {
        let touched =
            std::fs::File::open(&dir).and_then(|d| d.set_modified(std::time::SystemTime::now()));
        return touched.map(|()| dir).map_err(TreeError::Io);
    }
    let blobs = blobs_dir(trees);
    let items = measure(repo, &tree, limits, &blobs)?;
    let tmp = trees.join(format!(".{}.{}", commit.id(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    // The files in it take the process's umask (see `state::restrict_umask`).
    let written = crate::state::private_dir(&tmp)
        .and_then(|()| crate::state::private_dir(&blobs))
        .and_then(|()| write_items(repo, &tmp, &items, &blobs))
        .and_then(|()| std::fs::rename(&tmp, &dir));
    match written {
        Ok(()) => Ok(dir),
        Err(e) => {
            // A failed write leaves nothing behind; a rename lost to another process
            // that wrote the same tree meanwhile is no failure.
            let _ = std::fs::remove_dir_all(&tmp);
            if dir.is_dir() {
                Ok(dir)
            } else {
                Err(TreeError::Io(e))
            }
        }
    }
}

/// Refuses a tree whose `paths` (an app's, relative to the root; `.` the root) hold more
/// than [`TreeLimits::app_files`] files, counted from the tree objects alone (no blob is
/// read, nothing written; a subtree repeated under many names is counted each time, so a
/// few hundred bytes of trees that would write 10^5 files are refused at the bound).
pub(super) fn count_under(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    paths: &[String],
    limits: TreeLimits,
) -> Result<(), TreeError> {
    let io = |e: git2::Error| TreeError::Io(std::io::Error::other(e));
    let mut roots: Vec<Oid> = Vec::new();
    let mut files = 0usize;
    for path in paths {
        let path = path.trim_matches('/').trim_start_matches("./");
        if path.is_empty() || path == "." {
            roots.push(tree.id());
            continue;
        }
        match tree.get_path(Path::new(path)) {
            Ok(entry) if entry.filemode() == 0o040000 => roots.push(entry.id()),
            Ok(_) => files += 1,
            // A path the commit lacks is the render's to say.
            Err(_) => {}
        }
    }
    let mut folders = roots;
    while let Some(id) = folders.pop() {
        for entry in repo.find_tree(id).map_err(io)?.iter() {
            match entry.filemode() {
                0o040000 => folders.push(entry.id()),
                0o160000 => {}
                _ => files += 1,
            }
            if files > limits.app_files {
                return Err(TreeError::Refused(format!(
                    "the app's paths ({}) hold more than {} files (agent.max_objects); nothing was written",
                    paths.join(", "),
                    limits.app_files
                )));
            }
        }
    }
    Ok(())
}

/// What the tree holds, measured from the trees and the objects' headers (no blob is
/// inflated; a blob whose file is in `blobs` is measured by that file): refused past
/// `limits`, or at a name git would not check out.
fn measure(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    limits: TreeLimits,
    blobs: &Path,
) -> Result<Vec<Item>, TreeError> {
    let odb = repo
        .odb()
        .map_err(|e| TreeError::Io(std::io::Error::other(e)))?;
    let (mut items, mut bytes) = (Vec::new(), 0u64);
    let mut folders = vec![(PathBuf::new(), tree.id())];
    while let Some((at, id)) = folders.pop() {
        let folder = repo
            .find_tree(id)
            .map_err(|e| TreeError::Io(std::io::Error::other(e)))?;
        for entry in folder.iter() {
            let name = entry.name().unwrap_or_default();
            check_name(name, &at)?;
            if items.len() >= limits.files {
                return Err(TreeError::Refused(format!(
                    "it holds more than {} files and folders (10 × agent.max_objects); nothing was written",
                    limits.files
                )));
            }
            let path = at.join(name);
            let item = match entry.filemode() {
                0o040000 => {
                    folders.push((path.clone(), entry.id()));
                    Item::Folder(path)
                }
                // A submodule: an empty folder, as git leaves it.
                0o160000 => Item::Folder(path),
                0o120000 => link_item(&odb, path, entry.id())?,
                mode => {
                    let file = (path, entry.id(), mode & 0o111 != 0);
                    file_item(&odb, blobs, file, limits, &mut bytes)?
                }
            };
            items.push(item);
        }
    }
    Ok(items)
}

/// Refuses an entry named `name` in the folder `at` that git would not check out.
fn check_name(name: &str, at: &Path) -> Result<(), TreeError> {
    if matches!(name, "" | "." | "..") || name.eq_ignore_ascii_case(".git") {
        return Err(TreeError::Refused(format!(
            "it holds an entry named {name:?} in {:?}, which git does not check out",
            at.display().to_string()
        )));
    }
    Ok(())
}

/// The link `path` to blob `id`, refused when its target is longer than [`MAX_LINK`].
fn link_item(odb: &git2::Odb<'_>, path: PathBuf, id: Oid) -> Result<Item, TreeError> {
    let (size, _) = odb
        .read_header(id)
        .map_err(|e| TreeError::Io(std::io::Error::other(e)))?;
    if size > MAX_LINK {
        return Err(TreeError::Refused(format!(
            "its link {} points at a target of {size} bytes; refused",
            path.display()
        )));
    }
    Ok(Item::Link(path, id))
}

/// The file `path` of blob `id` (a hole past `limits.blob`), its size added to `bytes`:
/// refused once they pass `limits.bytes`. Its size is that of the blob's file in `blobs`
/// when there is one (a plain file: what would be linked), else the object's header.
fn file_item(
    odb: &git2::Odb<'_>,
    blobs: &Path,
    (path, id, runs): (PathBuf, Oid, bool),
    limits: TreeLimits,
    bytes: &mut u64,
) -> Result<Item, TreeError> {
    let stored = std::fs::symlink_metadata(blobs.join(stored_name(id, runs)))
        .ok()
        .filter(std::fs::Metadata::is_file);
    let size = match &stored {
        Some(file) => file.len(),
        None => {
            odb.read_header(id)
                .map_err(|e| TreeError::Io(std::io::Error::other(e)))?
                .0 as u64
        }
    };
    if size > limits.blob {
        return Ok(Item::Hole(path, size));
    }
    *bytes += size;
    if *bytes > limits.bytes {
        return Err(TreeError::Refused(format!(
            "its files hold more than {} bytes (16 × agent.max_app_size); nothing was written",
            limits.bytes
        )));
    }
    Ok(Item::File(path, id, runs, stored.is_some()))
}

/// The name of the file of blob `id` in the store (`-x`: one that runs).
fn stored_name(id: Oid, runs: bool) -> String {
    if runs {
        format!("{id}-x")
    } else {
        id.to_string()
    }
}

/// The files of the blobs the trees hold, one per blob (and whether it runs), beside the
/// trees.
fn blobs_dir(trees: &Path) -> PathBuf {
    trees.with_file_name("blobs")
}

/// Writes what [`measure`] found under `dir`: its folders, then the files whose blob is in
/// `blobs`, linked from there on every core ([`link_stored`]), then what git itself must
/// write. A file written from git is linked into `blobs` for the trees to come. Only a file
/// complete in a tree is ever linked into `blobs`, and only a plain file (as measured) is
/// linked from it.
fn write_items(repo: &Repository, dir: &Path, items: &[Item], blobs: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for item in items {
        if let Item::Folder(path) = item {
            crate::state::private_dir(&dir.join(path))?;
        }
    }
    let stored: Vec<&Item> = (items.iter())
        .filter(|i| matches!(i, Item::File(.., true)))
        .collect();
    let unlinked = link_stored(dir, blobs, &stored);
    let rest = (items.iter()).filter(|i| !matches!(i, Item::Folder(_) | Item::File(.., true)));
    let blob = |id: Oid| repo.find_blob(id).map_err(std::io::Error::other);
    for item in rest.chain(unlinked) {
        match item {
            Item::Folder(_) => {}
            Item::File(path, id, runs, _) => {
                let path = dir.join(path);
                std::fs::write(&path, blob(*id)?.content())?;
                if *runs {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))?;
                }
                // A file system without hard links writes every file, as before.
                let _ = std::fs::hard_link(&path, blobs.join(stored_name(*id, *runs)));
            }
            Item::Hole(path, size) => std::fs::File::create(dir.join(path))?.set_len(*size)?,
            Item::Link(path, id) => {
                let target = blob(*id)?;
                let target = std::ffi::OsStr::from_bytes(target.content());
                std::os::unix::fs::symlink(target, dir.join(path))?;
            }
        }
    }
    Ok(())
}

/// Links each of `stored` (files whose blob is in `blobs`) into `dir` from `blobs`, the
/// work spread over the cores (one per 1000 files at most); the ones not linked, for git
/// to write. A new commit that changes a few of its files links all the others.
fn link_stored<'i>(dir: &Path, blobs: &Path, stored: &[&'i Item]) -> Vec<&'i Item> {
    let link = |item: &Item| match item {
        Item::File(path, id, runs, _) => {
            std::fs::hard_link(blobs.join(stored_name(*id, *runs)), dir.join(path)).is_ok()
        }
        _ => false,
    };
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let threads = cores.min(stored.len() / 1000).max(1);
    if threads == 1 {
        return stored.iter().copied().filter(|i| !link(i)).collect();
    }
    std::thread::scope(|scope| {
        let parts: Vec<_> = stored
            .chunks(stored.len().div_ceil(threads))
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .copied()
                        .filter(|i| !link(i))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|linking| {
                linking
                    .join()
                    .unwrap_or_else(|e| std::panic::resume_unwind(e))
            })
            .collect()
    })
}

/// Removes the trees [`crate::source::cache::remove_old_trees`] removes; then the blobs'
/// files that no tree links to any more.
pub(super) fn prune_trees(trees: &Path) {
    if crate::source::cache::remove_old_trees(trees) {
        prune_blobs(&blobs_dir(trees));
    }
}

/// Removes the files of `blobs` that only the store itself still links to.
fn prune_blobs(blobs: &Path) {
    use std::os::unix::fs::MetadataExt;
    let unlinked = std::fs::read_dir(blobs)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.metadata().is_ok_and(|m| !m.is_file() || m.nlink() == 1));
    for entry in unlinked {
        let _ = std::fs::remove_file(entry.path());
    }
}
