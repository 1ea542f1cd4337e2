//! A kustomization that reads files encrypted with sops (resources, generators' `files`
//! and `envs`): kustomize is another program and reads files, so it is given a copy of
//! what the kustomization reaches with those files decrypted, in a private folder on a
//! tmpfs — memory, never a disk: `$RUNTIME_DIRECTORY` (the unit's `RuntimeDirectory=`,
//! `/run/berth`) when it is one, else `/dev/shm` — made 0700 for this render alone and
//! removed when the render ends, whether kustomize succeeded, failed or timed out (the
//! folder's guard is dropped on every path; a folder left by a berth that was killed is
//! removed by the next render that makes one). Only berth's user can read it, and
//! nothing in it outlives the render; like any memory it may be swapped out, as berth's
//! own memory may.

use std::path::{Path, PathBuf};

use super::relative;
use crate::manifest::decrypt::{Decryption, KeyFileError};
use crate::manifest::read::{copy_confined, copy_file, read_confined, CopyError, Unreadable};
use crate::manifest::sops::stores::{decrypt_file, is_encrypted_file, Format};
use crate::manifest::sops::SopsError;

/// Why kustomize could not be given a copy in clear; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum PlainCopyError {
    /// The keys cannot be read.
    #[error(transparent)]
    Keys(#[from] KeyFileError),
    /// No tmpfs to write to.
    #[error("no tmpfs to decrypt into ($RUNTIME_DIRECTORY, /dev/shm): berth writes decrypted files for kustomize to memory only; give the unit RuntimeDirectory=berth")]
    NoTmpfs,
    /// The OS refused the private folder.
    #[error("cannot make a private folder in {folder}: {cause}")]
    Folder {
        /// Where.
        folder: PathBuf,
        /// The OS's error.
        cause: std::io::Error,
    },
    /// A file or folder the copy refuses.
    #[error(transparent)]
    Copy(#[from] CopyError),
    /// An encrypted file that may not be read.
    #[error("{path} {why}")]
    Unreadable {
        /// The file in the repository.
        path: String,
        /// Why.
        why: Unreadable,
    },
    /// An encrypted file that does not open.
    #[error("{path}: {why}")]
    Sops {
        /// The file in the repository.
        path: String,
        /// Why.
        why: SopsError,
    },
    /// The OS refused the clear copy.
    #[error("cannot write {path} in clear to memory: {cause}")]
    Write {
        /// The file in the repository.
        path: String,
        /// The OS's error.
        cause: std::io::Error,
    },
}

/// The name every plain copy's folder starts with (then the pid and a counter).
const PREFIX: &str = "berth-plain-";

/// Whether the file at `path` (confined, a regular file) is one sops encrypted.
pub(super) fn is_encrypted(root: &Path, path: &Path, max_file_size: u64) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    read_confined(root, path, max_file_size).is_ok_and(|bytes| {
        is_encrypted_file(&bytes, Format::of(name.as_deref().unwrap_or_default()))
    })
}

/// The copy kustomize renders: the checkout's folders and files it reaches, the
/// encrypted ones in clear. Removed when dropped.
pub(super) struct PlainCopy {
    /// The copy's root (the checkout's root, as far as kustomize is concerned).
    pub root: PathBuf,
    /// Each value decrypted, to mark and mask in what kustomize prints.
    pub values: Vec<String>,
}

impl Drop for PlainCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl PlainCopy {
    /// Copies `reach` (paths relative to `root`, as [`super::reach`] gives them) into a
    /// private tmpfs folder and writes each of `encrypted` (inside them) there in clear.
    ///
    /// # Errors
    /// No tmpfs, a file the copy refuses (outside, too large, past `budget`), a key that
    /// opens nothing, a file whose MAC does not match: the message names the file.
    pub(super) fn make(
        root: &Path,
        reach: &[String],
        encrypted: &[PathBuf],
        decryption: &Decryption,
        max_file_size: u64,
        mut budget: u64,
    ) -> Result<Self, PlainCopyError> {
        let keys = decryption.keys()?;
        let mut copy = PlainCopy {
            root: private_folder()?,
            values: Vec::new(),
        };
        for rel in reach {
            let (src, dst) = (root.join(rel), copy.root.join(rel));
            if src.is_dir() {
                copy_confined(root, &src, &dst, &mut budget, max_file_size, 0)?;
            } else {
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent).map_err(|cause| CopyError::Io {
                        path: rel.clone(),
                        cause,
                    })?;
                }
                copy_file(&src, &dst, rel, &mut budget, max_file_size)?;
            }
        }
        for file in encrypted {
            let rel = relative(root, file);
            let bytes = read_confined(root, file, max_file_size).map_err(|why| {
                PlainCopyError::Unreadable {
                    path: rel.clone(),
                    why,
                }
            })?;
            let opened = decrypt_file(&bytes, Format::of(&rel), &keys).map_err(|why| {
                PlainCopyError::Sops {
                    path: rel.clone(),
                    why,
                }
            })?;
            write_private(&copy.root.join(&rel), &opened.bytes).map_err(|cause| {
                PlainCopyError::Write {
                    path: rel.clone(),
                    cause,
                }
            })?;
            copy.values.extend(opened.values);
        }
        Ok(copy)
    }

    /// `message` with every decrypted value of four characters or more replaced by
    /// `***` (kustomize may quote what it could not read).
    pub(super) fn redact(&self, message: String) -> String {
        self.values
            .iter()
            .filter(|v| v.chars().count() >= 4)
            .fold(message, |m, v| m.replace(v.as_str(), "***"))
    }
}

/// Writes `bytes` to `path` readable by berth's user alone (replacing the encrypted copy).
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

/// A new 0700 folder on a tmpfs, for one render; folders of berths that no longer run
/// are removed first.
fn private_folder() -> Result<PathBuf, PlainCopyError> {
    let base = crate::state::memory_dir().ok_or(PlainCopyError::NoTmpfs)?;
    crate::state::remove_stale_dirs(&base, PREFIX);
    crate::state::fresh_private_dir(&base, PREFIX).map_err(|cause| PlainCopyError::Folder {
        folder: base,
        cause,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_shm_is_memory_and_a_plain_copy_goes_with_its_guard() {
        assert!(
            crate::state::is_tmpfs(Path::new("/dev/shm")),
            "this machine has /dev/shm"
        );
        let path = private_folder().unwrap();
        let mode = std::fs::metadata(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o700);
        let copy = PlainCopy {
            root: path.clone(),
            values: vec!["hunter2-long".into(), "ab".into()],
        };
        assert_eq!(
            copy.redact("env line PASS=hunter2-long ab".into()),
            "env line PASS=*** ab"
        );
        drop(copy);
        assert!(!path.exists());
    }
}
