//! Secrets handed over as systemd intends: a file setting written `credential:NAME` means
//! the file NAME in `$CREDENTIALS_DIRECTORY`, where systemd's `LoadCredential=NAME:PATH`
//! puts a copy only the service's (dynamic) user can read. Outside systemd — an operator's
//! `berth status` at a terminal — the same name is read from [`CREDENTIALS_DIR`], the
//! folder the shipped unit loads them from, so one configuration serves both.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

/// Where the shipped unit's `LoadCredential=` lines read from, and where berth looks when
/// `$CREDENTIALS_DIRECTORY` is not set.
pub const CREDENTIALS_DIR: &str = "/etc/berth/credentials";

const PREFIX: &str = "credential:";

/// A `credential:NAME` whose NAME systemd would not accept; holds the setting as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} names no credential: write credential:NAME with NAME as in the unit's LoadCredential=NAME:PATH (no '/')")]
pub struct CredentialNameError(pub String);

/// The path a file setting names: `credential:NAME` in `credentials_directory` (the value
/// of `$CREDENTIALS_DIRECTORY`, else [`CREDENTIALS_DIR`]); anything else as written.
///
/// # Errors
/// NAME is not a credential name systemd accepts (empty, `.`, `..`, a `/`, over 255 bytes).
pub fn resolve(
    value: &str,
    credentials_directory: Option<&OsStr>,
) -> Result<PathBuf, CredentialNameError> {
    let Some(name) = value.strip_prefix(PREFIX) else {
        return Ok(PathBuf::from(value));
    };
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.len() > 255 {
        return Err(CredentialNameError(value.to_string()));
    }
    let dir = credentials_directory.map_or(Path::new(CREDENTIALS_DIR), Path::new);
    Ok(dir.join(name))
}

/// Deserializes an optional file setting through [`resolve`], reading
/// `$CREDENTIALS_DIRECTORY` once per setting.
pub(super) fn file<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let text = String::deserialize(d)?;
    let dir = std::env::var_os("CREDENTIALS_DIRECTORY");
    resolve(&text, dir.as_deref())
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Deserializes a list of file settings through [`resolve`].
pub(super) fn files<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    let texts = Vec::<String>::deserialize(d)?;
    let dir = std::env::var_os("CREDENTIALS_DIRECTORY");
    texts
        .iter()
        .map(|t| resolve(t, dir.as_deref()).map_err(serde::de::Error::custom))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_is_read_where_systemd_put_it() {
        let dir = OsStr::new("/run/credentials/berth.service");
        assert_eq!(
            resolve("credential:kubeconfig", Some(dir)).unwrap(),
            Path::new("/run/credentials/berth.service/kubeconfig")
        );
    }

    #[test]
    fn outside_systemd_a_credential_is_read_from_the_folder_the_unit_loads() {
        assert_eq!(
            resolve("credential:webhook", None).unwrap(),
            Path::new("/etc/berth/credentials/webhook")
        );
    }

    #[test]
    fn a_plain_path_stays_as_written() {
        let dir = OsStr::new("/run/credentials/berth.service");
        assert_eq!(
            resolve("/etc/berth/token", Some(dir)).unwrap(),
            Path::new("/etc/berth/token")
        );
    }

    #[test]
    fn a_name_that_would_leave_the_folder_is_refused() {
        for bad in [
            "credential:",
            "credential:..",
            "credential:../shadow",
            "credential:a/b",
        ] {
            let e = resolve(bad, None).unwrap_err().to_string();
            assert!(e.contains("LoadCredential=NAME:PATH"), "{bad}: {e}");
        }
    }
}
