//! Reading what a render needs under the rules every manifest follows: inside the
//! repository checkout once links are resolved, a regular file, at most the per-file cap;
//! never more bytes than the cap, even from a file that grows while it is read.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Why [`read_capped`] read nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The OS refused.
    #[error("{0}")]
    Io(std::io::Error),
    /// Past the cap (the bytes found).
    #[error("{0} bytes or more, over the cap")]
    TooLarge(u64),
}

/// Why a folder was not copied or walked ([`copy_confined`], [`check_links`]), naming the
/// path in the repository.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Folders nested deeper than copying allows (a link loop).
    #[error("{0} is nested too deep")]
    TooDeep(String),
    /// More entries than a walk takes.
    #[error("{0} holds more than {MAX_WALK} files and folders")]
    TooMany(String),
    /// A file or link that may not be read.
    #[error("{path} {why}")]
    Unreadable {
        /// The path in the repository.
        path: String,
        /// Why.
        why: Unreadable,
    },
    /// Past what the app may read in all.
    #[error("what the render reads is larger than the app may be (agent.max_app_size), at {0}")]
    OverBudget(String),
    /// The OS refused.
    #[error("{path}: {cause}")]
    Io {
        /// The path.
        path: String,
        /// The OS's error.
        cause: std::io::Error,
    },
}

impl CopyError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CopyError + '_ {
        move |cause| CopyError::Io {
            path: path.display().to_string(),
            cause,
        }
    }
}

/// `path` as the repository names it (relative to `root`).
fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Why a file that a render needs (a kustomization, a plugin configuration) was not read.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// After its links are resolved it lies outside the repository.
    #[error("resolves outside the repository; refused unread")]
    Outside,
    /// A folder, FIFO, device or socket.
    #[error("is not a regular file; refused unread")]
    NotAFile,
    /// Over the per-file cap.
    #[error("is {size} bytes, over the {limit}-byte cap (agent.max_file_size); refused unread")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The cap.
        limit: u64,
    },
    /// It does not exist (or a link in it is broken).
    #[error("does not exist")]
    Missing,
    /// The OS refused.
    /// (The OS's error is in the message and not a `source` too: an `Unreadable` is only
    /// ever shown inside a message, and a chain printed whole would show it twice.)
    #[error("cannot read: {0}")]
    Io(std::io::Error),
}

/// `path` with its links resolved, when that lies inside `root` (canonical).
///
/// # Errors
/// [`Unreadable::Outside`], [`Unreadable::Missing`] or the OS's error.
pub fn confined(root: &Path, path: &Path) -> Result<PathBuf, Unreadable> {
    let resolved = path.canonicalize().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unreadable::Missing,
        _ => Unreadable::Io(e),
    })?;
    if resolved.starts_with(root) {
        Ok(resolved)
    } else {
        Err(Unreadable::Outside)
    }
}

/// Checks that `path` (already [`confined`]) is a regular file of at most `limit` bytes.
///
/// # Errors
/// [`Unreadable::NotAFile`], [`Unreadable::TooLarge`] or the OS's error.
pub fn regular_file(path: &Path, limit: u64) -> Result<(), Unreadable> {
    let meta = std::fs::metadata(path).map_err(Unreadable::Io)?;
    if !meta.is_file() {
        return Err(Unreadable::NotAFile);
    }
    if meta.len() > limit {
        return Err(Unreadable::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    Ok(())
}

/// Reads a file a render needs under the rules every manifest follows: inside `root`
/// (canonical) once its links are resolved, a regular file, at most `limit` bytes.
///
/// # Errors
/// Why it was not read.
pub fn read_confined(root: &Path, path: &Path, limit: u64) -> Result<Vec<u8>, Unreadable> {
    let resolved = confined(root, path)?;
    regular_file(&resolved, limit)?;
    read_capped(std::fs::File::open(&resolved), limit).map_err(|e| match e {
        ReadError::Io(e) => Unreadable::Io(e),
        ReadError::TooLarge(size) => Unreadable::TooLarge { size, limit },
    })
}

/// Reads at most `limit` bytes; a file that grew past it since `stat` is refused too.
pub fn read_capped(file: std::io::Result<impl Read>, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::new();
    file.and_then(|r| r.take(limit + 1).read_to_end(&mut bytes))
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Folders deeper than this are not copied (a link loop).
const MAX_COPY_DEPTH: usize = 32;

/// Copies the folder `src` (inside `root`, canonical) to `dst`: links followed only
/// inside `root`, `.git` left out, files bounded one by one by `max_file_size` and in all
/// by `budget` (what the app may still read).
///
/// # Errors
/// A file outside, too large, past the budget, or nested too deep; the OS's error.
pub fn copy_confined(
    root: &Path,
    src: &Path,
    dst: &Path,
    budget: &mut u64,
    max_file_size: u64,
    depth: usize,
) -> Result<(), CopyError> {
    if depth > MAX_COPY_DEPTH {
        return Err(CopyError::TooDeep(shown(root, src)));
    }
    std::fs::create_dir_all(dst).map_err(CopyError::io(dst))?;
    for entry in std::fs::read_dir(src)
        .map_err(CopyError::io(src))?
        .flatten()
    {
        if entry.file_name() == ".git" {
            continue;
        }
        let path = entry.path();
        let shown = shown(root, &path);
        let resolved = confined(root, &path).map_err(|why| CopyError::Unreadable {
            path: shown.clone(),
            why,
        })?;
        let target = dst.join(entry.file_name());
        if resolved.is_dir() {
            copy_confined(root, &resolved, &target, budget, max_file_size, depth + 1)?;
            continue;
        }
        copy_file(&resolved, &target, &shown, budget, max_file_size)?;
    }
    Ok(())
}

/// The most entries [`check_links`] walks in one folder tree.
const MAX_WALK: usize = 100_000;

/// Checks that every link in the folder `dir` (inside `root`, canonical) resolves inside
/// `root`, before a tool that follows links (helm) reads the folder; the folders that
/// links point at are walked too. Nothing is read but the folders' entries.
///
/// # Errors
/// The first link outside `root` (its path in the repository, and why), a tree deeper
/// than copying allows or of more than 100,000 entries, or the OS's error.
pub fn check_links(root: &Path, dir: &Path) -> Result<(), CopyError> {
    let mut walked = 0;
    let mut seen = std::collections::HashSet::new();
    let mut folders = vec![(dir.to_path_buf(), 0)];
    while let Some((folder, depth)) = folders.pop() {
        if depth > MAX_COPY_DEPTH {
            return Err(CopyError::TooDeep(shown(root, &folder)));
        }
        if !seen.insert(folder.clone()) {
            continue;
        }
        for entry in std::fs::read_dir(&folder).map_err(CopyError::io(&folder))? {
            let entry = entry.map_err(CopyError::io(&folder))?;
            walked += 1;
            if walked > MAX_WALK {
                return Err(CopyError::TooMany(shown(root, dir)));
            }
            let path = entry.path();
            let kind = entry.file_type().map_err(CopyError::io(&path))?;
            if kind.is_symlink() {
                let resolved = confined(root, &path).map_err(|why| CopyError::Unreadable {
                    path: shown(root, &path),
                    why,
                })?;
                if resolved.is_dir() {
                    folders.push((resolved, depth + 1));
                }
            } else if kind.is_dir() {
                folders.push((path, depth + 1));
            }
        }
    }
    Ok(())
}

/// Copies one file (already [`confined`]), charged to `budget`.
///
/// # Errors
/// Not a regular file, too large, past the budget; the OS's error.
pub fn copy_file(
    src: &Path,
    dst: &Path,
    shown: &str,
    budget: &mut u64,
    max_file_size: u64,
) -> Result<(), CopyError> {
    regular_file(src, max_file_size).map_err(|why| CopyError::Unreadable {
        path: shown.to_string(),
        why,
    })?;
    let size = std::fs::metadata(src).map_or(0, |m| m.len());
    *budget = budget
        .checked_sub(size)
        .ok_or_else(|| CopyError::OverBudget(shown.to_string()))?;
    std::fs::copy(src, dst).map_err(|cause| CopyError::Io {
        path: shown.to_string(),
        cause,
    })?;
    Ok(())
}
