//! The file formats sops writes, as its Go source names them (`stores/`): YAML and JSON
//! (the `sops` block beside the values), dotenv (`KEY=VALUE` lines, the metadata
//! flattened into `sops_…=` lines after them) and binary (the whole file one value,
//! `{"data": "ENC[…]", "sops": {…}}`). The format follows the file name as sops picks
//! it: `.yaml`/`.yml`, `.json`, `.env`, anything else binary.
//!
//! A file of any format decrypts to its plain bytes in the same format (what kustomize
//! reads in place of the encrypted file) and the values it decrypted.

use serde_json::{Map, Value};

use super::{decrypt, Keys, SopsError, METADATA};

/// How sops stores a file, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `.yaml`, `.yml`: one or more documents.
    Yaml,
    /// `.json`.
    Json,
    /// `.env`: `KEY=VALUE` lines.
    Dotenv,
    /// Anything else: the file is one value, `data`.
    Binary,
}

impl Format {
    /// The format sops gives a file of this name (case-sensitive suffixes, as sops).
    pub fn of(name: &str) -> Format {
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            Format::Yaml
        } else if name.ends_with(".json") {
            Format::Json
        } else if name.ends_with(".env") {
            Format::Dotenv
        } else {
            Format::Binary
        }
    }
}

/// The prefix of a dotenv file's metadata keys.
const DOTENV_PREFIX: &str = "sops_";

/// Whether `bytes`, stored in `format`, are a file sops encrypted (it holds sops'
/// metadata, with a MAC or without: one without is refused when opened). A file that does
/// not parse is not one.
pub fn is_encrypted_file(bytes: &[u8], format: Format) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    // Every file a kustomization reads is asked: parse only one that names sops.
    if !text.contains(METADATA) {
        return false;
    }
    match format {
        Format::Dotenv => text
            .lines()
            .any(|l| l.starts_with("sops_mac=") || l.starts_with("sops_lastmodified=")),
        Format::Yaml => serde_yaml::Deserializer::from_str(text)
            .next()
            .and_then(|d| serde::Deserialize::deserialize(d).ok())
            .is_some_and(|doc: Value| super::is_encrypted(&doc)),
        Format::Json | Format::Binary => {
            serde_json::from_str::<Value>(text).is_ok_and(|doc| super::is_encrypted(&doc))
        }
    }
}

/// A file decrypted: its plain bytes, in its own format, and the values decrypted (to be
/// masked wherever they show).
pub struct Opened {
    /// What the file holds in clear.
    pub bytes: Vec<u8>,
    /// Each value that was encrypted, in clear.
    pub values: Vec<String>,
}

/// Decrypts a whole file stored in `format`.
///
/// # Errors
/// As [`decrypt`]; also a file that is not what sops writes in that format.
pub fn decrypt_file(bytes: &[u8], format: Format, keys: &Keys) -> Result<Opened, SopsError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| SopsError::Metadata("the file is not UTF-8 text".into()))?;
    let bad = |e: String| SopsError::Metadata(format!("not a {format:?} file of sops: {e}"));
    let mut docs: Vec<Value> = match format {
        Format::Yaml => serde_yaml::Deserializer::from_str(text)
            .map(|d| serde::Deserialize::deserialize(d).map_err(|e| bad(e.to_string())))
            .collect::<Result<_, _>>()?,
        Format::Json | Format::Binary => {
            vec![serde_json::from_str(text).map_err(|e| bad(e.to_string()))?]
        }
        Format::Dotenv => vec![dotenv_tree(text).map_err(|e| bad(e.to_string()))?],
    };
    let pointers = decrypt(&mut docs, keys)?;
    let values = pointers
        .iter()
        .zip(&docs)
        .flat_map(|(ps, doc)| ps.iter().filter_map(|p| doc.pointer(p)))
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let bytes = match format {
        Format::Yaml => {
            let mut out = String::new();
            for (i, doc) in docs.iter().enumerate() {
                if i > 0 {
                    out.push_str("---\n");
                }
                out.push_str(&serde_yaml::to_string(doc).map_err(|e| bad(e.to_string()))?);
            }
            out.into_bytes()
        }
        Format::Json => serde_json::to_vec_pretty(&docs[0]).map_err(|e| bad(e.to_string()))?,
        Format::Binary => match docs[0].get("data") {
            Some(Value::String(data)) => data.clone().into_bytes(),
            _ => return Err(bad("it holds no data".into())),
        },
        Format::Dotenv => dotenv_text(&docs[0])?.into_bytes(),
    };
    Ok(Opened { bytes, values })
}

/// A dotenv file as sops reads it: one mapping of its `KEY=VALUE` lines in order (`\n`
/// in a value is a newline; comments left out: they hold nothing kustomize reads), its
/// `sops_…` lines unflattened into the `sops` block.
/// Why a dotenv file is not one sops writes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum DotenvError {
    #[error("line {0} holds no '='")]
    NoEquals(usize),
    #[error("line {line}: {key} is set twice")]
    Twice { line: usize, key: String },
    #[error("line {line}: {why}")]
    Metadata { line: usize, why: FlatError },
}

/// Why a flattened metadata key (`sops_age__list_0__map_enc`) cannot be placed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum FlatError {
    #[error("sops_{0} is set twice")]
    Twice(String),
    #[error("a value and a map at once")]
    ValueAndMap,
    #[error("a list and a map at once")]
    ListAndMap,
    #[error("a list index is not a number")]
    NotAnIndex,
    #[error("a list's indices skip one")]
    Skipped,
}

fn dotenv_tree(text: &str) -> Result<Value, DotenvError> {
    let (mut values, mut metadata) = (Map::new(), Value::Object(Map::new()));
    for (i, line) in text.split('\n').enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').ok_or(DotenvError::NoEquals(i + 1))?;
        let value = Value::String(value.replace("\\n", "\n"));
        match key.strip_prefix(DOTENV_PREFIX) {
            Some(flat) => place(&mut metadata, flat, value)
                .map_err(|why| DotenvError::Metadata { line: i + 1, why })?,
            None => {
                if values.insert(key.to_string(), value).is_some() {
                    return Err(DotenvError::Twice {
                        line: i + 1,
                        key: key.to_string(),
                    });
                }
            }
        }
    }
    // Unflattened values are text: the flags sops reads weakly typed.
    if let Some(flag) = metadata.get_mut("mac_only_encrypted") {
        *flag = Value::Bool(flag.as_str() == Some("true"));
    }
    values.insert(METADATA.into(), metadata);
    Ok(Value::Object(values))
}

/// Places a flattened metadata value (`age__list_0__map_enc`) in `tree`.
fn place(tree: &mut Value, flat: &str, value: Value) -> Result<(), FlatError> {
    const MAP: &str = "__map_";
    const LIST: &str = "__list_";
    let mut node = tree;
    let mut rest = flat;
    let mut key = take_until_separator(&mut rest);
    loop {
        let next_is_list = rest.starts_with(LIST);
        let Some(after) = rest.strip_prefix(MAP).or_else(|| rest.strip_prefix(LIST)) else {
            let map = node.as_object_mut().ok_or(FlatError::ValueAndMap)?;
            if map.insert(key.to_string(), value).is_some() {
                return Err(FlatError::Twice(flat.to_string()));
            }
            return Ok(());
        };
        rest = after;
        let child_default = if next_is_list {
            Value::Array(Vec::new())
        } else {
            Value::Object(Map::new())
        };
        let child = match node {
            Value::Object(map) => map.entry(key.to_string()).or_insert(child_default),
            Value::Array(items) => {
                let index: usize = key.parse().map_err(|_| FlatError::NotAnIndex)?;
                if index > items.len() || index > 64 {
                    return Err(FlatError::Skipped);
                }
                if index == items.len() {
                    items.push(child_default);
                }
                &mut items[index]
            }
            _ => return Err(FlatError::ValueAndMap),
        };
        node = child;
        key = take_until_separator(&mut rest);
        if node.is_array() && !next_is_list || node.is_object() && next_is_list {
            return Err(FlatError::ListAndMap);
        }
    }
}

/// The text of `rest` up to its next separator, which stays in `rest`.
fn take_until_separator<'a>(rest: &mut &'a str) -> &'a str {
    let end = ["__map_", "__list_"]
        .iter()
        .filter_map(|s| rest.find(s))
        .min()
        .unwrap_or(rest.len());
    let (head, tail) = rest.split_at(end);
    *rest = tail;
    head
}

/// A decrypted dotenv mapping as `KEY=VALUE` lines (a newline in a value written `\n`,
/// as sops writes it).
fn dotenv_text(doc: &Value) -> Result<String, SopsError> {
    let mut out = String::new();
    for (key, value) in doc.as_object().into_iter().flatten() {
        let value = match value {
            Value::String(s) => s.replace('\n', "\\n"),
            other => other.to_string(),
        };
        out.push_str(&format!("{key}={value}\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sops");

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
    }

    fn keys() -> Keys {
        let mut keys = Keys::default();
        keys.add_age(&String::from_utf8(fixture("age.key")).unwrap())
            .unwrap();
        keys
    }

    #[test]
    fn a_dotenv_file_as_the_go_tool_writes_it_decrypts_to_its_lines() {
        let bytes = fixture("db.enc.env");
        assert!(is_encrypted_file(&bytes, Format::Dotenv));
        let opened = decrypt_file(&bytes, Format::Dotenv, &keys()).unwrap();
        // The comment is left out; every value back in clear.
        assert_eq!(
            String::from_utf8(opened.bytes).unwrap(),
            "DB_PASSWORD=s3cr3t-dotenv\nDB_USER=app-user\nPORT_unencrypted=5432\n"
        );
        assert_eq!(opened.values, ["s3cr3t-dotenv", "app-user"]);
    }

    #[test]
    fn a_binary_file_of_sops_1_18_decrypts_to_its_bytes() {
        let bytes = fixture("ca.enc.txt");
        assert!(is_encrypted_file(&bytes, Format::Binary));
        let opened = decrypt_file(&bytes, Format::Binary, &keys()).unwrap();
        assert_eq!(opened.bytes, fixture("plain/ca.txt"));
    }

    #[test]
    fn a_dotenv_value_edited_is_refused_by_the_mac() {
        let text = String::from_utf8(fixture("db.enc.env")).unwrap();
        let edited = text.replace("PORT_unencrypted=5432", "PORT_unencrypted=5433");
        let e = decrypt_file(edited.as_bytes(), Format::Dotenv, &keys())
            .err()
            .unwrap();
        assert_eq!(e, SopsError::Mac);
        assert!(!is_encrypted_file(b"A=1\n", Format::Dotenv));
    }

    #[test]
    fn sops_picks_a_format_by_the_name_alone() {
        assert_eq!(Format::of("a/secret.enc.yaml"), Format::Yaml);
        assert_eq!(Format::of("db.env"), Format::Dotenv);
        assert_eq!(Format::of("db.env.local"), Format::Binary);
        assert_eq!(Format::of("x.json"), Format::Json);
    }

    #[test]
    fn flattened_metadata_is_unflattened_as_sops_does() {
        let tree = dotenv_tree(
            "A=1\nsops_age__list_0__map_recipient=age1x\nsops_age__list_0__map_enc=line1\\nline2\nsops_age__list_1__map_recipient=age1y\nsops_mac=m\nsops_mac_only_encrypted=true\n",
        )
        .unwrap();
        let sops = &tree["sops"];
        assert_eq!(sops["age"][0]["recipient"], "age1x");
        assert_eq!(sops["age"][0]["enc"], "line1\nline2");
        assert_eq!(sops["age"][1]["recipient"], "age1y");
        assert_eq!(sops["mac_only_encrypted"], true);
        assert_eq!(tree["A"], "1");
    }

    #[test]
    fn hostile_flattened_metadata_is_refused() {
        for bad in [
            "sops_age__list_2__map_enc=x\n",
            "sops_age__list_x__map_enc=x\n",
            "sops_mac=a\nsops_mac=b\n",
            "sops_mac=a\nsops_mac__map_x=b\n",
            "A=1\nA=2\n",
            "no equals sign\n",
        ] {
            assert!(dotenv_tree(bad).is_err(), "{bad}");
        }
    }
}
