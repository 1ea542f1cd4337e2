//! One file's walk, in document order: every value the rule encrypts is decrypted in
//! place (comments dropped), and what the MAC covers is hashed as the Go tool hashes it.

use serde_json::Value;
use sha2::{Digest, Sha256, Sha512};

use super::rule::Rule;
use super::value::{open, typed, Cipher, ValueError};
use super::SopsError;

/// One file's walk: decrypts, and hashes what the MAC covers.
pub(super) struct Walk<'a> {
    cipher: &'a Cipher,
    rule: &'a Rule,
    mac: Sha512,
    mac_only_encrypted: bool,
    decrypted: Vec<String>,
}

impl<'a> Walk<'a> {
    /// A walk that decrypts with `cipher` what `rule` encrypts; with
    /// `mac_only_encrypted`, the MAC covers those values alone, after SHA-256("sops").
    pub(super) fn new(cipher: &'a Cipher, rule: &'a Rule, mac_only_encrypted: bool) -> Self {
        let mut walk = Walk {
            cipher,
            rule,
            mac: Sha512::new(),
            mac_only_encrypted,
            decrypted: Vec::new(),
        };
        if walk.mac_only_encrypted {
            walk.mac.update(Sha256::digest(b"sops"));
        }
        walk
    }

    /// Decrypts one document in place; the JSON pointer of each value it decrypted.
    pub(super) fn document(&mut self, doc: &mut Value) -> Result<Vec<String>, SopsError> {
        self.value(doc, &mut Vec::new(), "", self.rule.at_root())?;
        Ok(std::mem::take(&mut self.decrypted))
    }

    /// The MAC of the documents walked, as sops writes it (upper-case hex).
    pub(super) fn mac(self) -> String {
        hex::encode_upper(self.mac.finalize())
    }

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
