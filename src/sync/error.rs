//! What can go wrong in a sync. Every variant carries its context (the file, the object,
//! the app); [`SyncError::origin`] is the file a history record's error points at.
//!
//! A sync error is said whole — its message and its sources', [`crate::Chain`] — where
//! the history records it, the journal logs it and `berth history show` prints it. A
//! cause in a variant's `cause` field is part of the variant's message (through `Chain`
//! when it has sources of its own), never also its `source()`, so `{e:#}` prints it once;
//! the variants that wrap another module's error whole are `transparent` and pass its
//! sources on.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::ClusterError;
use crate::manifest::{ManifestError, ObjectKey, Origin};
use crate::plan::{Taken, UnknownKind};
use crate::rollout::engine::EngineError;
use crate::source::git::SourceError;
use crate::source::verify::VerifyError;

/// An error of one sync step, as recorded in the history.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The repository could not be fetched or checked out.
    #[error("{}; the cluster keeps its last applied state", crate::Chain(cause))]
    Fetch {
        /// Why.
        cause: SourceError,
    },
    /// The commit is not signed by a trusted key (`[app.verify]`).
    #[error(
        "{}; nothing was rendered or written, the cluster keeps its last applied commit",
        crate::Chain(cause)
    )]
    Verify {
        /// Why.
        cause: VerifyError,
    },
    /// An app's include/exclude glob does not compile.
    #[error("invalid glob in app {app}: {cause}")]
    Glob {
        /// The app.
        app: String,
        /// The glob's error.
        cause: globset::Error,
    },
    /// The commit does not render: its file, document and object are in the message.
    #[error(transparent)]
    Render(#[from] ManifestError),
    /// An object of a kind the cluster does not serve.
    #[error(transparent)]
    UnknownKind(#[from] UnknownKind),
    /// An object another app owns.
    #[error(transparent)]
    Taken(#[from] Taken),
    /// A request to the cluster failed, or the cluster refused an object.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The branch or tag moved to a commit that does not descend from the last applied one;
    /// a registry source to an older version than the last applied.
    #[error("{note}: refusing to apply it ({why}); nothing was written. If this is meant, run `berth sync --accept-rewind {app}` once, or set allow_rewind = true")]
    Rewound {
        /// The app.
        app: String,
        /// What moved where.
        note: String,
        /// Why that is refused.
        why: &'static str,
    },
    /// A commit with no objects would prune every object of the app.
    #[error("the commit holds no objects: refusing to prune all {} of app {app} (set allow_empty = true if that is what you want)", crate::plural(*objects, "object"))]
    EmptyCommit {
        /// The app.
        app: String,
        /// How many objects it manages.
        objects: usize,
    },
    /// A CustomResourceDefinition of the commit was not Established in time.
    #[error("{origin}: CustomResourceDefinition {name} did not become Established within {}s", timeout.as_secs())]
    CrdNotEstablished {
        /// Where the CRD came from.
        origin: Origin,
        /// Its name.
        name: String,
        /// How long berth waited.
        timeout: Duration,
    },
    /// berth's engine refused a Deployment (another controller made its ReplicaSets).
    #[error("{cause}; nothing was written")]
    EngineRefused {
        /// Where the Deployment came from.
        origin: Origin,
        /// The engine's refusal.
        cause: EngineError,
    },
    /// A Deployment's canary cannot run: its `berth.dev/rollout` annotation is wrong, or
    /// the live Deployment cannot be read.
    #[error("{origin}: Deployment {key}: {message}; nothing was written")]
    Canary {
        /// Where the Deployment came from.
        origin: Origin,
        /// The Deployment (`namespace/name`).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An ordering annotation (wave, hook, delete policy) berth cannot read.
    #[error(transparent)]
    Phase(crate::plan::phases::PhaseError),
    /// A hook failed, timed out, or could not be run.
    #[error("{phase} hook {key} {what}")]
    Hook {
        /// `pre`, `sync`, `post` or `fail`.
        phase: &'static str,
        /// Its object (with the name the server gave it).
        key: ObjectKey,
        /// What became of it (`failed: BackoffLimitExceeded: …`).
        what: String,
    },
    /// An applied object failed, or did not become ready in time.
    #[error("{key} {what}: {reason}")]
    Unhealthy {
        /// The object.
        key: ObjectKey,
        /// `failed`, or `did not become ready within 5m`.
        what: String,
        /// What its status said.
        reason: String,
    },
    /// `state_dir` does not take writes (missing, read-only, full): berth changes nothing
    /// it could not record.
    #[error("{what} {}: {cause}; nothing was written to the cluster (free space in, or fix the permissions of, [agent] state_dir)", path.display())]
    State {
        /// What berth was doing.
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        cause: std::io::Error,
    },
    /// An app removed from the configuration was synced to a cluster that is no longer
    /// configured: nothing of it is pruned.
    #[error("app {app} was synced to cluster {cluster:?}, which is no longer configured: nothing of it was pruned (put the cluster back to prune its objects)")]
    ClusterGone {
        /// The app.
        app: String,
        /// The cluster it named (`default`: none, when there was one cluster).
        cluster: String,
    },
    /// A renamed folder's app already has an inventory: the old folder's app is not
    /// handed to it (it is removed as any app a set no longer makes).
    #[error(
        "app {app}'s objects were not handed over to app {to}, which has an inventory already"
    )]
    HandOver {
        /// The old folder's app.
        app: String,
        /// The new folder's.
        to: String,
    },
    /// The app's inventory belongs to another app of the same name (a folder of another
    /// set, another cluster): nothing is written, pruned or handed over on its word.
    #[error("inventory {inventory} belongs to {theirs}, not to this app ({ours}): refused; nothing was written or pruned (two apps share the name {app:?}: rename one, or delete the inventory if that app is gone)")]
    ForeignInventory {
        /// The app.
        app: String,
        /// The inventory, `namespace/name`.
        inventory: String,
        /// Whose it is.
        theirs: crate::plan::AppOrigin,
        /// This app's origin.
        ours: crate::plan::AppOrigin,
    },
    /// A sync's history record could not be written.
    #[error("this sync's history record could not be written ({0}): the cluster holds what it lists; free space in [agent] state_dir")]
    Unrecorded(crate::history::HistoryError),
    /// A rollout failed or timed out; what the failure policy did follows.
    #[error("rollout of Deployment {} {outcome}: {message}{}", key.qualified_name(), rollback.as_ref().map(|r| format!("; {r}")).unwrap_or_default())]
    Rollout {
        /// The Deployment.
        key: ObjectKey,
        /// `failed` or `timed-out`.
        outcome: &'static str,
        /// What its status said.
        message: String,
        /// The rollback that followed (`rolled back Deployment … from revision 3 to 2`).
        rollback: Option<String>,
    },
    /// A rollout could not be followed (one cause, shared by the Deployments followed
    /// together).
    #[error(transparent)]
    Follow(Arc<EngineError>),
    /// Restoring an earlier revision's template failed.
    #[error("rollback failed: {0}")]
    RollbackFailed(ClusterError),
    /// The API server gave no answer to the rollback's apply.
    #[error("rollback of Deployment {} failed: no answer to its apply", .0.qualified_name())]
    RollbackNotApplied(ObjectKey),
    /// The rollout of a manual rollback did not complete.
    #[error("the rollback's rollout did not complete")]
    RollbackIncomplete,
}

impl SyncError {
    /// The file (and document) the error belongs to, when it belongs to one.
    pub fn origin(&self) -> Option<String> {
        match self {
            SyncError::Render(e) => e.origin(),
            SyncError::UnknownKind(e) => Some(e.origin.to_string()),
            SyncError::Taken(e) => Some(e.origin.to_string()),
            SyncError::Phase(e) => Some(e.origin.clone()),
            SyncError::Cluster(ClusterError::UnknownKind(e)) => Some(e.origin.to_string()),
            SyncError::Cluster(
                ClusterError::Object { origin, .. } | ClusterError::Encode { origin, .. },
            ) => Some(origin.clone()),
            SyncError::CrdNotEstablished { origin, .. }
            | SyncError::EngineRefused { origin, .. }
            | SyncError::Canary { origin, .. } => Some(origin.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_below_a_sync_error_is_said_once_and_whole() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let cause = SourceError::Credential {
            what: "password file",
            path: "/etc/berth/git-password".into(),
            source: Arc::new(denied),
        };
        let said = SyncError::Fetch { cause }.to_string();
        assert_eq!(
            said,
            "cannot read password file /etc/berth/git-password: permission denied; the cluster keeps its last applied state"
        );
        let encode = serde_json::from_str::<u8>("x").unwrap_err();
        let e = SyncError::Cluster(ClusterError::Encode {
            key: Box::new(ObjectKey {
                group: String::new(),
                kind: "ConfigMap".into(),
                namespace: Some("web".into()),
                name: "settings".into(),
            }),
            origin: "app.yaml".into(),
            cause: encode,
        });
        let said = crate::Chain(&e).to_string();
        assert!(
            said.starts_with("cannot encode ConfigMap web/settings (app.yaml): expected value"),
            "{said}"
        );
        assert_eq!(said.matches("expected value").count(), 1, "{said}");
    }
}
