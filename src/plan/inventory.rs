//! The inventory's data: which objects an app applied, with the digest of what was applied
//! and the version then observed, the commit, and whether the app is held. Stored by
//! [`cluster::inventory`](crate::cluster::inventory); planned here.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::manifest::{Manifest, ObjectKey};

/// One applied object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The object.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// Its apiVersion, to find its resource when pruning.
    pub api_version: String,
    /// SHA-256 of the applied manifest.
    pub digest: String,
    /// Generation or resourceVersion seen right after applying it.
    pub observed: String,
}

/// The objects of an app, as of its last (partly) successful sync.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    /// The commit last applied in full.
    pub commit: Option<String>,
    /// The objects.
    pub objects: Vec<Entry>,
    /// Set when a commit's rollout failed (rolled back or halted): berth leaves the app
    /// alone until another commit arrives or a sync is forced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Held>,
    /// The commit the app's last sync ended at, successful and healthy (a later commit
    /// that changed nothing of the app's moves it on). Apps that depend on this one
    /// (`depends_on`) wait until it is their dependency's current commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// The last sync that wrote this inventory failed (`ready` is unset): a commit that
    /// changes nothing does not make the app ready again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// The app it belongs to, beyond its name: a sync refuses an inventory another app's.
    /// (`None`: written before berth kept it; the app's next write records it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<AppOrigin>,
    /// The commit whose pre hooks completed: a sync of it resumed or repeated (a restart
    /// mid-rollout, drift repaired) does not run them again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_hooks_ran: Option<String>,
}

/// Where an app comes from: what tells two apps apart beyond a name, which a folder in a
/// shared set can choose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppOrigin {
    /// The app set that makes it; `None`: a written `[[app]]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
    /// The set's folder it is made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    /// The ref it is a preview of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// Its cluster.
    pub cluster: String,
    /// Its repository (or registry source: [`crate::config::AppConfig::origin`]).
    pub repo: String,
}

impl AppOrigin {
    /// Whether both name the same app: the same set, folder and ref (or both written) on
    /// the same cluster. Its repository may change (a written app moved to another); the
    /// rewind check then compares nothing.
    pub fn same_app(&self, other: &AppOrigin) -> bool {
        (self.set == other.set && self.folder == other.folder)
            && (self.git_ref == other.git_ref && self.cluster == other.cluster)
    }
}

impl std::fmt::Display for AppOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.set, &self.folder) {
            (Some(set), Some(folder)) => write!(f, "app set {set}'s folder {folder}")?,
            (Some(set), None) => write!(f, "app set {set}")?,
            (None, _) => f.write_str("a written [[app]]")?,
        }
        if let Some(git_ref) = &self.git_ref {
            write!(f, ", ref {git_ref}")?;
        }
        write!(f, " on cluster {} (repository {})", self.cluster, self.repo)
    }
}

/// Why an app is held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The commit not to apply again.
    pub commit: String,
    /// What happened to it.
    pub reason: String,
}

impl Inventory {
    /// Why commit `sha` is held, when it is: a held app skips only the commit it was held
    /// at; a new commit is applied. `berth sync` and `berth plan` both ask this.
    pub fn held_at(&self, sha: &str) -> Option<&Held> {
        self.held.as_ref().filter(|h| h.commit == sha)
    }

    /// Adds the entries of `others` whose objects it does not hold; returns how many.
    pub fn adopt(&mut self, others: impl IntoIterator<Item = Entry>) -> usize {
        let held: std::collections::HashSet<ObjectKey> =
            self.objects.iter().map(|e| e.key.clone()).collect();
        let before = self.objects.len();
        self.objects
            .extend(others.into_iter().filter(|e| !held.contains(&e.key)));
        self.objects.len() - before
    }

    /// The entries by object.
    pub fn by_key(&self) -> HashMap<&ObjectKey, &Entry> {
        self.objects.iter().map(|e| (&e.key, e)).collect()
    }
}

/// SHA-256 of a manifest as it is applied.
pub fn digest(m: &Manifest) -> String {
    let bytes = serde_json::to_vec(&m.object).unwrap_or_default();
    crate::digest::sha256_hex(&bytes)
}

/// The berth app that owns a live object, when it is not the one syncing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherOwner {
    /// That app (its `berth.dev/app` label, or the app `create_namespace` made the
    /// namespace for); empty when no app is.
    pub app: String,
    /// `berth.dev/shared: "true"` is set on the live object.
    pub shared: bool,
    /// How it is that app's.
    pub claim: Claim,
}

/// How a live object is another's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Its `berth.dev/app` label names another app.
    Label,
    /// A namespace berth created for another app (`create_namespace`).
    CreateNamespace,
    /// A namespace berth did not make, which an app set's app may not take.
    NotBerths,
}

/// What berth sees of a live object it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    /// See [`observed`](crate::cluster::apply::observed).
    pub observed: String,
    /// `berth.dev/prune: "false"` is set.
    pub keep: bool,
    /// Its uid: a deletion's precondition, so that only the object read is deleted.
    pub uid: Option<String>,
    /// Another app that asked berth for this namespace (`create_namespace`): it is not
    /// deleted while one has.
    pub asked_by_another: Option<String>,
}
