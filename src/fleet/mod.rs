//! App sets (`[[app_set]]`). Listed at each fetch of a set's repository: the folders its
//! `folders` match at the commit, each with its tree's id ([`list`]); the set's apps made
//! from them and checked as written ones are ([`expand`]). What a set listed last is kept
//! in `state_dir/sets/<set>.json` ([`remember`]): the empty-set guard compares with it, a
//! set that cannot be listed keeps its apps by it, and the apps a set no longer makes —
//! removed as an app removed from the configuration is — are found by it. What a listing
//! changes is a value ([`Transition`], `transition.rs`), acted on by one executor
//! ([`execute`], `execute.rs`) for `berth sync` and `berth run` alike.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::config::{
    check_generated, AppConfig, AppSetConfig, Config, FoundRef, Problem as Invalid, Refused,
    SetError,
};
use crate::source::folders::{self, FolderError};
use crate::source::git::SourceError;
use crate::source::shared::Sources;

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
    /// The commit (empty for a set without folders, which reads no commit).
    pub commit: String,
    /// The folders matching, sorted.
    pub folders: Vec<Folder>,
    /// The remote's refs matching, sorted (expired ones too: their `since` is kept).
    #[serde(default)]
    pub refs: Vec<FoundRef>,
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
            Err(torn) => (Listed::default(), Some(Problem::Torn(torn.to_string()))),
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
    let mut listing = list_commit(sources, config, set, since, revision).await;
    if let (Ok(now), Ok(Some(before))) = (&mut listing, &before) {
        keep_since(&mut now.refs, &before.refs);
    }
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
            Some(Problem::Unlisted(crate::Chain(&e).to_string())),
        ),
    };
    Listing {
        set: set.name.clone(),
        listed,
        problem,
    }
}

/// The refs of `now` that name another commit than they did `before` (none before: none
/// moved).
pub fn moved_refs(before: Option<&Listed>, now: &Listed) -> Vec<String> {
    let Some(before) = before else {
        return Vec::new();
    };
    let moved = |r: &&FoundRef| (before.refs.iter()).any(|b| b.name == r.name && b.sha != r.sha);
    now.refs
        .iter()
        .filter(moved)
        .map(|r| r.name.clone())
        .collect()
}

/// Each ref of `now` that names the commit it named `before` keeps the time berth first
/// saw it there.
fn keep_since(now: &mut [FoundRef], before: &[FoundRef]) {
    for found in now {
        let same = before
            .iter()
            .find(|b| b.name == found.name && b.sha == found.sha);
        if let Some(same) = same {
            found.since = same.since;
        }
    }
}

/// The folders `set` matches at its repository's commit, and the refs its remote has that
/// `set` matches.
async fn list_commit(
    sources: &Sources,
    config: &Config,
    set: &AppSetConfig,
    since: Instant,
    revision: Option<&str>,
) -> Result<Listed, ListError> {
    let (folder_globs, ref_globs) = (set.folder_globs()?, set.ref_globs()?);
    if folder_globs.is_none() && ref_globs.is_none() {
        return Ok(Listed::default());
    }
    let sample = set.sample(&config.cluster)?.ok_or(ListError::NoCluster)?;
    let refs = match ref_globs {
        None => Vec::new(),
        Some(globs) => {
            let app = sample.clone();
            let listed = move || crate::source::git::matching_refs(&app, &globs);
            let now = jiff::Timestamp::now();
            (tokio::task::spawn_blocking(listed)
                .await
                .map_err(ListError::Task)??)
            .into_iter()
            .map(|(name, sha)| FoundRef {
                name,
                sha,
                since: now,
            })
            .collect()
        }
    };
    let Some(globs) = folder_globs else {
        return Ok(Listed {
            refs,
            ..Listed::default()
        });
    };
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
    let trees = crate::source::folder_ids(&checkout, &paths)
        .ok_or_else(|| ListError::Commit(checkout.commit.short().to_string()))?;
    Ok(Listed {
        commit: sha.clone(),
        folders: paths
            .into_iter()
            .zip(trees)
            .map(|(path, tree)| Folder { path, tree })
            .collect(),
        refs,
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
    kept: &dyn Fn(&str) -> Vec<Arc<AppConfig>>,
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
                    listing.problem = Some(Problem::Unlisted(crate::Chain(&e).to_string()));
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
pub fn remembered_apps(config: &Config, set: &AppSetConfig) -> Vec<Arc<AppConfig>> {
    let listed = remembered(&config.agent.state_dir, &set.name).unwrap_or_default();
    made(config, set, &listed).map_or_else(|_| Vec::new(), |(apps, _)| apps)
}

/// The apps of `set` for `listed` (its refs past the set's `ttl` left out), each checked
/// as a written app is, and those refused: a folder whose apps would reach a reserved
/// namespace (see [`within_reach`]), a ref whose app cannot be made (one pull request
/// never holds back the others).
///
/// # Errors
/// The first app of a folder, item or cluster that cannot be made, or more apps than the
/// set's `max_apps`.
pub fn made(
    config: &Config,
    set: &AppSetConfig,
    listed: &Listed,
) -> Result<(Vec<Arc<AppConfig>>, Vec<Refused>), ListError> {
    let now = jiff::Timestamp::now();
    let live = |r: &&FoundRef| {
        let age = now.duration_since(r.since).unsigned_abs();
        set.ttl.is_none_or(|ttl| age <= ttl)
    };
    let refs: Vec<FoundRef> = listed.refs.iter().filter(live).cloned().collect();
    let (mut apps, mut refused) = (Vec::new(), Vec::new());
    for app in set.generate(&listed.paths(), &refs, &config.cluster)? {
        let app = match app {
            Ok(app) => app,
            Err(e) => match Refused::unmade(e) {
                // One pull request's ref never holds back the set's other apps.
                Ok(one) => {
                    refused.push(one);
                    continue;
                }
                Err(e) => return Err(e.into()),
            },
        };
        if let Err(problems) = check_generated(&app, &config.cluster) {
            if app.preview.is_some() {
                let said: Vec<String> = problems
                    .iter()
                    .map(|p| format!("{}: {}", p.key, p.message))
                    .collect();
                refused.push(Refused::of(&app, said.join("; ")));
                continue;
            }
            let (app, path) = (app.name.clone(), app.path.join(", "));
            return Err(ListError::Invalid {
                app,
                path,
                problems,
            });
        }
        apps.push(Arc::new(app));
    }
    let (apps, more) = within_reach(config, set, apps);
    refused.extend(more);
    Ok((apps, refused))
}

/// Whether `e` is about a ref's app.
mod desired;
mod execute;
mod refuse;
mod state;
mod transition;
pub use desired::{desired, diff, Changes, Role};
pub use execute::{execute, Executed};
pub use refuse::{refuse_clashes, reserved_namespaces, within_reach};
use state::read_state;
#[cfg(test)]
use state::state_path;
pub use state::{forget_others, note_problem, problem_of, remember, remembered, TornState};
pub use transition::Transition;

#[cfg(test)]
mod tests;
