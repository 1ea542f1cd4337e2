//! Waiting for objects to be ready, as their status says (every kind with a notion of
//! readiness but Deployments): what the health step waits for after each wave, and the
//! apply step for the CRDs it has just written to be Established.

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};

use super::context::Ctx;
use super::write::Write;
use crate::cluster::api_for;
use crate::cluster::health::{live_health, said};
use crate::health::{health, selects_pods, Health};
use crate::history::ObjectHealth;

/// How often the objects waited for are read again.
pub(super) const POLL: Duration = Duration::from_millis(500);

/// One object being waited for.
pub(super) struct Waiting<'w> {
    pub write: &'w Write,
    pub api: Api<DynamicObject>,
    /// What its status said last.
    pub last: Option<Health>,
    pub ended: Option<ObjectHealth>,
    /// A Service with a selector: its endpoints are checked too.
    pub selects_pods: bool,
}

/// The objects `writes` as they are waited for.
pub(super) fn waiting_for<'w>(
    ctx: &Ctx<'_>,
    writes: impl Iterator<Item = &'w Write>,
) -> Vec<Waiting<'w>> {
    writes
        .map(|w| Waiting {
            write: w,
            api: api_for(
                &ctx.cluster.client,
                &w.target.resolved,
                w.target.manifest.namespace(),
            ),
            last: None,
            ended: None,
            selects_pods: false,
        })
        .collect()
}

/// Waits, as for every other kind's health, until each of `writes` is ready, failed, or
/// `timeout` or shutdown cut it short; how each ended, in their order. The apply step waits
/// so for the CRDs it has just written to be Established.
pub(in crate::sync) async fn wait_ready(
    ctx: &Ctx<'_>,
    writes: &[&Write],
    timeout: Duration,
) -> Vec<ObjectHealth> {
    let mut waiting = waiting_for(ctx, writes.iter().copied());
    poll(ctx, &mut waiting, timeout).await;
    waiting.into_iter().filter_map(|w| w.ended).collect()
}

/// Reads the objects waited for until each has ended: ready, failed, or cut short by the
/// timeout or shutdown.
pub(super) async fn poll(ctx: &Ctx<'_>, waiting: &mut [Waiting<'_>], timeout: Duration) {
    let started = Instant::now();
    // A long wait says where it stands: every quarter of the timeout, at most every 30 s.
    let every = (timeout / 4).clamp(POLL, Duration::from_secs(30));
    let mut report = started + every;
    loop {
        for w in waiting.iter_mut().filter(|w| w.ended.is_none()) {
            check(ctx, w, started).await;
        }
        if waiting.iter().all(|w| w.ended.is_some()) {
            return;
        }
        if Instant::now() >= report {
            report += every;
            still_waiting(ctx, waiting, started.elapsed(), timeout);
        }
        let over = if ctx.interrupted().is_err() {
            Some("interrupted")
        } else if started.elapsed() >= timeout {
            Some("timed-out")
        } else {
            None
        };
        if let Some(outcome) = over {
            for w in waiting.iter_mut().filter(|w| w.ended.is_none()) {
                w.ended = Some(ended(w, outcome, None));
            }
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Says which objects are not ready yet, and how long of `timeout` has passed (what each
/// waits for was said when it changed).
fn still_waiting(ctx: &Ctx<'_>, waiting: &[Waiting<'_>], elapsed: Duration, timeout: Duration) {
    for w in waiting.iter().filter(|w| w.ended.is_none()) {
        ctx.say(&format!(
            "{}: still waiting ({}s of {}s)",
            w.write.target.manifest.key().kubectl(),
            elapsed.as_secs(),
            timeout.as_secs()
        ));
    }
}

/// Reads one object and notes where it stands; says so when that changed. The apply's
/// answer, the object as it stood once written (its body kept), is the first look: when
/// it is ready already, no request is sent.
async fn check(ctx: &Ctx<'_>, w: &mut Waiting<'_>, started: Instant) {
    let write = w.write;
    let m = &write.target.manifest;
    // The first look is the apply's answer, when it says the object itself is ready (a
    // read of the object would say no more); what more it needs (endpoints) is read once.
    let answer = (write.applied.as_ref())
        .filter(|obj| w.last.is_none() && !obj.data.is_null())
        .map(|obj| serde_json::to_value(obj).unwrap_or_default())
        .filter(|json| health(m.group(), m.kind(), json) == Health::Current);
    let now = match answer {
        Some(json) => health_of(ctx, w, &json).await,
        None => match w.api.get_opt(m.name()).await {
            Ok(Some(obj)) => {
                health_of(ctx, w, &serde_json::to_value(obj).unwrap_or_default()).await
            }
            Ok(None) => Health::InProgress("not found (deleted meanwhile?)".into()),
            Err(e) => Health::InProgress(format!("cannot read it: {e}")),
        },
    };
    if w.last.as_ref() != Some(&now) {
        ctx.say(&format!("{}: {}", m.key().kubectl(), said(&now)));
        w.last = Some(now.clone());
    }
    w.ended = match now {
        Health::Current => Some(ended(w, "ready", Some(started))),
        Health::Failed(message) => Some(ObjectHealth {
            message,
            ..ended(w, "failed", None)
        }),
        Health::InProgress(_) => None,
    };
}

/// Where `json`, the object `w` waits for, stands.
async fn health_of(ctx: &Ctx<'_>, w: &mut Waiting<'_>, json: &serde_json::Value) -> Health {
    let m = &w.write.target.manifest;
    w.selects_pods = selects_pods(m.group(), m.kind(), json);
    let client = &ctx.cluster.client;
    let ns = m.namespace_or_default();
    let endpoints = ctx.app.rollout.require_endpoints;
    live_health(client, m.group(), m.kind(), ns, json, endpoints).await
}

/// The record of how waiting for `w` ended.
fn ended(w: &Waiting<'_>, outcome: &str, ready_since: Option<Instant>) -> ObjectHealth {
    ObjectHealth {
        key: w.write.target.manifest.key(),
        outcome: outcome.into(),
        message: match &w.last {
            Some(Health::InProgress(m)) => m.clone(),
            _ => String::new(),
        },
        ready_ms: ready_since.map(|s| s.elapsed().as_millis() as u64),
    }
}
