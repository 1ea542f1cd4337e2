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
        let sizes = [folders.len(), refs.len(), items.len(), targets.len()];
        let count = self.within_bound(sizes)?;
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

    /// How many apps the generators' `sizes` (folders, refs, items, clusters) make.
    ///
    /// # Errors
    /// More than the set's `max_apps`, naming what each generator found.
    fn within_bound(&self, sizes: [usize; 4]) -> Result<usize, SetError> {
        let count = sizes.iter().fold(1usize, |n, k| n.saturating_mul(*k));
        if count <= self.max_apps {
            return Ok(count);
        }
        let given = [
            (!self.folders.is_empty(), "folder"),
            (!self.refs.is_empty(), "ref"),
            (!self.list.is_empty(), "list item"),
            (true, "cluster"),
        ];
        let found: Vec<String> = (given.iter().zip(sizes))
            .filter(|((given, _), _)| *given)
            .map(|((_, noun), n)| crate::plural(n, noun))
            .collect();
        Err(SetError::TooMany {
            set: self.name.clone(),
            generators: found.join(" × "),
            apps: count,
            max: self.max_apps,
        })
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

mod parse;
mod refused;
mod template;
pub use refused::{Combination, Refused};
pub use template::FoundRef;
use template::{fill, fill_table, label_of, last_segment, Unfilled, Values};

#[cfg(test)]
mod tests;
