//! [`Sources`]: the agent's fetches, shared. Apps of one repository and ref ask for the
//! commit together (a push triggers all of them): the first asks git, the others wait for
//! its answer — one fetch and one written-out tree per push, not one per app.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::git::{self, Checkout, SourceError};
use super::registry::{self, archive::ArchiveLimits};
use crate::config::{AgentConfig, AppConfig, SourceRef};

/// A sync started by its interval takes a fetch started this long before it asked, so
/// apps whose intervals fall close together share one fetch too.
pub const INTERVAL_SHARE: Duration = Duration::from_secs(5);

/// The last fetch of one repository, ref and credentials.
type Last = Option<(Instant, Result<Checkout, SourceError>)>;

/// The agent's fetches, by repository, ref and credentials.
pub struct Sources {
    state_dir: PathBuf,
    limits: git::TreeLimits,
    archives: ArchiveLimits,
    last: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Last>>>>,
    /// Each registry source's session, by the same key: its client and its verified
    /// signatures kept between fetches (one that could not reach its registry is made
    /// again, its CA file read again).
    sessions: Mutex<HashMap<String, Arc<registry::Session>>>,
}

impl Sources {
    /// No fetch yet; caches under the agent's `state_dir`, commits and archives written
    /// out within its bounds.
    pub fn of(agent: &AgentConfig) -> Self {
        Sources {
            state_dir: agent.state_dir.clone(),
            limits: git::TreeLimits::of(agent),
            archives: ArchiveLimits::of(agent),
            last: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Fetches the history a shallow cache lacks (its first fetch took the newest commit
    /// alone), for a step that needs an older commit; whether it did. A failure is
    /// logged: the caller goes on with what it has.
    pub async fn deepen(&self, app: &AppConfig) -> bool {
        if !matches!(app.source(), SourceRef::Git(_)) {
            return false;
        }
        let (owned, state_dir) = (app.clone(), self.state_dir.clone());
        let deepened = tokio::task::spawn_blocking(move || git::deepen(&owned, &state_dir)).await;
        match deepened {
            Ok(Ok(deepened)) => deepened,
            Ok(Err(e)) => {
                tracing::warn!(app = %app.name, error = %crate::Chain(&e), "cannot fetch the repository's history");
                false
            }
            Err(_) => false,
        }
    }

    /// The app's commit, from a fetch started at `since` or later: one already done or
    /// under way is shared, else this call fetches.
    ///
    /// # Errors
    /// The fetch's [`SourceError`] (shared as well).
    pub async fn fetch(&self, app: &AppConfig, since: Instant) -> Result<Checkout, SourceError> {
        let key = match app.source() {
            SourceRef::Git(repo) => format!(
                "{}\n{:?}\n{:?}",
                git::remote_url(repo),
                app.git_ref(),
                app.auth
            ),
            _ => format!(
                "{:?}\n{:?}\n{:?}",
                app.source(),
                app.registry,
                app.verify.cosign_keys
            ),
        };
        let slot = self
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        let mut last = slot.lock().await;
        if let Some((started, result)) = last.as_ref() {
            if *started >= since {
                return result.clone();
            }
        }
        let started = Instant::now();
        let result = match app.source() {
            SourceRef::Git(_) => self.fetch_git(app).await,
            _ => self.fetch_registry(app, &key).await,
        };
        *last = Some((started, result.clone()));
        result
    }

    async fn fetch_registry(&self, app: &AppConfig, key: &str) -> Result<Checkout, SourceError> {
        let sessions = || self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        let held = sessions().get(key).cloned();
        let session = match held {
            Some(session) => session,
            None => {
                let session = Arc::new(registry::Session::new(&app.registry)?);
                sessions().insert(key.to_string(), session.clone());
                session
            }
        };
        let wanted = registry::Wanted::of(app);
        let fetched = registry::fetch(&session, wanted, &self.state_dir, self.archives).await;
        if let Err(registry::RegistryError::Unreachable { .. }) = &fetched {
            sessions().remove(key);
        }
        Ok(fetched?)
    }

    async fn fetch_git(&self, app: &AppConfig) -> Result<Checkout, SourceError> {
        let (app, state_dir) = (app.clone(), self.state_dir.clone());
        let limits = self.limits;
        // The fetch and the tree it writes out (a commit's files) are a batch job.
        let fetch = move || git::fetch(&app, &state_dir, limits);
        crate::blocking::in_background("berth-fetch", fetch).await
    }
}
