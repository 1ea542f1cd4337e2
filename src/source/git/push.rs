//! Writing to a repository: its branches fetched into the cache, a commit made there from
//! a parent and changed files, and pushed — with a lease: the push goes through only
//! while the branch is where berth last saw it, so a branch that moved is never
//! overwritten. Credentials and the host-key check are the fetch's.
use std::path::Path;

use git2::{build::TreeUpdateBuilder, FetchOptions, Oid, PushOptions, Repository};

use super::fetch::{callbacks, classify, first_fetch, open_cache, Depth};
use super::{bound_network_waits, redact_url, remote_url, source_dir, SourceError};
use crate::config::AppConfig;
use crate::source::sign::{SignError, Signer};
use crate::state::lock;

/// The repository's cache, open and locked against fetches (the lock is held until this
/// is dropped).
pub struct Writable {
    pub repo: Repository,
    app: AppConfig,
    url: String,
    _lock: std::fs::File,
}

/// Where a push stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// The branch now names the commit.
    Done,
    /// The branch is no longer where the lease said (someone pushed meanwhile): nothing
    /// was written; fetch, and try again on its new head.
    Moved,
}

impl Writable {
    /// The cache of `app`'s repository, opened (made, if no fetch made it yet) and locked.
    ///
    /// # Errors
    /// The cache cannot be made, opened or locked.
    pub fn open(app: &AppConfig, state_dir: &Path) -> Result<Writable, SourceError> {
        let source = source_dir(state_dir, &app.repo);
        let cache_dir = SourceError::cache_dir(&source);
        crate::state::private_dir(&source).map_err(cache_dir)?;
        let lock = lock(&source.join("lock")).map_err(cache_dir)?;
        let cache = source.join("git");
        let url = remote_url(&app.repo);
        first_fetch(app, &cache);
        let repo = open_cache(&cache, &url).map_err(|e| SourceError::Cache {
            path: cache.clone(),
            message: e.message().to_string(),
        })?;
        Ok(Writable {
            repo,
            app: app.clone(),
            url,
            _lock: lock,
        })
    }

    /// Fetches `branches`, and the rest of the history when the cache is shallow (libgit2
    /// pushes from a whole repository only); each one's head, or `None` for a branch the
    /// remote does not have.
    ///
    /// # Errors
    /// As a fetch's.
    pub fn fetch(&self, branches: &[&str]) -> Result<Vec<Option<Oid>>, SourceError> {
        bound_network_waits();
        let shown = redact_url(&self.url);
        let mut remote = self.repo.find_remote("origin").map_err(|e| self.cache(e))?;
        let refspecs: Vec<String> = (branches.iter())
            .map(|b| format!("+refs/heads/{b}:refs/remotes/origin/{b}"))
            .collect();
        let mut options = FetchOptions::new();
        let depth = if self.repo.is_shallow() {
            Depth::Whole
        } else {
            Depth::AsItIs
        };
        options
            .remote_callbacks(callbacks(&self.app, &self.url)?)
            .download_tags(git2::AutotagOption::None)
            .depth(depth.git());
        remote
            .fetch(&refspecs, Some(&mut options), None)
            .map_err(|e| classify(e, &self.url, &shown, self.repo.path()))?;
        let advertised: Vec<String> = (remote.list().map_err(|e| self.cache(e))?.iter())
            .map(|h| h.name().to_string())
            .collect();
        Ok(branches
            .iter()
            .map(|b| {
                let named = advertised.contains(&format!("refs/heads/{b}"));
                named.then(|| {
                    self.repo
                        .refname_to_id(&format!("refs/remotes/origin/{b}"))
                        .ok()
                })?
            })
            .collect())
    }

    /// A commit on `parent` whose tree is `parent`'s with `files` (path, content) written,
    /// each keeping its mode; signed by `signer` when given.
    ///
    /// # Errors
    /// The objects cannot be read or written, or the key cannot sign.
    pub fn commit(
        &self,
        parent: Oid,
        files: &[(&str, &str)],
        author: &git2::Signature<'_>,
        message: &str,
        signer: Option<&Signer>,
    ) -> Result<Oid, SourceError> {
        let cache = |e: git2::Error| self.cache(e);
        let parent = self.repo.find_commit(parent).map_err(cache)?;
        let base = parent.tree().map_err(cache)?;
        let mut update = TreeUpdateBuilder::new();
        for (path, text) in files {
            let mode = base
                .get_path(Path::new(*path))
                .map_or(git2::FileMode::Blob.into(), |e| e.filemode());
            let blob = self.repo.blob(text.as_bytes()).map_err(cache)?;
            update.upsert(*path, blob, file_mode(mode));
        }
        let tree = update.create_updated(&self.repo, &base).map_err(cache)?;
        let tree = self.repo.find_tree(tree).map_err(cache)?;
        write_commit(&self.repo, author, author, message, &tree, &parent, signer).map_err(|e| {
            match e {
                Written::Git(e) => cache(e),
                Written::Sign(e) => SourceError::Sign(e.to_string()),
            }
        })
    }

    /// Pushes `commit` to `branch`, while the branch is at `lease` (`None`: while it does
    /// not exist); `force` lets the commit not descend from it (never the followed branch's
    /// choice).
    ///
    /// # Errors
    /// The push is refused (other than by the lease), or the remote cannot be reached.
    pub fn push(
        &self,
        commit: Oid,
        branch: &str,
        lease: Option<Oid>,
        force: bool,
    ) -> Result<Pushed, SourceError> {
        bound_network_waits();
        let shown = redact_url(&self.url);
        let refused = |message: String| SourceError::Push {
            url: shown.clone(),
            branch: branch.to_string(),
            message: message.replace(&self.url, &shown),
        };
        let local = format!("refs/berth/push/{branch}");
        let target = format!("refs/heads/{branch}");
        (self
            .repo
            .reference(&local, commit, true, "berth: a commit to push"))
        .map_err(|e| self.cache(e))?;
        let mut remote = self.repo.find_remote("origin").map_err(|e| self.cache(e))?;
        let moved = std::cell::Cell::new(false);
        let rejected = std::cell::RefCell::new(None);
        let callbacks = self.leased(&target, lease, &moved, &rejected)?;
        let mut options = PushOptions::new();
        options.remote_callbacks(callbacks);
        let plus = if force { "+" } else { "" };
        let pushed = remote.push(&[format!("{plus}{local}:{target}")], Some(&mut options));
        drop(options);
        let _ = self
            .repo
            .find_reference(&local)
            .and_then(|mut r| r.delete());
        if moved.get() {
            return Ok(Pushed::Moved);
        }
        match pushed {
            Err(e) if e.code() == git2::ErrorCode::NotFastForward => return Ok(Pushed::Moved),
            Err(e) => return Err(refused(e.message().to_string())),
            Ok(()) => {}
        }
        if let Some(why) = rejected.into_inner() {
            return Err(refused(why));
        }
        let tracking = format!("refs/remotes/origin/{branch}");
        (self
            .repo
            .reference(&tracking, commit, true, "berth: pushed"))
        .map_err(|e| self.cache(e))?;
        Ok(Pushed::Done)
    }

    /// The push's callbacks: credentials, and the lease — the remote's branch must be where
    /// berth built on (else `moved`); what the remote says of the update goes in `rejected`.
    fn leased<'c>(
        &self,
        target: &'c str,
        lease: Option<Oid>,
        moved: &'c std::cell::Cell<bool>,
        rejected: &'c std::cell::RefCell<Option<String>>,
    ) -> Result<git2::RemoteCallbacks<'c>, SourceError> {
        let mut callbacks = callbacks(&self.app, &self.url)?;
        callbacks.push_negotiation(move |updates| {
            let expected = lease.unwrap_or(Oid::ZERO_SHA1);
            let at = |u: &git2::PushUpdate<'_>| u.dst_refname() == Ok(target);
            if updates.iter().any(|u| at(u) && u.src() != expected) {
                moved.set(true);
                return Err(git2::Error::from_str("the branch moved"));
            }
            Ok(())
        });
        callbacks.push_update_reference(move |_, status| {
            *rejected.borrow_mut() = status.map(str::to_string);
            Ok(())
        });
        Ok(callbacks)
    }

    /// `e`, a failure of the cache.
    pub fn cache(&self, e: git2::Error) -> SourceError {
        SourceError::Cache {
            path: self.repo.path().to_path_buf(),
            message: e.message().to_string(),
        }
    }
}

/// Why [`write_commit`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum Written {
    #[error(transparent)]
    Git(#[from] git2::Error),
    #[error(transparent)]
    Sign(#[from] SignError),
}

/// Writes the commit of `tree` on `parent`, signed by `signer` when given.
///
/// # Errors
/// The object cannot be written, or the key cannot sign.
pub fn write_commit(
    repo: &Repository,
    author: &git2::Signature<'_>,
    committer: &git2::Signature<'_>,
    message: &str,
    tree: &git2::Tree<'_>,
    parent: &git2::Commit<'_>,
    signer: Option<&Signer>,
) -> Result<Oid, Written> {
    let buffer = repo.commit_create_buffer(author, committer, message, tree, &[parent])?;
    Ok(match signer {
        Some(signer) => {
            let text = String::from_utf8_lossy(&buffer);
            repo.commit_signed(&text, &signer.sign(&buffer)?, None)?
        }
        None => repo.odb()?.write(git2::ObjectType::Commit, &buffer)?,
    })
}

/// A tree entry's mode as the builder takes it (a file's own, or a plain file).
fn file_mode(mode: i32) -> git2::FileMode {
    match mode {
        0o100755 => git2::FileMode::BlobExecutable,
        0o120000 => git2::FileMode::Link,
        _ => git2::FileMode::Blob,
    }
}
