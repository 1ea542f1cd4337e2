//! Who may read the status page (`[agent] status_page_credentials`): a file of
//! `USER:PASSWORD` lines, for a browser's basic auth, and bare `TOKEN` lines, for
//! `Authorization: Bearer TOKEN`; `#` starts a comment. Only digests are kept, and a
//! request's secret is compared with each in constant time.

use std::path::{Path, PathBuf};

use base64::Engine;

use crate::digest::sha256;

/// The largest credentials file read.
const MAX_FILE: u64 = 64 << 10;

/// The accepted credentials, as digests.
#[derive(Debug, Default)]
pub struct Credentials {
    /// SHA-256 of `USER:PASSWORD` (basic) and of `TOKEN` (bearer), each with its scheme.
    digests: Vec<(Scheme, [u8; 32])>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Basic,
    Bearer,
}

/// The credentials file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// It cannot be read.
    #[error("agent.status_page_credentials: cannot read {}: {cause}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        cause: std::io::Error,
    },
    /// It is larger than a credentials file is.
    #[error("agent.status_page_credentials: {} is over 64 KiB", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// It holds no credential.
    #[error("agent.status_page_credentials: {} holds no USER:PASSWORD or TOKEN line", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
}

impl Credentials {
    /// Reads the credentials file (its secrets are never shown in an error).
    ///
    /// # Errors
    /// It cannot be read, is over 64 KiB, or holds no credential.
    pub fn read(path: &Path) -> Result<Self, AuthError> {
        use std::io::Read;
        let read = |cause| AuthError::Read {
            path: path.to_path_buf(),
            cause,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(read)?
            .take(MAX_FILE + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_FILE {
            return Err(AuthError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let credentials = Credentials::parse(&text);
        if credentials.digests.is_empty() {
            return Err(AuthError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(credentials)
    }

    fn parse(text: &str) -> Self {
        let digests = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let scheme = if l.contains(':') {
                    Scheme::Basic
                } else {
                    Scheme::Bearer
                };
                (scheme, sha256(l.as_bytes()))
            })
            .collect();
        Credentials { digests }
    }

    /// Whether an `Authorization` header's value is one of the credentials.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        let Some((scheme, secret)) = authorization.and_then(|a| a.trim().split_once(' ')) else {
            return false;
        };
        let (scheme, presented) = if scheme.eq_ignore_ascii_case("basic") {
            let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(secret.trim())
            else {
                return false;
            };
            (Scheme::Basic, sha256(&decoded))
        } else if scheme.eq_ignore_ascii_case("bearer") {
            (Scheme::Bearer, sha256(secret.trim().as_bytes()))
        } else {
            return false;
        };
        // Every digest is compared, whichever matches.
        self.digests.iter().fold(false, |found, (s, d)| {
            found | (*s == scheme && equal(d, &presented))
        })
    }
}

/// Equality of two digests in a time that does not depend on where they differ.
fn equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user_password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_password)
        )
    }

    #[test]
    fn basic_and_bearer_lines_each_open_their_own_scheme() {
        let c = Credentials::parse("# readers\nops:hunter2\n\ns3cr3t-token\n");
        assert!(c.allows(Some(&basic("ops:hunter2"))));
        assert!(c.allows(Some("Bearer s3cr3t-token")));
        assert!(c.allows(Some("bearer  s3cr3t-token ")));
        assert!(!c.allows(Some(&basic("ops:hunter3"))));
        assert!(!c.allows(Some(&basic("root:hunter2"))));
        // A token is not a password, nor a password line a token.
        assert!(!c.allows(Some("Bearer ops:hunter2")));
        assert!(!c.allows(Some(&basic("s3cr3t-token"))));
        assert!(!c.allows(None));
        assert!(!c.allows(Some("Basic %%%")));
        assert!(!c.allows(Some("Digest s3cr3t-token")));
    }

    #[test]
    fn an_empty_or_huge_file_is_refused_without_showing_it() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("creds");
        std::fs::write(&path, "# nobody\n").unwrap();
        let e = Credentials::read(&path).unwrap_err().to_string();
        assert!(e.contains("holds no USER:PASSWORD or TOKEN line"), "{e}");
        std::fs::write(&path, "x".repeat(70_000)).unwrap();
        let e = Credentials::read(&path).unwrap_err().to_string();
        assert!(e.contains("over 64 KiB") && !e.contains("xxx"), "{e}");
    }
}
