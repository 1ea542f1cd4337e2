//! One encrypted value, `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`: opened with the
//! file's data key and its additional data, and its clear text read back as its type.

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, Payload};
use aes_gcm::aes::Aes256;
use aes_gcm::AesGcm;
use base64::Engine;
use serde_json::{Number, Value};

/// AES-256-GCM with sops' 32-byte IV.
pub(super) type Cipher = AesGcm<Aes256, U32>;

/// Why one encrypted value could not be used (never the value: it is a secret).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValueError {
    /// Not `ENC[AES256_GCM,…]`.
    #[error("an encrypted value is not in sops' format")]
    NotSops,
    /// One of its fields is missing.
    #[error("an encrypted value has no {0}")]
    NoField(&'static str),
    /// One of its fields is not base64.
    #[error("an encrypted value's {0} is not base64")]
    NotBase64(&'static str),
    /// Its IV or tag has the wrong length.
    #[error("an encrypted value's IV or tag has the wrong length")]
    Length,
    /// The data key does not open it here.
    #[error("does not decrypt with the file's data key at this place (a value edited or moved)")]
    Moved,
    /// Its clear text is not UTF-8.
    #[error("a {0} value is not UTF-8")]
    NotText(String),
    /// Its clear text is not of its type.
    #[error("its decrypted value is not a {0}")]
    NotOfType(String),
    /// A type sops does not write.
    #[error("unknown value type {0:?}")]
    UnknownType(String),
}

/// Decrypts one `ENC[AES256_GCM,…]` value with additional data `aad`: its plaintext and
/// its type.
pub(super) fn open(
    cipher: &Cipher,
    text: &str,
    aad: &str,
) -> Result<(Vec<u8>, String), ValueError> {
    let inner = text
        .strip_prefix("ENC[AES256_GCM,")
        .and_then(|t| t.strip_suffix(']'))
        .ok_or(ValueError::NotSops)?;
    let field = |name: &'static str| {
        inner
            .split(',')
            .find_map(|part| part.strip_prefix(name)?.strip_prefix(':'))
            .ok_or(ValueError::NoField(name))
    };
    let b64 = |name: &'static str| {
        base64::engine::general_purpose::STANDARD
            .decode(field(name)?)
            .map_err(|_| ValueError::NotBase64(name))
    };
    let (mut data, iv, tag) = (b64("data")?, b64("iv")?, b64("tag")?);
    if iv.len() != 32 || tag.len() != 16 {
        return Err(ValueError::Length);
    }
    data.extend_from_slice(&tag);
    let nonce = aes_gcm::aead::generic_array::GenericArray::from_slice(&iv);
    let plaintext = cipher
        .decrypt(
            nonce,
            Payload {
                msg: &data,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| ValueError::Moved)?;
    Ok((plaintext, field("type")?.to_string()))
}

/// A decrypted value of `kind` as JSON.
pub(super) fn typed(plaintext: Vec<u8>, kind: &str) -> Result<Value, ValueError> {
    let text = String::from_utf8(plaintext).map_err(|_| ValueError::NotText(kind.into()))?;
    // Never the value itself: it is a secret.
    let bad = || ValueError::NotOfType(kind.into());
    Ok(match kind {
        "str" | "bytes" | "time" => Value::String(text),
        "int" => Value::Number(text.parse::<i64>().map_err(|_| bad())?.into()),
        "float" => Number::from_f64(text.parse::<f64>().map_err(|_| bad())?)
            .map_or(Value::Null, Value::Number),
        "bool" => Value::Bool(match text.to_ascii_lowercase().as_str() {
            "true" | "1" | "t" => true,
            "false" | "0" | "f" => false,
            _ => return Err(bad()),
        }),
        other => return Err(ValueError::UnknownType(other.into())),
    })
}
