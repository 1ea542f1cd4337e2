//! The fetch into the repository's cache: only the configured ref is fetched (a first
//! fetch from a remote shallow, [`deepen`] for the rest); remote refs that disappeared are
//! pruned, so a deleted branch is an error rather than a stale commit; a cache that cannot
//! be read is removed and cloned again once; credentials and the ssh host-key check. The
//! per-app caches of berth before 0.2 (`state_dir/repos/<app>`) are removed on first use.
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, ErrorClass, FetchOptions,
    FetchPrune, Oid, RemoteCallbacks, Repository,
};

use super::branch::followed;
use super::commits::commit_info;
use super::trees::{prune_trees, write_tree, TreeError, TreeLimits};
use super::{
    bound_network_waits, local_path, redact_url, remote_url, source_dir, Checkout, SourceError,
};
use crate::config::{AppConfig, GitRef, DEFAULT_KNOWN_HOSTS};
use crate::source::known_hosts;
use crate::state::lock;

/// What to fetch and which local ref then holds the commit.
struct Want {
    refspec: String,
    /// The ref the server must advertise (none for a pinned commit).
    remote_ref: Option<String>,
    local_ref: String,
    what: String,
}

fn want(git_ref: GitRef<'_>) -> Want {
    match git_ref {
        GitRef::Tag(tag) => Want {
            refspec: format!("+refs/tags/{tag}:refs/tags/{tag}"),
            remote_ref: Some(format!("refs/tags/{tag}")),
            local_ref: format!("refs/tags/{tag}"),
            what: format!("tag {tag}"),
        },
        GitRef::Commit(commit) => Want {
            refspec: "+refs/heads/*:refs/remotes/origin/*".into(),
            remote_ref: None,
            local_ref: String::new(),
            what: format!("commit {commit}"),
        },
        GitRef::Branch(branch) => Want {
            refspec: format!("+refs/heads/{branch}:refs/remotes/origin/{branch}"),
            remote_ref: Some(format!("refs/heads/{branch}")),
            local_ref: format!("refs/remotes/origin/{branch}"),
            what: format!("branch {branch}"),
        },
        GitRef::Ref(name) => {
            let local = format!("refs/berth/{}", name.trim_start_matches("refs/"));
            Want {
                refspec: format!("+{name}:{local}"),
                remote_ref: Some(name.to_string()),
                local_ref: local,
                what: format!("ref {name}"),
            }
        }
        GitRef::DefaultBranch => Want {
            refspec: "+HEAD:refs/remotes/origin/HEAD".into(),
            remote_ref: Some("HEAD".into()),
            local_ref: "refs/remotes/origin/HEAD".into(),
            what: "the default branch (HEAD)".into(),
        },
    }
}

/// Fetches the app's ref into its repository's cache and writes the commit's tree out
/// (once per commit, within `limits`). Fetches of one repository are serialised across processes.
///
/// # Errors
/// Fetch, authentication, host-key, missing-ref and cache errors.
pub fn fetch(
    app: &AppConfig,
    state_dir: &Path,
    limits: TreeLimits,
) -> Result<Checkout, SourceError> {
    if let Some(path) = local_path(&app.repo).filter(|p| !p.exists()) {
        return Err(SourceError::NoSuchPath { path });
    }
    bound_network_waits();
    remove_legacy_cache(state_dir, &app.name);
    let source = source_dir(state_dir, &app.repo);
    let followed = followed(app, &source);
    let app = followed.as_ref();
    let cache = source.join("git");
    let cache_err = |message: String| SourceError::Cache {
        path: source.clone(),
        message,
    };
    let cache_dir = SourceError::cache_dir(&source);
    crate::state::private_dir(&source).map_err(cache_dir)?;
    let _lock = lock(&source.join("lock")).map_err(cache_dir)?;
    let depth = first_fetch(app, &cache);
    let (repo, oid) = match fetch_into(app, &cache, depth) {
        Err(SourceError::Cache { .. }) => {
            tracing::warn!(app = %app.name, cache = %cache.display(), "repository cache is unreadable; cloning again");
            let _ = std::fs::remove_dir_all(&cache);
            let depth = first_fetch(app, &cache);
            fetch_into(app, &cache, depth)?
        }
        other => other?,
    };
    // An annotated tag names a tag object: peeled to its commit, its id kept (a signed
    // tag vouches for the commit with `mode = "tag"`).
    let object = repo
        .find_object(oid, None)
        .map_err(|e| cache_err(e.message().to_string()))?;
    let tag = object.as_tag().map(|t| t.id().to_string());
    let commit = object
        .peel_to_commit()
        .map_err(|e| cache_err(e.message().to_string()))?;
    let trees = source.join("trees");
    let dir = write_tree(&repo, &commit, &trees, limits, &app.path).map_err(|e| match e {
        TreeError::Refused(why) => SourceError::Tree {
            commit: commit.id().to_string()[..7].to_string(),
            why,
        },
        TreeError::Io(e) => cache_dir(e),
    })?;
    prune_trees(&trees);
    Ok(Checkout {
        dir,
        source,
        commit: commit_info(&commit),
        tag,
    })
}

/// How a fetch into `cache` begins. A first fetch from a remote takes the newest commit
/// alone, as `git clone --depth 1` does, and history comes when an older commit is needed
/// ([`deepen`]); a pinned commit takes history at once. From a repository on this host
/// (libgit2's local transport cannot fetch shallow, and packs object by object) the cache
/// starts as a copy of its object files, as `git clone` of a path does, then fetches as usual.
pub(super) fn first_fetch(app: &AppConfig, cache: &Path) -> Depth {
    if Repository::open_bare(cache).is_ok() {
        return Depth::AsItIs;
    }
    if local_path(&app.repo).is_some() {
        let copied = git2::build::RepoBuilder::new()
            .bare(true)
            .clone_local(git2::build::CloneLocal::NoLinks)
            .clone(&remote_url(&app.repo), cache);
        if let Err(e) = copied {
            // The fetch below reports what is wrong with the repository, if anything.
            tracing::debug!(app = %app.name, error = %e, "cannot copy the local repository");
            let _ = std::fs::remove_dir_all(cache);
        }
        return Depth::AsItIs;
    }
    match app.git_ref() {
        GitRef::Commit(_) => Depth::AsItIs,
        _ => Depth::Newest,
    }
}

/// How much history a fetch asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Depth {
    /// The newest commit of the ref alone (a first fetch).
    Newest,
    /// What the cache lacks down to what it holds (shallow or not).
    AsItIs,
    /// Everything: a shallow cache becomes whole.
    Whole,
}

impl Depth {
    /// libgit2's depth: 1, 0 (no limit), `GIT_FETCH_DEPTH_UNSHALLOW`.
    pub(super) fn git(self) -> i32 {
        match self {
            Depth::Newest => 1,
            Depth::AsItIs => 0,
            Depth::Whole => i32::MAX,
        }
    }
}

/// Fetches the whole history of the app's repository into a cache whose first fetch took
/// the newest commit alone: telling whether an older commit is an ancestor, or rendering
/// it, needs it. `Ok(false)`: the cache was whole already (or is not there).
///
/// # Errors
/// As [`fetch`].
pub fn deepen(app: &AppConfig, state_dir: &Path) -> Result<bool, SourceError> {
    let source = source_dir(state_dir, &app.repo);
    let cache = source.join("git");
    let _lock = lock(&source.join("lock")).map_err(SourceError::cache_dir(&source))?;
    if !Repository::open_bare(&cache).is_ok_and(|r| r.is_shallow()) {
        return Ok(false);
    }
    bound_network_waits();
    fetch_into(followed(app, &source).as_ref(), &cache, Depth::Whole)?;
    Ok(true)
}

/// Removes the per-app cache of berth before 0.2 (`state_dir/repos/<app>`): the shared one
/// replaces it.
fn remove_legacy_cache(state_dir: &Path, app: &str) {
    let legacy = state_dir.join("repos").join(app);
    if legacy.is_dir() {
        match std::fs::remove_dir_all(&legacy) {
            Ok(()) => {
                tracing::info!(app, cache = %legacy.display(), "removed the per-app repository cache: apps of one repository now share one cache")
            }
            Err(e) => {
                tracing::warn!(app, cache = %legacy.display(), error = %e, "cannot remove the old per-app repository cache")
            }
        }
        let _ = std::fs::remove_dir(state_dir.join("repos")); // only when empty
    }
}

/// Fetches the app's ref into the bare repository `cache`; the repository and the commit.
fn fetch_into(
    app: &AppConfig,
    cache: &Path,
    depth: Depth,
) -> Result<(Repository, Oid), SourceError> {
    let url = remote_url(&app.repo);
    let shown = redact_url(&url);
    let cache_err = |e: git2::Error| SourceError::Cache {
        path: cache.to_path_buf(),
        message: e.message().to_string(),
    };
    let repo = open_cache(cache, &url).map_err(cache_err)?;
    let want = want(app.git_ref());
    let mut remote = repo.find_remote("origin").map_err(cache_err)?;
    let mut options = FetchOptions::new();
    options
        .remote_callbacks(callbacks(app, &url)?)
        .prune(FetchPrune::On)
        .download_tags(AutotagOption::None)
        .depth(depth.git());
    remote
        .fetch(&[want.refspec.as_str()], Some(&mut options), None)
        .map_err(|e| classify(e, &url, &shown, cache))?;
    // The local tracking ref is kept between fetches (it is what lets the fetch send only
    // the new objects), so a branch deleted upstream is caught in the server's ref list.
    if let Some(remote_ref) = &want.remote_ref {
        let advertised = remote
            .list()
            .map_err(cache_err)?
            .iter()
            .any(|h| h.name() == remote_ref);
        if !advertised {
            if let Ok(mut stale) = repo.find_reference(&want.local_ref) {
                stale.delete().map_err(cache_err)?;
            }
            return Err(SourceError::RefNotFound {
                what: want.what,
                url: shown,
            });
        }
    }
    let oid = match app.git_ref() {
        GitRef::Commit(sha) => Oid::from_str(sha)
            .ok()
            .filter(|o| repo.find_commit(*o).is_ok()),
        _ => repo.refname_to_id(&want.local_ref).ok(),
    };
    drop(remote);
    match oid {
        Some(oid) => Ok((repo, oid)),
        // A pinned commit older than a shallow cache's history: fetch the rest.
        None if depth != Depth::Whole && repo.is_shallow() => {
            drop(repo);
            fetch_into(app, cache, Depth::Whole)
        }
        None => Err(SourceError::RefNotFound {
            what: want.what,
            url: shown,
        }),
    }
}

/// Opens the cache, (re)initialising it when missing or when it points elsewhere.
pub(super) fn open_cache(cache: &Path, url: &str) -> Result<Repository, git2::Error> {
    if let Ok(repo) = Repository::open_bare(cache) {
        let same = repo
            .find_remote("origin")
            .ok()
            .and_then(|r| r.url().ok().map(|u| u == url))
            .unwrap_or(false);
        if same && repo.head_detached().is_ok() {
            return Ok(repo);
        }
        drop(repo);
        let _ = std::fs::remove_dir_all(cache);
    }
    let repo = Repository::init_bare(cache)?;
    repo.remote("origin", url)?;
    Ok(repo)
}

/// Errors from a broken cache (objects, index, refs) are retried with a fresh clone; the
/// rest are the remote's — an object missing while every object the cache's refs name is
/// there too: the source lacks it, and a fresh clone would fail the same way.
pub(super) fn classify(e: git2::Error, url: &str, shown: &str, cache: &Path) -> SourceError {
    let message = e.message().replace(url, shown);
    match e.class() {
        ErrorClass::Odb | ErrorClass::Object if cache_is_whole(cache) => SourceError::Fetch {
            url: shown.to_string(),
            message: format!(
                "the repository lacks an object that its history needs ({message}): it is damaged at the source (run git fsck there); berth's cache is intact and was kept"
            ),
        },
        ErrorClass::Odb | ErrorClass::Object | ErrorClass::Index | ErrorClass::Repository
            if !message.contains("could not find repository") =>
        {
            SourceError::Cache {
                path: cache.to_path_buf(),
                message,
            }
        }
        _ => SourceError::Fetch {
            url: shown.to_string(),
            message,
        },
    }
}

/// Whether the cache opens and holds every commit its refs name, with its tree.
fn cache_is_whole(cache: &Path) -> bool {
    let Ok(repo) = Repository::open_bare(cache) else {
        return false;
    };
    let Ok(refs) = repo.references() else {
        return false;
    };
    let whole = refs
        .flatten()
        .filter_map(|r| r.target())
        .all(|oid| repo.find_commit(oid).is_ok_and(|c| c.tree().is_ok()));
    whole
}

/// Credentials (read now, never logged) and the ssh host-key check.
pub(super) fn callbacks(
    app: &AppConfig,
    url: &str,
) -> Result<RemoteCallbacks<'static>, SourceError> {
    let auth = app.auth.clone();
    let password = match (&auth.password_file, &auth.password_env) {
        (Some(path), _) => Some(
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .map_err(|e| SourceError::Credential {
                    what: "password file",
                    path: path.clone(),
                    source: Arc::new(e),
                })?,
        ),
        (None, Some(var)) => std::env::var(var).ok(),
        (None, None) => None,
    };
    let known_hosts_path = auth
        .known_hosts
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_KNOWN_HOSTS));
    let port = ssh_port(url);
    let mut attempts = 0;
    let mut cb = RemoteCallbacks::new();
    cb.credentials(move |_url, user_from_url, allowed| {
        attempts += 1;
        if attempts > 2 {
            return Err(git2::Error::from_str(
                "authentication failed: check [app.auth] of this app",
            ));
        }
        let user = auth.username.as_deref().or(user_from_url);
        if allowed.contains(CredentialType::SSH_KEY) {
            if let Some(key) = &auth.ssh_key_file {
                return Cred::ssh_key(user.unwrap_or("git"), None, key, None);
            }
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            if let Some(secret) = &password {
                return Cred::userpass_plaintext(user.unwrap_or("x-access-token"), secret);
            }
        }
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user.unwrap_or("git"));
        }
        Err(git2::Error::from_str(
            "the repository wants credentials and none are configured: set [app.auth]",
        ))
    });
    cb.certificate_check(move |cert, host| {
        let Some(hostkey) = cert.as_hostkey() else {
            return Ok(CertificateCheckStatus::CertificatePassthrough); // TLS: libgit2 verifies
        };
        let (Some(key), Some(kind)) = (hostkey.hostkey(), hostkey.hostkey_type()) else {
            return Err(git2::Error::from_str(
                &known_hosts::HostKeyError::NoKey { host: host.into() }.to_string(),
            ));
        };
        let text = std::fs::read_to_string(&known_hosts_path).unwrap_or_default();
        let file = known_hosts_path.display().to_string();
        known_hosts::verify(&text, &file, host, port, kind.name(), key)
            .map(|()| CertificateCheckStatus::CertificateOk)
            .map_err(|e| git2::Error::from_str(&e.to_string()))
    });
    Ok(cb)
}

/// The port of an `ssh://host:port/…` URL; 22 otherwise.
pub(super) fn ssh_port(url: &str) -> u16 {
    url.strip_prefix("ssh://")
        .and_then(|rest| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(22)
}
