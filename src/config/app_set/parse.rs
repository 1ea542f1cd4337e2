//! `[[app_set]]` read from its table: the set's own keys taken out, the rest its template.
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::{AppSetConfig, Selector, DEFAULT_MAX_APPS};

impl<'de> Deserialize<'de> for AppSetConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut template = toml::Table::deserialize(d)?;
        let mut take = |key: &str| template.remove(key);
        let name = match take("name") {
            Some(toml::Value::String(name)) => name,
            Some(_) => return Err(D::Error::custom("name: must be a string")),
            None => return Err(D::Error::custom("missing field `name`")),
        };
        let folders = globs("folders", take("folders"))?;
        let refs = globs("refs", take("refs"))?;
        let list = match take("list") {
            None => Vec::new(),
            Some(items) => list_items(items)?,
        };
        let ttl = ttl(take("ttl"))?;
        let allow_empty = boolean("allow_empty", take("allow_empty"))?;
        let allow_decrypt = boolean("allow_decrypt", take("allow_decrypt"))?;
        let allow_remote_charts = boolean("allow_remote_charts", take("allow_remote_charts"))?;
        let clusters = match take("clusters") {
            None => None,
            Some(toml::Value::String(all)) if all == "*" => Some(Selector(BTreeMap::new())),
            Some(labels) => Some(Selector(BTreeMap::deserialize(labels).map_err(|_| {
                D::Error::custom(
                    "clusters: must be \"*\" or a table of labels, such as { env = \"prod\" }",
                )
            })?)),
        };
        let app_name = match take("app_name") {
            None => None,
            Some(toml::Value::String(t)) => Some(t),
            Some(_) => return Err(D::Error::custom("app_name: must be a string")),
        };
        let max_apps = match take("max_apps") {
            None => DEFAULT_MAX_APPS,
            Some(toml::Value::Integer(n)) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
            Some(_) => return Err(D::Error::custom("max_apps: must be a whole number above 0")),
        };
        for key in ["cluster", "name"] {
            if template.contains_key(key) {
                let why = "a set's apps take theirs from the set";
                return Err(D::Error::custom(format!("{key}: {why}")));
            }
        }
        Ok(AppSetConfig {
            name,
            folders,
            clusters,
            app_name,
            allow_empty,
            max_apps,
            refs,
            list,
            ttl,
            allow_decrypt,
            allow_remote_charts,
            template,
        })
    }
}

/// `KEY = "glob"` or `KEY = ["glob", …]`.
fn globs<E: serde::de::Error>(key: &str, value: Option<toml::Value>) -> Result<Vec<String>, E> {
    match value {
        None => Ok(Vec::new()),
        Some(toml::Value::String(one)) => Ok(vec![one]),
        Some(many) => Vec::<String>::deserialize(many)
            .map_err(|_| E::custom(format!("{key}: must be a glob or a list of globs"))),
    }
}

/// `ttl = "14d"`.
fn ttl<E: serde::de::Error>(value: Option<toml::Value>) -> Result<Option<std::time::Duration>, E> {
    match value {
        None => Ok(None),
        Some(toml::Value::String(text)) => humantime::parse_duration(&text)
            .map(Some)
            .map_err(|e| E::custom(format!("ttl: {text:?} is not a duration ({e})"))),
        Some(_) => Err(E::custom("ttl: must be a duration, such as \"14d\"")),
    }
}

/// `KEY = true` (unset: false).
fn boolean<E: serde::de::Error>(key: &str, value: Option<toml::Value>) -> Result<bool, E> {
    match value {
        None => Ok(false),
        Some(toml::Value::Boolean(b)) => Ok(b),
        Some(_) => Err(E::custom(format!("{key}: must be true or false"))),
    }
}

/// `list = [{ region = "eu" }, …]`: each item's keys (letters, digits, `_`) and their
/// values (strings, numbers and booleans, as text).
fn list_items<E: serde::de::Error>(items: toml::Value) -> Result<Vec<BTreeMap<String, String>>, E> {
    let toml::Value::Array(items) = items else {
        return Err(E::custom(
            "list: must be a list of tables, such as [{ region = \"eu\" }]",
        ));
    };
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let toml::Value::Table(table) = item else {
            return Err(E::custom(format!("list[{i}]: must be a table of values")));
        };
        let mut values = BTreeMap::new();
        for (key, value) in table {
            let good =
                !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !good {
                return Err(E::custom(format!(
                    "list[{i}].{key}: keys are letters, digits and _"
                )));
            }
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(n) => n.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    let why = "must be a string, a number or a boolean";
                    return Err(E::custom(format!("list[{i}].{key}: {why}")));
                }
            };
            values.insert(key, text);
        }
        out.push(values);
    }
    Ok(out)
}
