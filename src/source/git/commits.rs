//! Questions about the commits in a repository's cache: whether one descends from another,
//! what some paths hold at a commit, a commit's [`CommitInfo`].
use std::path::Path;

use git2::Oid;

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

/// A digest of what `paths` (relative to the repository's root; `""` is the root) hold at
/// commit `sha`: the same digest at two commits means the same files there.
pub fn paths_digest(source: &Path, sha: &str, paths: &[String]) -> Option<String> {
    let repo = repository(source).ok()?;
    let tree = repo
        .find_commit(Oid::from_str(sha).ok()?)
        .ok()?
        .tree()
        .ok()?;
    let ids: Vec<Oid> = paths
        .iter()
        .map(|path| match path.as_str() {
            "" => tree.id(),
            p => tree
                .get_path(Path::new(p))
                .map_or(Oid::ZERO_SHA1, |e| e.id()),
        })
        .collect();
    let parts = paths
        .iter()
        .zip(&ids)
        .flat_map(|(path, id)| [path.as_bytes(), &[0], id.as_bytes()]);
    Some(crate::digest::hex(&crate::digest::sha256_parts(parts)))
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
