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

use std::io::Read;
use std::str::FromStr;

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes256;
use aes_gcm::AesGcm;
use base64::Engine;
use pgp::composed::{Deserializable, Message, SignedSecretKey};
use pgp::types::{KeyDetails, Password};
use serde_json::{Number, Value};
use sha2::{Digest, Sha256, Sha512};

/// AES-256-GCM with sops' 32-byte IV.
type Cipher = AesGcm<Aes256, U32>;

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

/// The most recipients (age or OpenPGP entries) a file may name, and the most stanzas an
/// age entry may hold: sops writes one entry per recipient, and one stanza in each.
pub const MAX_RECIPIENTS: usize = 64;

/// The largest armored data key read (an entry's `enc`): an RSA-4096 OpenPGP message of a
/// 32-byte key is under 1 KiB armored, an age one under 300 bytes.
const MAX_ENC: usize = 16 << 10;

/// The most bytes a data key is read to once opened (it is 32).
const MAX_DATA_KEY: u64 = 1024;

#[derive(serde::Deserialize)]
struct Metadata {
    lastmodified: String,
    mac: Option<String>,
    #[serde(default)]
    age: Vec<AgeEntry>,
    #[serde(default)]
    pgp: Vec<PgpEntry>,
    #[serde(default)]
    key_groups: Vec<Value>,
    unencrypted_suffix: Option<String>,
    encrypted_suffix: Option<String>,
    unencrypted_regex: Option<String>,
    encrypted_regex: Option<String>,
    unencrypted_comment_regex: Option<String>,
    encrypted_comment_regex: Option<String>,
    #[serde(default)]
    mac_only_encrypted: bool,
}

#[derive(serde::Deserialize)]
struct AgeEntry {
    recipient: String,
    enc: String,
}

#[derive(serde::Deserialize)]
struct PgpEntry {
    fp: String,
    enc: String,
}

/// Which values of the file are encrypted.
enum Rule {
    UnencryptedSuffix(String),
    EncryptedSuffix(String),
    UnencryptedRegex(regex::Regex),
    EncryptedRegex(regex::Regex),
}

impl Rule {
    fn of(m: &Metadata) -> Result<Rule, SopsError> {
        if m.unencrypted_comment_regex.is_some() || m.encrypted_comment_regex.is_some() {
            return Err(SopsError::Metadata(
                "comment rules (unencrypted_comment_regex, encrypted_comment_regex) are not supported"
                    .into(),
            ));
        }
        let regex =
            |r: &str| compiled(r).map_err(|e| SopsError::Metadata(format!("invalid regex: {e}")));
        let rules = [
            m.unencrypted_suffix
                .as_deref()
                .map(|s| Ok(Rule::UnencryptedSuffix(s.into()))),
            m.encrypted_suffix
                .as_deref()
                .map(|s| Ok(Rule::EncryptedSuffix(s.into()))),
            m.unencrypted_regex
                .as_deref()
                .map(|r| regex(r).map(Rule::UnencryptedRegex)),
            m.encrypted_regex
                .as_deref()
                .map(|r| regex(r).map(Rule::EncryptedRegex)),
        ];
        let mut set = rules.into_iter().flatten();
        let rule = set
            .next()
            .unwrap_or_else(|| Ok(Rule::UnencryptedSuffix("_unencrypted".into())))?;
        if set.next().is_some() {
            return Err(SopsError::Metadata(
                "more than one of unencrypted_suffix, encrypted_suffix, unencrypted_regex and encrypted_regex".into(),
            ));
        }
        Ok(rule)
    }

    /// Whether the value under `key` is encrypted, `parent` being whether a key above it
    /// decided so (for the rules that encrypt by default: whether one above left it clear).
    fn encrypts(&self, key: &str, parent: bool) -> bool {
        match self {
            Rule::UnencryptedSuffix(s) => parent && !key.ends_with(s.as_str()),
            Rule::EncryptedSuffix(s) => parent || key.ends_with(s.as_str()),
            Rule::UnencryptedRegex(r) => parent && !r.is_match(key),
            Rule::EncryptedRegex(r) => parent || r.is_match(key),
        }
    }

    /// Whether a value at the root (no key yet) is encrypted.
    fn at_root(&self) -> bool {
        matches!(self, Rule::UnencryptedSuffix(_) | Rule::UnencryptedRegex(_))
    }
}

/// `pattern` compiled, once for every file that names it (a repository's files share one
/// or two rules; compiling costs more than decrypting a Secret). At most 64 are kept.
fn compiled(pattern: &str) -> Result<regex::Regex, regex::Error> {
    static CACHE: std::sync::Mutex<Vec<(String, regex::Regex)>> = std::sync::Mutex::new(Vec::new());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, r)) = cache.iter().find(|(p, _)| p == pattern) {
        return Ok(r.clone());
    }
    let r = regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()?;
    if cache.len() >= 64 {
        cache.remove(0);
    }
    cache.push((pattern.to_string(), r.clone()));
    Ok(r)
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
    let mut walk = Walk {
        cipher: &cipher,
        rule: &rule,
        mac: Sha512::new(),
        mac_only_encrypted: metadata.mac_only_encrypted,
        decrypted: Vec::new(),
    };
    if walk.mac_only_encrypted {
        walk.mac.update(Sha256::digest(b"sops"));
    }
    let mut decrypted = Vec::with_capacity(docs.len());
    for doc in docs.iter_mut() {
        walk.value(doc, &mut Vec::new(), "", rule.at_root())?;
        decrypted.push(std::mem::take(&mut walk.decrypted));
    }
    let computed = hex::encode_upper(walk.mac.finalize());
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

/// Refuses more recipients than [`MAX_RECIPIENTS`], an `enc` longer than a data key's
/// message can be, and an age entry of more stanzas than [`MAX_RECIPIENTS`] (counted in
/// one pass over its armor, before age parses it).
fn bounded_entries(m: &Metadata) -> Result<(), SopsError> {
    let refuse = |what: String| Err(SopsError::Metadata(format!("{what}; refused unread")));
    let recipients = m.age.len() + m.pgp.len();
    if recipients > MAX_RECIPIENTS {
        return refuse(format!(
            "it names {recipients} recipients, more than the {MAX_RECIPIENTS} berth reads"
        ));
    }
    let encs = m.age.iter().map(|a| (&a.enc, "age", &a.recipient));
    let encs = encs.chain(m.pgp.iter().map(|p| (&p.enc, "OpenPGP", &p.fp)));
    for (enc, kind, recipient) in encs {
        if enc.len() > MAX_ENC {
            return refuse(format!(
                "the {kind} data key for {recipient} is {} bytes armored, more than a data key's {MAX_ENC}",
                enc.len()
            ));
        }
    }
    for a in &m.age {
        let stanzas = age_stanzas(&a.enc);
        if stanzas > MAX_RECIPIENTS {
            return refuse(format!(
                "the age data key for {} holds {stanzas} stanzas, more than the {MAX_RECIPIENTS} berth reads (sops writes one)",
                a.recipient
            ));
        }
    }
    Ok(())
}

/// How many stanzas (`-> ` lines) an armored age file's header holds, or more than
/// [`MAX_RECIPIENTS`] when its armor does not decode.
fn age_stanzas(armored: &str) -> usize {
    use base64::Engine;
    let body: String = armored
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("-----"))
        .collect();
    match base64::engine::general_purpose::STANDARD.decode(body) {
        Ok(bytes) => memchr::memmem::find_iter(&bytes, b"\n-> ").count(),
        Err(_) => MAX_RECIPIENTS + 1,
    }
}

/// The 32-byte data key, opened by the first of berth's age identities that can.
fn data_key(m: &Metadata, keys: &Keys) -> Result<Vec<u8>, SopsError> {
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
fn open_openpgp(enc: &str, keys: &Keys) -> Option<Vec<u8>> {
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

/// One file's walk: decrypts, and hashes what the MAC covers.
struct Walk<'a> {
    cipher: &'a Cipher,
    rule: &'a Rule,
    mac: Sha512,
    mac_only_encrypted: bool,
    decrypted: Vec<String>,
}

impl Walk<'_> {
    /// `path`: the mapping keys down to `node`; `pointer`: its JSON pointer. True when
    /// `node` was a comment, to be dropped.
    fn value(
        &mut self,
        node: &mut Value,
        path: &mut Vec<String>,
        pointer: &str,
        encrypted: bool,
    ) -> Result<bool, SopsError> {
        match node {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    let inside = self.rule.encrypts(key, encrypted);
                    path.push(key.clone());
                    let at = format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
                    self.value(child, path, &at, inside)?;
                    path.pop();
                }
            }
            Value::Array(items) => {
                let mut comments = Vec::new();
                for (i, item) in items.iter_mut().enumerate() {
                    // A comment inside a list is written as an item (`type:comment`).
                    if self.value(item, path, &format!("{pointer}/{i}"), encrypted)? {
                        comments.push(i);
                    }
                }
                for i in comments.into_iter().rev() {
                    items.remove(i);
                }
            }
            _ => return self.leaf(node, path, pointer, encrypted),
        }
        Ok(false)
    }

    /// Decrypts or hashes one scalar; true when it was a comment (to be dropped).
    fn leaf(
        &mut self,
        node: &mut Value,
        path: &[String],
        pointer: &str,
        encrypted: bool,
    ) -> Result<bool, SopsError> {
        let shown = || {
            if pointer.is_empty() {
                "/".to_string()
            } else {
                pointer.to_string()
            }
        };
        if !encrypted {
            if !self.mac_only_encrypted {
                if let Some(bytes) = clear_bytes(node) {
                    self.mac.update(bytes);
                }
            }
            return Ok(false);
        }
        let text = match node {
            Value::Null => return Ok(false),
            Value::String(s) if s.is_empty() => return Ok(false),
            Value::String(s) => s.clone(),
            _ => {
                return Err(SopsError::Value {
                    path: shown(),
                    why: ValueError::NotSops,
                })
            }
        };
        let aad = format!("{}:", path.join(":"));
        let (plaintext, kind) = open(self.cipher, &text, &aad)
            .map_err(|why| SopsError::Value { path: shown(), why })?;
        if kind == "comment" {
            return Ok(true);
        }
        self.mac.update(&plaintext);
        *node = typed(plaintext, &kind).map_err(|why| SopsError::Value { path: shown(), why })?;
        self.decrypted.push(pointer.to_string());
        Ok(false)
    }
}

/// The bytes the MAC takes of a value in clear, as the Go tool formats it.
fn clear_bytes(node: &Value) -> Option<Vec<u8>> {
    match node {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Bool(true) => Some(b"True".to_vec()),
        Value::Bool(false) => Some(b"False".to_vec()),
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string().into_bytes(),
            (_, Some(u), _) => u.to_string().into_bytes(),
            (_, _, Some(f)) => f.to_string().into_bytes(),
            _ => n.to_string().into_bytes(),
        }),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Decrypts one `ENC[AES256_GCM,…]` value with additional data `aad`: its plaintext and
/// its type.
fn open(cipher: &Cipher, text: &str, aad: &str) -> Result<(Vec<u8>, String), ValueError> {
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
fn typed(plaintext: Vec<u8>, kind: &str) -> Result<Value, ValueError> {
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

pub mod stores;

#[cfg(test)]
mod tests;
