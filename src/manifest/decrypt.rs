//! Decryption in the pipeline (`[app.decrypt]`): a file whose first document holds a
//! `sops:` block is decrypted in memory, all its documents together (the MAC covers them
//! all), before its objects go on; the decode cache keeps only the encrypted documents.
//! Each object remembers which of its values were decrypted, so that they are masked
//! wherever values show (`berth render`, `berth plan`'s diff, the API server's messages).
//! A decrypted value may land in a Secret; in another kind only when the app allows that
//! kind (`allow_decrypted_in`), since whoever reads such objects reads the value.
//!
//! The keys are read from their files by each render that meets an encrypted file, so a
//! key rotated on disk is used by the next sync and an app with no encrypted file needs
//! none readable. A render's encrypted files are decoded and decrypted on other threads
//! while the walk goes on (`source/deferred.rs`): opening a file's data key costs more
//! than reading the file.

use std::path::{Path, PathBuf};

use super::error::ManifestError;
use super::object::Manifest;
use super::read::{read_capped, ReadError};
use super::sops::{self, KeyError, Keys};
use crate::config::{AppConfig, DecryptProvider};

/// The most a key or passphrase file may hold.
const MAX_KEY_FILE: u64 = 64 << 10;

/// Fields that name an object: shown everywhere, so never counted as secret even when
/// a file encrypts them (sops' default encrypts every value).
const IDENTITY: [&str; 4] = [
    "/apiVersion",
    "/kind",
    "/metadata/name",
    "/metadata/namespace",
];

/// Why a render that met an encrypted file has no keys to open it with (a key's text is
/// never shown).
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The app has no `[app.decrypt]`.
    #[error("encrypted with sops, and the app decrypts nothing: set [app.decrypt] provider = \"sops\" with the keys that open it")]
    NotConfigured,
    /// The OS refused.
    #[error("cannot read key file {path}: {cause}")]
    Unreadable {
        /// The key file.
        path: PathBuf,
        /// The OS's error.
        cause: std::io::Error,
    },
    /// Over [`MAX_KEY_FILE`].
    #[error("key file {0} is over {MAX_KEY_FILE} bytes")]
    TooLarge(PathBuf),
    /// Not UTF-8.
    #[error("key file {0} is not UTF-8 text")]
    NotText(PathBuf),
    /// It holds something other than keys.
    #[error("{} key file {}: {why}", match why { KeyError::Age { .. } => "age", KeyError::OpenPgp => "OpenPGP" }, path.display())]
    NotAKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong in it.
        why: KeyError,
    },
}

/// How an app's encrypted files are opened, and where their values may land.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decryption {
    /// age identity files.
    pub age_key_files: Vec<PathBuf>,
    /// ASCII-armored OpenPGP secret key files.
    pub openpgp_key_files: Vec<PathBuf>,
    /// The OpenPGP keys' passphrase (its first line).
    pub openpgp_passphrase_file: Option<PathBuf>,
    /// Kinds besides Secret that may hold decrypted values.
    pub allow_in: Vec<String>,
}

impl Decryption {
    /// The app's `[app.decrypt]`, when set.
    pub fn for_app(app: &AppConfig) -> Option<Self> {
        let d = app.decrypt.as_ref()?;
        match d.provider {
            DecryptProvider::Sops => Some(Decryption {
                age_key_files: d.age_key_files.clone(),
                openpgp_key_files: d.openpgp_key_files.clone(),
                openpgp_passphrase_file: d.openpgp_passphrase_file.clone(),
                allow_in: d.allow_decrypted_in.clone(),
            }),
        }
    }

    /// Reads the key files.
    ///
    /// # Errors
    /// A file that cannot be read, is too large, or holds no key (named, with the line of
    /// an age file that is not an identity; a key's text is never shown).
    pub fn keys(&self) -> Result<Keys, KeyFileError> {
        fn not_a_key(path: &Path) -> impl FnOnce(KeyError) -> KeyFileError + '_ {
            move |why| KeyFileError::NotAKey {
                path: path.to_path_buf(),
                why,
            }
        }
        let mut keys = Keys::default();
        for file in &self.age_key_files {
            keys.add_age(&read_key_file(file)?)
                .map_err(not_a_key(file))?;
        }
        let passphrase = match &self.openpgp_passphrase_file {
            Some(file) => Some(
                read_key_file(file)?
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            ),
            None => None,
        };
        for file in &self.openpgp_key_files {
            keys.add_openpgp(&read_key_file(file)?, passphrase.as_deref())
                .map_err(not_a_key(file))?;
        }
        Ok(keys)
    }
}

fn read_key_file(file: &Path) -> Result<String, KeyFileError> {
    let bytes = read_capped(std::fs::File::open(file), MAX_KEY_FILE).map_err(|e| match e {
        ReadError::Io(cause) => KeyFileError::Unreadable {
            path: file.to_path_buf(),
            cause,
        },
        ReadError::TooLarge(_) => KeyFileError::TooLarge(file.to_path_buf()),
    })?;
    String::from_utf8(bytes).map_err(|_| KeyFileError::NotText(file.to_path_buf()))
}

/// The keys of a render that met encrypted files.
///
/// # Errors
/// The app decrypts nothing, or a key file is unusable: the message, for each file.
pub fn keys(decryption: Option<&Decryption>) -> Result<Keys, KeyFileError> {
    decryption.ok_or(KeyFileError::NotConfigured)?.keys()
}

/// The documents of the encrypted file `path`, decrypted with `keys`; each knows which
/// of its values were. A value decrypted into a kind that `allow` (beside Secret) does
/// not name is refused.
///
/// # Errors
/// [`ManifestError::Encrypted`] for the file (no key, a MAC that does not match, …),
/// or [`ManifestError::Invalid`] for each object holding a decrypted value it may not.
pub fn open(
    keys: &Keys,
    allow: &[String],
    path: &str,
    manifests: Vec<Manifest>,
) -> Result<Vec<Manifest>, Vec<ManifestError>> {
    let (mut docs, origins): (Vec<_>, Vec<_>) = manifests
        .into_iter()
        .map(|m| (serde_json::Value::Object(m.object), m.origin))
        .unzip();
    let decrypted = sops::decrypt(&mut docs, keys).map_err(|e| {
        vec![ManifestError::Encrypted {
            path: path.to_string(),
            message: e.to_string(),
        }]
    })?;
    let mut out = Vec::with_capacity(docs.len());
    let mut errors = Vec::new();
    for ((doc, origin), pointers) in docs.into_iter().zip(origins).zip(decrypted) {
        let serde_json::Value::Object(object) = doc else {
            continue;
        };
        let m = Manifest {
            object,
            origin,
            decrypted: pointers
                .into_iter()
                .filter(|p| !IDENTITY.contains(&p.as_str()))
                .collect(),
        };
        match refused_kind(&m, allow) {
            Some(e) => errors.push(e),
            None => out.push(m),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The values of encrypted files that kustomize was given in clear, and their base64 (a
/// generated Secret's data), made once for a render's objects.
pub struct Marks {
    values: Vec<String>,
}

impl Marks {
    /// Marks for `values` (empty ones never match).
    pub fn new(values: &[String]) -> Self {
        use base64::Engine;
        let plain = values.iter().filter(|v| !v.is_empty());
        let encoded = plain
            .clone()
            .map(|v| base64::engine::general_purpose::STANDARD.encode(v.as_bytes()));
        Marks {
            values: plain.cloned().chain(encoded).collect(),
        }
    }

    /// Marks each string of `m` that is one of the values as decrypted. Names are never
    /// marked.
    pub fn mark(&self, m: &mut Manifest) {
        if self.values.is_empty() {
            return;
        }
        let mut found = Vec::new();
        for (key, value) in &m.object {
            strings(value, &format!("/{}", escape(key)), &mut |pointer, s| {
                if self.values.iter().any(|v| v == s) && !IDENTITY.contains(&pointer) {
                    found.push(pointer.to_string());
                }
            });
        }
        m.decrypted.extend(found);
    }
}

/// Calls `f` with each string in `value` and its JSON pointer.
fn strings(value: &serde_json::Value, at: &str, f: &mut dyn FnMut(&str, &str)) {
    match value {
        serde_json::Value::String(s) => f(at, s),
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                strings(v, &format!("{at}/{}", escape(k)), f);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                strings(v, &format!("{at}/{i}"), f);
            }
        }
        _ => {}
    }
}

/// A key as a JSON pointer's part.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Why `m` may not hold its decrypted values: a kind besides Secret that `allow` does not
/// name.
pub fn refused_kind(m: &Manifest, allow: &[String]) -> Option<ManifestError> {
    let kind = m.kind();
    if m.decrypted.is_empty() || kind == "Secret" || allow.iter().any(|k| k == kind) {
        return None;
    }
    Some(ManifestError::Invalid {
        origin: m.origin.clone(),
        message: format!(
            "{} holds values decrypted by sops ({}): whoever can read a {kind} reads them; make it a Secret, or allow it with [app.decrypt] allow_decrypted_in = [\"{kind}\"]",
            m.key(),
            m.decrypted.join(", ")
        ),
    })
}

/// `object` with each value at `pointers` replaced by `***`.
pub fn mask(object: &mut serde_json::Value, pointers: &[String]) {
    for p in pointers {
        if let Some(v) = object.pointer_mut(p) {
            *v = serde_json::Value::String("***".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Origin;

    fn manifest(kind: &str, decrypted: &[&str]) -> Manifest {
        let object = serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "db"}, "data": {"a": "x"}});
        Manifest {
            object: object.as_object().unwrap().clone(),
            origin: Origin::file("db.yaml"),
            decrypted: decrypted.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn a_decrypted_value_lands_in_a_secret_or_an_allowed_kind_only() {
        assert!(refused_kind(&manifest("Secret", &["/data/a"]), &[]).is_none());
        assert!(refused_kind(&manifest("ConfigMap", &[]), &[]).is_none());
        let e = refused_kind(&manifest("ConfigMap", &["/data/a"]), &[]).unwrap();
        assert_eq!(
            e.to_string(),
            "db.yaml: ConfigMap db holds values decrypted by sops (/data/a): whoever can read a ConfigMap reads them; make it a Secret, or allow it with [app.decrypt] allow_decrypted_in = [\"ConfigMap\"]"
        );
        let allowed = ["ConfigMap".to_string()];
        assert!(refused_kind(&manifest("ConfigMap", &["/data/a"]), &allowed).is_none());
    }

    #[test]
    fn masking_replaces_the_values_at_the_pointers_alone() {
        let mut object = manifest("ConfigMap", &[]).object.into();
        mask(&mut object, &["/data/a".into(), "/data/missing".into()]);
        assert_eq!(object["data"]["a"], "***");
        assert_eq!(object["metadata"]["name"], "db");
    }

    #[test]
    fn without_decryption_an_encrypted_file_says_what_to_set() {
        let e = keys(None).err().unwrap().to_string();
        assert!(
            e.starts_with("encrypted with sops, and the app decrypts nothing: set [app.decrypt]"),
            "{e}"
        );
    }

    #[test]
    fn a_key_file_is_named_and_its_text_never_shown() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("age.key");
        std::fs::write(&file, "# created\nAGE-SECRET-KEY-NOT-A-KEY-hunter2\n").unwrap();
        let decryption = Decryption {
            age_key_files: vec![file.clone()],
            ..Decryption::default()
        };
        let e = decryption.keys().err().unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "age key file {}: line 2 is not an age identity",
                file.display()
            )
        );
        let missing = Decryption {
            openpgp_key_files: vec![d.path().join("none.asc")],
            ..Decryption::default()
        };
        assert!(missing
            .keys()
            .err()
            .unwrap()
            .to_string()
            .starts_with("cannot read key file"));
    }
}
