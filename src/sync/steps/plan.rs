//! The plan step: what the commit writes, keeps and prunes, drafted from the inventory
//! (pure, [`crate::plan::draft`]), refused where another app owns an object it would
//! take, or a namespace is not its to take ([`crate::plan::taken`]), and settled against the live objects of what git did
//! not change (drift).

use std::sync::Arc;

use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory;
use crate::manifest::Manifest;
use crate::plan::{draft, taken, Inventory, Plan, Resolved, Target};
use crate::sync::context::{Ctx, Journal, Stop};

/// What a sync of `manifests` over `inventory` writes, keeps and prunes.
pub(in crate::sync) async fn plan(
    ctx: &Ctx<'_>,
    manifests: Vec<Manifest>,
    kinds: &Arc<ClusterKinds>,
    inventory: &Inventory,
    journal: &mut Journal<'_>,
) -> Result<Plan, Stop> {
    // Each object's digest (SHA-256 of its JSON) grows with the commit: off the runtime.
    let (resolver, old) = (kinds.clone(), inventory.clone());
    let drafted =
        crate::blocking::off_runtime(move || draft(manifests, |m| resolver.resolve(m), &old));
    let draft = match drafted.await {
        Ok(draft) => draft,
        Err(errors) => {
            crate::plan::UnknownKind::one_per_kind(errors)
                .into_iter()
                .for_each(|e| journal.fail(kinds.explain(e)));
            return Err(Stop::Failed);
        }
    };
    let client = &ctx.cluster.client;
    let app = &ctx.app.name;
    let mut owners = inventory::owned_elsewhere(client, resources(draft.new_targets()), app)
        .await
        .map_err(|e| journal.stop(e))?;
    let namespaces: Vec<String> = (draft.new_targets())
        .map(|t| &t.manifest)
        .filter(|m| m.group().is_empty() && m.kind() == "Namespace")
        .map(|m| m.name().to_string())
        .collect();
    let generated = ctx.app.set.is_some();
    let others = inventory::namespaces_of_others(client, namespaces, app, generated)
        .await
        .map_err(|e| journal.stop(e))?;
    owners.extend(others);
    let taken = taken(draft.new_targets(), &owners);
    if !taken.is_empty() {
        taken.into_iter().for_each(|e| journal.fail(e));
        return Err(Stop::Failed);
    }
    let live = inventory::live_objects(client, resources(draft.unchanged()), &ctx.app.name)
        .await
        .map_err(|e| journal.stop(e))?;
    Ok(draft.settle(inventory, &live))
}

/// Each target's resource, namespace and name, as the cluster is asked for them.
fn resources<'a>(
    targets: impl Iterator<Item = &'a Target>,
) -> Vec<(Resolved, Option<String>, String)> {
    targets
        .map(|t| {
            let m = &t.manifest;
            (
                t.resolved.clone(),
                m.namespace().map(str::to_string),
                m.name().to_string(),
            )
        })
        .collect()
}
