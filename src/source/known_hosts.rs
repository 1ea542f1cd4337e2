//! SSH host-key verification against a known_hosts file (OpenSSH format: plain and hashed
//! host patterns, `[host]:port`, wildcards, negation, `@revoked`), read by `ssh_key`'s
//! parser; the matching of a host against an entry's patterns is here. libgit2 before 1.6
//! did not check host keys at all (CVE-2023-22742); berth always does, and refuses unknown
//! and changed keys.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use ssh_key::known_hosts::{HostPatterns, KnownHosts, Marker};
use ssh_key::PublicKey;

/// Why a host key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostKeyError {
    /// No entry for the host.
    #[error("ssh host {host} is not in {file}: check its key fingerprint out of band, then add it (ssh-keyscan -t ed25519 {keyscan} >> {file})")]
    Unknown {
        /// The host as known_hosts names it.
        host: String,
        /// The host and port for ssh-keyscan.
        keyscan: String,
        /// The known_hosts file.
        file: String,
    },
    /// An entry exists but the key differs, or the key is revoked.
    #[error("ssh host key of {host} does not match {file} ({key_type}): possible man-in-the-middle attack; refusing to connect")]
    Mismatch {
        /// The host.
        host: String,
        /// The key type the server offered.
        key_type: String,
        /// The known_hosts file.
        file: String,
    },
    /// The server's key could not be read.
    #[error("the ssh server of {host} offered no host key berth can check")]
    NoKey {
        /// The host.
        host: String,
    },
}

/// Checks a server's host key (`key_type` such as `ssh-ed25519`, raw key blob) for
/// `host:port` against the text of a known_hosts file named `file`.
///
/// # Errors
/// [`HostKeyError::Unknown`] when no line names the host, [`HostKeyError::Mismatch`] when
/// lines name it but none has this key (or the key is `@revoked`).
pub fn verify(
    known_hosts: &str,
    file: &str,
    host: &str,
    port: u16,
    key_type: &str,
    key: &[u8],
) -> Result<(), HostKeyError> {
    let name = if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    };
    // The server's key, compared with each entry's as key data (not as text).
    let offered = PublicKey::from_bytes(key).ok();
    let mut host_known = false;
    // Lines that are not entries (comments, keys of a type it does not read) are skipped.
    for entry in KnownHosts::new(known_hosts).filter_map(Result::ok) {
        if entry.marker() == Some(&Marker::CertAuthority)
            || !hosts_match(entry.host_patterns(), &name)
        {
            continue;
        }
        let same_key = offered
            .as_ref()
            .is_some_and(|o| o.key_data() == entry.public_key().key_data());
        if entry.marker() == Some(&Marker::Revoked) {
            if same_key {
                return Err(mismatch(&name, key_type, file));
            }
            continue;
        }
        if same_key {
            return Ok(());
        }
        host_known = true;
    }
    if host_known {
        Err(mismatch(&name, key_type, file))
    } else {
        Err(HostKeyError::Unknown {
            host: name,
            keyscan: if port == 22 {
                host.to_string()
            } else {
                format!("-p {port} {host}")
            },
            file: file.to_string(),
        })
    }
}

fn mismatch(host: &str, key_type: &str, file: &str) -> HostKeyError {
    HostKeyError::Mismatch {
        host: host.to_string(),
        key_type: key_type.to_string(),
        file: file.to_string(),
    }
}

/// An entry's hosts: a hashed name that is `name`'s, or a pattern list with any positive
/// match and no negated match.
fn hosts_match(patterns: &HostPatterns, name: &str) -> bool {
    let patterns = match patterns {
        HostPatterns::HashedName { salt, hash } => return hashed_match(salt, hash, name),
        HostPatterns::Patterns(patterns) => patterns,
    };
    let mut matched = false;
    for p in patterns {
        match p.strip_prefix('!') {
            Some(neg) if wildcard(neg, name) => return false,
            Some(_) => {}
            None => matched |= wildcard(p, name),
        }
    }
    matched
}

/// `|1|salt|hash`: the HMAC-SHA1 of the name keyed with the salt (compared in constant
/// time).
fn hashed_match(salt: &[u8], hash: &[u8], name: &str) -> bool {
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(hash).is_ok()
}

/// `*` and `?` wildcards, case-insensitive as hostnames are.
fn wildcard(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(b) => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;

    const KEY: &[u8] =
        b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20abcdefghijklmnopqrstuvwxyz012345";
    const OTHER: &[u8] =
        b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ";

    fn b64(k: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(k)
    }

    fn check(text: &str, host: &str, port: u16, key: &[u8]) -> Result<(), HostKeyError> {
        verify(text, "known_hosts", host, port, "ssh-ed25519", key)
    }

    #[test]
    fn known_key_passes() {
        let text = format!(
            "# comment\ngit.example.com,10.0.0.1 ssh-ed25519 {}\n",
            b64(KEY)
        );
        assert_eq!(check(&text, "git.example.com", 22, KEY), Ok(()));
        assert_eq!(check(&text, "10.0.0.1", 22, KEY), Ok(()));
    }

    #[test]
    fn unknown_host_is_refused_with_advice() {
        let text = format!("other.example.com ssh-ed25519 {}\n", b64(KEY));
        let e = check(&text, "git.example.com", 22, KEY).unwrap_err();
        assert!(matches!(e, HostKeyError::Unknown { .. }));
        assert!(
            e.to_string()
                .contains("ssh-keyscan -t ed25519 git.example.com >> known_hosts"),
            "{e}"
        );
        assert!(matches!(
            check("", "git.example.com", 22, KEY),
            Err(HostKeyError::Unknown { .. })
        ));
    }

    #[test]
    fn changed_key_is_a_mismatch() {
        let text = format!("git.example.com ssh-ed25519 {}\n", b64(KEY));
        let e = check(&text, "git.example.com", 22, OTHER).unwrap_err();
        assert!(matches!(e, HostKeyError::Mismatch { .. }), "{e}");
        assert!(e.to_string().contains("man-in-the-middle"));
    }

    #[test]
    fn port_wildcard_negation_and_revocation() {
        let text = format!(
            "[git.example.com]:2222 ssh-ed25519 {k}\n*.corp.example,!evil.corp.example ssh-ed25519 {k}\n@revoked old.example.com ssh-ed25519 {k}\nold.example.com ssh-ed25519 {k}\n",
            k = b64(KEY)
        );
        assert_eq!(check(&text, "git.example.com", 2222, KEY), Ok(()));
        assert!(check(&text, "git.example.com", 22, KEY).is_err());
        assert_eq!(check(&text, "GIT.corp.example", 22, KEY), Ok(()));
        assert!(matches!(
            check(&text, "evil.corp.example", 22, KEY),
            Err(HostKeyError::Unknown { .. })
        ));
        assert!(matches!(
            check(&text, "old.example.com", 22, KEY),
            Err(HostKeyError::Mismatch { .. })
        ));
    }

    #[test]
    fn hashed_hosts() {
        let salt = b"0123456789abcdefghij";
        let mut mac = Hmac::<Sha1>::new_from_slice(salt).unwrap();
        mac.update(b"git.example.com");
        let hash = mac.finalize().into_bytes();
        let text = format!("|1|{}|{} ssh-ed25519 {}\n", b64(salt), b64(&hash), b64(KEY));
        assert_eq!(check(&text, "git.example.com", 22, KEY), Ok(()));
        assert!(matches!(
            check(&text, "git.example.org", 22, KEY),
            Err(HostKeyError::Unknown { .. })
        ));
    }
}
