//! A registry's credentials from a Docker `config.json` (what `docker login`, `helm
//! registry login` and `skopeo login` write): `auths` by registry host, each a base64
//! `auth` of `user:password`, or `username` and `password`, or an `identitytoken` (an
//! OAuth2 refresh token for the token flow). Read at each fetch (a rotated file is used
//! by the next), bounded; never logged.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;

/// The largest `config.json` read.
const MAX_CONFIG: u64 = 1 << 20;

/// What a registry host is given.
#[derive(Clone, PartialEq, Eq)]
pub enum Login {
    /// HTTP basic auth (and the token flow's request for a token).
    Basic { username: String, password: String },
    /// An identity token, traded for an access token in the token flow.
    IdentityToken(String),
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Login::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Login::IdentityToken(_) => write!(f, "IdentityToken(***)"),
        }
    }
}

#[derive(serde::Deserialize, Default)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Entry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
}

/// Why the credentials could not be read; never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot read the registry credentials {}", path.display())]
    Unreadable {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the registry credentials {} are not a Docker config.json ({why}): write {{\"auths\": {{\"HOST\": {{\"auth\": base64 of \"user:password\"}}}}}}", path.display())]
    Malformed {
        path: std::path::PathBuf,
        why: String,
    },
}

/// The login for `host` (`registry.example.com` or `registry.example.com:5000`) in the
/// `config.json` at `path`; `None` when it names none.
///
/// # Errors
/// The file cannot be read or is not a `config.json`.
pub fn login_for(path: &Path, host: &str) -> Result<Option<Login>, CredentialsError> {
    let bytes =
        crate::manifest::read::read_capped(std::fs::File::open(path), MAX_CONFIG).map_err(|e| {
            match e {
                crate::manifest::read::ReadError::Io(source) => CredentialsError::Unreadable {
                    path: path.to_path_buf(),
                    source,
                },
                crate::manifest::read::ReadError::TooLarge(_) => CredentialsError::Malformed {
                    path: path.to_path_buf(),
                    why: format!("larger than {MAX_CONFIG} bytes"),
                },
            }
        })?;
    let malformed = |why: String| CredentialsError::Malformed {
        path: path.to_path_buf(),
        why,
    };
    // serde_json's message names a line and column, never the value.
    let config: DockerConfig =
        serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))?;
    let Some(entry) = config
        .auths
        .iter()
        .find(|(key, _)| names(key, host))
        .map(|e| e.1)
    else {
        return Ok(None);
    };
    if let Some(token) = &entry.identitytoken {
        return Ok(Some(Login::IdentityToken(token.clone())));
    }
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Some(Login::Basic {
            username: username.clone(),
            password: password.clone(),
        }));
    }
    let Some(auth) = &entry.auth else {
        return Ok(None);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()
        .and_then(|d| String::from_utf8(d).ok())
        .ok_or_else(|| {
            malformed(format!(
                "the auth of {host} is not base64 of \"user:password\""
            ))
        })?;
    let (username, password) = decoded
        .split_once(':')
        .ok_or_else(|| malformed(format!("the auth of {host} holds no ':'")))?;
    Ok(Some(Login::Basic {
        username: username.to_string(),
        password: password.to_string(),
    }))
}

/// Whether a `config.json` key names `host`: the host itself, or a URL of it (`docker
/// login` writes `https://index.docker.io/v1/`).
fn names(key: &str, host: &str) -> bool {
    let bare = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    bare.split('/').next() == Some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), json).unwrap();
        file
    }

    #[test]
    fn each_form_of_docker_login_is_read_for_its_host() {
        let auth = base64::engine::general_purpose::STANDARD.encode("robot:s3cret");
        let file = config(&format!(
            r#"{{"auths": {{
                "127.0.0.1:5000": {{"auth": "{auth}"}},
                "https://registry.example.com/v1/": {{"username": "u", "password": "p"}},
                "ghcr.io": {{"identitytoken": "refresh"}}
            }}}}"#
        ));
        let basic = |u: &str, p: &str| Login::Basic {
            username: u.into(),
            password: p.into(),
        };
        let login = |host| login_for(file.path(), host).unwrap();
        assert_eq!(login("127.0.0.1:5000"), Some(basic("robot", "s3cret")));
        assert_eq!(login("registry.example.com"), Some(basic("u", "p")));
        assert_eq!(
            login("ghcr.io"),
            Some(Login::IdentityToken("refresh".into()))
        );
        assert_eq!(login("127.0.0.1"), None, "another port is another registry");
    }

    #[test]
    fn a_broken_file_is_named_and_its_secrets_are_not() {
        let file = config(r#"{"auths": {"r.example": {"auth": "not base64 s3cret!"}}}"#);
        let e = login_for(file.path(), "r.example").unwrap_err().to_string();
        assert!(e.contains(&file.path().display().to_string()), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        let login = Login::Basic {
            username: "u".into(),
            password: "s3cret".into(),
        };
        assert!(!format!("{login:?}").contains("s3cret"));
    }
}
