//! Talking to the clusters: [`handle`] holds each cluster berth drives, [`client`] connects, [`discovery`] maps kinds to resources and
//! scopes, [`apply`] dry-runs and server-side-applies objects, [`inventory`] keeps the set
//! of applied objects in a ConfigMap, [`prune`] deletes what git no longer holds.

pub mod apply;
pub mod client;
pub mod discovery;
pub mod drift;
pub mod handle;
pub mod health;
pub mod inventory;
pub mod prune;
pub mod resilient;

pub use handle::{Cluster, Fleet};

use serde::{Deserialize, Serialize};

use crate::manifest::ObjectKey;
use kube::api::{Api, DynamicObject};

use crate::plan::{Resolved, UnknownKind};

/// The API of one object's resource: in `namespace` when its kind is namespaced (`default`
/// when it names none), else cluster-wide.
pub fn api_for(
    client: &kube::Client,
    resolved: &Resolved,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    if resolved.namespaced {
        Api::namespaced_with(
            client.clone(),
            crate::manifest::object::namespace_or_default(namespace),
            &resolved.resource,
        )
    } else {
        Api::all_with(client.clone(), &resolved.resource)
    }
}

/// A request's failure in words: the API server's message; berth's own words for a server
/// it cannot reach (naming it) or a request cut short by shutdown; else the innermost
/// cause (not kube's `ServiceError: client error (Connect)`).
pub fn said(e: &kube::Error) -> String {
    use resilient::{Stopping, Unreachable};
    match e {
        kube::Error::Api(status) => status.message.clone(),
        kube::Error::Service(inner) if inner.is::<Unreachable>() || inner.is::<Stopping>() => {
            inner.to_string()
        }
        kube::Error::Service(inner) => resilient::root_cause(inner.as_ref()),
        other => other.to_string(),
    }
}

/// Errors talking to the cluster. Object errors name the object and its origin.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No client could be made.
    #[error("cannot connect to the cluster: {0}")]
    Connect(String),
    /// The API server did not answer a command's first question, or something else did.
    #[error("cannot connect to the cluster: {cause}. {hint}")]
    Unreachable {
        /// What happened, naming the server.
        cause: String,
        /// What to check.
        hint: &'static str,
    },
    /// The inventory ConfigMap changed (or went) since it was read: another writer.
    #[error("{0}: the inventory changed since berth read it (another writer)")]
    InventoryChanged(String),
    /// A request that is not about one object failed.
    #[error("{what}: {}", said(cause))]
    Request {
        /// What was being done.
        what: String,
        /// The API error (part of the message).
        cause: kube::Error,
    },
    /// The cluster does not serve a kind.
    #[error(transparent)]
    UnknownKind(#[from] Box<UnknownKind>),
    /// An object cannot be encoded as JSON for its request.
    #[error("cannot encode {key} ({origin}): {cause}")]
    Encode {
        /// The object.
        key: Box<ObjectKey>,
        /// Where it came from.
        origin: String,
        /// The encoder's error (part of the message).
        cause: serde_json::Error,
    },
    /// The apiserver refused one object (in a dry run or for real).
    #[error("{verb} {key} ({origin}): {message}")]
    Object {
        /// `dry run refused`, `failed to apply`, `failed to prune`.
        verb: &'static str,
        /// The object.
        key: Box<ObjectKey>,
        /// Where it came from.
        origin: String,
        /// The apiserver's message (Secret values redacted).
        message: String,
    },
    /// The inventory ConfigMap could not be read.
    #[error("inventory {name}: {message}")]
    Inventory {
        /// The ConfigMap.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// What a sync did to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// It did not exist and was created.
    Created,
    /// It existed and changed.
    Configured,
    /// It existed and did not change.
    Unchanged,
    /// It was deleted because git no longer holds it.
    Pruned,
    /// Git no longer holds it but it was kept (taken over, or `berth.dev/prune: "false"`).
    Kept,
    /// Applying or pruning it failed.
    Failed,
}

impl Action {
    /// The word shown in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Pruned => "pruned",
            Action::Kept => "kept",
            Action::Failed => "failed",
        }
    }

    /// True for actions that wrote to the cluster.
    pub fn is_change(self) -> bool {
        matches!(self, Action::Created | Action::Configured | Action::Pruned)
    }
}
