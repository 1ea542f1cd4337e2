//! The git source: fetch an app's ref into `state_dir/repos/<app>`, resolve it to a commit
//! and check that commit out (detached), with git2.
//!
//! Only the configured ref is fetched. Remote refs that disappeared are pruned, so a
//! deleted branch is an error rather than a stale commit. A cache that cannot be read is
//! removed and cloned again once. URLs are shown with their user-info redacted.
//!
//! Over 450 lines only with its tests (about 120 lines, against real repositories made
//! with the git CLI); the code is about 420.

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
/// redacted.
#[derive(Debug, thiserror::Error)]
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
    #[error("cannot read {what} {}: {source}", path.display())]
    Credential {
        /// Which credential.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// A checked-out commit.
#[derive(Debug, Clone)]
pub struct Checkout {
    /// The working tree.
    pub dir: PathBuf,
    /// The commit.
    pub commit: CommitInfo,
    /// Set when `previous` is not an ancestor of this commit (history was rewritten).
    pub history_rewritten: Option<String>,
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

/// The app's repository cache (a git repository, its commit checked out):
/// `state_dir/repos/<app>`.
pub fn cache_dir(state_dir: &Path, app: &str) -> PathBuf {
    state_dir.join("repos").join(app)
}

/// Fetches the app's ref and checks out its commit; `previous` is the commit of the last
/// successful sync, checked for ancestry.
///
/// # Errors
/// Fetch, authentication, host-key, missing-ref and cache errors.
pub fn fetch_and_checkout(
    app: &AppConfig,
    state_dir: &Path,
    previous: Option<&str>,
) -> Result<Checkout, SourceError> {
    if let Some(path) = local_path(&app.repo).filter(|p| !p.exists()) {
        return Err(SourceError::NoSuchPath { path });
    }
    bound_network_waits();
    let cache = cache_dir(state_dir, &app.name);
    match fetch_into(app, &cache, previous) {
        Err(SourceError::Cache { .. }) => {
            tracing::warn!(app = %app.name, cache = %cache.display(), "repository cache is unreadable; cloning again");
            let _ = std::fs::remove_dir_all(&cache);
            fetch_into(app, &cache, previous)
        }
        other => other,
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

fn fetch_into(
    app: &AppConfig,
    cache: &Path,
    previous: Option<&str>,
) -> Result<Checkout, SourceError> {
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
        .download_tags(AutotagOption::None);
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
    let Some(oid) = oid else {
        return Err(SourceError::RefNotFound {
            what: want.what,
            url: shown,
        });
    };
    let commit = repo.find_commit(oid).map_err(cache_err)?;
    repo.checkout_tree(
        commit.as_object(),
        Some(
            CheckoutBuilder::new()
                .force()
                .remove_untracked(true)
                .remove_ignored(true),
        ),
    )
    .map_err(cache_err)?;
    repo.set_head_detached(oid).map_err(cache_err)?;
    let history_rewritten = previous.and_then(|p| ancestry(&repo, p, oid));
    Ok(Checkout {
        dir: cache.to_path_buf(),
        commit: commit_info(&commit),
        history_rewritten,
    })
}

/// Opens the cache, (re)initialising it when missing or when it points elsewhere.
fn open_cache(cache: &Path, url: &str) -> Result<Repository, git2::Error> {
    if let Ok(repo) = Repository::open(cache) {
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
    let repo = Repository::init(cache)?;
    repo.remote("origin", url)?;
    Ok(repo)
}

/// Errors from a broken cache (objects, index, refs) are retried with a fresh clone; the
/// rest are the remote's.
fn classify(e: git2::Error, url: &str, shown: &str, cache: &Path) -> SourceError {
    let message = e.message().replace(url, shown);
    match e.class() {
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

fn ancestry(repo: &Repository, previous: &str, new: Oid) -> Option<String> {
    let prev = Oid::from_str(previous).ok()?;
    let short = |o: Oid| o.to_string()[..7].to_string();
    if prev == new {
        return None;
    }
    match repo.find_commit(prev) {
        Ok(_) if repo.graph_descendant_of(new, prev).unwrap_or(false) => None,
        Ok(_) => Some(format!(
            "previous commit {} is not an ancestor of {}: history was rewritten (force-push)",
            short(prev),
            short(new)
        )),
        Err(_) => Some(format!(
            "previous commit {} is no longer in the repository: history was rewritten (force-push)",
            short(prev)
        )),
    }
}

/// The metadata of commit `sha` in a local repository, when it is there.
pub fn commit_at(repo: &Path, sha: &str) -> Option<CommitInfo> {
    let repo = Repository::open(repo).ok()?;
    let commit = repo.find_commit(Oid::from_str(sha).ok()?).ok()?;
    Some(commit_info(&commit))
}

/// A placeholder for a commit whose metadata is not known.
pub fn unknown_commit() -> CommitInfo {
    CommitInfo {
        sha: String::new(),
        author: String::new(),
        time: jiff::Timestamp::UNIX_EPOCH,
        subject: String::new(),
    }
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
                .map_err(|source| SourceError::Credential {
                    what: "password file",
                    path: path.clone(),
                    source,
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
    fn branch_tag_and_commit_refs() {
        let o = origin();
        let state = tempfile::tempdir().unwrap();
        let head = fetch_and_checkout(&app(o.path(), ""), state.path(), None).unwrap();
        assert_eq!(
            (content(&head).as_str(), head.commit.subject.as_str()),
            ("v: 2\n", "two")
        );
        let tag = fetch_and_checkout(&app(o.path(), "tag = \"v1\""), state.path(), None).unwrap();
        assert_eq!(content(&tag), "v: 1\n");
        let first = git(o.path(), &["rev-parse", "v1"]);
        let pinned = fetch_and_checkout(
            &app(o.path(), &format!("commit = \"{first}\"")),
            state.path(),
            None,
        )
        .unwrap();
        assert_eq!(pinned.commit.sha, first);
        assert_eq!(pinned.commit.author, "T <t@example.com>");
        let e = fetch_and_checkout(&app(o.path(), "tag = \"v9\""), state.path(), None).unwrap_err();
        assert!(e.to_string().starts_with("tag v9 not found in"), "{e}");
    }

    #[test]
    fn a_corrupted_cache_is_cloned_again() {
        let o = origin();
        let state = tempfile::tempdir().unwrap();
        let a = app(o.path(), "branch = \"main\"");
        fetch_and_checkout(&a, state.path(), None).unwrap();
        let objects = state.path().join("repos/t/.git/objects");
        std::fs::remove_dir_all(&objects).unwrap();
        std::fs::create_dir(&objects).unwrap();
        std::fs::write(state.path().join("repos/t/.git/HEAD"), "garbage").unwrap();
        let again = fetch_and_checkout(&a, state.path(), None).unwrap();
        assert_eq!(content(&again), "v: 2\n");
    }

    #[test]
    fn an_unreachable_remote_is_an_error_naming_it() {
        let state = tempfile::tempdir().unwrap();
        let a = app(Path::new("/nonexistent/repo"), "branch = \"main\"");
        let e = fetch_and_checkout(&a, state.path(), None)
            .unwrap_err()
            .to_string();
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
