//! SOPS: a manifest file whose values are encrypted (`ENC[AES256_GCM,data:…,iv:…,tag:…,
//! type:…]`) under a data key that the file's `sops:` block wraps for age or OpenPGP
//! recipients. Decrypted in memory, as the current sops tool (Go, v3) defines the format:
//!
//! - each value is AES-256-GCM with a 32-byte IV, its additional data the mapping keys
//!   on its path joined by `:` with a final `:` (list items add nothing); its `type`
//!   (str, int, float, bool, bytes) restored; empty values are never encrypted;
//! - which values are encrypted: `unencrypted_suffix` (the default, `_unencrypted`),
//!   `encrypted_suffix`, `unencrypted_regex` or `encrypted_regex`, each matched against
//!   every key on the path (a match on a parent covers what is below it);
//! - the MAC — SHA-512 over every value in document order (only the encrypted ones, after
//!   SHA-256("sops"), with `mac_only_encrypted`), upper-case hex, stored encrypted with
//!   `lastmodified` as additional data — is checked before any value is used.
//!
//! The data key is opened with age identities (the `age` crate's own X25519 identity) or
//! OpenPGP secret keys (the `pgp` crate), age first as sops does; a file with several key
//! groups (Shamir) is refused.
//!
//! In files of their own:
//! - `keys.rs`: the keys berth holds, and opening the data key with them;
//! - `metadata.rs`: the `sops:` block, its entries bounded before any is opened;
//! - `rule.rs`: which values are encrypted;
//! - `walk.rs`: one file's values decrypted in document order, and its MAC computed;
//! - `value.rs`: one encrypted value;
//! - [`stores`]: the file formats (YAML, JSON, dotenv, binary).

use aes_gcm::aead::KeyInit;
use serde_json::Value;

use keys::data_key;
use metadata::{bounded_entries, Metadata};
use rule::Rule;
use value::{open, Cipher};
use walk::Walk;

pub use keys::{KeyError, Keys};
pub use metadata::MAX_RECIPIENTS;
pub use value::ValueError;

mod keys;
mod metadata;
mod rule;
pub mod stores;
mod value;
mod walk;

/// The top-level key of an encrypted file's metadata.
pub const METADATA: &str = "sops";

/// Why an encrypted file cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SopsError {
    /// Its `sops:` block is not what sops writes.
    #[error("sops metadata: {0}")]
    Metadata(String),
    /// None of berth's keys opens its data key.
    #[error(
        "none of berth's keys opens its data key: it is encrypted for {file}; berth holds {held}"
    )]
    NoKey { file: String, held: String },
    /// A value could not be decrypted.
    #[error("{path}: {why}")]
    Value { path: String, why: ValueError },
    /// The MAC does not match: the file changed after it was encrypted.
    #[error("its MAC does not match its values: the file was changed after sops encrypted it (a value edited, added or moved); nothing of it is used")]
    Mac,
}

/// Whether a decoded document is a sops file's (it holds a `sops:` block with a MAC).
pub fn is_encrypted(doc: &Value) -> bool {
    doc.as_object().is_some_and(is_encrypted_object)
}

/// Whether a file's text may be a sops file's, before it is decoded: it holds a `sops`
/// key at the start of a line (YAML, as sops writes it) or a `"sops"` key (JSON). A file
/// that does is decoded and checked with [`is_encrypted`] anyway.
pub fn looks_encrypted(text: &[u8]) -> bool {
    use memchr::memmem::find;
    text.starts_with(b"sops:")
        || find(text, b"\nsops:").is_some()
        || find(text, b"\"sops\"").is_some()
}

/// [`is_encrypted`] of a document that is a mapping: it holds a `sops` mapping (with its
/// MAC or without: one whose MAC was removed is refused, as sops refuses it, never taken
/// as clear text with its `ENC[…]` strings for values).
pub fn is_encrypted_object(doc: &serde_json::Map<String, Value>) -> bool {
    doc.get(METADATA).is_some_and(Value::is_object)
}

/// A file's documents, decrypted in place (their `sops:` blocks removed). Returns, per
/// document, the JSON pointer of each value that was decrypted.
///
/// # Errors
/// See [`SopsError`]: nothing is decrypted unless every value is and the MAC matches.
pub fn decrypt(docs: &mut [Value], keys: &Keys) -> Result<Vec<Vec<String>>, SopsError> {
    let metadata = docs
        .first()
        .and_then(|d| d.get(METADATA))
        .cloned()
        .ok_or_else(|| SopsError::Metadata("the first document has no sops block".into()))?;
    let metadata: Metadata =
        serde_json::from_value(metadata).map_err(|e| SopsError::Metadata(e.to_string()))?;
    let Some(mac) = metadata.mac.as_deref() else {
        return Err(SopsError::Metadata(
            "it has no mac, so its values cannot be checked: sops refuses such a file, and so does berth (encrypt it again with sops)".into(),
        ));
    };
    bounded_entries(&metadata)?;
    for doc in docs.iter_mut() {
        if let Some(map) = doc.as_object_mut() {
            map.remove(METADATA);
        }
    }
    let rule = Rule::of(&metadata)?;
    let cipher = Cipher::new_from_slice(&data_key(&metadata, keys)?)
        .map_err(|e| SopsError::Metadata(e.to_string()))?;
    let mut walk = Walk::new(&cipher, &rule, metadata.mac_only_encrypted);
    let decrypted = docs
        .iter_mut()
        .map(|doc| walk.document(doc))
        .collect::<Result<Vec<_>, _>>()?;
    let computed = walk.mac();
    let stored = open(&cipher, mac, &metadata.lastmodified).map_err(|_| SopsError::Mac)?;
    // In constant time: how much of a MAC matched says nothing.
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        stored.0.as_slice(),
        computed.as_bytes(),
    )) {
        return Err(SopsError::Mac);
    }
    Ok(decrypted)
}

#[cfg(test)]
mod tests;
