//! SSH signatures (`gpg.format = ssh`): a signature checked against git's
//! `allowed_signers` file, honouring its `namespaces`, `valid-after` and `valid-before`.
use std::path::Path;

use jiff::Timestamp;

use super::{Signature, Trust, VerifyError};

/// The namespace git signs commits in (`ssh-keygen -Y sign -n git`).
const SSH_NAMESPACE: &str = "git";

/// One line of an `allowed_signers` file.
#[derive(Debug)]
pub(super) struct AllowedSigner {
    principals: String,
    key: ssh_key::PublicKey,
    namespaces: Option<Vec<String>>,
    valid_after: Option<Timestamp>,
    valid_before: Option<Timestamp>,
}

impl Trust {
    /// Checks the armored SSH signature `armored` over `data` against the allowed signers.
    pub(super) fn verify_ssh(
        &self,
        commit: &str,
        armored: &str,
        data: &[u8],
        now: Timestamp,
    ) -> Result<Signature, VerifyError> {
        let signature = ssh_key::SshSig::from_pem(armored.trim()).map_err(|e| {
            VerifyError::bad(commit, None, format!("unreadable SSH signature ({e})"))
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
            .map_err(|e| {
                let why = format!(
                    "it does not match the commit ({e}): was the commit changed after signing?"
                );
                VerifyError::bad(commit, Some(fingerprint.clone()), why)
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

/// The entries of an `allowed_signers` file (`man ssh-keygen`, ALLOWED SIGNERS).
pub(super) fn allowed_signers(path: &Path) -> Result<Vec<AllowedSigner>, VerifyError> {
    let text = std::fs::read_to_string(path).map_err(|e| VerifyError::Unreadable {
        path: path.to_path_buf(),
        source: std::sync::Arc::new(e),
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
}
