//! The plan step: what the commit writes, keeps and prunes, drafted from the inventory
//! (pure, [`crate::plan::draft`]) and settled against the live objects of what git did not
//! change (drift).

use super::context::{Ctx, Journal, Stop};
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory;
use crate::manifest::Manifest;
use crate::plan::{draft, Inventory, Plan};

/// What a sync of `manifests` over `inventory` writes, keeps and prunes.
pub(super) async fn plan(
    ctx: &Ctx<'_>,
    manifests: Vec<Manifest>,
    kinds: &ClusterKinds,
    inventory: &Inventory,
    journal: &mut Journal<'_>,
) -> Result<Plan, Stop> {
    let draft = match draft(manifests, |m| kinds.resolve(m), inventory) {
        Ok(draft) => draft,
        Err(errors) => {
            errors
                .into_iter()
                .for_each(|e| journal.fail(kinds.explain(e)));
            return Err(Stop::Failed);
        }
    };
    let resources: Vec<_> = draft
        .unchanged()
        .map(|t| {
            let m = &t.manifest;
            (
                t.resolved.clone(),
                m.namespace().map(str::to_string),
                m.name().to_string(),
            )
        })
        .collect();
    let client = &ctx.syncer.client;
    let live = inventory::live_objects(client, resources, &ctx.app.name)
        .await
        .map_err(|e| journal.stop(e))?;
    Ok(draft.settle(inventory, &live))
}
