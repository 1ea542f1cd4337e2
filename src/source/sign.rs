//! Commit signatures berth makes (its image updates' commits): with an OpenSSH private key
//! (sshsig in git's namespace, as `git commit -S` with `gpg.format = ssh`) or an armored
//! OpenPGP secret key (a detached signature by its signing subkey, else its primary key) —
//! each through the crate that verifies them, so [`super::verify`] accepts what it signs.
use std::path::{Path, PathBuf};

use pgp::composed::{Deserializable, DetachedSignature, SignedSecretKey};
use pgp::types::{Password, SigningKey};

/// The most a key file may hold.
const MAX_KEY: u64 = 64 << 10;

/// A private key that signs commits.
pub enum Signer {
    Ssh(Box<ssh_key::PrivateKey>),
    OpenPgp(Box<SignedSecretKey>),
}

/// Why a key cannot sign.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("cannot read the signing key {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the signing key {} {why}", path.display())]
    Key { path: PathBuf, why: String },
    #[error("cannot sign the commit: {0}")]
    Sign(String),
}

impl Signer {
    /// The key in `path`: an OpenSSH private key, or an armored OpenPGP secret key, neither
    /// encrypted (hand it over as a systemd credential instead).
    ///
    /// # Errors
    /// The file cannot be read, or holds neither kind of key, or an encrypted one.
    pub fn load(path: &Path) -> Result<Signer, SignError> {
        let read = |source: std::io::Error| SignError::Read {
            path: path.to_path_buf(),
            source,
        };
        let key = |why: String| SignError::Key {
            path: path.to_path_buf(),
            why,
        };
        use crate::manifest::read::{read_capped, ReadError};
        let bytes = read_capped(std::fs::File::open(path), MAX_KEY).map_err(|e| match e {
            ReadError::Io(e) => read(e),
            ReadError::TooLarge(_) => key("is larger than 64 KiB: it is no key".into()),
        })?;
        let text = String::from_utf8_lossy(&bytes);
        if text.contains("BEGIN OPENSSH PRIVATE KEY") {
            let parsed = ssh_key::PrivateKey::from_openssh(text.trim())
                .map_err(|e| key(format!("is not an OpenSSH private key ({e})")))?;
            if parsed.is_encrypted() {
                return Err(key(
                    "is encrypted: give berth an unencrypted key, as a systemd credential".into(),
                ));
            }
            return Ok(Signer::Ssh(Box::new(parsed)));
        }
        if text.contains("BEGIN PGP PRIVATE KEY BLOCK") {
            let (parsed, _) = SignedSecretKey::from_string(&text)
                .map_err(|e| key(format!("is not an OpenPGP secret key ({e})")))?;
            return Ok(Signer::OpenPgp(Box::new(parsed)));
        }
        Err(key(
            "holds neither an OpenSSH private key nor an armored OpenPGP secret key".into(),
        ))
    }

    /// The armored signature of `data` (a commit's bytes).
    ///
    /// # Errors
    /// The key cannot sign (an OpenPGP key protected by a passphrase).
    pub fn sign(&self, data: &[u8]) -> Result<String, SignError> {
        let failed = |e: &dyn std::fmt::Display| SignError::Sign(e.to_string());
        match self {
            Signer::Ssh(key) => key
                .sign("git", ssh_key::HashAlg::Sha512, data)
                .and_then(|sig| sig.to_pem(ssh_key::LineEnding::LF))
                .map_err(|e| failed(&e)),
            Signer::OpenPgp(key) => {
                let signing_subkey = key
                    .secret_subkeys
                    .iter()
                    .find(|s| s.signatures.iter().any(|sig| sig.key_flags().sign()));
                let rng = rand::rngs::OsRng;
                let password = Password::empty();
                let signature = match signing_subkey {
                    Some(sub) => DetachedSignature::sign_binary_data(
                        rng,
                        &sub.key,
                        &password,
                        sub.key.hash_alg(),
                        data,
                    ),
                    None => DetachedSignature::sign_binary_data(
                        rng,
                        &key.primary_key,
                        &password,
                        key.primary_key.hash_alg(),
                        data,
                    ),
                };
                signature
                    .and_then(|s| s.to_armored_string(Default::default()))
                    .map_err(|e| failed(&e))
            }
        }
    }
}
