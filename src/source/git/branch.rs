//! Which branch an app follows: the one it names; for a local repository whose app names
//! none, the branch its work tree had checked out at the first fetch (recorded in the
//! cache); else the remote's default branch.
use std::path::Path;

use git2::Repository;

use super::{bound_network_waits, local_path, remote_url, source_dir};
use crate::config::{AppConfig, GitRef};

/// The file in a repository's cache that names the branch a local repository's apps
/// follow when they name no ref.
const FOLLOWED_BRANCH: &str = "followed-branch";

/// `app` as it is fetched. An app that names no ref of a local repository follows the
/// branch its work tree had checked out at the repository's first fetch — recorded in the
/// cache, and said once — never the work tree's HEAD as it moves: `git checkout -b
/// feature` in that work tree deploys nothing. A detached HEAD at the first fetch is
/// followed as HEAD (nothing to record).
pub(super) fn followed<'a>(app: &'a AppConfig, source: &Path) -> std::borrow::Cow<'a, AppConfig> {
    use std::borrow::Cow;
    let (GitRef::DefaultBranch, Some(path)) = (app.git_ref(), local_path(&app.repo)) else {
        return Cow::Borrowed(app);
    };
    let record = source.join(FOLLOWED_BRANCH);
    let recorded = crate::manifest::read::read_capped(crate::state::open_state(&record), 256)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .map(|b| b.trim().to_string())
        .filter(|b| git2::Branch::name_is_valid(b).unwrap_or(false));
    let branch = match recorded {
        Some(branch) => branch,
        None => {
            let Some(branch) = checked_out(&path) else {
                return Cow::Borrowed(app);
            };
            if let Err(e) = crate::state::private_dir(source)
                .and_then(|()| crate::state::write_private(&record, branch.as_bytes()))
            {
                tracing::warn!(app = %app.name, error = %e, "cannot record the branch the app follows");
            }
            tracing::info!(app = %app.name, repo = %path.display(), "the app names no branch of its local repository: it follows branch {branch}, checked out there now, whatever the work tree checks out later (set branch = \"{branch}\" to say so)");
            branch
        }
    };
    Cow::Owned(AppConfig {
        branch: Some(branch),
        ..app.clone()
    })
}

/// The branch `app` follows: the one it names, else the one its local repository had
/// checked out at the first fetch, else the remote's default branch; `None` for an app
/// pinned to a tag or a commit, or a remote that cannot be asked.
pub fn followed_branch(app: &AppConfig, state_dir: &Path) -> Option<String> {
    match followed(app, &source_dir(state_dir, &app.repo)).git_ref() {
        GitRef::Branch(branch) => Some(branch.to_string()),
        GitRef::DefaultBranch => default_branch(&app.repo),
        GitRef::Tag(_) | GitRef::Commit(_) | GitRef::Ref(_) => None,
    }
}

/// The default branch of repository `repo` (a local one's: the branch its work tree has
/// checked out), when it can be asked without credentials; `None` else.
pub fn default_branch(repo: &str) -> Option<String> {
    if let Some(path) = local_path(repo) {
        return checked_out(&path);
    }
    bound_network_waits();
    let mut remote = git2::Remote::create_detached(remote_url(repo)).ok()?;
    remote.connect(git2::Direction::Fetch).ok()?;
    let branch = remote.default_branch().ok()?;
    let branch = branch
        .as_str()
        .ok()?
        .strip_prefix("refs/heads/")?
        .to_string();
    let _ = remote.disconnect();
    Some(branch)
}

/// The branch the work tree of the local repository `path` has checked out, if one is.
fn checked_out(path: &Path) -> Option<String> {
    let repo = Repository::open(path).ok()?;
    let head = repo.find_reference("HEAD").ok()?;
    let target = head.symbolic_target().ok()??;
    target.strip_prefix("refs/heads/").map(str::to_string)
}
