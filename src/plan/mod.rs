//! Planning a sync, without I/O: which rendered objects must be written (new, changed in
//! git, or drifted in the cluster), which are unchanged, which wait for a CRD of the same
//! commit, and which inventory entries are prune candidates. Its vocabulary — the
//! inventory, a resolved target — lives here too, so planning needs no cluster.

use std::collections::{HashMap, HashSet};

mod inventory;

pub use inventory::{digest, Entry, Held, Inventory, LiveObject};

use kube::api::ApiResource;

use crate::manifest::scope::WithCrds;
use crate::manifest::{Manifest, ObjectKey, Origin, ScopeLookup};

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
#[error("{origin}: unknown kind {kind} in {api_version}: {why}")]
pub struct UnknownKind {
    /// Where the object came from.
    pub origin: Origin,
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Why, and what to do.
    pub why: String,
}

impl UnknownKind {
    /// The error for manifest `m`.
    pub fn of(m: &Manifest) -> Self {
        UnknownKind {
            origin: m.origin.clone(),
            api_version: m.api_version().to_string(),
            kind: m.kind().to_string(),
            why: "the cluster does not serve it (is its CRD installed?)".into(),
        }
    }
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
    }
}

/// The digest of an entry written ahead of its object: it never matches a manifest, so
/// the object is applied by the next sync if this one dies before it.
pub const PENDING: &str = "pending";

/// The inventory written before a sync's first write: `old`, plus a pending entry for
/// each target it does not hold yet.
pub fn write_ahead<'a>(
    old: &Inventory,
    targets: impl IntoIterator<Item = &'a Target>,
) -> Inventory {
    let held: HashSet<ObjectKey> = old.objects.iter().map(|e| e.key.clone()).collect();
    let mut ahead = old.clone();
    for t in targets {
        let key = t.manifest.key();
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

/// `next` with the entries of `keys` as they were before the sync (`old`), or pending
/// where `old` had none: objects written but not followed to the end, so that the next
/// sync writes and follows them again.
pub fn unfinished(next: &Inventory, old: &Inventory, keys: &[ObjectKey]) -> Inventory {
    let before = old.by_key();
    let mut out = next.clone();
    for e in out.objects.iter_mut().filter(|e| keys.contains(&e.key)) {
        match before.get(&e.key) {
            Some(was) => *e = (*was).clone(),
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
mod tests {
    use super::*;

    use crate::manifest::Origin;
    use kube::api::ApiResource;

    /// The whole plan at once: [`draft`], then [`Draft::settle`].
    fn plan(
        manifests: Vec<Manifest>,
        resolve: impl Fn(&Manifest) -> Option<Resolved>,
        inventory: &Inventory,
        live: &HashMap<ObjectKey, LiveObject>,
    ) -> Result<Plan, Vec<UnknownKind>> {
        Ok(draft(manifests, resolve, inventory)?.settle(inventory, live))
    }

    fn cm(name: &str, data: &str) -> Manifest {
        Manifest {
            object: serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "shop"}, "data": {"k": data}
            }))
            .unwrap(),
            origin: Origin::file("cm.yaml"),
        }
    }

    fn resolve(m: &Manifest) -> Option<Resolved> {
        (m.kind() == "ConfigMap").then(|| Resolved {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
        })
    }

    fn entry(m: &Manifest, observed: &str) -> Entry {
        Entry {
            key: m.key(),
            api_version: "v1".into(),
            digest: digest(m),
            observed: observed.into(),
        }
    }

    fn live(entries: &[(&Manifest, &str)]) -> HashMap<ObjectKey, LiveObject> {
        entries
            .iter()
            .map(|(m, o)| {
                (
                    m.key(),
                    LiveObject {
                        observed: o.to_string(),
                        keep: false,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn classifies_new_changed_drifted_same_and_prune() {
        let (same, changed, drifted, deleted, gone) = (
            cm("same", "1"),
            cm("changed", "1"),
            cm("drifted", "1"),
            cm("deleted", "1"),
            cm("gone", "1"),
        );
        let inventory = Inventory {
            commit: Some("abc".into()),
            objects: vec![
                entry(&same, "rv1"),
                entry(&changed, "rv2"),
                entry(&drifted, "rv3"),
                entry(&deleted, "rv4"),
                entry(&gone, "rv5"),
            ],
            held: None,
        };
        let live = live(&[
            (&same, "rv1"),
            (&changed, "rv2"),
            (&drifted, "rv9"),
            (&gone, "rv5"),
        ]);
        let manifests = vec![
            same.clone(),
            cm("changed", "2"),
            drifted.clone(),
            deleted.clone(),
            cm("new", "1"),
        ];
        let read: Vec<String> = draft(manifests.clone(), resolve, &inventory)
            .unwrap()
            .unchanged()
            .map(|t| t.manifest.name().to_string())
            .collect();
        assert_eq!(
            read,
            ["same", "drifted", "deleted"],
            "only these are looked up"
        );
        let p = plan(manifests, resolve, &inventory, &live).unwrap();
        let changes: Vec<(&str, &Change)> = p
            .planned
            .iter()
            .map(|x| (x.target.manifest.name(), &x.change))
            .collect();
        assert_eq!(changes[0], ("same", &Change::Same));
        assert_eq!(changes[1], ("changed", &Change::Changed));
        assert!(matches!(changes[2], ("drifted", Change::Drifted(_))));
        assert_eq!(
            changes[3],
            (
                "deleted",
                &Change::Drifted("deleted from the cluster".into())
            )
        );
        assert_eq!(changes[4], ("new", &Change::New));
        assert_eq!(
            p.prune
                .iter()
                .map(|e| e.key.name.as_str())
                .collect::<Vec<_>>(),
            ["gone"]
        );
        assert!(!p.is_no_op());
    }

    #[test]
    fn unchanged_commit_is_a_no_op() {
        let a = cm("a", "1");
        let inventory = Inventory {
            commit: None,
            objects: vec![entry(&a, "rv1")],
            held: None,
        };
        let p = plan(vec![a.clone()], resolve, &inventory, &live(&[(&a, "rv1")])).unwrap();
        assert!(p.is_no_op());
    }

    #[test]
    fn unknown_kinds_fail_unless_a_crd_of_the_commit_defines_them() {
        let widget = Manifest {
            object: serde_json::from_value(serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}))
            .unwrap(),
            origin: Origin::file("w.yaml"),
        };
        let errors = plan(
            vec![widget.clone()],
            resolve,
            &Inventory::default(),
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(
            errors[0]
                .to_string()
                .contains("w.yaml: unknown kind Widget in example.com/v1"),
            "{}",
            errors[0]
        );
        let crd = Manifest {
            object: serde_json::from_value(serde_json::json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget"}}})).unwrap(),
            origin: Origin::file("crd.yaml"),
        };
        let with_crds = |m: &Manifest| {
            resolve(m).or_else(|| {
                (m.kind() == "CustomResourceDefinition").then(|| Resolved {
                    resource: ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                    namespaced: false,
                })
            })
        };
        let p = plan(
            vec![crd, widget],
            with_crds,
            &Inventory::default(),
            &HashMap::new(),
        )
        .unwrap();
        assert_eq!(p.planned.len(), 1);
        assert_eq!(p.deferred[0].name(), "w");
    }

    #[test]
    fn split_keeps_the_unchanged_apart() {
        let (a, b) = (cm("a", "1"), cm("b", "1"));
        let planned = |m: &Manifest, change| Planned {
            target: Target {
                manifest: m.clone(),
                resolved: resolve(m).unwrap(),
            },
            change,
            digest: digest(m),
            live: None,
        };
        let (same, changed) = split(vec![planned(&a, Change::Same), planned(&b, Change::New)]);
        assert_eq!(same, [a.key()]);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].target.manifest.key(), b.key());
    }

    #[test]
    fn next_inventory_after_a_complete_and_a_failed_apply() {
        let (kept, written, dropped) = (cm("kept", "1"), cm("written", "2"), cm("dropped", "1"));
        let old = Inventory {
            commit: Some("old".into()),
            objects: vec![
                entry(&kept, "rv1"),
                entry(&written, "rv1"),
                entry(&dropped, "rv1"),
            ],
            held: Some(Held {
                commit: "old".into(),
                reason: "rolled back".into(),
            }),
        };
        let fresh = entry(&written, "rv9");

        // Complete: the unchanged and the written; the rest (prune candidates) go; not held.
        let next = next_inventory(&old, Some(&[kept.key()]), vec![fresh.clone()]);
        assert_eq!(next.objects, [entry(&kept, "rv1"), fresh.clone()]);
        assert_eq!(next.held, None);
        assert_eq!(
            next.commit.as_deref(),
            Some("old"),
            "the caller sets the new commit"
        );

        // Failed part way: nothing forgotten, what was written updated, held as it was.
        let next = next_inventory(&old, None, vec![fresh.clone()]);
        assert_eq!(
            next.objects,
            [entry(&kept, "rv1"), entry(&dropped, "rv1"), fresh]
        );
        assert_eq!(next.held, old.held);
    }

    #[test]
    fn unfinished_entries_go_back_to_what_they_were_before_the_sync() {
        let (a, b, c) = (cm("a", "1"), cm("b", "1"), cm("c", "1"));
        let old = Inventory {
            commit: Some("c1".into()),
            objects: vec![entry(&a, "5"), entry(&c, "5")],
            held: None,
        };
        let next = Inventory {
            commit: Some("c2".into()),
            objects: vec![entry(&a, "6"), entry(&b, "6"), entry(&c, "6")],
            held: None,
        };
        let out = unfinished(&next, &old, &[a.key(), b.key()]);
        assert_eq!(out.commit.as_deref(), Some("c2"));
        assert_eq!(out.objects[0], old.objects[0], "as before the sync");
        assert_eq!(
            (
                out.objects[1].digest.as_str(),
                out.objects[1].observed.as_str()
            ),
            (PENDING, ""),
            "new in this sync: pending"
        );
        assert_eq!(out.objects[2], next.objects[2], "finished: as written");
    }

    #[test]
    fn write_ahead_adds_pending_entries_for_new_objects_only() {
        let (a, b) = (cm("a", "1"), cm("b", "1"));
        let old = Inventory {
            commit: Some("c1".into()),
            objects: vec![entry(&a, "5")],
            held: None,
        };
        let targets: Vec<Target> = [cm("a", "2"), b.clone()]
            .into_iter()
            .map(|m| Target {
                resolved: resolve(&m).unwrap(),
                manifest: m,
            })
            .collect();
        let ahead = write_ahead(&old, &targets);
        assert_eq!(
            ahead.objects[0], old.objects[0],
            "held entries are untouched"
        );
        assert_eq!(ahead.objects.len(), 2);
        assert_eq!(ahead.objects[1].key, b.key());
        assert_eq!(ahead.objects[1].digest, PENDING);
        assert_eq!(ahead.commit, old.commit);
        assert_eq!(
            write_ahead(&ahead, &targets),
            ahead,
            "nothing new: unchanged"
        );
    }

    #[test]
    fn adopt_keeps_what_is_held_and_adds_the_rest() {
        let (a, b) = (cm("a", "1"), cm("b", "1"));
        let mut inv = Inventory {
            objects: vec![entry(&a, "5")],
            ..Inventory::default()
        };
        let added = inv.adopt([entry(&a, "9"), entry(&b, "7")]);
        assert_eq!(added, 1);
        assert_eq!(inv.objects, vec![entry(&a, "5"), entry(&b, "7")]);
    }
}
