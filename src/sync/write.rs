//! [`Write`]: one object the plan would write, and what the dry run and the apply made of
//! it — what the validate, apply, roll-out and health steps pass along.

use kube::api::DynamicObject;

use crate::cluster::apply::observed;
use crate::config::Progressive;
use crate::manifest::ObjectKey;
use crate::plan::{Change, Entry, Planned, Target};

/// An object to write and what became of it.
pub(super) struct Write {
    pub target: Target,
    pub change: Change,
    pub digest: String,
    /// The server's answer to the dry run: the object as it would be.
    pub dry_run: Option<DynamicObject>,
    pub applied: Option<DynamicObject>,
    /// The fields git sets that another manager had taken, and this write takes back
    /// (`.spec.replicas from "kubectl-patch"`).
    pub took_back: Option<String>,
    /// The live object's version when the plan read it.
    pub live: Option<String>,
    /// Why the dry run refused it, when it did.
    pub refused: Option<String>,
    /// A Deployment whose canary runs: what is applied meanwhile, and its steps.
    pub canary: Option<Canary>,
}

impl Write {
    /// A write of `target`, not yet dry-run.
    pub fn new(target: Target, change: Change, digest: String) -> Self {
        Write {
            target,
            change,
            digest,
            dry_run: None,
            applied: None,
            took_back: None,
            live: None,
            refused: None,
            canary: None,
        }
    }

    /// A drifted object whose dry run changes no field of its spec (the generation stays
    /// the live one): only fields git does not set moved (an HPA's replicas), and nothing
    /// is written, so nobody's fields are fought over.
    pub fn drift_elsewhere(&self) -> bool {
        let Some(obj) = &self.dry_run else {
            return false;
        };
        matches!(self.change, Change::Drifted(_))
            && self.took_back.is_none()
            && self.live.as_deref().is_some_and(|l| l.starts_with('g'))
            && self.live.as_deref() == Some(observed(&obj.metadata).as_str())
    }

    /// From the dry run: whether the write may change the object's spec — its generation
    /// moves from `recorded`, the one berth left it at. Yes when either is not known: a
    /// change of labels alone starts no rollout, and the inventory need not say one began.
    pub fn may_change_spec(&self, recorded: Option<&str>) -> bool {
        let after = self.dry_run.as_ref().map(|o| observed(&o.metadata));
        let known = recorded.filter(|r| r.starts_with('g'));
        known.is_none() || after.as_deref() != known
    }

    /// From the dry run: whether the object exists, and at which resourceVersion.
    pub fn existing(&self) -> Option<Option<&str>> {
        let obj = self.dry_run.as_ref()?;
        Some(
            obj.metadata
                .resource_version
                .as_deref()
                .filter(|rv| !rv.is_empty()),
        )
    }

    /// From the dry run: a Deployment's revision before this sync.
    pub fn existing_revision(&self) -> Option<i64> {
        crate::rollout::revisions::revision_of(&self.dry_run.as_ref()?.metadata)
    }

    /// From the dry run: a Deployment as the server would make it (its template defaulted),
    /// when the write is one and its dry run kept it.
    pub fn planned_deployment(&self) -> Option<k8s_openapi::api::apps::v1::Deployment> {
        let obj = self.dry_run.as_ref().filter(|_| self.is_deployment())?;
        let value = serde_json::to_value(obj).ok()?;
        serde_json::from_value(value).ok()
    }

    /// What the apply writes: the held Deployment while its canary runs, else the target.
    pub fn to_apply(&self) -> &Target {
        self.canary.as_ref().map_or(&self.target, |c| &c.held)
    }

    /// Whether the object is a Namespace the cluster does not hold yet.
    pub fn is_new_namespace(&self) -> bool {
        let m = &self.target.manifest;
        m.group().is_empty() && m.kind() == "Namespace" && self.existing() == Some(None)
    }

    /// Whether the object is a Deployment.
    pub fn is_deployment(&self) -> bool {
        let m = &self.target.manifest;
        m.group() == "apps" && m.kind() == "Deployment"
    }
}

/// A Deployment's canary (or blue-green): what is applied while it runs, and its strategy.
pub(super) struct Canary {
    /// The Deployment as git has it, paused, its strategy Recreate.
    pub held: Target,
    /// Applied first when the live Deployment is not held yet: paused, its strategy (the
    /// rolling update's sizes the server defaulted) claimed by berth's field manager, so
    /// that [`Canary::held`], which leaves them out, removes them — a Recreate strategy
    /// may have none.
    pub claim: Option<Target>,
    /// Git moved while its canary was in flight: the Deployment was held with another
    /// template when the sync began.
    pub moved: bool,
    /// Its strategy: a canary's steps, or blue-green.
    pub plan: Progressive,
}

/// Splits planned objects into the unchanged ones (by key) and those to write.
pub(super) fn split_writes(planned: Vec<Planned>) -> (Vec<ObjectKey>, Vec<Write>) {
    let (same, changed) = crate::plan::split(planned);
    let writes = changed
        .into_iter()
        .map(|p| Write {
            live: p.live,
            ..Write::new(p.target, p.change, p.digest)
        })
        .collect();
    (same, writes)
}

/// The inventory entries of what was applied.
pub(super) fn written<'a>(writes: impl IntoIterator<Item = &'a Write>) -> Vec<Entry> {
    writes
        .into_iter()
        .filter_map(|w| {
            let obj = w.applied.as_ref()?;
            Some(Entry {
                key: w.target.manifest.key(),
                api_version: w.target.manifest.api_version().to_string(),
                digest: w.digest.clone(),
                observed: observed(&obj.metadata),
            })
        })
        .collect()
}

/// The Namespaces the commit creates (objects in them cannot be dry-run before).
pub(super) fn new_namespaces(writes: &[Write]) -> Vec<&str> {
    writes
        .iter()
        .filter(|w| w.is_new_namespace())
        .map(|w| w.target.manifest.name())
        .collect()
}

/// What the validate step passed, by index into the writes.
pub(super) struct Validated {
    /// Stage 0: Namespaces and CRDs.
    pub first: Vec<usize>,
    /// Objects that can only be dry-run once stage 0 is applied.
    pub late: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use kube::api::ApiResource;

    use super::*;
    use crate::manifest::{Manifest, Origin};
    use crate::plan::Resolved;

    /// A write of Deployment `web` whose dry run answers with `generation`.
    fn dry_run_at(generation: Option<i64>) -> Write {
        let json = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "generation": generation},
        });
        let manifest = Manifest {
            decrypted: Vec::new(),
            object: serde_json::from_value(json.clone()).unwrap(),
            origin: Origin::file("web.yaml"),
        };
        let resolved = Resolved {
            resource: ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
            namespaced: true,
        };
        let target = Target { resolved, manifest };
        Write {
            dry_run: Some(serde_json::from_value(json).unwrap()),
            ..Write::new(target, Change::Changed, String::new())
        }
    }

    #[test]
    fn a_write_changes_the_spec_when_its_generation_moves_or_is_not_known() {
        assert!(
            !dry_run_at(Some(3)).may_change_spec(Some("g3")),
            "labels alone"
        );
        assert!(dry_run_at(Some(4)).may_change_spec(Some("g3")));
        assert!(dry_run_at(Some(3)).may_change_spec(None), "never recorded");
        assert!(
            dry_run_at(Some(3)).may_change_spec(Some("rv3")),
            "no generation recorded"
        );
        let mut unchecked = dry_run_at(Some(3));
        unchecked.dry_run = None;
        assert!(unchecked.may_change_spec(Some("g3")), "not dry-run");
    }
}
