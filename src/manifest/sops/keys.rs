//! The keys berth decrypts with (age identities, OpenPGP secret keys) and opening a
//! file's data key with them: age first, as sops does, and the entry for a recipient
//! berth holds before the others.

use std::io::Read;
use std::str::FromStr;

use pgp::composed::{Deserializable, Message, SignedSecretKey};
use pgp::types::{KeyDetails, Password};

use super::metadata::{AgeEntry, Metadata};
use super::SopsError;

/// The most bytes a data key is read to once opened (it is 32).
const MAX_DATA_KEY: u64 = 1024;

/// A key file that berth cannot decrypt with (never its text: it is a secret).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// A line of an age key file is not an age identity.
    #[error("line {line} is not an age identity")]
    Age { line: usize },
    /// The text is not an OpenPGP secret key.
    #[error("not an ASCII-armored OpenPGP secret key")]
    OpenPgp,
}

/// An age identity and its recipient (`age1…`), made once to name it and to match sops'
/// entries.
struct AgeKey {
    identity: age::x25519::Identity,
    recipient: String,
}

/// The age identities and OpenPGP secret keys berth decrypts with.
#[derive(Default)]
pub struct Keys {
    age: Vec<AgeKey>,
    /// Each with its passphrase (empty: none).
    openpgp: Vec<(SignedSecretKey, Password)>,
}

impl Keys {
    /// Adds the identities of an age key file's text (`AGE-SECRET-KEY-1…` lines; `#`
    /// comments and blank lines skipped).
    ///
    /// # Errors
    /// A line that is not an age identity (its number, never its text).
    pub fn add_age(&mut self, text: &str) -> Result<(), KeyError> {
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let identity =
                age::x25519::Identity::from_str(line).map_err(|_| KeyError::Age { line: i + 1 })?;
            let recipient = identity.to_public().to_string();
            self.age.push(AgeKey {
                identity,
                recipient,
            });
        }
        Ok(())
    }

    /// Adds an ASCII-armored OpenPGP secret key, unprotected or opened by `passphrase`.
    ///
    /// # Errors
    /// The text is not an OpenPGP secret key.
    pub fn add_openpgp(&mut self, armored: &str, passphrase: Option<&str>) -> Result<(), KeyError> {
        let (key, _) = SignedSecretKey::from_string(armored).map_err(|_| KeyError::OpenPgp)?;
        self.openpgp
            .push((key, passphrase.map_or_else(Password::empty, Password::from)));
        Ok(())
    }

    /// The recipients berth can open, for messages.
    fn held(&self) -> String {
        let held: Vec<String> = self
            .age
            .iter()
            .map(|i| format!("age {}", i.recipient))
            .chain(
                self.openpgp
                    .iter()
                    .map(|(k, _)| format!("OpenPGP {:X}", k.fingerprint())),
            )
            .collect();
        if held.is_empty() {
            "no key".into()
        } else {
            held.join(", ")
        }
    }
}

/// The 32-byte data key, opened by the first of berth's age identities that can.
pub(super) fn data_key(m: &Metadata, keys: &Keys) -> Result<Vec<u8>, SopsError> {
    let top_level = !m.age.is_empty() || !m.pgp.is_empty();
    if !top_level && m.key_groups.len() > 1 {
        return Err(SopsError::Metadata(
            "its data key is split over several key groups (Shamir), which berth does not open"
                .into(),
        ));
    }
    let opened = held_first(&m.age, |a| {
        keys.age.iter().any(|i| i.recipient == a.recipient)
    })
    .find_map(|a| Some((open_age(a, keys)?, &a.recipient)))
    .or_else(|| {
        m.pgp
            .iter()
            .find_map(|p| Some((open_openpgp(&p.enc, keys)?, &p.fp)))
    });
    if let Some((key, recipient)) = opened {
        return if key.len() == 32 {
            Ok(key)
        } else {
            Err(SopsError::Metadata(format!(
                "the data key for {recipient} is {} bytes, not 32",
                key.len()
            )))
        };
    }
    let file: Vec<String> = m
        .age
        .iter()
        .map(|a| format!("age {}", a.recipient))
        .chain(m.pgp.iter().map(|p| format!("OpenPGP {}", p.fp)))
        .collect();
    Err(SopsError::NoKey {
        file: if file.is_empty() {
            "no recipient".into()
        } else {
            file.join(", ")
        },
        held: keys.held(),
    })
}

/// `items`, those for which `held` holds first: every age key tried on an entry costs an
/// X25519 agreement, so the entry for a recipient berth holds, and that recipient's key,
/// are tried before the others.
fn held_first<T>(items: &[T], held: impl Fn(&T) -> bool) -> impl Iterator<Item = &T> {
    let (first, others): (Vec<_>, Vec<_>) = items.iter().partition(|i| held(i));
    first.into_iter().chain(others)
}

/// The age-armored data key of `entry`, when one of `keys` opens it (the entry's own
/// recipient tried first).
fn open_age(entry: &AgeEntry, keys: &Keys) -> Option<Vec<u8>> {
    if keys.age.is_empty() {
        return None;
    }
    let reader = age::armor::ArmoredReader::new(entry.enc.as_bytes());
    // Buffered: the header is read in one pass, where `new` parses it again for each
    // piece it reads (a third of the cost of opening a data key).
    let decryptor = age::Decryptor::new_buffered(reader).ok()?;
    let identities = held_first(&keys.age, |k| k.recipient == entry.recipient)
        .map(|k| &k.identity as &dyn age::Identity);
    let mut opened = decryptor.decrypt(identities).ok()?;
    let mut key = Vec::new();
    opened
        .by_ref()
        .take(MAX_DATA_KEY)
        .read_to_end(&mut key)
        .ok()?;
    Some(key)
}

/// The OpenPGP-armored data key, when one of `keys` opens it.
pub(super) fn open_openpgp(enc: &str, keys: &Keys) -> Option<Vec<u8>> {
    if keys.openpgp.is_empty() {
        return None;
    }
    let (message, _) = Message::from_armor(enc.as_bytes()).ok()?;
    let (secret, passwords): (Vec<&SignedSecretKey>, Vec<&Password>) =
        keys.openpgp.iter().map(|(k, p)| (k, p)).unzip();
    let mut opened = message.decrypt_with_keys(passwords, secret).ok()?;
    if opened.is_compressed() {
        opened = opened.decompress().ok()?;
    }
    // Read to a data key's size at most: a compressed message may inflate without bound.
    let mut key = Vec::new();
    opened.take(MAX_DATA_KEY).read_to_end(&mut key).ok()?;
    Some(key)
}
