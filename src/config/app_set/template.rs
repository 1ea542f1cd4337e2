//! A set's templates filled for one combination: the placeholders of its folder, ref,
//! list item and cluster.
use std::collections::BTreeMap;

use super::super::ClusterConfig;

/// A ref a set's `refs` matched, as the remote listed it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FoundRef {
    /// Its full name.
    pub name: String,
    /// The commit it names.
    pub sha: String,
    /// When berth first saw it name that commit: its `ttl` counts from there (a commit's
    /// own date is its author's to choose).
    pub since: jiff::Timestamp,
}

impl FoundRef {
    /// The ref a set's templates are tried with before any remote is read.
    pub(super) fn sample() -> FoundRef {
        FoundRef {
            name: "refs/pull/1/head".into(),
            sha: "0".repeat(40),
            since: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    /// `{branch}`: the name after `refs/heads/`, else after `refs/`.
    pub fn branch(&self) -> &str {
        (self.name.strip_prefix("refs/heads/"))
            .or_else(|| self.name.strip_prefix("refs/"))
            .unwrap_or(&self.name)
    }

    /// `{number}`: the first run of digits in the name (a pull request's number).
    pub fn number(&self) -> Option<&str> {
        let start = self.name.find(|c: char| c.is_ascii_digit())?;
        let rest = &self.name[start..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        Some(&rest[..end])
    }
}

/// `text` as a DNS label's part: lowercase letters, digits and `-`, at most 40 bytes.
pub(super) fn label_of(text: &str) -> String {
    let mapped: String = (text.chars())
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_lowercase(),
            false => '-',
        })
        .collect();
    let trimmed = mapped.trim_matches('-');
    trimmed[..trimmed.len().min(40)]
        .trim_end_matches('-')
        .to_string()
}

/// What a template's placeholders stand for.
pub(super) struct Values<'a> {
    pub set: &'a str,
    pub path: Option<&'a str>,
    pub git_ref: Option<&'a FoundRef>,
    pub item: Option<(usize, &'a BTreeMap<String, String>)>,
    pub cluster: &'a ClusterConfig,
}

/// A folder's last segment: `{folder}`.
pub(super) fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Why a template cannot be filled.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unfilled {
    /// A `{` or `}` without its pair.
    #[error("{0:?} has an unmatched brace (write {{{{ or }}}} for one)")]
    Brace(String),
    /// `{folder}` or `{path}` in a set without folders (or a ref's, an item's placeholder
    /// in a set without refs, a list).
    #[error("{{{0}}} needs {1}: the set has none")]
    Missing(String, &'static str),
    /// `{number}` of a ref without digits.
    #[error("{{number}}: ref {0} holds no number")]
    NoNumber(String),
    /// `{label.KEY}` of a cluster without the label.
    #[error("{{label.{label}}}: cluster {cluster} has no label {label:?}")]
    NoLabel {
        /// The label.
        label: String,
        /// The cluster.
        cluster: String,
    },
    /// `{item.KEY}` of an item without the key.
    #[error("{{item.{0}}}: a list item has no key {0:?}")]
    NoItemKey(String),
    /// A placeholder berth does not know.
    #[error("unknown placeholder {{{0}}} (there are {{set}}, {{folder}}, {{path}}, {{ref}}, {{branch}}, {{number}}, {{sha}}, {{short_sha}}, {{item.KEY}}, {{cluster}} and {{label.KEY}})")]
    Unknown(String),
    /// Where, in the template's keys.
    #[error("{key}: {inner}")]
    At {
        /// The key.
        key: String,
        /// What is wrong there.
        inner: Box<Unfilled>,
    },
}

/// Fills every string value of `table`, in tables and arrays too.
pub(super) fn fill_table(table: &mut toml::Table, values: &Values<'_>) -> Result<(), Unfilled> {
    for (key, value) in table.iter_mut() {
        fill_value(value, values).map_err(|inner| Unfilled::At {
            key: key.clone(),
            inner: Box::new(inner),
        })?;
    }
    Ok(())
}

fn fill_value(value: &mut toml::Value, values: &Values<'_>) -> Result<(), Unfilled> {
    match value {
        toml::Value::String(s) => *s = fill(s, values)?,
        toml::Value::Array(items) => {
            for item in items {
                fill_value(item, values)?;
            }
        }
        toml::Value::Table(table) => fill_table(table, values)?,
        _ => {}
    }
    Ok(())
}

/// `template` with each `{placeholder}` replaced; `{{` and `}}` are a brace.
///
/// # Errors
/// An unknown placeholder, `{folder}` or `{path}` in a set without folders, a label the
/// cluster does not have, or a brace left open.
pub(super) fn fill(template: &str, values: &Values<'_>) -> Result<String, Unfilled> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        let Some(end) = tail.find('}').filter(|_| tail.starts_with('{')) else {
            return Err(Unfilled::Brace(template.to_string()));
        };
        out.push_str(&placeholder(&tail[1..end], values)?);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of one placeholder.
fn placeholder(name: &str, values: &Values<'_>) -> Result<String, Unfilled> {
    let missing = |what| Unfilled::Missing(name.to_string(), what);
    let path = || values.path.ok_or_else(|| missing("folders"));
    let git_ref = || values.git_ref.ok_or_else(|| missing("refs"));
    Ok(match name {
        "set" => values.set.to_string(),
        "cluster" => values.cluster.name().to_string(),
        "folder" => last_segment(path()?).to_string(),
        "path" => path()?.to_string(),
        "ref" => git_ref()?.name.clone(),
        "branch" => git_ref()?.branch().to_string(),
        "sha" => git_ref()?.sha.clone(),
        "short_sha" => git_ref()?.sha.chars().take(7).collect(),
        "number" => {
            let git_ref = git_ref()?;
            let number = git_ref.number();
            number
                .ok_or_else(|| Unfilled::NoNumber(git_ref.name.clone()))?
                .to_string()
        }
        _ if name.starts_with("item.") => {
            let (_, item) = values.item.ok_or_else(|| missing("a list"))?;
            let key = &name["item.".len()..];
            item.get(key)
                .cloned()
                .ok_or_else(|| Unfilled::NoItemKey(key.to_string()))?
        }
        _ => {
            let label = name
                .strip_prefix("label.")
                .ok_or_else(|| Unfilled::Unknown(name.to_string()))?;
            let cluster = values.cluster;
            cluster
                .labels
                .get(label)
                .cloned()
                .ok_or_else(|| Unfilled::NoLabel {
                    label: label.to_string(),
                    cluster: cluster.name().to_string(),
                })?
        }
    })
}
