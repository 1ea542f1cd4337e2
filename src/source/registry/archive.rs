//! A registry's archive (a chart's `.tgz`, an OCI layer's tar+gzip) written out as a
//! folder, as a commit's tree is — within bounds and confined: the inflated stream is cut
//! at `max_app_size` however small the archive (a gzip bomb stops there), each file at
//! `max_file_size` by its header before a byte is written, and an entry that could reach
//! outside the folder (an absolute path, `..`, any link — a chart or an artifact holds
//! none —, a device or a FIFO) refuses the whole archive. Files and folders take the
//! process's umask, never the archive's modes; the caller writes into a fresh folder and
//! keeps it only on success.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The bounds of one archive.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveLimits {
    /// The most bytes of the inflated archive (`agent.max_app_size`).
    pub bytes: u64,
    /// The largest file (`agent.max_file_size`).
    pub file: u64,
    /// The most entries (`agent.max_objects`).
    pub entries: usize,
}

impl ArchiveLimits {
    /// The bounds that follow from the agent's caps.
    pub fn of(agent: &crate::config::AgentConfig) -> Self {
        ArchiveLimits {
            bytes: agent.max_app_size,
            file: agent.max_file_size,
            entries: agent.max_objects,
        }
    }
}

/// Why an archive was refused.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// An entry that could reach outside the folder, or of a type berth never writes.
    #[error("entry {entry:?}: {why}")]
    Refused { entry: String, why: &'static str },
    /// Past a bound.
    #[error("{0}")]
    TooLarge(String),
    /// Not a gzip-compressed tar, or cut short.
    #[error("not a readable tar+gzip archive: {0}")]
    Corrupt(std::io::Error),
    /// The folder could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What was written.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unpacked {
    pub files: usize,
    pub bytes: u64,
}

/// Writes the gzip-compressed tar `archive` out into the folder `into` (which exists and
/// is empty). With `top`, every entry must lie in that folder (a chart's archive holds
/// `<name>/…`), which is left out: its files land at `into`'s root.
///
/// # Errors
/// [`ArchiveError`]: the caller removes what was written.
pub fn unpack(
    archive: impl Read,
    into: &Path,
    top: Option<&str>,
    limits: ArchiveLimits,
) -> Result<Unpacked, ArchiveError> {
    let inflated = Capped {
        inner: flate2::read::GzDecoder::new(archive),
        left: limits.bytes,
    };
    let mut tar = tar::Archive::new(inflated);
    let mut unpacked = Unpacked::default();
    let entries = tar.entries().map_err(|e| corrupt_or_bound(e, limits))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| corrupt_or_bound(e, limits))?;
        unpacked.files += 1;
        if unpacked.files > limits.entries {
            return Err(ArchiveError::TooLarge(format!(
                "more than {} entries (agent.max_objects)",
                limits.entries
            )));
        }
        let name = entry
            .path()
            .map_err(ArchiveError::Corrupt)?
            .display()
            .to_string();
        let path = inside(&name)?;
        let path = match top {
            None => path,
            Some(top) => match path.strip_prefix(top) {
                Ok(p) if p.as_os_str().is_empty() => continue,
                Ok(p) => p.to_path_buf(),
                Err(_) => return Err(refused(&name, "outside the chart's folder")),
            },
        };
        unpacked.bytes += write_entry(&mut entry, &name, &into.join(&path), limits)?;
    }
    Ok(unpacked)
}

/// Writes one entry (named `name` in the archive) at `target`: the bytes written.
fn write_entry(
    entry: &mut tar::Entry<'_, impl Read>,
    name: &str,
    target: &Path,
    limits: ArchiveLimits,
) -> Result<u64, ArchiveError> {
    let write = |source| ArchiveError::Write {
        path: target.to_path_buf(),
        source,
    };
    use tar::EntryType as T;
    match entry.header().entry_type() {
        T::Directory => std::fs::create_dir_all(target).map_err(write).map(|()| 0),
        T::Regular | T::Continuous => {
            let size = entry.header().size().map_err(ArchiveError::Corrupt)?;
            if size > limits.file {
                return Err(ArchiveError::TooLarge(format!(
                    "entry {name:?} is {size} bytes, more than max_file_size ({})",
                    limits.file
                )));
            }
            make_parent(target).map_err(write)?;
            let mut file = std::fs::File::create(target).map_err(write)?;
            std::io::copy(entry, &mut file).map_err(|e| corrupt_or_bound(e, limits))
        }
        // A link read through another link is not checked by its text alone: none.
        T::Symlink | T::Link => Err(refused(
            name,
            "a link (berth writes none out of an archive; a chart or an artifact holds none)",
        )),
        // pax headers that the reader folds into the next entry, git's global one.
        T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => Ok(0),
        _ => Err(refused(name, "a device, FIFO or other special file")),
    }
}

fn refused(entry: &str, why: &'static str) -> ArchiveError {
    ArchiveError::Refused {
        entry: entry.to_string(),
        why,
    }
}

/// The entry's path, relative and never climbing: `./a/b` is `a/b`.
fn inside(name: &str) -> Result<PathBuf, ArchiveError> {
    let mut path = PathBuf::new();
    for part in Path::new(name).components() {
        match part {
            Component::Normal(p) => path.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err(refused(name, "a path with '..'")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refused(name, "an absolute path"))
            }
        }
    }
    if path.as_os_str().is_empty() {
        return Err(refused(name, "an empty path"));
    }
    Ok(path)
}

fn make_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(parent) => std::fs::create_dir_all(parent),
        None => Ok(()),
    }
}

/// The bound's error when `e` is [`Capped`]'s, else the archive's.
fn corrupt_or_bound(e: std::io::Error, limits: ArchiveLimits) -> ArchiveError {
    if e.kind() == std::io::ErrorKind::FileTooLarge {
        return ArchiveError::TooLarge(format!(
            "more than {} bytes once inflated (agent.max_app_size): inflating stopped there",
            limits.bytes
        ));
    }
    ArchiveError::Corrupt(e)
}

/// A reader that fails once more than `left` bytes were read from it.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            return Err(std::io::ErrorKind::FileTooLarge.into());
        }
        self.left -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
