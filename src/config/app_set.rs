//! `[[app_set]]`: apps generated from a repository's folders and refs, literal parameter
//! sets and the configured clusters. One app per combination (a matrix) of: folder
//! matching `folders` (read at each fetch), ref matching `refs` (listed from the remote at
//! each fetch: a pull request's, a preview branch), item of `list`, cluster whose labels
//! match `clusters`. Every other key is an `[[app]]` key, written as a template in which
//! `{set}`, `{folder}` (the folder's last segment), `{path}` (its path in the repository),
//! `{ref}`, `{branch}`, `{number}`, `{sha}`, `{short_sha}` (the ref's), `{item.KEY}` (the
//! list item's), `{cluster}` and `{label.KEY}` (the cluster's label) are replaced. A
//! generated app is an `AppConfig` like a written one, checked the same way; an app of a
//! ref follows that ref and is a preview: untrusted code (see `docs/previews.md`).

use std::collections::BTreeMap;

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
    /// The most apps it may make (the product of its generators): a listing making more is
    /// refused, and its apps stay as they were.
    pub max_apps: usize,
    /// Globs of full ref names (`refs/pull/*/head`: `*` stops at `/`); one app per ref the
    /// remote has that matches, following it. Empty: none.
    pub refs: Vec<String>,
    /// Literal parameter sets: one app per item (`{item.KEY}`). Empty: none.
    pub list: Vec<BTreeMap<String, String>>,
    /// A ref's apps are removed after this long without a push (berth's own clock: when it
    /// first saw the ref's commit).
    pub ttl: Option<std::time::Duration>,
    /// Whether a ref's apps keep the template's `[decrypt]` keys (off: a pull request's
    /// commit never meets them).
    pub allow_decrypt: bool,
    /// Whether a ref's apps may download the charts `[agent] allow_remote_charts` names.
    pub allow_remote_charts: bool,
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
    /// Its ref, when the set has refs.
    pub git_ref: Option<String>,
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
            git_ref: app.preview.clone(),
            cluster: app.cluster.clone().unwrap_or_default(),
            why,
        }
    }

    /// The app a set could not make (its name unknown: `-`), and why.
    pub fn unmade(error: &SetError) -> Refused {
        let SetError::App {
            set,
            at,
            cluster,
            message,
        } = error
        else {
            return Refused {
                app: "-".into(),
                set: String::new(),
                folder: None,
                git_ref: None,
                cluster: String::new(),
                why: error.to_string(),
            };
        };
        Refused {
            app: "-".into(),
            set: set.clone(),
            folder: at.folder.clone(),
            git_ref: at.git_ref.clone(),
            cluster: cluster.clone(),
            why: message.clone(),
        }
    }
}

/// Which of a set's combinations an app is, but for its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combination {
    /// The folder, when the set has folders.
    pub folder: Option<String>,
    /// The ref, when the set has refs.
    pub git_ref: Option<String>,
    /// The list item, when the set has a list.
    pub item: Option<usize>,
}

impl std::fmt::Display for Combination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(folder) = &self.folder {
            write!(f, ", folder {folder}")?;
        }
        if let Some(git_ref) = &self.git_ref {
            write!(f, ", ref {git_ref}")?;
        }
        if let Some(item) = self.item {
            write!(f, ", list item {item}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "app {} (app set {}", self.app, self.set)?;
        if let Some(folder) = &self.folder {
            write!(f, ", folder {folder}")?;
        }
        if let Some(git_ref) = &self.git_ref {
            write!(f, ", ref {git_ref}")?;
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
    #[error("app set {set}: its {generators} make {apps} apps, more than its max_apps ({max}); none is made (raise max_apps on the set, or split it)")]
    TooMany {
        /// The set.
        set: String,
        /// What its generators found: `200 refs × 1 cluster`.
        generators: String,
        /// The apps they would make.
        apps: usize,
        /// Its bound.
        max: usize,
    },
    /// A template or the app it makes is wrong for one combination.
    #[error("app set {set}{at}, cluster {cluster}: {message}")]
    App {
        /// The set.
        set: String,
        /// The combination's folder, ref and item.
        at: Box<Combination>,
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
        let globs = |key: &str, value: Option<toml::Value>| match value {
            None => Ok(Vec::new()),
            Some(toml::Value::String(one)) => Ok(vec![one]),
            Some(many) => Vec::<String>::deserialize(many)
                .map_err(|_| D::Error::custom(format!("{key}: must be a glob or a list of globs"))),
        };
        let folders = globs("folders", take("folders"))?;
        let refs = globs("refs", take("refs"))?;
        let list = match take("list") {
            None => Vec::new(),
            Some(items) => list_items(items).map_err(D::Error::custom)?,
        };
        let ttl = match take("ttl") {
            None => None,
            Some(toml::Value::String(text)) => {
                Some(humantime::parse_duration(&text).map_err(|e| {
                    D::Error::custom(format!("ttl: {text:?} is not a duration ({e})"))
                })?)
            }
            Some(_) => return Err(D::Error::custom("ttl: must be a duration, such as \"14d\"")),
        };
        let mut boolean = |key: &str| match take(key) {
            None => Ok(false),
            Some(toml::Value::Boolean(b)) => Ok(b),
            Some(_) => Err(D::Error::custom(format!("{key}: must be true or false"))),
        };
        let allow_empty = boolean("allow_empty")?;
        let allow_decrypt = boolean("allow_decrypt")?;
        let allow_remote_charts = boolean("allow_remote_charts")?;
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

/// `list = [{ region = "eu" }, …]`: each item's keys (letters, digits, `_`) and their
/// values (strings, numbers and booleans, as text).
fn list_items(items: toml::Value) -> Result<Vec<BTreeMap<String, String>>, String> {
    let toml::Value::Array(items) = items else {
        return Err("list: must be a list of tables, such as [{ region = \"eu\" }]".into());
    };
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let toml::Value::Table(table) = item else {
            return Err(format!("list[{i}]: must be a table of values"));
        };
        let mut values = BTreeMap::new();
        for (key, value) in table {
            let good =
                !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !good {
                return Err(format!("list[{i}].{key}: keys are letters, digits and _"));
            }
            let text = match value {
                toml::Value::String(s) => s,
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(n) => n.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    return Err(format!(
                        "list[{i}].{key}: must be a string, a number or a boolean"
                    ))
                }
            };
            values.insert(key, text);
        }
        out.push(values);
    }
    Ok(out)
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

    /// The compiled `refs` (`*` and `?` stop at `/`); `None` when there are none.
    ///
    /// # Errors
    /// A glob that does not compile, or does not start with `refs/`.
    pub fn ref_globs(&self) -> Result<Option<GlobSet>, SetError> {
        if self.refs.is_empty() {
            return Ok(None);
        }
        let fault = |message: String| SetError::Key {
            key: "refs",
            message,
        };
        let mut set = GlobSetBuilder::new();
        for pattern in &self.refs {
            if !pattern.starts_with("refs/") {
                return Err(fault(format!(
                    "{pattern:?} is not a full ref name's glob (refs/pull/*/head, refs/heads/preview/*)"
                )));
            }
            let glob = GlobBuilder::new(pattern).literal_separator(true).build();
            set.add(glob.map_err(|e| fault(e.to_string()))?);
        }
        set.build().map(Some).map_err(|e| fault(e.to_string()))
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

    /// Its templates made into an app for [`SAMPLE_FOLDER`] (a sample ref, the first list
    /// item) on the first cluster it selects (`None`: it selects none): what validation
    /// checks, and what its repository is fetched as to list its folders (repository and
    /// credentials are the same for all its apps; a ref's apps follow their ref).
    ///
    /// # Errors
    /// As [`AppSetConfig::generate`].
    pub fn sample(&self, clusters: &Clusters) -> Result<Option<AppConfig>, SetError> {
        let Some(cluster) = self.clusters(clusters)?.into_iter().next() else {
            return Ok(None);
        };
        let sample_ref = FoundRef::sample();
        let values = Values {
            set: &self.name,
            path: (!self.folders.is_empty()).then_some(SAMPLE_FOLDER),
            git_ref: (!self.refs.is_empty()).then_some(&sample_ref),
            item: self.list.first().map(|item| (0, item)),
            cluster,
        };
        self.app(&values).map(Some)
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

    /// How many generators it combines (`folders`, `clusters`, `refs`, `list`).
    pub fn generators(&self) -> usize {
        let given = [
            !self.folders.is_empty(),
            self.clusters.is_some(),
            !self.refs.is_empty(),
            !self.list.is_empty(),
        ];
        given.iter().filter(|g| **g).count()
    }

    /// The set's apps for `folders` (repository paths of the folders matching, from the
    /// commit) × `refs` (those of the remote matching) × its list's items × the clusters
    /// it selects: each app, or why that one cannot be made.
    ///
    /// # Errors
    /// More apps than its `max_apps`, or clusters that cannot be told.
    pub fn generate(
        &self,
        folders: &[String],
        refs: &[FoundRef],
        clusters: &Clusters,
    ) -> Result<Vec<Result<AppConfig, SetError>>, SetError> {
        let targets = self.clusters(clusters)?;
        let folders: Vec<Option<&str>> = match self.folders.is_empty() {
            true => vec![None],
            false => folders.iter().map(|f| Some(f.as_str())).collect(),
        };
        let refs: Vec<Option<&FoundRef>> = match self.refs.is_empty() {
            true => vec![None],
            false => refs.iter().map(Some).collect(),
        };
        let items: Vec<Option<(usize, &BTreeMap<String, String>)>> = match self.list.is_empty() {
            true => vec![None],
            false => self.list.iter().enumerate().map(Some).collect(),
        };
        let count = [folders.len(), refs.len(), items.len(), targets.len()]
            .iter()
            .fold(1usize, |n, k| n.saturating_mul(*k));
        if count > self.max_apps {
            let mut found = Vec::new();
            for (given, n, noun) in [
                (!self.folders.is_empty(), folders.len(), "folder"),
                (!self.refs.is_empty(), refs.len(), "ref"),
                (!self.list.is_empty(), items.len(), "list item"),
                (true, targets.len(), "cluster"),
            ] {
                if given {
                    found.push(crate::plural(n, noun));
                }
            }
            return Err(SetError::TooMany {
                set: self.name.clone(),
                generators: found.join(" × "),
                apps: count,
                max: self.max_apps,
            });
        }
        let mut apps = Vec::with_capacity(count);
        for path in &folders {
            for git_ref in &refs {
                for item in &items {
                    for cluster in &targets {
                        let values = Values {
                            set: &self.name,
                            path: *path,
                            git_ref: *git_ref,
                            item: *item,
                            cluster,
                        };
                        let app = self.app(&values).map(|mut app| {
                            if let Some(git_ref) = git_ref {
                                self.preview(&mut app, git_ref);
                            }
                            app
                        });
                        apps.push(app);
                    }
                }
            }
        }
        Ok(apps)
    }

    /// The app of one combination.
    fn app(&self, values: &Values<'_>) -> Result<AppConfig, SetError> {
        let (path, cluster) = (values.path, values.cluster);
        let fault = |message: String| SetError::App {
            set: self.name.clone(),
            at: Box::new(Combination {
                folder: path.map(str::to_string),
                git_ref: values.git_ref.map(|r| r.name.clone()),
                item: values.item.map(|(i, _)| i),
            }),
            cluster: cluster.name().to_string(),
            message,
        };
        let unfilled = |e: Unfilled| fault(e.to_string());
        let mut table = self.template.clone();
        fill_table(&mut table, values).map_err(unfilled)?;
        let name = match &self.app_name {
            Some(template) => fill(template, values).map_err(unfilled)?,
            None => self.default_name(values),
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

    /// `app` made a preview of `git_ref`: it follows the ref (a branch's or a tag's as
    /// `branch` or `tag`), takes a force-push (a pull
    /// request's head is rewritten as a matter of course) unless the template asks for the
    /// rewind rule, and keeps no decryption keys unless the set allows them.
    fn preview(&self, app: &mut AppConfig, git_ref: &FoundRef) {
        (app.branch, app.tag, app.commit, app.follow_ref) = (None, None, None, None);
        let name = &git_ref.name;
        match (
            name.strip_prefix("refs/heads/"),
            name.strip_prefix("refs/tags/"),
        ) {
            (Some(branch), _) => app.branch = Some(branch.to_string()),
            (_, Some(tag)) => app.tag = Some(tag.to_string()),
            _ => app.follow_ref = Some(name.clone()),
        }
        if !self.template.contains_key("allow_rewind") {
            app.allow_rewind = true;
        }
        if !self.allow_decrypt {
            app.decrypt = None;
        }
        app.no_remote_charts = !self.allow_remote_charts;
        app.preview = Some(git_ref.name.clone());
    }

    /// `{set}`, then `-{folder}`, `-{number}` (or the ref's branch), `-{item's index}` and
    /// `-{cluster}` for each generator the set has.
    fn default_name(&self, values: &Values<'_>) -> String {
        let mut name = self.name.clone();
        if let Some(path) = values.path {
            name = format!("{name}-{}", last_segment(path));
        }
        if let Some(git_ref) = values.git_ref {
            let part = git_ref
                .number()
                .map_or_else(|| label_of(git_ref.branch()), str::to_string);
            name = format!("{name}-{part}");
        }
        if let Some((i, _)) = values.item {
            name = format!("{name}-{i}");
        }
        if self.clusters.is_some() {
            name = format!("{name}-{}", values.cluster.name());
        }
        name
    }
}

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
    fn sample() -> FoundRef {
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
fn label_of(text: &str) -> String {
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
struct Values<'a> {
    set: &'a str,
    path: Option<&'a str>,
    git_ref: Option<&'a FoundRef>,
    item: Option<(usize, &'a BTreeMap<String, String>)>,
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
        "short_sha" => crate::source::short(&git_ref()?.sha).to_string(),
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

#[cfg(test)]
mod tests;
