//! Commit signatures: `[app.verify] mode = "head"` lets berth apply only a commit signed by
//! a trusted key — OpenPGP (`git commit -S` with GnuPG) or SSH (`gpg.format = ssh`),
//! checked in-process (the `pgp` and `ssh-key` crates), never by running gpg.
//!
//! A commit's signature is its `gpgsig` header over the commit object without it (what
//! `git verify-commit` checks). OpenPGP keys come from armored files; SSH keys from an
//! `allowed_signers` file in git's format (principals, options, key), honouring its
//! `namespaces`, `valid-after` and `valid-before` options.
//!
//! This module holds the trusted keys ([`Trust`]) and what a check answers; `openpgp.rs`
//! and `ssh.rs` verify a signature of their format and read their key files.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use pgp::composed::SignedPublicKey;
use serde::{Deserialize, Serialize};

use crate::config::{VerifyConfig, VerifyMode};

mod openpgp;
mod ssh;

use openpgp::openpgp_keys;
use ssh::{allowed_signers, AllowedSigner};

/// Who signed a commit, as the history records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// `openpgp` or `ssh`.
    pub format: String,
    /// The signer: the key's first user ID (OpenPGP) or the principals (SSH).
    pub signer: String,
    /// The key's fingerprint: 40 hex digits (OpenPGP primary key) or `SHA256:…` (SSH).
    pub fingerprint: String,
}

/// Why a commit is refused, or the trusted keys cannot be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum VerifyError {
    /// The commit carries no signature.
    #[error("commit {commit} is not signed; [app.verify] mode = \"head\" applies only signed commits (sign it: git commit -S)")]
    Unsigned {
        /// The commit.
        commit: String,
    },
    /// `mode = "tag"`, and the tag is lightweight or carries no signature.
    #[error("tag {tag} is not a signed annotated tag; [app.verify] mode = \"tag\" applies only tags signed by a trusted key (sign it: git tag -s)")]
    UnsignedTag {
        /// The tag's name.
        tag: String,
    },
    /// The signature does not match the commit (edited after signing) or cannot be read.
    #[error("commit {commit}: bad signature{}: {why}", by(fingerprint))]
    Bad {
        /// The commit.
        commit: String,
        /// The key it claims, when it names one.
        fingerprint: Option<String>,
        /// What failed.
        why: String,
    },
    /// Signed by a key none of the trusted keys is.
    #[error("commit {commit} is signed by key {fingerprint}, which is not trusted (add its public key to [app.verify] {})", if *ssh { "ssh_allowed_signers" } else { "openpgp_keys" })]
    Untrusted {
        /// The commit.
        commit: String,
        /// The signing key.
        fingerprint: String,
        /// An SSH signature.
        ssh: bool,
    },
    /// Signed by a trusted key that has expired, is revoked or is not valid now.
    #[error("commit {commit} is signed by key {fingerprint} ({signer}), which {state}")]
    KeyInvalid {
        /// The commit.
        commit: String,
        /// The key.
        fingerprint: String,
        /// Its owner.
        signer: String,
        /// `expired at …`, `is revoked`, `is not valid before …`.
        state: String,
    },
    /// A trusted key file (or the folder a pattern names) cannot be read.
    #[error("cannot read {}", path.display())]
    Unreadable {
        /// The file or folder.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
    /// A trusted key file does not parse, or holds no key.
    #[error("{}: {message}", path.display())]
    Keys {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        message: String,
    },
}

impl VerifyError {
    /// A bad signature of `commit` (the key it claims, when it names one).
    pub fn bad(commit: &str, fingerprint: Option<String>, why: impl Into<String>) -> Self {
        VerifyError::Bad {
            commit: commit.to_string(),
            fingerprint,
            why: why.into(),
        }
    }
}

/// A tag object's signed part and its signature: git appends the armored signature to
/// the tag's message, on a line of its own.
fn split_tag_signature(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    const MARKERS: [&[u8]; 2] = [
        b"-----BEGIN PGP SIGNATURE-----",
        b"-----BEGIN SSH SIGNATURE-----",
    ];
    let mut start = 0;
    for line in raw.split_inclusive(|&b| b == b'\n') {
        if MARKERS.iter().any(|m| line.starts_with(m)) {
            return Some(raw.split_at(start));
        }
        start += line.len();
    }
    None
}

fn by(fingerprint: &Option<String>) -> String {
    fingerprint
        .as_ref()
        .map(|f| format!(" by key {f}"))
        .unwrap_or_default()
}

/// The keys an app trusts.
pub struct Trust {
    openpgp: Vec<SignedPublicKey>,
    ssh: Vec<AllowedSigner>,
}

impl Trust {
    /// Reads the trusted keys of `[app.verify]`; `None` when verification is off.
    ///
    /// # Errors
    /// A key file is missing, unreadable or holds no valid key (each self-signature is
    /// checked); a glob matches no file.
    pub fn load(config: &VerifyConfig) -> Result<Option<Trust>, VerifyError> {
        if config.mode == VerifyMode::Off {
            return Ok(None);
        }
        let mut openpgp = Vec::new();
        for pattern in &config.openpgp_keys {
            for path in expand(Path::new(pattern))? {
                openpgp.extend(openpgp_keys(&path)?);
            }
        }
        let ssh = match &config.ssh_allowed_signers {
            Some(path) => allowed_signers(path)?,
            None => Vec::new(),
        };
        Ok(Some(Trust { openpgp, ssh }))
    }

    /// How many keys: OpenPGP, SSH.
    pub fn counts(&self) -> (usize, usize) {
        (self.openpgp.len(), self.ssh.len())
    }

    /// Checks the signature of `commit` in `repo` against the trusted keys at `now`.
    ///
    /// # Errors
    /// The commit is unsigned, its signature is bad, its key is not trusted, expired or
    /// revoked.
    pub fn verify(
        &self,
        repo: &git2::Repository,
        commit: &str,
        now: Timestamp,
    ) -> Result<Signature, VerifyError> {
        let short = commit[..commit.len().min(7)].to_string();
        let oid =
            git2::Oid::from_str(commit).map_err(|e| VerifyError::bad(&short, None, e.message()))?;
        let (signature, data) = match repo.extract_signature(&oid, None) {
            Ok(pair) => pair,
            Err(e) if e.code() == git2::ErrorCode::NotFound => {
                return Err(VerifyError::Unsigned { commit: short })
            }
            Err(e) => return Err(VerifyError::bad(&short, None, e.message())),
        };
        self.check(&short, &signature, &data, now)
    }

    /// Checks the signature of the annotated tag object `tag` (named `name`, pointing at
    /// commit `commit`) in `repo`: a signed tag vouches for its commit (`mode = "tag"`).
    ///
    /// # Errors
    /// The tag is unsigned, its signature is bad, its key is not trusted, expired or
    /// revoked.
    pub fn verify_tag(
        &self,
        repo: &git2::Repository,
        tag: &str,
        name: &str,
        commit: &str,
        now: Timestamp,
    ) -> Result<Signature, VerifyError> {
        let shown = format!("{} (tag {name})", &commit[..commit.len().min(7)]);
        let bad = |why: String| VerifyError::bad(&shown, None, why);
        let oid = git2::Oid::from_str(tag).map_err(|e| bad(e.message().to_string()))?;
        let odb = repo.odb().map_err(|e| bad(e.message().to_string()))?;
        let object = odb.read(oid).map_err(|e| bad(e.message().to_string()))?;
        let (data, signature) =
            split_tag_signature(object.data()).ok_or_else(|| VerifyError::UnsignedTag {
                tag: name.to_string(),
            })?;
        self.check(&shown, signature, data, now)
    }

    /// Checks `signature` (armored OpenPGP or SSH) over `data`.
    fn check(
        &self,
        shown: &str,
        signature: &[u8],
        data: &[u8],
        now: Timestamp,
    ) -> Result<Signature, VerifyError> {
        let signature = String::from_utf8_lossy(signature).into_owned();
        if signature.contains("BEGIN SSH SIGNATURE") {
            self.verify_ssh(shown, &signature, data, now)
        } else {
            self.verify_openpgp(shown, &signature, data, now)
        }
    }
}

/// The files `pattern` names: itself, or the files of its folder its last part (a glob)
/// matches, in name order.
fn expand(pattern: &Path) -> Result<Vec<PathBuf>, VerifyError> {
    let name = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(['*', '?', '[']) {
        return Ok(vec![pattern.to_path_buf()]);
    }
    let failed = |message: String| VerifyError::Keys {
        path: pattern.to_path_buf(),
        message,
    };
    let matcher = globset::Glob::new(&name)
        .map_err(|e| failed(e.kind().to_string()))?
        .compile_matcher();
    let dir = pattern.parent().unwrap_or(Path::new("."));
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| VerifyError::Unreadable {
            path: dir.to_path_buf(),
            source: std::sync::Arc::new(e),
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| matcher.is_match(n)))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(failed("matches no file".into()));
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_are_named_by_a_glob_in_their_last_part() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.asc", "a.asc", "notes.txt"] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        let found = expand(&dir.path().join("*.asc")).unwrap();
        let names: Vec<_> = found
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.asc", "b.asc"]);
        assert!(
            expand(&dir.path().join("*.gpg")).is_err(),
            "no match is an error"
        );
        let err = openpgp_keys(&dir.path().join("a.asc")).unwrap_err();
        assert!(err.to_string().contains("a.asc"), "{err}");
    }
}
