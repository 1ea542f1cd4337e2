//! `[[app_set]]`: apps generated from a repository's folders and the configured clusters.
//! One app per folder matching `folders` (read at each fetch) × cluster whose labels
//! match `clusters`; every other key is an `[[app]]` key, written as a template in which
//! `{set}`, `{folder}` (the folder's last segment), `{path}` (its path in the repository),
//! `{cluster}` and `{label.KEY}` (the cluster's label) are replaced. A generated app is an
//! `AppConfig` like a written one, checked the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Deserializer};

use super::{AppConfig, ClusterConfig, Clusters};

/// The folder a set's templates are tried with before any repository is read.
pub const SAMPLE_FOLDER: &str = "example";

/// One `[[app_set]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppSetConfig {
    /// A DNS label; `{set}` in the templates.
    pub name: String,
    /// Globs of repository folders (`addons/*`: `*` stops at `/`); one app per folder
    /// matching. Empty: no folders, one app per cluster.
    pub folders: Vec<String>,
    /// Which clusters: `None` (unset) the only one; else those whose labels match.
    pub clusters: Option<Selector>,
    /// The apps' names, a template; `None`: `{set}-{folder}`, with `-{cluster}` when
    /// `clusters` is given.
    pub app_name: Option<String>,
    /// A set that generates nothing where it generated apps before removes them (else it
    /// removes nothing and says so on every sync).
    pub allow_empty: bool,
    /// The most apps it may make (folders × clusters): a listing making more is refused,
    /// and its apps stay as they were.
    pub max_apps: usize,
    /// Every other key: an `[[app]]`'s, its string values templates.
    pub template: toml::Table,
}

/// An app a set makes that does not run, and why: a name another app has, or a namespace
/// no set may reach. It is neither synced nor removed: its objects stay as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The app's name.
    pub app: String,
    /// Its set.
    pub set: String,
    /// Its folder, when the set has folders.
    pub folder: Option<String>,
    /// Its cluster.
    pub cluster: String,
    /// Why it does not run.
    pub why: String,
}

impl Refused {
    /// `app` refused for `why`.
    pub fn of(app: &AppConfig, why: String) -> Refused {
        Refused {
            app: app.name.clone(),
            set: app.set.clone().unwrap_or_default(),
            folder: app.folder.clone(),
            cluster: app.cluster.clone().unwrap_or_default(),
            why,
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "app {} (app set {}", self.app, self.set)?;
        if let Some(folder) = &self.folder {
            write!(f, ", folder {folder}")?;
        }
        write!(f, ", cluster {}): {}", self.cluster, self.why)
    }
}

/// How many apps a set may make unless its `max_apps` says otherwise.
pub const DEFAULT_MAX_APPS: usize = 10_000;

/// `clusters = "*"`, `{}` (every cluster) or `{ env = "prod" }` (each label matches).
#[derive(Debug, Clone, PartialEq)]
pub struct Selector(pub BTreeMap<String, String>);

impl Selector {
    /// Whether `cluster`'s labels hold every label of the selector.
    pub fn selects(&self, cluster: &ClusterConfig) -> bool {
        self.0.iter().all(|(k, v)| cluster.labels.get(k) == Some(v))
    }
}

/// What cannot be generated, naming the set (and the folder and cluster, when one is at
/// fault).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SetError {
    /// A key of the set is malformed.
    #[error("{key}: {message}")]
    Key {
        /// The key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The set names no clusters while several are configured, or a selector matches none.
    #[error("app set {set}: {message}")]
    Clusters {
        /// The set.
        set: String,
        /// What is wrong.
        message: String,
    },
    /// It would make more apps than its `max_apps`.
    #[error("app set {set}: its {} make {apps} apps, more than its max_apps ({max}); none is made (raise max_apps on the set, or split it)", crate::plural(*folders, "folder"))]
    TooMany {
        /// The set.
        set: String,
        /// The folders matching.
        folders: usize,
        /// The apps they would make.
        apps: usize,
        /// Its bound.
        max: usize,
    },
    /// A template or the app it makes is wrong for one folder and cluster.
    #[error("app set {set}{}, cluster {cluster}: {message}", folder.as_ref().map(|f| format!(", folder {f}")).unwrap_or_default())]
    App {
        /// The set.
        set: String,
        /// The folder, when the set has folders.
        folder: Option<String>,
        /// The cluster.
        cluster: String,
        /// What is wrong.
        message: String,
    },
}

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
        let folders = match take("folders") {
            None => Vec::new(),
            Some(toml::Value::String(one)) => vec![one],
            Some(many) => Vec::<String>::deserialize(many)
                .map_err(|_| D::Error::custom("folders: must be a glob or a list of globs"))?,
        };
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
        let allow_empty = match take("allow_empty") {
            None => false,
            Some(toml::Value::Boolean(b)) => b,
            Some(_) => return Err(D::Error::custom("allow_empty: must be true or false")),
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
            template,
        })
    }
}

impl AppSetConfig {
    /// The compiled `folders` (`*` and `?` stop at `/`); `None` when there are none.
    ///
    /// # Errors
    /// A glob that does not compile.
    pub fn folder_globs(&self) -> Result<Option<GlobSet>, SetError> {
        if self.folders.is_empty() {
            return Ok(None);
        }
        let mut set = GlobSetBuilder::new();
        for pattern in &self.folders {
            let glob = GlobBuilder::new(pattern.trim_end_matches('/'))
                .literal_separator(true)
                .build()
                .map_err(|e| SetError::Key {
                    key: "folders",
                    message: e.to_string(),
                })?;
            set.add(glob);
        }
        set.build().map(Some).map_err(|e| SetError::Key {
            key: "folders",
            message: e.to_string(),
        })
    }

    /// How deep the folder globs reach, in segments; `None` with `**`.
    pub fn folder_depth(&self) -> Option<usize> {
        let depth =
            |p: &String| (!p.contains("**")).then(|| p.trim_matches('/').split('/').count());
        self.folders
            .iter()
            .map(depth)
            .try_fold(0, |deepest, d| Some(deepest.max(d?)))
    }

    /// Its templates made into an app for [`SAMPLE_FOLDER`] on the first cluster it
    /// selects (`None`: it selects none): what validation checks, and what its repository
    /// is fetched as (repository, ref and credentials are the same for all its apps).
    ///
    /// # Errors
    /// As [`AppSetConfig::generate`].
    pub fn sample(&self, clusters: &Clusters) -> Result<Option<AppConfig>, SetError> {
        let first = self.clusters(clusters)?.into_iter().next();
        let folder = (!self.folders.is_empty()).then_some(SAMPLE_FOLDER);
        first.map(|c| self.app(folder, c)).transpose()
    }

    /// The clusters the set's apps go to, in the configuration's order.
    ///
    /// # Errors
    /// No `clusters` while several are configured.
    pub fn clusters<'a>(&self, clusters: &'a Clusters) -> Result<Vec<&'a ClusterConfig>, SetError> {
        let all = clusters.list();
        match &self.clusters {
            Some(selector) => Ok(all.iter().filter(|c| selector.selects(c)).collect()),
            None if all.len() == 1 => Ok(all.iter().collect()),
            None => Err(SetError::Clusters {
                set: self.name.clone(),
                message: format!(
                    "give its clusters (clusters = \"*\" or labels to match): {} clusters are configured",
                    all.len()
                ),
            }),
        }
    }

    /// The set's apps for `folders` (repository paths of the folders matching, from the
    /// commit) on the clusters it selects.
    ///
    /// # Errors
    /// A template names an unknown placeholder or label, or makes an app that is not one.
    pub fn generate(
        &self,
        folders: &[String],
        clusters: &Clusters,
    ) -> Result<Vec<Arc<AppConfig>>, SetError> {
        let targets = self.clusters(clusters)?;
        let folders: Vec<Option<&str>> = if self.folders.is_empty() {
            vec![None]
        } else {
            folders.iter().map(|f| Some(f.as_str())).collect()
        };
        let count = folders.len().saturating_mul(targets.len());
        if count > self.max_apps {
            return Err(SetError::TooMany {
                set: self.name.clone(),
                folders: folders.len(),
                apps: count,
                max: self.max_apps,
            });
        }
        let mut apps = Vec::new();
        for folder in &folders {
            for cluster in &targets {
                apps.push(Arc::new(self.app(*folder, cluster)?));
            }
        }
        Ok(apps)
    }

    /// The app of one folder (`None`: the set has none) and cluster.
    fn app(&self, path: Option<&str>, cluster: &ClusterConfig) -> Result<AppConfig, SetError> {
        let fault = |message: String| SetError::App {
            set: self.name.clone(),
            folder: path.map(str::to_string),
            cluster: cluster.name().to_string(),
            message,
        };
        let values = Values {
            set: &self.name,
            path,
            cluster,
        };
        let unfilled = |e: Unfilled| fault(e.to_string());
        let mut table = self.template.clone();
        fill_table(&mut table, &values).map_err(unfilled)?;
        let name = match &self.app_name {
            Some(template) => fill(template, &values).map_err(unfilled)?,
            None => self.default_name(path, cluster),
        };
        if !super::is_dns_label(&name) {
            return Err(fault(format!(
                "the app's name {name:?} is not a DNS label (set app_name to a template that makes one)"
            )));
        }
        table.insert("name".into(), toml::Value::String(name));
        table.insert("cluster".into(), cluster.name().into());
        if let (Some(path), false) = (path, table.contains_key("path")) {
            table.insert("path".into(), toml::Value::String(path.to_string()));
        }
        let mut app = toml::Value::Table(table)
            .try_into::<AppConfig>()
            .map_err(|e| fault(e.message().to_string()))?;
        app.set = Some(self.name.clone());
        app.folder = path.map(str::to_string);
        Ok(app)
    }

    /// `{set}-{folder}`, with `-{cluster}` when the set selects clusters.
    fn default_name(&self, path: Option<&str>, cluster: &ClusterConfig) -> String {
        let mut name = self.name.clone();
        if let Some(path) = path {
            name = format!("{name}-{}", last_segment(path));
        }
        if self.clusters.is_some() {
            name = format!("{name}-{}", cluster.name());
        }
        name
    }
}

/// What a template's placeholders stand for.
struct Values<'a> {
    set: &'a str,
    path: Option<&'a str>,
    cluster: &'a ClusterConfig,
}

/// A folder's last segment: `{folder}`.
fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Why a template cannot be filled.
#[derive(Debug, thiserror::Error)]
enum Unfilled {
    /// A `{` or `}` without its pair.
    #[error("{0:?} has an unmatched brace (write {{{{ or }}}} for one)")]
    Brace(String),
    /// `{folder}` or `{path}` in a set without folders.
    #[error("{{{0}}} needs folders: the set has none")]
    NoFolders(String),
    /// `{label.KEY}` of a cluster without the label.
    #[error("{{label.{label}}}: cluster {cluster} has no label {label:?}")]
    NoLabel {
        /// The label.
        label: String,
        /// The cluster.
        cluster: String,
    },
    /// A placeholder berth does not know.
    #[error("unknown placeholder {{{0}}} (there are {{set}}, {{folder}}, {{path}}, {{cluster}} and {{label.KEY}})")]
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
fn fill_table(table: &mut toml::Table, values: &Values<'_>) -> Result<(), Unfilled> {
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
fn fill(template: &str, values: &Values<'_>) -> Result<String, Unfilled> {
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
    let path = || {
        values
            .path
            .ok_or_else(|| Unfilled::NoFolders(name.to_string()))
    };
    Ok(match name {
        "set" => values.set.to_string(),
        "cluster" => values.cluster.name().to_string(),
        "folder" => last_segment(path()?).to_string(),
        "path" => path()?.to_string(),
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

#[cfg(test)]
mod tests;
