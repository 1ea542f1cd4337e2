//! The skip steps: a sync that writes nothing. A commit that changes none of the paths the
//! app's last good sync read costs no request at all ([`untouched`]); a commit held after
//! a failed rollout, or one whose objects all match the cluster, writes nothing
//! ([`held_or_unchanged`]).

use crate::history::{Outcome, Trigger};
use crate::plan::{Inventory, Plan};
use crate::source::git::Checkout;
use crate::sync::context::Ctx;
use crate::sync::inputs::Inputs;

/// A sync that writes nothing: how it ends, and what its record says.
pub(in crate::sync) struct Skip {
    /// `no-change` or `held`.
    pub outcome: Outcome,
    /// Why, for the record.
    pub note: Option<String>,
    /// The objects that match.
    pub unchanged: usize,
}

/// A set's app whose folder the commit no longer holds (removed or renamed in git, its set
/// not listed again yet) is not synced at it: its set's next listing removes it, or hands
/// its objects over. No failure is recorded, and nothing is written or pruned.
pub(in crate::sync) fn folder_gone(ctx: &Ctx<'_>, checkout: &Checkout) -> Option<Skip> {
    let folder = ctx.app.folder.as_deref()?;
    if std::fs::symlink_metadata(checkout.dir.join(folder)).is_ok() {
        return None;
    }
    let note = format!(
        "its folder {folder} is gone at commit {}: not synced (its app set's next listing removes the app, or hands it over)",
        checkout.commit.short()
    );
    ctx.say(&note);
    Some(Skip {
        outcome: Outcome::NoChange,
        note: Some(note),
        unchanged: 0,
    })
}

/// A commit that changes none of the paths the app's last good sync read is not synced
/// again (no request to the cluster) when a push triggered the sync, or when `berth sync`
/// finds a new commit (not `--force`); the interval's syncs, and `berth sync` of the
/// commit already synced, still compare with the cluster, which finds drift. An app whose
/// kustomizations reach remote bases reads more than its commit: never skipped. Returns
/// the skip and what the render would have read at this commit.
pub(in crate::sync) fn untouched(ctx: &Ctx<'_>, checkout: &Checkout) -> Option<(Skip, Inputs)> {
    if ctx.app.allow_remote_bases {
        return None;
    }
    let remembered = &ctx.syncer.inputs;
    let sha = &checkout.commit.sha;
    let last = match ctx.options.trigger {
        Trigger::Notify | Trigger::Webhook | Trigger::Dependency => remembered.get(ctx.app)?,
        Trigger::Cli if !ctx.options.force => {
            Some(remembered.get(ctx.app)?).filter(|last| last.commit != *sha)?
        }
        _ => return None,
    };
    let digest = crate::source::paths_digest(checkout, &last.paths)?;
    if digest != last.digest {
        return None;
    }
    let note = if last.commit == *sha {
        format!(
            "no change: commit {} is the one last synced",
            checkout.commit.short()
        )
    } else {
        format!("no change: {}", unchanged_under(checkout, &last.paths))
    };
    ctx.say(&note);
    let skip = Skip {
        outcome: Outcome::NoChange,
        note: Some(note),
        unchanged: last.objects,
    };
    let inputs = Inputs {
        commit: sha.clone(),
        ..last
    };
    Some((skip, inputs))
}

/// `commit abc1234 changes nothing under deploy, base`.
pub(in crate::sync) fn unchanged_under(checkout: &Checkout, paths: &[String]) -> String {
    let shown: Vec<&str> = paths
        .iter()
        .map(|p| if p.is_empty() { "." } else { p.as_str() })
        .collect();
    let c = &checkout.commit;
    format!(
        "{} {} changes nothing under {}",
        c.noun(),
        c.short(),
        shown.join(", ")
    )
}

/// A commit held after a failed rollout is not applied again unless forced; a commit
/// already applied, with nothing changed or drifted, sends no write at all.
pub(in crate::sync) fn held_or_unchanged(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    inventory: &Inventory,
    plan: &Plan,
) -> Option<Skip> {
    let sha = checkout.commit.sha.as_str();
    if let Some(held) = inventory.held_at(sha).filter(|_| !ctx.options.force) {
        let note = format!(
            "held: {}; waiting for a new commit (berth sync --force retries this one)",
            held.reason
        );
        ctx.say(&note);
        return Some(Skip {
            outcome: Outcome::Held,
            note: Some(note),
            unchanged: 0,
        });
    }
    // A commit that changes none of the app's objects writes nothing, not even the
    // inventory's commit (which stays the last commit that changed something).
    if plan.is_no_op() && inventory.held.is_none() {
        ctx.say(&format!(
            "no change: {} match {}",
            crate::plural(plan.planned.len(), "object"),
            checkout.commit.short()
        ));
        return Some(Skip {
            outcome: Outcome::NoChange,
            note: None,
            unchanged: plan.planned.len(),
        });
    }
    None
}
