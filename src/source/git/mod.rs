//! The git source: fetch a ref into the repository's cache, resolve it to a commit and
//! write that commit's tree out once, with git2.
//!
//! Every app of one repository shares one cache, `state_dir/sources/<name>-<hash>/`: a
//! bare repository (`git/`), a lock that serialises fetches across processes (`lock`), and
//! the trees of recent commits (`trees/<sha>/`), each written once and read by every app
//! (kustomize needs a folder). URLs are shown with their user-info redacted.
//!
//! `fetch.rs` fills the cache, `trees.rs` writes commits out and removes the unused ones,
//! `commits.rs` answers questions about commits (ancestry, what paths hold); this module
//! names the cache, its URLs and its errors.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::Repository;

pub use super::cache::Checkout;

mod branch;
mod commits;
mod fetch;
mod paths;
mod push;
mod refs;
#[cfg(test)]
mod tests;
mod trees;

pub use branch::{default_branch, followed_branch};
pub use commits::{ancestry, branches_holding, local_tip, paths_digest, tree_ids};
pub use fetch::{deepen, fetch};
pub use push::{write_commit, Pushed, Writable, Written};
pub use refs::matching_refs;
pub use trees::{tree_at, TreeLimits};

/// Every git network operation gives up when the server does not answer: 30 s to connect,
/// 60 s without a byte read or written (libgit2's server timeouts; set once per process).
pub(super) fn bound_network_waits() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: libgit2 global options, set once before this process's first fetch
        // (call_once keeps any other thread from fetching meanwhile through this path).
        let set = unsafe {
            git2::opts::set_server_connect_timeout_in_milliseconds(30_000)
                .and_then(|()| git2::opts::set_server_timeout_in_milliseconds(60_000))
        };
        if let Err(e) = set {
            tracing::warn!(error = %e, "cannot bound git's network waits");
        }
    });
}

/// Errors of the git source. Every message names the repository with its credentials
/// redacted. Cloneable: every app sharing a fetch gets its error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// Fetching failed (network, authentication, host key).
    #[error("cannot fetch {url}: {message}")]
    Fetch {
        /// The redacted URL.
        url: String,
        /// What went wrong: git's message with the URL redacted in it (text, not git's
        /// error: that would carry the credentials).
        message: String,
    },
    /// The commit's tree is past a bound of what is written out (nothing was written).
    #[error("commit {commit}: {why}")]
    Tree {
        /// The commit, short.
        commit: String,
        /// Which bound, or which entry.
        why: String,
    },
    /// A local repository path that does not exist (or that the service cannot see).
    #[error("cannot fetch {}: the path does not exist (check the app's repo){}", path.display(), hidden_by_unit(path))]
    NoSuchPath {
        /// The absolute path.
        path: PathBuf,
    },
    /// The ref does not exist on the remote (any more).
    #[error("{what} not found in {url} (deleted, or never pushed?)")]
    RefNotFound {
        /// `branch main`, `tag v1`, `commit 0123…`.
        what: String,
        /// The redacted URL.
        url: String,
    },
    /// The local cache could not be used, even after a fresh clone.
    #[error("repository cache {}: {message}", path.display())]
    Cache {
        /// The cache folder.
        path: PathBuf,
        /// What git said (the remote's URL redacted in it).
        message: String,
    },
    /// The local cache's folder, its lock or a commit's tree could not be written.
    #[error("repository cache {} cannot be written", path.display())]
    CacheDir {
        /// The cache folder.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A push was refused (other than because the branch moved).
    #[error("cannot push to branch {branch} of {url}: {message}")]
    Push {
        /// The redacted URL.
        url: String,
        branch: String,
        /// What git or the remote said (the URL redacted in it).
        message: String,
    },
    /// A commit could not be signed (the key's error, as it says it).
    #[error("{0}")]
    Sign(String),
    /// A chart's or an artifact's registry.
    #[error(transparent)]
    Registry(#[from] crate::source::registry::RegistryError),
    /// A credential file could not be read.
    #[error("cannot read {what} {}", path.display())]
    Credential {
        /// Which credential.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: Arc<std::io::Error>,
    },
}

impl SourceError {
    /// A [`SourceError::CacheDir`] of the cache at `path`.
    pub fn cache_dir(path: &Path) -> impl Fn(std::io::Error) -> Self + Copy + '_ {
        |e| SourceError::CacheDir {
            path: path.to_path_buf(),
            source: Arc::new(e),
        }
    }
}

/// The URL git2 is given: local paths made absolute, the rest as configured.
pub fn remote_url(repo: &str) -> String {
    if repo.contains("://") || is_scp_like(repo) {
        return repo.to_string();
    }
    std::path::absolute(repo)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| repo.to_string())
}

/// Under systemd, a path the shipped unit hides: its hint.
fn hidden_by_unit(path: &std::path::Path) -> &'static str {
    let hidden = ["/home", "/root", "/run/user", "/tmp", "/var/tmp"];
    let under_systemd = std::env::var_os("INVOCATION_ID").is_some();
    if under_systemd && hidden.iter().any(|h| path.starts_with(h)) {
        "; the shipped unit hides /home, /root and /run/user (ProtectHome=yes) and gives the service a /tmp of its own (PrivateTmp=yes): keep the repository elsewhere, such as /srv/git, readable by the service's user"
    } else {
        ""
    }
}

/// Lets berth read local repositories that another user owns (a shared `/srv/git`, a
/// deploy user's checkout). git refuses such a repository ("dubious ownership") because
/// git itself would run what its config names (hooks, `core.fsmonitor`, filters); berth
/// runs nothing of a repository: libgit2 reads its refs and objects, and berth writes the
/// trees itself. Its own caches in `state_dir` are checked by [`crate::state`] instead.
/// Call it before any thread starts: the setting is process-wide.
pub fn read_repositories_of_other_users() {
    // SAFETY: called once at start, before any thread that could use libgit2.
    if let Err(e) = unsafe { git2::opts::set_verify_owner_validation(false) } {
        tracing::warn!(error = %e, "cannot let libgit2 read repositories of other users");
    }
}

/// The local folder of a `file://` URL or a path, when the repository is local.
pub fn local_path(repo: &str) -> Option<PathBuf> {
    if let Some(path) = repo.strip_prefix("file://") {
        return Some(PathBuf::from(path));
    }
    (!repo.contains("://") && !is_scp_like(repo)).then(|| PathBuf::from(remote_url(repo)))
}

fn is_scp_like(repo: &str) -> bool {
    // user@host:path, as git understands it; a local path has no '@' before a ':'.
    match (repo.find('@'), repo.find(':')) {
        (Some(at), Some(colon)) => at < colon && !repo[..colon].contains('/'),
        _ => false,
    }
}

/// The URL with its user-info (a token, a password) replaced by `***`, and each query
/// value (`?token=…`, `?access_token=…`) too; a URL with neither, an scp-like address or
/// a path, is shown as written.
pub fn redact_url(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        return url.to_string();
    };
    let user_info = !parsed.username().is_empty() || parsed.password().is_some();
    if !user_info && parsed.query().is_none() {
        return url.to_string();
    }
    if parsed.query().is_some() {
        let keys: Vec<String> = parsed.query_pairs().map(|(k, _)| k.into_owned()).collect();
        parsed
            .query_pairs_mut()
            .clear()
            .extend_pairs(keys.iter().map(|k| (k, "***")));
    }
    if user_info {
        let _ = parsed.set_password(None);
        let _ = parsed.set_username("***");
    }
    parsed.to_string()
}

/// The cache shared by every app of a repository: `state_dir/sources/<name>-<hash>`, the
/// name being the URL's last segment and the hash the URL's.
pub fn source_dir(state_dir: &Path, repo: &str) -> PathBuf {
    super::cache::source_dir(state_dir, &remote_url(repo))
}

/// The bare repository of a cache (see [`source_dir`]).
///
/// # Errors
/// It is not there or not a repository.
pub fn repository(source: &Path) -> Result<Repository, git2::Error> {
    Repository::open_bare(source.join("git"))
}
