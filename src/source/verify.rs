//! Commit signatures: `[app.verify] mode = "head"` lets berth apply only a commit signed by
//! a trusted key — OpenPGP (`git commit -S` with GnuPG) or SSH (`gpg.format = ssh`),
//! checked in-process (the `pgp` and `ssh-key` crates), never by running gpg.
//!
//! A commit's signature is its `gpgsig` header over the commit object without it (what
//! `git verify-commit` checks). OpenPGP keys come from armored files; SSH keys from an
//! `allowed_signers` file in git's format (principals, options, key), honouring its
//! `namespaces`, `valid-after` and `valid-before` options.

use std::path::{Path, PathBuf};

use jiff::Timestamp;
use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey, SignedPublicSubKey};
use pgp::packet::SignatureType;
use pgp::types::KeyDetails;
use serde::{Deserialize, Serialize};

use crate::config::{VerifyConfig, VerifyMode};

/// The namespace git signs commits in (`ssh-keygen -Y sign -n git`).
const SSH_NAMESPACE: &str = "git";

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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    /// A trusted key file cannot be read or parsed.
    #[error("{}: {message}", path.display())]
    Keys {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
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

/// One line of an `allowed_signers` file.
#[derive(Debug)]
struct AllowedSigner {
    principals: String,
    key: ssh_key::PublicKey,
    namespaces: Option<Vec<String>>,
    valid_after: Option<Timestamp>,
    valid_before: Option<Timestamp>,
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
        let oid = git2::Oid::from_str(commit).map_err(|e| VerifyError::Bad {
            commit: short.clone(),
            fingerprint: None,
            why: e.message().to_string(),
        })?;
        let (signature, data) = match repo.extract_signature(&oid, None) {
            Ok(pair) => pair,
            Err(e) if e.code() == git2::ErrorCode::NotFound => {
                return Err(VerifyError::Unsigned { commit: short })
            }
            Err(e) => {
                return Err(VerifyError::Bad {
                    commit: short,
                    fingerprint: None,
                    why: e.message().to_string(),
                })
            }
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
        let bad = |why: String| VerifyError::Bad {
            commit: shown.clone(),
            fingerprint: None,
            why,
        };
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

    fn verify_openpgp(
        &self,
        commit: &str,
        armored: &str,
        data: &[u8],
        now: Timestamp,
    ) -> Result<Signature, VerifyError> {
        let bad = |fingerprint: Option<String>, why: String| VerifyError::Bad {
            commit: commit.to_string(),
            fingerprint,
            why,
        };
        let (signature, _) = DetachedSignature::from_string(armored)
            .map_err(|e| bad(None, format!("unreadable OpenPGP signature ({e})")))?;
        let sig = &signature.signature;
        let issuer: String = sig
            .issuer_fingerprint()
            .first()
            .map(|f| format!("{f:X}"))
            .or_else(|| {
                sig.issuer_key_id()
                    .first()
                    .map(|k| k.to_string().to_uppercase())
            })
            .unwrap_or_else(|| "(none named)".into());
        let names = |fingerprint: &pgp::types::Fingerprint, key_id: &pgp::types::KeyId| {
            sig.issuer_fingerprint().contains(&fingerprint) || sig.issuer_key_id().contains(&key_id)
        };
        for key in &self.openpgp {
            // The primary key (`None`) or the signing subkey the signature names.
            let component = if names(&key.fingerprint(), &key.legacy_key_id()) {
                None
            } else {
                match key
                    .public_subkeys
                    .iter()
                    .find(|s| names(&s.key.fingerprint(), &s.key.legacy_key_id()))
                {
                    Some(sub) => Some(sub),
                    None => continue,
                }
            };
            let fingerprint = format!("{:X}", key.fingerprint());
            let checked = match component {
                None => sig.verify(key, data),
                Some(sub) => sig.verify(sub, data),
            };
            checked.map_err(|e| {
                bad(
                    Some(fingerprint.clone()),
                    format!(
                        "it does not match the commit ({e}): was the commit changed after signing?"
                    ),
                )
            })?;
            let signer = key
                .details
                .users
                .first()
                .and_then(|u| u.id.as_str().map(str::to_owned))
                .unwrap_or_else(|| fingerprint.clone());
            if let Some(state) = invalid_at(key, component, now) {
                return Err(VerifyError::KeyInvalid {
                    commit: commit.to_string(),
                    fingerprint,
                    signer,
                    state,
                });
            }
            return Ok(Signature {
                format: "openpgp".into(),
                signer,
                fingerprint,
            });
        }
        Err(VerifyError::Untrusted {
            commit: commit.to_string(),
            fingerprint: issuer,
            ssh: false,
        })
    }

    fn verify_ssh(
        &self,
        commit: &str,
        armored: &str,
        data: &[u8],
        now: Timestamp,
    ) -> Result<Signature, VerifyError> {
        let signature =
            ssh_key::SshSig::from_pem(armored.trim()).map_err(|e| VerifyError::Bad {
                commit: commit.to_string(),
                fingerprint: None,
                why: format!("unreadable SSH signature ({e})"),
            })?;
        let fingerprint = signature
            .public_key()
            .fingerprint(ssh_key::HashAlg::Sha256)
            .to_string();
        let Some(allowed) = self
            .ssh
            .iter()
            .find(|a| a.key.key_data() == signature.public_key())
        else {
            return Err(VerifyError::Untrusted {
                commit: commit.to_string(),
                fingerprint,
                ssh: true,
            });
        };
        allowed
            .key
            .verify(SSH_NAMESPACE, data, &signature)
            .map_err(|e| VerifyError::Bad {
                commit: commit.to_string(),
                fingerprint: Some(fingerprint.clone()),
                why: format!(
                    "it does not match the commit ({e}): was the commit changed after signing?"
                ),
            })?;
        let invalid = |state: String| VerifyError::KeyInvalid {
            commit: commit.to_string(),
            fingerprint: fingerprint.clone(),
            signer: allowed.principals.clone(),
            state,
        };
        if let Some(namespaces) = &allowed.namespaces {
            if !namespaces.iter().any(|n| n == SSH_NAMESPACE) {
                return Err(invalid(format!(
                    "is allowed only for namespaces {:?}, not \"git\"",
                    namespaces.join(",")
                )));
            }
        }
        if let Some(after) = allowed.valid_after.filter(|a| now < *a) {
            return Err(invalid(format!("is not valid before {after}")));
        }
        if let Some(before) = allowed.valid_before.filter(|b| now >= *b) {
            return Err(invalid(format!("expired at {before}")));
        }
        Ok(Signature {
            format: "ssh".into(),
            signer: allowed.principals.clone(),
            fingerprint,
        })
    }
}

/// Why `key` (and its signing `subkey`, when the signature was made with one) may not
/// sign at `now`: revoked, or expired; `None` when it may.
fn invalid_at(
    key: &SignedPublicKey,
    subkey: Option<&SignedPublicSubKey>,
    now: Timestamp,
) -> Option<String> {
    if !key.details.revocation_signatures.is_empty() {
        return Some("is revoked".into());
    }
    let (own_fingerprint, own_id) = (key.fingerprint(), key.legacy_key_id());
    let self_signatures = key
        .details
        .users
        .iter()
        .flat_map(|u| &u.signatures)
        .chain(&key.details.direct_signatures)
        .filter(|s| {
            s.issuer_fingerprint().contains(&&own_fingerprint)
                || s.issuer_key_id().contains(&&own_id)
        });
    if let Some(at) = expires(key.created_at(), self_signatures).filter(|at| *at <= now) {
        return Some(format!("expired at {at}"));
    }
    let sub = subkey?;
    let of_type = |t| sub.signatures.iter().filter(move |s| s.typ() == Some(t));
    if of_type(SignatureType::SubkeyRevocation).next().is_some() {
        return Some(format!(
            "has its signing subkey {:X} revoked",
            sub.key.fingerprint()
        ));
    }
    let expiry = expires(sub.key.created_at(), of_type(SignatureType::SubkeyBinding));
    expiry
        .filter(|at| *at <= now)
        .map(|at| format!("has its signing subkey expired at {at}"))
}

/// When a key created at `created` expires: as its newest self-signature says (an older
/// one's expiry no longer counts once a newer one changed or removed it).
fn expires<'a>(
    created: pgp::types::Timestamp,
    self_signatures: impl Iterator<Item = &'a pgp::packet::Signature>,
) -> Option<Timestamp> {
    let newest = self_signatures.max_by_key(|s| s.created().map(|c| c.as_secs()))?;
    let seconds = newest.key_expiration_time()?.as_secs();
    if seconds == 0 {
        return None;
    }
    Timestamp::from_second(i64::from(created.as_secs()) + i64::from(seconds)).ok()
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
        .map_err(|e| failed(format!("cannot read {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| matcher.is_match(n)))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(failed("matches no file".into()));
    }
    Ok(paths)
}

/// The public keys of an armored (or binary) OpenPGP file, each self-signature checked.
fn openpgp_keys(path: &Path) -> Result<Vec<SignedPublicKey>, VerifyError> {
    let failed = |message: String| VerifyError::Keys {
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| failed(format!("cannot read it: {e}")))?;
    let (keys, _) = SignedPublicKey::from_reader_many(&bytes[..])
        .map_err(|e| failed(format!("not an OpenPGP public key ({e})")))?;
    let mut out = Vec::new();
    for key in keys {
        let key = key.map_err(|e| failed(format!("not an OpenPGP public key ({e})")))?;
        key.verify_bindings().map_err(|e| {
            failed(format!(
                "key {:X} has a broken self-signature ({e})",
                key.fingerprint()
            ))
        })?;
        out.push(key);
    }
    if out.is_empty() {
        return Err(failed("holds no OpenPGP public key".into()));
    }
    Ok(out)
}

/// The entries of an `allowed_signers` file (`man ssh-keygen`, ALLOWED SIGNERS).
fn allowed_signers(path: &Path) -> Result<Vec<AllowedSigner>, VerifyError> {
    let text = std::fs::read_to_string(path).map_err(|e| VerifyError::Keys {
        path: path.to_path_buf(),
        message: format!("cannot read it: {e}"),
    })?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(allowed_signer(line).map_err(|message| VerifyError::Keys {
            path: path.to_path_buf(),
            message: format!("line {}: {message}", n + 1),
        })?);
    }
    if out.is_empty() {
        return Err(VerifyError::Keys {
            path: path.to_path_buf(),
            message: "holds no signer".into(),
        });
    }
    Ok(out)
}

/// Why a line of an `allowed_signers` file is refused (the file and line are added by
/// [`VerifyError::Keys`]).
#[derive(Debug, thiserror::Error)]
enum SignerLineError {
    /// The key does not parse; ssh-key's reason in the message (no source: the message
    /// is all that is shown, inside [`VerifyError::Keys`]).
    #[error("not a public key ({0})")]
    NotAKey(ssh_key::Error),
    /// `valid-after` or `valid-before` is no time.
    #[error("{0:?} is not a time (YYYYMMDD[HHMM[SS]][Z])")]
    NotATime(String),
    /// `cert-authority`.
    #[error("cert-authority (SSH certificates) is not supported: list the signing keys")]
    CertAuthority,
    /// An option ssh-keygen does not know either.
    #[error("unknown option {0:?}")]
    UnknownOption(String),
}

/// One `allowed_signers` line: `principals [options] keytype base64 [comment]`.
fn allowed_signer(line: &str) -> Result<AllowedSigner, SignerLineError> {
    let (principals, rest) = token(line);
    let (next, after) = token(rest);
    let is_key_type =
        |t: &str| t.starts_with("ssh-") || t.starts_with("ecdsa-") || t.starts_with("sk-");
    let (options, key) = if is_key_type(next) {
        ("", rest)
    } else {
        (next, after)
    };
    let key = ssh_key::PublicKey::from_openssh(key.trim()).map_err(SignerLineError::NotAKey)?;
    let mut signer = AllowedSigner {
        principals: principals.trim_matches('"').to_string(),
        key,
        namespaces: None,
        valid_after: None,
        valid_before: None,
    };
    for option in split_options(options) {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        let value = value.trim_matches('"');
        match name.to_ascii_lowercase().as_str() {
            "namespaces" => {
                signer.namespaces = Some(value.split(',').map(str::to_owned).collect());
            }
            "valid-after" => signer.valid_after = Some(ssh_time(value)?),
            "valid-before" => signer.valid_before = Some(ssh_time(value)?),
            "cert-authority" => return Err(SignerLineError::CertAuthority),
            other => return Err(SignerLineError::UnknownOption(other.to_string())),
        }
    }
    Ok(signer)
}

/// The first token of `s` (a double-quoted one may hold spaces) and the rest.
fn token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let mut quoted = false;
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return (&s[..i], &s[i..]),
            _ => {}
        }
    }
    (s, "")
}

/// Comma-separated options, commas inside double quotes kept.
fn split_options(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// `YYYYMMDD[HHMM[SS]][Z]`, as `ssh-keygen` reads it (UTC here, with or without `Z`).
fn ssh_time(s: &str) -> Result<Timestamp, SignerLineError> {
    let digits = s.trim_end_matches(['Z', 'z']);
    let bad = || SignerLineError::NotATime(s.to_string());
    if !digits.chars().all(|c| c.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(bad());
    }
    let part = |a: usize, b: usize| digits.get(a..b).unwrap_or("00");
    let text = format!(
        "{}-{}-{}T{}:{}:{}Z",
        part(0, 4),
        part(4, 6),
        part(6, 8),
        part(8, 10),
        part(10, 12),
        part(12, 14)
    );
    text.parse().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED25519: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMNREh3Sdz7J3PUGyaoqXnpq469dm0vnVE9+5woaA/U7";

    #[test]
    fn allowed_signers_lines_are_read_with_their_options() {
        let plain = allowed_signer(&format!("dev@example.com {ED25519} laptop")).unwrap();
        assert_eq!(plain.principals, "dev@example.com");
        assert_eq!(plain.namespaces, None);
        let line = format!(
            "a@x,b@x namespaces=\"git,file\",valid-after=\"20240101\",valid-before=\"20250102030405Z\" {ED25519}"
        );
        let s = allowed_signer(&line).unwrap();
        assert_eq!(s.principals, "a@x,b@x");
        assert_eq!(s.namespaces, Some(vec!["git".into(), "file".into()]));
        assert_eq!(s.valid_after.unwrap().to_string(), "2024-01-01T00:00:00Z");
        assert_eq!(s.valid_before.unwrap().to_string(), "2025-01-02T03:04:05Z");
        let ca = allowed_signer(&format!("*@x cert-authority {ED25519}"))
            .unwrap_err()
            .to_string();
        assert!(ca.contains("not supported"), "{ca}");
        let bad = allowed_signer("dev@x ssh-ed25519 notbase64")
            .unwrap_err()
            .to_string();
        assert!(bad.contains("not a public key"), "{bad}");
        assert!(ssh_time("2024").is_err());
    }

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
