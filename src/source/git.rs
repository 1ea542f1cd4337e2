//! The git source: fetch a ref into the repository's cache, resolve it to a commit and
//! write that commit's tree out once, with git2.
//!
//! Every app of one repository shares one cache, `state_dir/sources/<name>-<hash>/`: a
//! bare repository (`git/`), a lock that serialises fetches across processes (`lock`), and
//! the trees of recent commits (`trees/<sha>/`), each written once and read by every app
//! (kustomize needs a folder). Only the configured ref is fetched. Remote refs that
//! disappeared are pruned, so a deleted branch is an error rather than a stale commit. A
//! cache that cannot be read is removed and cloned again once. URLs are shown with their
//! user-info redacted. The per-app caches of berth before 0.2 (`state_dir/repos/<app>`)
//! are removed on first use.
//!
//! Over 450 lines only with its tests (against real repositories made with the git CLI).
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, ErrorClass, FetchOptions,
    FetchPrune, Oid, RemoteCallbacks, Repository,
};

use super::known_hosts;
use super::CommitInfo;
use crate::config::{AppConfig, GitRef, DEFAULT_KNOWN_HOSTS};

/// Errors of the git source. Every message names the repository with its credentials
/// redacted. Cloneable: every app sharing a fetch gets its error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// Fetching failed (network, authentication, host key).
    #[error("cannot fetch {url}: {message}")]
    Fetch {
        /// The redacted URL.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// A local repository path that does not exist.
    #[error("cannot fetch {}: the path does not exist (check the app's repo)", path.display())]
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
        /// What went wrong.
        message: String,
    },
    /// A credential file could not be read.
    #[error("cannot read {what} {}: {message}", path.display())]
    Credential {
        /// Which credential.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        message: String,
    },
}

/// A fetched commit and its tree.
#[derive(Debug, Clone)]
pub struct Checkout {
    /// The commit's tree, written out (shared by every app of the repository: read only).
    pub dir: PathBuf,
    /// The repository's cache (see [`source_dir`]).
    pub source: PathBuf,
    /// The commit.
    pub commit: CommitInfo,
    /// The annotated tag object the ref named (its id), when it names one.
    pub tag: Option<String>,
}

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
        GitRef::DefaultBranch => Want {
            refspec: "+HEAD:refs/remotes/origin/HEAD".into(),
            remote_ref: Some("HEAD".into()),
            local_ref: "refs/remotes/origin/HEAD".into(),
            what: "the default branch (HEAD)".into(),
        },
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

/// The URL with any user-info (tokens, passwords) replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***@{}", &url[..scheme_end + 3], &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// The cache shared by every app of a repository: `state_dir/sources/<name>-<hash>`, the
/// name being the URL's last segment and the hash the URL's.
pub fn source_dir(state_dir: &Path, repo: &str) -> PathBuf {
    let url = remote_url(repo);
    let name: String = url
        .trim_end_matches('/')
        .trim_end_matches(".git")
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(40)
        .collect();
    let hex = crate::digest::hex(&crate::digest::sha256(url.as_bytes())[..6]);
    state_dir.join("sources").join(format!("{name}-{hex}"))
}

/// Fetches the app's ref into its repository's cache and writes the commit's tree out
/// (once per commit). Fetches of one repository are serialised across processes.
///
/// # Errors
/// Fetch, authentication, host-key, missing-ref and cache errors.
pub fn fetch(app: &AppConfig, state_dir: &Path) -> Result<Checkout, SourceError> {
    if let Some(path) = local_path(&app.repo).filter(|p| !p.exists()) {
        return Err(SourceError::NoSuchPath { path });
    }
    bound_network_waits();
    remove_legacy_cache(state_dir, &app.name);
    let source = source_dir(state_dir, &app.repo);
    let cache = source.join("git");
    let cache_err = |message: String| SourceError::Cache {
        path: source.clone(),
        message,
    };
    crate::state::private_dir(&source).map_err(|e| cache_err(e.to_string()))?;
    let _lock = lock(&source.join("lock")).map_err(|e| cache_err(e.to_string()))?;
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
    let dir = write_tree(&repo, &commit, &trees).map_err(|e| cache_err(e.to_string()))?;
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
fn first_fetch(app: &AppConfig, cache: &Path) -> Depth {
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
enum Depth {
    /// The newest commit of the ref alone (a first fetch).
    Newest,
    /// What the cache lacks down to what it holds (shallow or not).
    AsItIs,
    /// Everything: a shallow cache becomes whole.
    Whole,
}

impl Depth {
    /// libgit2's depth: 1, 0 (no limit), `GIT_FETCH_DEPTH_UNSHALLOW`.
    fn git(self) -> i32 {
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
    let _lock = lock(&source.join("lock")).map_err(|e| SourceError::Cache {
        path: source.clone(),
        message: e.to_string(),
    })?;
    if !Repository::open_bare(&cache).is_ok_and(|r| r.is_shallow()) {
        return Ok(false);
    }
    bound_network_waits();
    fetch_into(app, &cache, Depth::Whole)?;
    Ok(true)
}

/// The tree of commit `sha` from the repository's cache, written out if it is not (a
/// rollback renders the commit the app was last synced to).
pub fn tree_at(state_dir: &Path, repo: &str, sha: &str) -> Option<Checkout> {
    let source = source_dir(state_dir, repo);
    let git = repository(&source).ok()?;
    let commit = git.find_commit(Oid::from_str(sha).ok()?).ok()?;
    let dir = write_tree(&git, &commit, &source.join("trees")).ok()?;
    Some(Checkout {
        dir,
        source,
        commit: commit_info(&commit),
        tag: None,
    })
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

/// An exclusive `flock` on `path`, held until the file is dropped.
fn lock(path: &Path) -> std::io::Result<std::fs::File> {
    let file = crate::state::private_file()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    crate::state::flock(&file, crate::state::Lock::Exclusive)?;
    Ok(file)
}

/// Trees kept whatever their age; older ones go once unused for [`TREE_GRACE`].
const TREES_KEPT: usize = 4;
/// A tree no sync has asked for in this long is removed (unless among the newest).
const TREE_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Writes the commit's tree to `trees/<sha>` unless it is there (then marks it used).
/// Written to a temporary folder first, so no reader sees half a tree.
fn write_tree(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    trees: &Path,
) -> Result<PathBuf, std::io::Error> {
    let dir = trees.join(commit.id().to_string());
    if dir.is_dir() {
        std::fs::File::open(&dir)?.set_modified(std::time::SystemTime::now())?;
        return Ok(dir);
    }
    let tmp = trees.join(format!(".{}.{}", commit.id(), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    // The files in it take the process's umask (see `state::restrict_umask`).
    crate::state::private_dir(&tmp)?;
    let written = repo
        .checkout_tree(
            commit.as_object(),
            Some(
                CheckoutBuilder::new()
                    .force()
                    .update_index(false)
                    .target_dir(&tmp),
            ),
        )
        .map_err(std::io::Error::other)
        .and_then(|()| std::fs::rename(&tmp, &dir));
    match written {
        Ok(()) => Ok(dir),
        Err(e) => {
            // A failed checkout leaves nothing behind; a rename lost to another process
            // that wrote the same tree meanwhile is no failure.
            let _ = std::fs::remove_dir_all(&tmp);
            if dir.is_dir() {
                Ok(dir)
            } else {
                Err(e)
            }
        }
    }
}

/// The written-out trees, oldest use first.
fn trees_by_age(trees: &Path) -> Vec<(std::time::SystemTime, PathBuf)> {
    let mut found: Vec<_> = std::fs::read_dir(trees)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort();
    found
}

/// Removes trees beyond the newest [`TREES_KEPT`] that nobody used for [`TREE_GRACE`], and
/// half-written ones (`.SHA.PID`) that a killed process left for as long.
fn prune_trees(trees: &Path) {
    let abandoned = std::fs::read_dir(trees)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > TREE_GRACE))
        });
    for entry in abandoned {
        let _ = std::fs::remove_dir_all(entry.path());
    }
    let found = trees_by_age(trees);
    let old = found.len().saturating_sub(TREES_KEPT);
    for (used, dir) in &found[..old] {
        if used.elapsed().is_ok_and(|age| age > TREE_GRACE) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Every git network operation gives up when the server does not answer: 30 s to connect,
/// 60 s without a byte read or written (libgit2's server timeouts; set once per process).
fn bound_network_waits() {
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
fn open_cache(cache: &Path, url: &str) -> Result<Repository, git2::Error> {
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
fn classify(e: git2::Error, url: &str, shown: &str, cache: &Path) -> SourceError {
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

/// The bare repository of a cache (see [`source_dir`]).
///
/// # Errors
/// It is not there or not a repository.
pub fn repository(source: &Path) -> Result<Repository, git2::Error> {
    Repository::open_bare(source.join("git"))
}

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

fn commit_info(c: &git2::Commit<'_>) -> CommitInfo {
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

/// Credentials (read now, never logged) and the ssh host-key check.
fn callbacks(app: &AppConfig, url: &str) -> Result<RemoteCallbacks<'static>, SourceError> {
    let auth = app.auth.clone();
    let password = match (&auth.password_file, &auth.password_env) {
        (Some(path), _) => Some(
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .map_err(|e| SourceError::Credential {
                    what: "password file",
                    path: path.clone(),
                    message: e.to_string(),
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
fn ssh_port(url: &str) -> u16 {
    url.strip_prefix("ssh://")
        .and_then(|rest| rest.split('/').next())
        .and_then(|authority| authority.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(22)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_user_info_only() {
        assert_eq!(
            redact_url("https://user:s3cret@git.example.com/a.git"),
            "https://***@git.example.com/a.git"
        );
        assert_eq!(
            redact_url("https://git.example.com/a@b.git"),
            "https://git.example.com/a@b.git"
        );
        assert_eq!(
            redact_url("git@github.com:org/repo.git"),
            "git@github.com:org/repo.git"
        );
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn origin() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        git(d.path(), &["init", "-q", "-b", "main"]);
        std::fs::write(d.path().join("a.yaml"), "v: 1\n").unwrap();
        git(d.path(), &["add", "."]);
        git(d.path(), &["commit", "-qm", "one"]);
        git(d.path(), &["tag", "v1"]);
        std::fs::write(d.path().join("a.yaml"), "v: 2\n").unwrap();
        git(d.path(), &["commit", "-qam", "two"]);
        d
    }

    fn app(repo: &Path, extra: &str) -> AppConfig {
        crate::config::parse(&format!(
            "[[app]]\nname = \"t\"\nrepo = \"{}\"\n{extra}\n",
            repo.display()
        ))
        .unwrap()
        .apps
        .remove(0)
    }

    fn content(c: &Checkout) -> String {
        std::fs::read_to_string(c.dir.join("a.yaml")).unwrap()
    }

    #[test]
    fn an_annotated_tag_is_peeled_to_its_commit() {
        let o = origin();
        git(
            o.path(),
            &["tag", "-a", "v1-annotated", "-m", "release", "v1"],
        );
        let state = tempfile::tempdir().unwrap();
        let tag = fetch(&app(o.path(), "tag = \"v1-annotated\""), state.path()).unwrap();
        assert_eq!(content(&tag), "v: 1\n");
        assert_eq!(tag.commit.sha, git(o.path(), &["rev-parse", "v1"]));
        let object = git(o.path(), &["rev-parse", "v1-annotated"]);
        assert_eq!(tag.tag.as_deref(), Some(object.as_str()));
        let light = fetch(&app(o.path(), "tag = \"v1\""), state.path()).unwrap();
        assert_eq!(light.tag, None, "a lightweight tag names the commit itself");
    }

    #[test]
    fn a_failed_checkout_leaves_no_folder_behind() {
        let o = origin();
        // A commit whose file name no file system takes (over 255 bytes): git stores it,
        // the checkout fails.
        std::fs::write(o.path().join("blob"), "v: 3\n").unwrap();
        let blob = git(o.path(), &["hash-object", "-w", "blob"]);
        let mut mktree = std::process::Command::new("git")
            .arg("mktree")
            .current_dir(o.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let entry = format!("100644 blob {blob}\t{}.yaml\n", "x".repeat(300));
        mktree
            .stdin
            .take()
            .unwrap()
            .write_all(entry.as_bytes())
            .unwrap();
        let out = mktree.wait_with_output().unwrap();
        let tree = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let commit = git(o.path(), &["commit-tree", &tree, "-m", "long name"]);
        git(o.path(), &["update-ref", "refs/heads/long", &commit]);
        let state = tempfile::tempdir().unwrap();
        let e = fetch(&app(o.path(), "branch = \"long\""), state.path()).unwrap_err();
        assert!(e.to_string().contains("name too long"), "{e}");
        let trees = source_dir(state.path(), &o.path().display().to_string()).join("trees");
        let left: Vec<_> = std::fs::read_dir(&trees)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn branch_tag_and_commit_refs() {
        let o = origin();
        let state = tempfile::tempdir().unwrap();
        let head = fetch(&app(o.path(), ""), state.path()).unwrap();
        assert_eq!(
            (content(&head).as_str(), head.commit.subject.as_str()),
            ("v: 2\n", "two")
        );
        let tag = fetch(&app(o.path(), "tag = \"v1\""), state.path()).unwrap();
        assert_eq!(content(&tag), "v: 1\n");
        let first = git(o.path(), &["rev-parse", "v1"]);
        let pinned = fetch(
            &app(o.path(), &format!("commit = \"{first}\"")),
            state.path(),
        )
        .unwrap();
        assert_eq!(pinned.commit.sha, first);
        assert_eq!(pinned.commit.author, "T <t@example.com>");
        let e = fetch(&app(o.path(), "tag = \"v9\""), state.path()).unwrap_err();
        assert!(e.to_string().starts_with("tag v9 not found in"), "{e}");
    }

    #[test]
    fn a_corrupted_cache_is_cloned_again() {
        let o = origin();
        let state = tempfile::tempdir().unwrap();
        let a = app(o.path(), "branch = \"main\"");
        fetch(&a, state.path()).unwrap();
        let git = source_dir(state.path(), &a.repo).join("git");
        std::fs::remove_dir_all(git.join("objects")).unwrap();
        std::fs::create_dir(git.join("objects")).unwrap();
        std::fs::write(git.join("HEAD"), "garbage").unwrap();
        let again = fetch(&a, state.path()).unwrap();
        assert_eq!(content(&again), "v: 2\n");
    }

    #[test]
    fn an_unreachable_remote_is_an_error_naming_it() {
        let state = tempfile::tempdir().unwrap();
        let a = app(Path::new("/nonexistent/repo"), "branch = \"main\"");
        let e = fetch(&a, state.path()).unwrap_err().to_string();
        assert!(e.starts_with("cannot fetch /nonexistent/repo"), "{e}");
    }

    #[test]
    fn url_kinds() {
        assert!(is_scp_like("git@github.com:org/repo.git"));
        assert!(!is_scp_like("/srv/git/repo"));
        assert!(!is_scp_like("./a@b:c/d"));
        assert_eq!(
            local_path("file:///srv/repo"),
            Some(PathBuf::from("/srv/repo"))
        );
        assert_eq!(local_path("https://x/y"), None);
        assert_eq!(ssh_port("ssh://git@host:2222/repo.git"), 2222);
        assert_eq!(ssh_port("git@host:repo.git"), 22);
    }
}
