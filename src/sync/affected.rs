//! `berth plan --all-affected`: whether a revision changes anything an app's render
//! reads, against what the app's last good sync on this host read (`inputs.rs`): an app
//! the revision does not touch costs the fetch of the revision (shared by the apps of a
//! repository) and no request to the cluster.

use std::time::Instant;

use super::syncer::Syncer;
use crate::config::AppConfig;

impl Syncer {
    /// A note when `at` (the app at the revision to plan) changes none of the paths
    /// `app`'s last good sync read: it need not be planned. `None` when it must be: the
    /// revision changes one of them, the app's last inputs are not known on this host (no
    /// sync here yet, several hosts, another configuration), it reaches remote bases, or
    /// the revision cannot be fetched (its plan says why).
    pub async fn untouched_by(&self, app: &AppConfig, at: &AppConfig) -> Option<String> {
        if app.allow_remote_bases {
            return None;
        }
        let last = self.inputs.get(app)?;
        let checkout = self.sources.fetch(at, Instant::now()).await.ok()?;
        let digest = crate::source::paths_digest(&checkout, &last.paths)?;
        if digest != last.digest {
            return None;
        }
        let unchanged = super::steps::skip::unchanged_under(&checkout, &last.paths);
        Some(format!("not affected: {unchanged}"))
    }
}
