//! Waiting for the health of every applied object that has a notion of readiness but is
//! no Deployment (those are followed step by step in `roll_out.rs`): StatefulSets,
//! DaemonSets, Jobs, claims, load balancers, Services' endpoints (a warning unless
//! `rollout.require_endpoints`) and custom resources with kstatus conditions, up to the
//! app's `rollout.timeout`. One that fails or times out fails the sync, and the
//! inventory keeps the previous commit and the entries those objects had before, so every
//! next sync of that commit applies them and waits again.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use crate::cluster::health::{has_ready_endpoints, routed_by};
use crate::health::waits_for;
use crate::manifest::ObjectKey;
use crate::plan::Inventory;
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;
use crate::sync::progress::Level;
use crate::sync::ready::{follow, waiting_for, Waiting};
use crate::sync::write::Write;

/// How long a Service may take to get endpoints before the warning.
const ENDPOINTS_GRACE: Duration = Duration::from_secs(5);

/// Waits until every object waited for is ready, one fails, or the timeout passes. The
/// objects that were not ready keep their entries in `next` from `old`, so that every next
/// sync of this commit applies them and waits again.
pub(in crate::sync) async fn wait_healthy(
    ctx: &Ctx<'_>,
    writes: &[&Write],
    old: &Inventory,
    next: &mut Inventory,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let waited = writes
        .iter()
        .copied()
        .filter(|w| w.applied.is_some())
        .filter(|w| waits_for(w.target.manifest.group(), w.target.manifest.kind()));
    let mut waiting = waiting_for(ctx, waited);
    if waiting.is_empty() || !ctx.options.wait {
        return Ok(());
    }
    let timeout = ctx.app.rollout.timeout;
    follow(ctx, &mut waiting, timeout).await;
    let all_ready = waiting
        .iter()
        .all(|w| w.ended.as_ref().is_some_and(|h| h.outcome == "ready"));
    if all_ready && !ctx.app.rollout.require_endpoints {
        warn_without_endpoints(ctx, &waiting).await;
    }
    let unready: Vec<ObjectKey> = waiting
        .iter()
        .filter(|w| w.ended.as_ref().is_none_or(|h| h.outcome != "ready"))
        .map(|w| w.write.target.manifest.key())
        .collect();
    let mut failed = false;
    for h in waiting.into_iter().filter_map(|w| w.ended) {
        if let Some(what) = unhealthy(&h.outcome, timeout) {
            journal.fail(SyncError::Unhealthy {
                key: h.key.clone(),
                what,
                reason: h.message.clone(),
            });
            failed = true;
        }
        journal.health.push(h);
    }
    if failed || ctx.interrupted().is_err() {
        // Not healthy yet: the objects that were not ready keep their entries from
        // before, so that every next sync of this commit applies them and waits again.
        *next = crate::plan::unfinished(next, old, &unready);
        next.commit = old.commit.clone();
        return Err(if failed {
            Stop::Failed
        } else {
            Stop::Interrupted
        });
    }
    Ok(())
}

/// What an object that ended with `outcome` did wrong, when it did.
fn unhealthy(outcome: &str, timeout: Duration) -> Option<String> {
    match outcome {
        "failed" => Some("failed".into()),
        "timed-out" => Some(format!(
            "did not become ready within {}",
            humantime::format_duration(timeout)
        )),
        _ => None,
    }
}

/// Whether a ready pod matches the Service's selector.
async fn selects_ready_pod(ctx: &Ctx<'_>, ns: &str, service: &crate::manifest::Manifest) -> bool {
    let selector = service
        .object
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(|s| s.as_object());
    let Some(selector) = selector else {
        return false;
    };
    let labels: Vec<String> = selector
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
        .collect();
    let api: Api<Pod> = Api::namespaced(ctx.cluster.client.clone(), ns);
    let pods = api
        .list(&kube::api::ListParams::default().labels(&labels.join(",")))
        .await;
    pods.is_ok_and(|list| {
        list.items.iter().any(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
}

/// Once everything else is ready: a Service that still routes to no pod after a few
/// seconds (the endpoints controller's moment to catch up) is a warning — its pods may
/// be elsewhere, or scaled to zero on purpose.
async fn warn_without_endpoints(ctx: &Ctx<'_>, waiting: &[Waiting<'_>]) {
    let grace = tokio::time::Instant::now() + ENDPOINTS_GRACE;
    for w in waiting.iter().filter(|w| w.selects_pods) {
        let m = &w.write.target.manifest;
        let ns = m.namespace_or_default();
        let client = &ctx.cluster.client;
        let mut routed = has_ready_endpoints(client, ns, m.name()).await;
        // The grace is for the endpoints controller to catch up with ready pods, watched;
        // with none selected (e.g. scaled to zero) there is nothing to wait for.
        if !routed && selects_ready_pod(ctx, ns, &w.write.target.manifest).await {
            routed = tokio::select! {
                routed = routed_by(client, ns, m.name(), grace) => routed,
                () = crate::shutdown::asked(ctx.shutdown.clone()) => false,
            };
        }
        if !routed {
            ctx.tell(Level::Warn, &format!(
                    "{}: warning: no ready endpoints (set rollout.require_endpoints = true to wait for them)",
                    m.key().kubectl()
                ));
        }
    }
}
