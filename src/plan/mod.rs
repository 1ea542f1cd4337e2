//! Planning a sync, without I/O: which rendered objects must be written (new, changed in
//! git, or drifted in the cluster), which are unchanged, which wait for a CRD of the same
//! commit, and which inventory entries are prune candidates. Its vocabulary — the
//! inventory, a resolved target — lives here too, so planning needs no cluster.

use std::collections::{HashMap, HashSet};

mod inventory;
pub mod phases;

pub use inventory::{digest, AppOrigin, Claim, Entry, Held, Inventory, LiveObject, OtherOwner};

use kube::api::ApiResource;

use crate::manifest::scope::WithCrds;
use crate::manifest::{Manifest, ObjectKey, Origin, ScopeLookup, ANNOTATION_SHARED, LABEL_APP};

/// A manifest's resource and scope, as discovery resolves it.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The resource (plural, group, version).
    pub resource: ApiResource,
    /// True for namespaced kinds.
    pub namespaced: bool,
}

/// A manifest and the resource that serves it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The object.
    pub manifest: Manifest,
    /// Its resource and scope.
    pub resolved: Resolved,
}

/// A manifest of a kind the cluster does not serve (and no CRD of the commit defines).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{origin}: unknown kind {kind} in {api_version}: {why}{}", others_too(*others))]
pub struct UnknownKind {
    /// Where the (first) object came from.
    pub origin: Origin,
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Why, and what to do.
    pub why: String,
    /// How many more objects are of the same kind (said once, with the first).
    pub others: usize,
}

fn others_too(others: usize) -> String {
    match others {
        0 => String::new(),
        n => format!(" (and {} of this kind)", crate::plural(n, "more object")),
    }
}

impl UnknownKind {
    /// The error for manifest `m`.
    pub fn of(m: &Manifest) -> Self {
        UnknownKind {
            origin: m.origin.clone(),
            api_version: m.api_version().to_string(),
            kind: m.kind().to_string(),
            why: "the cluster does not serve it (is its CRD installed?)".into(),
            others: 0,
        }
    }

    /// One error per kind: the first object of each, counting the rest (a missing CRD is
    /// one mistake, however many objects use it).
    pub fn one_per_kind(errors: Vec<UnknownKind>) -> Vec<UnknownKind> {
        let mut kinds: Vec<UnknownKind> = Vec::new();
        for e in errors {
            let same = |k: &&mut UnknownKind| k.api_version == e.api_version && k.kind == e.kind;
            match kinds.iter_mut().find(same) {
                Some(first) => first.others += 1 + e.others,
                None => kinds.push(e),
            }
        }
        kinds
    }
}

/// An object the commit renders that is another's: another berth app's, or a namespace an
/// app set's app did not make.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{origin}: {key} {}", says(*claim, owner))]
pub struct Taken {
    /// Where this app's object came from.
    pub origin: Origin,
    /// The object.
    pub key: ObjectKey,
    /// The app that owns it (empty: none).
    pub owner: String,
    /// How.
    pub claim: Claim,
}

fn says(claim: Claim, owner: &str) -> String {
    match claim {
        Claim::Label => format!("belongs to app {owner} (its {LABEL_APP} label); refused: an object has one owner (set {ANNOTATION_SHARED}: \"true\" on it in every app that renders it to share it)"),
        Claim::CreateNamespace => format!("was created for app {owner} (create_namespace); refused: a namespace has one owner, and no other app takes or deletes it"),
        Claim::NotBerths => format!("exists and berth did not make it; refused: an app set's app takes no namespace it did not make (label it {LABEL_APP}=<app> to hand it to one)"),
    }
}

/// The `targets` another app owns (`owners`, as the cluster says), unless both mark the
/// object shared: nothing changes owner silently.
pub fn taken<'a>(
    targets: impl IntoIterator<Item = &'a Target>,
    owners: &HashMap<ObjectKey, OtherOwner>,
) -> Vec<Taken> {
    targets
        .into_iter()
        .filter_map(|t| {
            let key = t.manifest.key();
            let owner = owners.get(&key)?;
            let shared = t.manifest.annotation(ANNOTATION_SHARED) == Some("true");
            (!(shared && owner.shared)).then(|| Taken {
                origin: t.manifest.origin.clone(),
                key,
                owner: owner.app.clone(),
                claim: owner.claim,
            })
        })
        .collect()
}

/// Why an object is written, or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Not in the inventory.
    New,
    /// Its manifest changed in git.
    Changed,
    /// Git is unchanged but the live object is not what berth left (edited or deleted).
    Drifted(String),
    /// Nothing to do: no request is sent.
    Same,
}

/// One rendered object and what to do with it.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The object and its resource.
    pub target: Target,
    /// Why it is written.
    pub change: Change,
    /// Digest of the manifest.
    pub digest: String,
    /// The live object's version (see [`LiveObject::observed`]) when it was read.
    pub live: Option<String>,
}

/// What a sync will do.
#[derive(Debug, Default)]
pub struct Plan {
    /// Objects whose resource is known now.
    pub planned: Vec<Planned>,
    /// Objects of kinds defined by a CRD in this commit that the cluster does not serve yet.
    pub deferred: Vec<Manifest>,
    /// Inventory entries this commit no longer holds.
    pub prune: Vec<Entry>,
}

/// Splits planned objects into the unchanged ones (by key) and those to write.
pub fn split(planned: Vec<Planned>) -> (Vec<ObjectKey>, Vec<Planned>) {
    let (same, changed): (Vec<Planned>, Vec<Planned>) =
        planned.into_iter().partition(|p| p.change == Change::Same);
    (
        same.into_iter().map(|p| p.target.manifest.key()).collect(),
        changed,
    )
}

/// The inventory after a sync's writes. With `same` (a complete apply): the unchanged
/// entries and everything `written`, and the app no longer held. Without (a failed
/// apply): the old entries, those `written` updated, so that nothing applied is ever
/// forgotten, and held as it was.
pub fn next_inventory(
    old: &Inventory,
    same: Option<&[ObjectKey]>,
    written: Vec<Entry>,
) -> Inventory {
    let written_keys: HashSet<&ObjectKey> = written.iter().map(|e| &e.key).collect();
    let keep =
        |e: &&Entry| !written_keys.contains(&e.key) && same.is_none_or(|s| s.contains(&e.key));
    let mut objects: Vec<Entry> = old.objects.iter().filter(keep).cloned().collect();
    objects.extend(written);
    Inventory {
        commit: old.commit.clone(),
        objects,
        held: if same.is_none() {
            old.held.clone()
        } else {
            None
        },
        // Set by the sync once it knows how it ended.
        ready: None,
        failed: false,
        origin: old.origin.clone(),
        pre_hooks_ran: old.pre_hooks_ran.clone(),
    }
}

/// The digest of an entry written ahead of its object: it never matches a manifest, so
/// the object is applied by the next sync if this one dies before it.
pub const PENDING: &str = "pending";
/// The digest of a Deployment whose rollout a sync started and did not see to its end
/// (shutdown cut it short, or the sync was killed): matches no manifest, so the next sync
/// writes it again and knows it resumes that rollout.
pub const UNFINISHED: &str = "unfinished";

/// The inventory written before a sync's first write: `old`, plus a pending entry for
/// each target it does not hold yet; a Deployment it holds whose spec the write may change
/// (each target comes with whether it may) is marked [`UNFINISHED`] (its rollout starts:
/// if the sync is killed, the next one knows it resumes it).
pub fn write_ahead<'a>(
    old: &Inventory,
    targets: impl IntoIterator<Item = (&'a Target, bool)>,
) -> Inventory {
    let held: HashSet<ObjectKey> = old.objects.iter().map(|e| e.key.clone()).collect();
    let mut ahead = old.clone();
    for (t, respecs) in targets {
        let key = t.manifest.key();
        if respecs && key.group == "apps" && key.kind == "Deployment" {
            if let Some(e) = ahead.objects.iter_mut().find(|e| e.key == key) {
                e.digest = UNFINISHED.to_string();
            }
        }
        if !held.contains(&key) {
            ahead.objects.push(Entry {
                key,
                api_version: t.manifest.api_version().to_string(),
                digest: PENDING.to_string(),
                observed: String::new(),
            });
        }
    }
    ahead
}

/// `next` with the entries of `keys` as they were before the sync (`old`, marked
/// [`UNFINISHED`]), or pending where `old` had none: objects written but not followed to
/// the end, so that the next sync writes and follows them again. Its commit stays
/// `old`'s, the last one applied whole: the next sync's record names that one as the
/// commit before.
pub fn unfinished(next: &Inventory, old: &Inventory, keys: &[ObjectKey]) -> Inventory {
    let before = old.by_key();
    let mut out = next.clone();
    out.commit.clone_from(&old.commit);
    for e in out.objects.iter_mut().filter(|e| keys.contains(&e.key)) {
        match before.get(&e.key) {
            Some(was) => {
                *e = (*was).clone();
                e.digest = UNFINISHED.to_string();
            }
            None => {
                e.digest = PENDING.to_string();
                e.observed = String::new();
            }
        }
    }
    out
}

impl Plan {
    /// True when nothing needs a write request.
    pub fn is_no_op(&self) -> bool {
        self.deferred.is_empty()
            && self.prune.is_empty()
            && self.planned.iter().all(|p| p.change == Change::Same)
    }
}

/// A plan from git and the inventory alone: an object git did not change is taken as
/// unchanged until [`Draft::settle`] holds it against its live object.
pub struct Draft(Plan);

impl Draft {
    /// The targets git did not change since the last sync: only their live objects decide
    /// anything (unchanged or drifted), so only they need reading. A changed or new object
    /// is written whatever is live.
    pub fn unchanged(&self) -> impl Iterator<Item = &Target> {
        self.0
            .planned
            .iter()
            .filter(|p| p.change == Change::Same)
            .map(|p| &p.target)
    }

    /// The targets the app's inventory does not hold: whether another app owns them is
    /// read before they are written.
    pub fn new_targets(&self) -> impl Iterator<Item = &Target> {
        self.0
            .planned
            .iter()
            .filter(|p| p.change == Change::New)
            .map(|p| &p.target)
    }

    /// The plan: each object git did not change is unchanged only when its `live` object
    /// is still what berth left (the `inventory` recorded it), else drifted.
    pub fn settle(mut self, inventory: &Inventory, live: &HashMap<ObjectKey, LiveObject>) -> Plan {
        let entries = inventory.by_key();
        for p in self
            .0
            .planned
            .iter_mut()
            .filter(|p| p.change == Change::Same)
        {
            let key = p.target.manifest.key();
            let recorded = entries.get(&key).map(|e| e.observed.as_str());
            p.live = live.get(&key).map(|l| l.observed.clone());
            p.change = match live.get(&key) {
                None => Change::Drifted("deleted from the cluster".into()),
                Some(l) if Some(l.observed.as_str()) != recorded => {
                    Change::Drifted("changed in the cluster since the last sync".into())
                }
                Some(_) => Change::Same,
            };
        }
        self.0
    }
}

/// The plan before the live objects are read (see [`Draft`]).
///
/// # Errors
/// Every manifest whose kind the cluster does not serve (and no CRD of the commit defines).
pub fn draft(
    manifests: Vec<Manifest>,
    resolve: impl Fn(&Manifest) -> Option<Resolved>,
    inventory: &Inventory,
) -> Result<Draft, Vec<UnknownKind>> {
    let crds = WithCrds::new(&manifests, &NoScopes);
    let entries = inventory.by_key();
    let mut plan = Plan::default();
    let mut errors = Vec::new();
    let mut keys = HashSet::new();
    for m in manifests {
        keys.insert(m.key());
        let Some(resolved) = resolve(&m) else {
            if crds.scope(m.group(), m.kind()).is_some() {
                plan.deferred.push(m);
            } else {
                errors.push(UnknownKind::of(&m));
            }
            continue;
        };
        let digest = digest(&m);
        let change = match entries.get(&m.key()) {
            None => Change::New,
            Some(e) if e.digest != digest => Change::Changed,
            Some(_) => Change::Same,
        };
        plan.planned.push(Planned {
            target: Target {
                manifest: m,
                resolved,
            },
            change,
            digest,
            live: None,
        });
    }
    plan.prune = inventory
        .objects
        .iter()
        .filter(|e| !keys.contains(&e.key))
        .cloned()
        .collect();
    if errors.is_empty() {
        Ok(Draft(plan))
    } else {
        Err(errors)
    }
}

/// Only the commit's own CRDs: whether a kind is deferred, not its scope.
struct NoScopes;

impl ScopeLookup for NoScopes {
    fn scope(&self, _: &str, _: &str) -> Option<crate::manifest::Scope> {
        None
    }
}

#[cfg(test)]
mod tests;
