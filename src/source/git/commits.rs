//! Questions about the commits in a repository's cache: whether one descends from another,
//! what some paths hold at a commit, a commit's [`CommitInfo`].
use std::path::Path;

use git2::Oid;

use super::paths::lookup;
use super::repository;
use crate::source::CommitInfo;

/// Set when `previous` (the commit of the app's last sync) is not an ancestor of `new` in
/// the repository's cache: its history was rewritten.
pub fn ancestry(source: &Path, previous: &str, new: &str) -> Option<String> {
    let repo = repository(source).ok()?;
    let prev = Oid::from_str(previous).ok()?;
    let new = Oid::from_str(new).ok()?;
    let short = |o: Oid| o.to_string()[..7].to_string();
    if prev == new {
        return None;
    }
    let known = repo.find_commit(prev).is_ok();
    match known {
        true if repo.graph_descendant_of(new, prev).unwrap_or(false) => None,
        true => Some(format!(
            "previous commit {} is not an ancestor of {}: history was rewritten (force-push)",
            short(prev),
            short(new)
        )),
        false => Some(format!(
            "previous commit {} is no longer in the repository: history was rewritten (force-push)",
            short(prev)
        )),
    }
}

/// The branches of the local repository at `path` whose history holds commit `sha`, by
/// name: where a commit that is no longer an ancestor went (a branch switched in a work
/// tree, not a force-push). At most the first 5.
pub fn branches_holding(path: &Path, sha: &str) -> Vec<String> {
    let Ok(repo) = git2::Repository::open(path) else {
        return Vec::new();
    };
    let Ok(wanted) = Oid::from_str(sha) else {
        return Vec::new();
    };
    let Ok(branches) = repo.branches(Some(git2::BranchType::Local)) else {
        return Vec::new();
    };
    branches
        .flatten()
        .filter_map(|(branch, _)| {
            let tip = branch.get().target()?;
            let holds = tip == wanted || repo.graph_descendant_of(tip, wanted).unwrap_or(false);
            holds.then(|| branch.name().ok().flatten().map(str::to_string))?
        })
        .take(5)
        .collect()
}

/// A digest of what `paths` (relative to the repository's root; `""` is the root) hold at
/// commit `sha`, and of what the links among them point at elsewhere in the repository:
/// the same digest at two commits means the same files there.
pub fn paths_digest(source: &Path, sha: &str, paths: &[String]) -> Option<String> {
    let repo = repository(source).ok()?;
    let tree = tree_of(&repo, sha)?;
    let mut read: Vec<(String, Oid)> = paths
        .iter()
        .map(|p| (p.clone(), id_at(&repo, &tree, p)))
        .collect();
    for target in link_targets(&repo, &tree, paths) {
        let id = id_at(&repo, &tree, &target);
        read.push((target, id));
    }
    let parts = read
        .iter()
        .flat_map(|(path, id)| [path.as_bytes(), &[0], id.as_bytes()]);
    Some(crate::digest::hex(&crate::digest::sha256_parts(parts)))
}

/// The id of what `path` holds in `tree`; the zero id when nothing is there.
fn id_at(repo: &git2::Repository, tree: &git2::Tree<'_>, path: &str) -> Oid {
    lookup(repo, tree.id(), path).map_or(Oid::ZERO_SHA1, |e| e.id)
}

/// The tree of commit `sha` in `repo`.
fn tree_of<'r>(repo: &'r git2::Repository, sha: &str) -> Option<git2::Tree<'r>> {
    repo.find_commit(Oid::from_str(sha).ok()?).ok()?.tree().ok()
}

/// The id of each of `paths`' trees at commit `sha` (the same id: the same files), in
/// their order; `None` when the commit cannot be read.
pub fn tree_ids(source: &Path, sha: &str, paths: &[String]) -> Option<Vec<String>> {
    let repo = repository(source).ok()?;
    let tree = tree_of(&repo, sha)?;
    Some(
        paths
            .iter()
            .map(|p| id_at(&repo, &tree, p).to_string())
            .collect(),
    )
}

/// The commit the app's ref names now in its local repository (a path or `file://`), read
/// without fetching; `None` for a remote one, or when it cannot be read.
pub fn local_tip(app: &crate::config::AppConfig) -> Option<String> {
    use crate::config::GitRef;
    let repo = git2::Repository::open(super::local_path(&app.repo)?).ok()?;
    let name = match app.git_ref() {
        GitRef::DefaultBranch => "HEAD".to_string(),
        GitRef::Branch(b) => format!("refs/heads/{b}"),
        GitRef::Tag(t) => format!("refs/tags/{t}"),
        GitRef::Commit(sha) => return Some(sha.to_string()),
        GitRef::Ref(name) => name.to_string(),
    };
    let commit = repo.revparse_single(&name).ok()?.peel_to_commit().ok()?;
    Some(commit.id().to_string())
}

/// The most links [`link_targets`] follows, and the most folders it walks.
const MAX_LINKS: usize = 1000;

/// The repository paths that links under `paths` point at, outside `paths` (and, in turn,
/// what links under those point at): a link's target changed in another folder changes
/// what the app reads. Links out of the repository are refused when the app renders, and
/// left out here.
fn link_targets(repo: &git2::Repository, tree: &git2::Tree<'_>, paths: &[String]) -> Vec<String> {
    let inside = |p: &str, of: &[String]| {
        of.iter()
            .any(|root| root.is_empty() || p == root || p.starts_with(&format!("{root}/")))
    };
    let mut walked: Vec<String> = Vec::new();
    let mut queue: Vec<String> = paths.to_vec();
    let mut found = Vec::new();
    while let Some(path) = queue.pop() {
        if walked.len() >= MAX_LINKS || found.len() >= MAX_LINKS {
            break;
        }
        let sub = lookup(repo, tree.id(), &path).and_then(|e| repo.find_tree(e.id).ok());
        let links = match sub {
            Some(sub) => links_in(repo, &sub, &path),
            // A file: a link itself, or not.
            None => links_in_entry(repo, tree, &path),
        };
        walked.push(path);
        for target in links {
            if !inside(&target, paths) && !inside(&target, &found) {
                found.push(target.clone());
                queue.push(target);
            }
        }
    }
    found
}

/// Where the links in `sub` (at `at` in the repository) point, as repository paths.
fn links_in(repo: &git2::Repository, sub: &git2::Tree<'_>, at: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let _ = sub.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if entry.filemode() == 0o120000 {
            let link = format!("{at}/{dir}{}", entry.name().unwrap_or_default());
            targets.extend(target(repo, entry.id(), link.trim_start_matches('/')));
        }
        if targets.len() >= MAX_LINKS {
            git2::TreeWalkResult::Abort
        } else {
            git2::TreeWalkResult::Ok
        }
    });
    targets
}

/// Where the entry at `path` points, when it is a link.
fn links_in_entry(repo: &git2::Repository, tree: &git2::Tree<'_>, path: &str) -> Vec<String> {
    match lookup(repo, tree.id(), path) {
        Some(e) if e.mode == 0o120000 => target(repo, e.id, path).into_iter().collect(),
        _ => Vec::new(),
    }
}

/// The repository path that the link at `link` (its blob `id`) points at, when it stays
/// in the repository.
fn target(repo: &git2::Repository, id: Oid, link: &str) -> Option<String> {
    let blob = repo.find_blob(id).ok()?;
    let to = std::str::from_utf8(blob.content()).ok()?;
    if to.starts_with('/') || blob.size() > 4096 {
        return None;
    }
    let mut parts: Vec<&str> = link.split('/').collect();
    parts.pop();
    for part in to.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

pub(super) fn commit_info(c: &git2::Commit<'_>) -> CommitInfo {
    let author = c.author();
    CommitInfo {
        sha: c.id().to_string(),
        author: format!(
            "{} <{}>",
            author.name().unwrap_or("?"),
            author.email().unwrap_or("?")
        ),
        time: jiff::Timestamp::from_second(c.time().seconds())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        subject: c.summary().ok().flatten().unwrap_or("").to_string(),
    }
}
