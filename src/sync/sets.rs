//! App sets, listed (`[[app_set]]`): at each fetch of a set's repository, the folders its
//! `folders` match at the commit, each with its tree's id ([`list`]); the set's apps made
//! from them and checked as written ones are ([`expand`]). What a set listed last is kept
//! in `state_dir/sets/<set>.json` ([`remember`]): the empty-set guard compares with it, a
//! set that cannot be listed keeps its apps by it, and the apps a set no longer makes —
//! removed as an app removed from the configuration is — are found by it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::config::{
    check_generated, compile_globs, AgentConfig, AppConfig, AppSetConfig, Config,
    Problem as Invalid, Refused, SetError,
};
use crate::source::folders::{self, FolderError};
use crate::source::git::{self, SourceError};
use crate::source::shared::Sources;

/// A set's state file is read no further than this (10,000 folders take ~1 MiB; the walk
/// stops at 50,000).
const MAX_STATE: u64 = 16 << 20;

/// One folder a set's apps are made from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Folder {
    /// Its path in the repository.
    pub path: String,
    /// Its tree's id at the commit: a folder renamed keeps it.
    pub tree: String,
}

/// What a set lists at a commit.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listed {
    /// The commit (empty for a set without folders, which reads no repository).
    pub commit: String,
    /// The folders matching, sorted.
    pub folders: Vec<Folder>,
}

impl Listed {
    fn paths(&self) -> Vec<String> {
        self.folders.iter().map(|f| f.path.clone()).collect()
    }
}

/// Why a set's apps are not those of its repository's commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// It generates nothing where it generated apps before: they are kept.
    #[error("it generates no app at commit {commit} where it generated {} before: none is removed until it generates apps again (allow_empty = true on the set lets it be empty)", crate::plural(*before, "app"))]
    Empty {
        /// The commit, short.
        commit: String,
        /// How many apps it generated before.
        before: usize,
    },
    /// Its folders cannot be read, or its apps not made: they stay as they were.
    #[error("{0}; its apps stay as they were")]
    Unlisted(String),
    /// Its state file is not one and it cannot be listed: its apps stay as they run, none
    /// is removed, until it is listed again.
    #[error("{0}: its apps stay as they run and none is removed until it is listed again")]
    Torn(String),
}

/// Why a set cannot be listed at its commit, or its apps not made.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// A key of the set, or a template for one folder and cluster.
    #[error(transparent)]
    Set(#[from] SetError),
    /// Its selector matches no cluster.
    #[error("it selects no cluster")]
    NoCluster,
    /// The revision to list it at is not one.
    #[error(transparent)]
    Revision(#[from] crate::config::RevisionError),
    /// Its repository cannot be fetched.
    #[error(transparent)]
    Fetch(#[from] SourceError),
    /// Its folders cannot be read.
    #[error(transparent)]
    Folders(#[from] FolderError),
    /// The task that reads them failed.
    #[error("listing its folders: {0}")]
    Task(tokio::task::JoinError),
    /// The commit cannot be read from the repository's cache.
    #[error("cannot read commit {0} in its repository")]
    Commit(String),
    /// An app it makes is not one.
    #[error("its app {app} (path {path}): {}", problems.iter().map(|p| format!("{}: {}", p.key, p.message)).collect::<Vec<_>>().join("; "))]
    Invalid {
        /// The app.
        app: String,
        /// Its paths.
        path: String,
        /// What is wrong.
        problems: Vec<Invalid>,
    },
}

/// A set's listing: the folders its apps are made from, and why they are the last ones
/// rather than the commit's.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// The set.
    pub set: String,
    /// The folders its apps are made from now.
    pub listed: Listed,
    /// Why they are not the commit's.
    pub problem: Option<Problem>,
}

impl Listing {
    /// What the set's state file holds: the last listing (a state file that is not one is
    /// the listing's problem: the set's apps are not known, and none is removed).
    pub fn remembered(state_dir: &Path, set: &str) -> Listing {
        let (listed, problem) = match read_state(state_dir, set) {
            Ok(listed) => (listed.unwrap_or_default(), None),
            Err(torn) => (Listed::default(), Some(Problem::Torn(torn))),
        };
        Listing {
            set: set.to_string(),
            listed,
            problem,
        }
    }
}

/// Lists `set` at its repository's commit, fetched at `since` or later (a fetch the
/// set's apps share; at `revision`, a commit, branch or tag, when given). A set that generates no app where it generated some before keeps
/// its last folders (unless `allow_empty`); one whose folders cannot be read keeps them
/// too.
pub async fn list(
    sources: &Sources,
    config: &Config,
    set: &AppSetConfig,
    since: Instant,
    revision: Option<&str>,
) -> Listing {
    let before = read_state(&config.agent.state_dir, &set.name);
    let listing = list_commit(sources, config, set, since, revision).await;
    let before = match (before, &listing) {
        (Ok(before), _) => before,
        // A listing of the commit mends a torn state file; without one, nothing is known.
        (Err(_), Ok(_)) => None,
        (Err(torn), Err(e)) => {
            let torn = format!("{e}, and {torn}");
            return Listing {
                set: set.name.clone(),
                listed: Listed::default(),
                problem: Some(Problem::Torn(torn)),
            };
        }
    };
    let (listed, problem) = match listing {
        Ok(now) if now.folders.is_empty() && !set.folders.is_empty() && !set.allow_empty => {
            match before {
                Some(before) if !before.folders.is_empty() => {
                    let clusters = set.clusters(&config.cluster).map_or(1, |c| c.len());
                    let problem = Problem::Empty {
                        commit: now.commit.chars().take(7).collect(),
                        before: before.folders.len() * clusters,
                    };
                    (before, Some(problem))
                }
                _ => (now, None),
            }
        }
        Ok(now) => (now, None),
        Err(e) => (
            before.unwrap_or_default(),
            Some(Problem::Unlisted(e.to_string())),
        ),
    };
    Listing {
        set: set.name.clone(),
        listed,
        problem,
    }
}

/// The folders `set` matches at its repository's commit.
async fn list_commit(
    sources: &Sources,
    config: &Config,
    set: &AppSetConfig,
    since: Instant,
    revision: Option<&str>,
) -> Result<Listed, ListError> {
    let Some(globs) = set.folder_globs()? else {
        return Ok(Listed::default());
    };
    let sample = set.sample(&config.cluster)?.ok_or(ListError::NoCluster)?;
    let sample = match revision {
        Some(revision) => sample.at_revision(revision)?,
        None => sample,
    };
    let checkout = sources.fetch(&sample, since).await?;
    let (dir, depth) = (checkout.dir.clone(), set.folder_depth());
    let paths = tokio::task::spawn_blocking(move || folders::matching(&dir, &globs, depth))
        .await
        .map_err(ListError::Task)??;
    let sha = &checkout.commit.sha;
    let trees = git::tree_ids(&checkout.source, sha, &paths)
        .ok_or_else(|| ListError::Commit(checkout.commit.short().to_string()))?;
    Ok(Listed {
        commit: sha.clone(),
        folders: paths
            .into_iter()
            .zip(trees)
            .map(|(path, tree)| Folder { path, tree })
            .collect(),
    })
}

/// `config` with each set's apps made from its listing, after the written apps (`config`
/// may be expanded already: its generated apps are made again). A set not listed, or
/// whose apps cannot be made from its listing — a template that fails for a folder, more
/// apps than its `max_apps` — keeps `kept(set)`'s apps; its listing's problem says why.
/// An app that cannot run — a name two apps have, a namespace no set may reach — is
/// refused: in `refused`, neither run nor removed.
pub fn expand(
    config: &Config,
    listings: &mut [Listing],
    kept: &dyn Fn(&str) -> Vec<AppConfig>,
) -> Config {
    let mut expanded = config.clone();
    expanded.apps.retain(|a| a.set.is_none());
    expanded.refused.clear();
    let mut generated = Vec::new();
    for set in &config.app_sets {
        let apps = match listings.iter_mut().find(|l| l.set == set.name) {
            None => kept(&set.name),
            Some(listing) if matches!(listing.problem, Some(Problem::Torn(_))) => kept(&set.name),
            Some(listing) => match made(config, set, &listing.listed) {
                Ok((apps, refused)) => {
                    expanded.refused.extend(refused);
                    apps
                }
                Err(e) => {
                    listing.problem = Some(Problem::Unlisted(e.to_string()));
                    kept(&set.name)
                }
            },
        };
        generated.extend(apps);
    }
    expanded
        .refused
        .extend(refuse_clashes(&expanded.apps, &mut generated));
    expanded.apps.extend(generated);
    expanded
}

/// Takes out of `generated` every app whose name another app has (see [`clashes`]), and
/// returns them refused.
pub fn refuse_clashes(written: &[AppConfig], generated: &mut Vec<AppConfig>) -> Vec<Refused> {
    let clashes = clashes(written, generated);
    let refused = (generated.iter())
        .filter_map(|app| Some(Refused::of(app, clashes.get(&app.name)?.clone())))
        .collect();
    generated.retain(|a| !clashes.contains_key(&a.name));
    refused
}

/// The names more than one app has, each with what says so: every generated app of such a
/// name is refused — never the first made — naming each app that has it. A written app
/// keeps its name: a folder cannot take it, nor stop it.
fn clashes(written: &[AppConfig], generated: &[AppConfig]) -> BTreeMap<String, String> {
    let mut holders: BTreeMap<&str, Vec<&AppConfig>> = BTreeMap::new();
    for app in written.iter().chain(generated) {
        holders.entry(app.name.as_str()).or_default().push(app);
    }
    let said = |app: &AppConfig| match (&app.set, &app.folder) {
        (None, _) => "the written [[app]]".to_string(),
        (Some(set), Some(folder)) => format!(
            "app set {set} (folder {folder}, cluster {})",
            app.cluster.as_deref().unwrap_or_default()
        ),
        (Some(set), None) => format!(
            "app set {set} (cluster {})",
            app.cluster.as_deref().unwrap_or_default()
        ),
    };
    holders
        .into_iter()
        .filter(|(_, apps)| apps.len() > 1)
        .map(|(name, apps)| {
            let who: Vec<String> = apps.iter().map(|a| said(a)).collect();
            let why = format!(
                "the name {name:?} is made by {}: each app of the sets that make it is refused until one is renamed (give app_name a template that tells them apart)",
                who.join(" and by ")
            );
            (name.to_string(), why)
        })
        .collect()
}

/// The `depends_on` names no app has once the sets are listed (validation lets a name no
/// written app has stand for a generated one), each said: `app web: depends_on names
/// "db-east", which no app is (nor any app set makes)`. Such a dependency is not waited on.
pub fn unknown_dependencies(config: &Config) -> Vec<String> {
    let mut unknown = Vec::new();
    for app in &config.apps {
        for dep in app.depends_on.iter().filter(|d| config.app(d).is_none()) {
            unknown.push(format!(
                "app {}: depends_on names {dep:?}, which no app is (nor any app set makes): not waited on",
                app.name
            ));
        }
    }
    unknown
}

/// `config` with each set's apps as it listed them last: what `berth status`, `plan` and
/// the other commands that read no repository see.
pub fn expand_remembered(config: &Config) -> Config {
    let mut listings: Vec<Listing> = config
        .app_sets
        .iter()
        .map(|s| Listing::remembered(&config.agent.state_dir, &s.name))
        .collect();
    expand(config, &mut listings, &|_| Vec::new())
}

/// The apps `set` made from its last listing, under `config` (none when they cannot be
/// made; those refused left out).
pub fn remembered_apps(config: &Config, set: &AppSetConfig) -> Vec<AppConfig> {
    let listed = remembered(&config.agent.state_dir, &set.name).unwrap_or_default();
    made(config, set, &listed).map_or_else(|_| Vec::new(), |(apps, _)| apps)
}

/// The apps a rename hands over, `(from, to)`: for each folder `before` has and `now` has
/// not, whose tree a folder new in `now` has, its app on each cluster and the new folder's
/// app on the same cluster.
pub fn renamed(
    config: &Config,
    set: &AppSetConfig,
    before: &Listed,
    now: &Listed,
) -> Vec<(AppConfig, AppConfig)> {
    let zero = git2::Oid::ZERO_SHA1.to_string();
    let has = |listed: &Listed, path: &str| listed.folders.iter().any(|f| f.path == path);
    let mut gone: Vec<&Folder> = (before.folders.iter())
        .filter(|f| f.tree != zero && !has(now, &f.path))
        .collect();
    let mut pairs = Vec::new();
    for new in now.folders.iter().filter(|f| !has(before, &f.path)) {
        let Some(at) = gone.iter().position(|old| old.tree == new.tree) else {
            continue;
        };
        let old = gone.swap_remove(at);
        let apps = |path: &str| set.generate(&[path.to_string()], &config.cluster);
        if let (Ok(from), Ok(to)) = (apps(&old.path), apps(&new.path)) {
            pairs.extend(from.into_iter().zip(to));
        }
    }
    pairs
}

/// The apps of `set` for `listed`, each checked as a written app is, and those refused: a
/// folder whose apps would reach a reserved namespace (see [`out_of_reach`]).
///
/// # Errors
/// The first app that cannot be made, or more apps than the set's `max_apps`.
fn made(
    config: &Config,
    set: &AppSetConfig,
    listed: &Listed,
) -> Result<(Vec<AppConfig>, Vec<Refused>), ListError> {
    let apps = set.generate(&listed.paths(), &config.cluster)?;
    for app in &apps {
        if let Err(problems) = check_generated(app, &config.cluster) {
            let (app, path) = (app.name.clone(), app.path.join(", "));
            return Err(ListError::Invalid {
                app,
                path,
                problems,
            });
        }
    }
    Ok(within_reach(config, set, apps))
}

/// The apps of `set` that may run, and those refused: each whose templates reach a
/// reserved namespace (see [`out_of_reach`]).
pub fn within_reach(
    config: &Config,
    set: &AppSetConfig,
    apps: Vec<AppConfig>,
) -> (Vec<AppConfig>, Vec<Refused>) {
    let reserved = reserved_namespaces(&config.agent);
    let (mut made, mut refused) = (Vec::with_capacity(apps.len()), Vec::new());
    for app in apps {
        match out_of_reach(set, &app, &reserved) {
            Some(why) => refused.push(Refused::of(&app, why)),
            None => made.push(app),
        }
    }
    (made, refused)
}

/// The namespaces no set's app may have or reach: Kubernetes' own, and berth's
/// (`agent.inventory_namespace`). Only a written app may name them.
pub fn reserved_namespaces(agent: &AgentConfig) -> [&str; 5] {
    [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "default",
        agent.inventory_namespace.as_str(),
    ]
}

/// Why a set's app may not run: a namespace or scope its templates fill in (from a
/// folder's name, a cluster's, a label) reaches a reserved namespace, or a folder's name
/// holding a glob's character fills in a scope (a folder named `*` would make
/// `scope = ["{folder}"]` every namespace). What the set writes literally stands.
fn out_of_reach(set: &AppSetConfig, app: &AppConfig, reserved: &[&str]) -> Option<String> {
    let filled = |v: Option<&toml::Value>| v.and_then(toml::Value::as_str).is_some_and(is_template);
    let template = &set.template;
    let scope_template = (template.get("scope"))
        .and_then(|s| s.get("namespaces"))
        .and_then(toml::Value::as_array);
    let mut reached: Vec<&str> = Vec::new();
    if filled(template.get("namespace")) && reserved.contains(&app.namespace.as_str()) {
        reached.push(&app.namespace);
    }
    let filled_scope: Vec<&String> = match (scope_template, &app.scope.namespaces) {
        (Some(written), Some(made)) => (written.iter().zip(made))
            .filter(|(w, _)| filled(Some(w)))
            .map(|(_, m)| m)
            .collect(),
        _ => Vec::new(),
    };
    if let Some(folder) =
        (app.folder.as_deref()).filter(|f| !filled_scope.is_empty() && f.contains(GLOB_CHARS))
    {
        return Some(format!(
            "its folder {folder:?} holds a glob's character, which its scope's template would take as one: skipped"
        ));
    }
    let globs = compile_globs(&filled_scope.into_iter().cloned().collect::<Vec<_>>())
        .ok()
        .flatten();
    reached.extend(
        reserved
            .iter()
            .filter(|ns| globs.as_ref().is_some_and(|g| g.is_match(ns))),
    );
    let reached = reached.first()?;
    Some(format!(
        "its templates make namespace {:?} and scope {:?}, which reach namespace {reached:?}: {} are out of any template's reach (only a written [[app]] may name them); skipped",
        app.namespace,
        app.scope_namespaces(),
        reserved.join(", ")
    ))
}

/// Whether a set's value is a template: it holds a placeholder.
fn is_template(text: &str) -> bool {
    text.replace("{{", "").contains('{')
}

/// The characters of a glob: a folder's name holding one could widen a scope.
const GLOB_CHARS: &[char] = &['*', '?', '[', ']', '{', '}', '!', '\\'];

fn state_path(state_dir: &Path, set: &str) -> PathBuf {
    state_dir.join("sets").join(format!("{set}.json"))
}

/// What `set` listed last; `None` when it never listed, or its state file is not one
/// (said: nothing is removed on its word).
pub fn remembered(state_dir: &Path, set: &str) -> Option<Listed> {
    read_state(state_dir, set).unwrap_or_else(|torn| {
        tracing::warn!(set = %set, "app set {set}: {torn}: nothing is removed on its word");
        None
    })
}

/// What `set` listed last (`None`: never listed); `Err`, saying why, when its state file is
/// there but not one (torn, damaged, too large, a link).
fn read_state(state_dir: &Path, set: &str) -> Result<Option<Listed>, String> {
    let path = state_path(state_dir, set);
    let torn = |why: &dyn std::fmt::Display| {
        format!("its state file {} is not one ({why})", path.display())
    };
    let file = match crate::state::open_state(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        file => file,
    };
    let text = crate::manifest::read::read_capped(file, MAX_STATE).map_err(|e| torn(&e))?;
    serde_json::from_slice::<Listed>(&text)
        .map(Some)
        .map_err(|e| torn(&e))
}

/// Keeps what `listing` lists, when it is the commit's (a listing with a problem keeps
/// the last one).
pub fn remember(state_dir: &Path, listing: &Listing) {
    if listing.problem.is_some() {
        return;
    }
    let written = serde_json::to_vec(&listing.listed)
        .map_err(std::io::Error::other)
        .and_then(|text| {
            crate::state::private_dir(&state_dir.join("sets"))?;
            crate::state::write_private(&state_path(state_dir, &listing.set), &text)
        });
    if let Err(e) = written {
        tracing::warn!(set = %listing.set, error = %e, "cannot keep what the set listed: its apps are found again at the next listing");
    }
}

/// Forgets the sets `config` no longer has (their apps were removed with them).
pub fn forget_others(config: &Config) {
    let folder = config.agent.state_dir.join("sets");
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let set = name.to_str().and_then(|n| n.strip_suffix(".json"));
        if set.is_some_and(|s| !config.app_sets.iter().any(|c| c.name == s)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests;
