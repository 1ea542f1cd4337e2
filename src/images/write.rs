//! The write-back: one commit per scan and repository branch that changes anything,
//! signed when a key is configured, pushed with a lease. A push the branch's move refused
//! is tried again on its new head (fetch, the same fields planned again, push), up to
//! [`ATTEMPTS`]; the followed branch is never force-pushed. A push branch that no longer
//! descends from the followed one is rebased onto it (others' commits replayed, berth's
//! own left out: the scan writes every field anew) or reset to it, as configured.
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use git2::Oid;

use super::files::marked_files;
use super::plan::{plan, Choice, Plan};
use super::state::State;
use crate::config::{author_parts, AppConfig, ImageUpdatesConfig, StalePushBranch};
use crate::source::git::{
    followed_branch, redact_url, write_commit, Pushed, SourceError, Writable, Written as GitWritten,
};
use crate::source::sign::{SignError, Signer};

/// Pushes tried before berth gives up until the next scan.
const ATTEMPTS: usize = 5;

/// The apps whose markers go to one branch of one repository, pushed with the same
/// credentials, author, key and message.
pub struct Group<'a> {
    pub apps: Vec<&'a AppConfig>,
    /// The apps' author, key and message.
    pub updates: &'a ImageUpdatesConfig,
    /// The branch pushed to.
    pub branch: String,
    /// The branch the first app follows (the push branch, unless another is configured).
    pub followed: String,
    /// Every configured app of the repository: a branch one of them follows is never
    /// force-pushed.
    pub everyone: Vec<&'a AppConfig>,
}

impl Group<'_> {
    /// The repository, as people read it.
    pub fn repo(&self) -> String {
        redact_url(&self.apps[0].repo)
    }
}

/// The apps of `apps` with `[app.image_updates]`, grouped by repository and push branch
/// (the apps whose followed branch cannot be told are said and left out). Apps that push
/// with other credentials or settings make groups of their own: a commit is never signed
/// with one app's key for another's fields. `all` is every configured app.
pub fn groups<'a>(
    apps: impl IntoIterator<Item = &'a AppConfig>,
    all: &'a [Arc<AppConfig>],
    state_dir: &Path,
) -> Vec<Group<'a>> {
    let mut groups: Vec<Group<'a>> = Vec::new();
    for app in apps {
        let Some(updates) = &app.image_updates else {
            continue;
        };
        let followed = followed_branch(app, state_dir);
        let Some(branch) = updates.push_branch.clone().or_else(|| followed.clone()) else {
            tracing::warn!(app = %app.name, "image updates: the app's branch cannot be told (its remote does not answer): set branch or push_branch");
            continue;
        };
        let followed = followed.unwrap_or_else(|| branch.clone());
        let same = |g: &&mut Group<'a>| {
            let first = g.apps[0];
            (first.repo == app.repo && first.auth == app.auth && g.branch == branch)
                && g.updates == updates
        };
        match groups.iter_mut().find(same) {
            Some(group) => group.apps.push(app),
            None => groups.push(Group {
                apps: vec![app],
                updates,
                branch,
                followed,
                everyone: (all.iter())
                    .filter(|a| a.repo == app.repo)
                    .map(|a| &**a)
                    .collect(),
            }),
        }
    }
    groups
}

/// What a write-back did.
#[derive(Debug)]
pub enum Written {
    /// Nothing to change (or a dry run: what would change).
    Planned(Plan),
    /// A commit pushed.
    Pushed {
        commit: String,
        plan: Plan,
        attempts: usize,
    },
}

/// Why a write-back did not go through.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sign(#[from] SignError),
    #[error("cannot read the marked files of {commit}: {message}")]
    Files { commit: String, message: String },
    #[error("cannot keep the image updates' state: {0}")]
    State(#[source] std::io::Error),
    #[error(
        "branch {branch} moved at each of {ATTEMPTS} pushes: berth tries again at the next scan"
    )]
    Moving { branch: String },
    #[error("cannot rebase {branch} onto {onto}: commit {commit} conflicts there; merge {branch} by hand, or set stale_push_branch = \"reset\"")]
    Rebase {
        branch: String,
        onto: String,
        commit: String,
    },
    #[error("push branch {branch} no longer descends from {onto}, and app {app} follows it: berth never force-pushes a branch an app follows; merge {onto} into it by hand")]
    Followed {
        branch: String,
        onto: String,
        app: String,
    },
}

/// Plans the group's fields at the branch's head and, unless `dry_run`, commits and pushes
/// them; `state` learns the fields paused, and the tags written.
///
/// # Errors
/// The repository cannot be fetched or pushed to, the key cannot sign, or the branch kept
/// moving.
pub fn write_back(
    group: &Group<'_>,
    state_dir: &Path,
    choices: &BTreeMap<&str, Choice<'_>>,
    state: &mut State,
    dry_run: bool,
) -> Result<Written, WriteError> {
    let writable = Writable::open(group.apps[0], state_dir)?;
    let signer = match (&group.updates.signing_key, dry_run) {
        (Some(path), false) => Some(Signer::load(path)?),
        _ => None,
    };
    let (name, email) = author_parts(&group.updates.author);
    let author =
        git2::Signature::now(name, email).map_err(|e| WriteError::from(writable.cache(e)))?;
    for attempt in 1..=ATTEMPTS {
        let base = base(group, &writable, state_dir, &author, signer.as_ref())?;
        let (planned, mut planned_state) = planned(group, &writable, base.commit, choices, state)?;
        if planned.files.is_empty() || dry_run {
            *state = planned_state;
            return Ok(Written::Planned(planned));
        }
        let message = message(&group.updates.message, &planned);
        let files: Vec<(&str, &str)> = (planned.files.iter())
            .map(|f| (f.path.as_str(), f.new.as_str()))
            .collect();
        let commit = writable.commit(base.commit, &files, &author, &message, signer.as_ref())?;
        match writable.push(commit, &group.branch, base.lease, base.force)? {
            Pushed::Moved => {
                tracing::info!(branch = %group.branch, attempt, "image updates: the branch moved while berth pushed; trying again on its new head");
            }
            Pushed::Done => {
                for change in &planned.changes {
                    planned_state.wrote(&change.policy, &change.field, &change.new);
                }
                *state = planned_state;
                return Ok(Written::Pushed {
                    commit: commit.to_string(),
                    plan: planned,
                    attempts: attempt,
                });
            }
        }
    }
    Err(WriteError::Moving {
        branch: group.branch.clone(),
    })
}

/// The plan of the group's marked files at `commit`, and the state it leaves (holding
/// the fields that exist).
fn planned(
    group: &Group<'_>,
    writable: &Writable,
    commit: Oid,
    choices: &BTreeMap<&str, Choice<'_>>,
    state: &State,
) -> Result<(Plan, State), WriteError> {
    let files =
        marked_files(&writable.repo, commit, &group.apps).map_err(|e| WriteError::Files {
            commit: commit.to_string(),
            message: e.message().to_string(),
        })?;
    let mut state = state.clone();
    let planned = plan(&files, choices, &mut state);
    let fields = planned.fields.iter().map(|f| f.field.as_str()).collect();
    let apps: Vec<&str> = group.apps.iter().map(|a| a.name.as_str()).collect();
    state.keep_fields(&apps, &fields);
    Ok((planned, state))
}

/// Where a scan's commit goes: its parent, the lease and whether it may replace the branch.
struct Base {
    commit: Oid,
    lease: Option<Oid>,
    force: bool,
}

/// Fetches the branches and finds the commit to build on.
fn base(
    group: &Group<'_>,
    writable: &Writable,
    state_dir: &Path,
    author: &git2::Signature<'_>,
    signer: Option<&Signer>,
) -> Result<Base, WriteError> {
    let missing = || SourceError::RefNotFound {
        what: format!("branch {}", group.followed),
        url: group.repo(),
    };
    if group.branch == group.followed {
        let head = writable.fetch(&[&group.branch])?[0].ok_or_else(missing)?;
        return Ok(Base {
            commit: head,
            lease: Some(head),
            force: false,
        });
    }
    let heads = writable.fetch(&[&group.followed, &group.branch])?;
    let followed = heads[0].ok_or_else(missing)?;
    let Some(pushed) = heads[1] else {
        return Ok(Base {
            commit: followed,
            lease: None,
            force: false,
        });
    };
    let repo = &writable.repo;
    let current = pushed == followed
        || repo
            .graph_descendant_of(pushed, followed)
            .map_err(|e| WriteError::from(writable.cache(e)))?;
    if current {
        return Ok(Base {
            commit: pushed,
            lease: Some(pushed),
            force: false,
        });
    }
    let (branch, onto) = (pushed, followed);
    replaced(group, writable, state_dir, (branch, onto), author, signer)
}

/// Where a scan's commit goes when the push branch, at `branch`, no longer descends from
/// the followed one, at `onto`: rebased or reset onto it — unless an app follows the push
/// branch, which is never force-pushed.
fn replaced(
    group: &Group<'_>,
    writable: &Writable,
    state_dir: &Path,
    (pushed, followed): (Oid, Oid),
    author: &git2::Signature<'_>,
    signer: Option<&Signer>,
) -> Result<Base, WriteError> {
    let follower = (group.everyone.iter())
        .find(|a| followed_branch(a, state_dir).as_deref() == Some(group.branch.as_str()));
    if let Some(app) = follower {
        return Err(WriteError::Followed {
            branch: group.branch.clone(),
            onto: group.followed.clone(),
            app: app.name.clone(),
        });
    }
    tracing::info!(branch = %group.branch, onto = %group.followed, "image updates: the push branch no longer descends from the followed branch: {}", match group.updates.stale_push_branch {
        StalePushBranch::Rebase => "rebasing it",
        StalePushBranch::Reset => "resetting it",
    });
    let commit = match group.updates.stale_push_branch {
        StalePushBranch::Reset => followed,
        StalePushBranch::Rebase => rebase(group, writable, pushed, followed, author, signer)?,
    };
    Ok(Base {
        commit,
        lease: Some(pushed),
        force: true,
    })
}

/// The commits of `branch` not in `onto`, but berth's own (by its author's address) and
/// merges, replayed onto it (oldest first; one that changes nothing there dropped).
fn rebase(
    group: &Group<'_>,
    writable: &Writable,
    branch: Oid,
    onto: Oid,
    committer: &git2::Signature<'_>,
    signer: Option<&Signer>,
) -> Result<Oid, WriteError> {
    let email = committer.email();
    let repo = &writable.repo;
    let git = |e: git2::Error| WriteError::from(writable.cache(e));
    let mut walk = repo.revwalk().map_err(git)?;
    walk.push(branch).map_err(git)?;
    walk.hide(onto).map_err(git)?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)
        .map_err(git)?;
    let mut tip = onto;
    for oid in walk {
        let commit = repo.find_commit(oid.map_err(git)?).map_err(git)?;
        if commit.author().email() == email || commit.parent_count() > 1 {
            continue;
        }
        let base = repo.find_commit(tip).map_err(git)?;
        let mut index = repo
            .cherrypick_commit(&commit, &base, 0, None)
            .map_err(git)?;
        if index.has_conflicts() {
            return Err(WriteError::Rebase {
                branch: group.branch.clone(),
                onto: group.followed.clone(),
                commit: crate::source::short(&commit.id().to_string()).to_string(),
            });
        }
        let tree = index.write_tree_to(repo).map_err(git)?;
        if tree == base.tree_id() {
            continue;
        }
        let tree = repo.find_tree(tree).map_err(git)?;
        let message = commit.message().unwrap_or_default();
        tip = write_commit(
            repo,
            &commit.author(),
            committer,
            message,
            &tree,
            &base,
            signer,
        )
        .map_err(|e| match e {
            GitWritten::Git(e) => git(e),
            GitWritten::Sign(e) => WriteError::Sign(e),
        })?;
    }
    Ok(tip)
}

/// The commit message: the template with `{policies}` and `{changes}` filled in.
fn message(template: &str, plan: &Plan) -> String {
    let mut policies: Vec<&str> = Vec::new();
    for change in &plan.changes {
        if !policies.contains(&change.policy.as_str()) {
            policies.push(&change.policy);
        }
    }
    let changes: Vec<String> = (plan.changes.iter())
        .map(|c| {
            format!(
                "- {}: {} -> {} ({}:{})",
                c.policy, c.old, c.new, c.path, c.line
            )
        })
        .collect();
    template
        .replace("{policies}", &policies.join(", "))
        .replace("{changes}", &changes.join("\n"))
}
