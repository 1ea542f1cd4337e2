//! Where manifests come from: [`git`] fetches a repository and writes out a commit's tree;
//! [`registry`] resolves a chart or an OCI artifact and writes out its archive; [`cache`]
//! is where both keep them; [`shared`] shares those fetches between the apps of one source;
//! [`known_hosts`] verifies ssh host keys; [`verify`] checks commit signatures and [`sign`]
//! makes berth's own; [`watch`]
//! turns commits in a local repository into sync triggers.

pub mod cache;
pub mod folders;
pub mod git;
pub mod known_hosts;
pub mod registry;
pub mod shared;
pub mod sign;
pub mod verify;
pub mod watch;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::config::{AgentConfig, AppConfig, SourceRef};

/// The commit a sync worked on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    /// Full SHA.
    pub sha: String,
    /// `Name <email>`.
    pub author: String,
    /// Commit time.
    pub time: Timestamp,
    /// First line of the message.
    pub subject: String,
}

/// A digest of what `paths` hold in `checkout` (the same digest at two revisions means the
/// same files there): git's digest of the paths for a commit; a registry revision's
/// content digest (its whole content, paths or not).
pub fn paths_digest(checkout: &cache::Checkout, paths: &[String]) -> Option<String> {
    match registry::parse_revision(&checkout.commit.sha) {
        Some((_, digest)) => Some(digest.to_string()),
        None => git::paths_digest(&checkout.source, &checkout.commit.sha, paths),
    }
}

/// The app's revision fetched and written out from code that is no runtime's task (a
/// command's offline plan, `berth validate`): git's fetch, or a registry's on a runtime of
/// its own.
///
/// # Errors
/// The source's.
pub fn fetch_now(
    app: &AppConfig,
    agent: &AgentConfig,
) -> Result<cache::Checkout, git::SourceError> {
    if let SourceRef::Git(_) = app.source() {
        return git::fetch(app, &agent.state_dir, git::TreeLimits::of(agent));
    }
    let limits = registry::archive::ArchiveLimits::of(agent);
    registry::fetch_blocking(registry::Wanted::of(app), &agent.state_dir, limits)
        .map_err(git::SourceError::from)
}

/// The key a push (a webhook, a registry's notification) names the app's source by: a git
/// repository's URL as git2 is given it, a registry source's origin.
pub fn push_key(app: &AppConfig) -> String {
    match app.source() {
        SourceRef::Git(repo) => git::remote_url(repo),
        other => other.origin(),
    }
}

/// The local repository whose changes a file watcher follows: a git source's, when local.
pub fn local_repository(app: &AppConfig) -> Option<std::path::PathBuf> {
    match app.source() {
        SourceRef::Git(repo) => git::local_path(repo),
        _ => None,
    }
}

/// The id of each of `paths`' folders in `checkout` (the same id: the same files), in
/// their order: git's tree ids; a registry revision's folders hashed. `None` when the
/// revision cannot be read.
pub fn folder_ids(checkout: &cache::Checkout, paths: &[String]) -> Option<Vec<String>> {
    if registry::parse_revision(&checkout.commit.sha).is_none() {
        return git::tree_ids(&checkout.source, &checkout.commit.sha, paths);
    }
    let ids = paths
        .iter()
        .map(|p| registry::folder_digest(&checkout.dir.join(p)));
    ids.collect::<std::io::Result<_>>().ok()
}

/// A commit's SHA or a registry revision, short: [`CommitInfo::short`].
pub fn short(revision: &str) -> &str {
    let end = match revision.find("sha256:") {
        Some(at) => at + "sha256:".len() + 7,
        None => 7,
    };
    &revision[..revision.len().min(end)]
}

impl CommitInfo {
    /// The first 7 characters of the SHA; of a registry revision, its version and the
    /// first 7 hex digits of its digest (`1.2.0@sha256:abcdef1`).
    pub fn short(&self) -> &str {
        short(&self.sha)
    }

    /// What it is: a `commit`, or a registry's `version`.
    pub fn noun(&self) -> &'static str {
        match registry::parse_revision(&self.sha) {
            Some(_) => "version",
            None => "commit",
        }
    }
}
