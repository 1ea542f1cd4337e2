//! Waiting for objects to be ready, as their status says (every kind with a notion of
//! readiness but Deployments): what the health step waits for after each wave, and the
//! apply step for the CRDs it has just written to be Established. Each object is watched
//! (a field selector on its name), never polled.

use std::time::{Duration, Instant};

use futures::stream::{BoxStream, SelectAll};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Endpoints;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::watch_object;
use kube::runtime::WatchStreamExt;

use super::context::Ctx;
use super::write::Write;
use crate::cluster::api_for;
use crate::cluster::health::said;
use crate::health::{health, routes, selects_pods, Health, NO_ENDPOINTS};
use crate::history::ObjectHealth;

/// One object being waited for.
pub(super) struct Waiting<'w> {
    pub write: &'w Write,
    api: Api<DynamicObject>,
    /// What was said of it last.
    last: Option<Health>,
    pub ended: Option<ObjectHealth>,
    /// A Service with a selector: its endpoints are checked too.
    pub selects_pods: bool,
    /// Where the object itself stands, by its status (in progress until a look).
    status: Health,
    /// Whether its Endpoints route to a ready address, once they are watched.
    routed: Option<bool>,
}

/// What a watch of the objects waited for told: of the `usize`th.
enum Seen {
    /// The object as it stands now (its JSON); `None` once it is gone.
    Object(Option<serde_json::Value>),
    /// Whether the Service's Endpoints list a ready address.
    Routed(bool),
    /// The watch failed (it starts again, backing off).
    Unreadable(String),
}

type Watches = SelectAll<BoxStream<'static, (usize, Seen)>>;

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
            status: Health::InProgress(String::new()),
            routed: None,
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
    follow(ctx, &mut waiting, timeout).await;
    waiting.into_iter().filter_map(|w| w.ended).collect()
}

/// Follows the objects waited for until each has ended — ready, failed, or cut short by
/// the timeout or shutdown — by a watch of each (a Service's Endpoints too, when it must
/// route): a change is seen as it happens, and an object standing still costs no request.
/// The apply's answer, the object as it stood once written, is the first look.
pub(super) async fn follow(ctx: &Ctx<'_>, waiting: &mut [Waiting<'_>], timeout: Duration) {
    let started = Instant::now();
    // A long wait says where it stands: every quarter of the timeout, at most every 30 s.
    let every = (timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
    let mut report = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let deadline = tokio::time::sleep(timeout);
    let stop = crate::shutdown::asked(ctx.shutdown.clone());
    tokio::pin!(deadline, stop);
    let mut watches = Watches::new();
    for (i, w) in waiting.iter_mut().enumerate() {
        let applied = (w.write.applied.clone()).filter(|obj| !obj.data.is_null());
        if let Some(applied) = applied {
            let json = serde_json::to_value(applied).unwrap_or_default();
            look(ctx, w, Seen::Object(Some(json)), i, &mut watches, started);
        }
        if w.ended.is_none() {
            let name = w.write.target.manifest.name();
            let object = watch_object(w.api.clone(), name).default_backoff();
            let json = |o: Option<DynamicObject>| {
                Seen::Object(o.and_then(|o| serde_json::to_value(o).ok()))
            };
            watches.push(object.map(move |o| (i, seen(o.map(json)))).boxed());
        }
    }
    while waiting.iter().any(|w| w.ended.is_none()) {
        tokio::select! {
            Some((i, seen)) = watches.next() => {
                look(ctx, &mut waiting[i], seen, i, &mut watches, started);
            }
            _ = report.tick() => still_waiting(ctx, waiting, started.elapsed(), timeout),
            () = &mut deadline => return end_all(waiting, "timed-out"),
            () = &mut stop => return end_all(waiting, "interrupted"),
        }
    }
}

fn seen(result: Result<Seen, kube::runtime::watcher::Error>) -> Seen {
    result.unwrap_or_else(|e| Seen::Unreadable(e.to_string()))
}

/// Ends every object still waited for with `outcome`.
fn end_all(waiting: &mut [Waiting<'_>], outcome: &str) {
    for w in waiting.iter_mut().filter(|w| w.ended.is_none()) {
        w.ended = Some(ended(w, outcome, None));
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

/// Notes what a watch of the `i`th object waited for, `w`, told, and where it stands now;
/// says so when that changed. A Service that must route has its Endpoints watched too.
fn look(
    ctx: &Ctx<'_>,
    w: &mut Waiting<'_>,
    seen: Seen,
    i: usize,
    watches: &mut Watches,
    started: Instant,
) {
    if w.ended.is_some() {
        return;
    }
    let m = &w.write.target.manifest;
    match seen {
        Seen::Object(Some(json)) => {
            w.selects_pods = selects_pods(m.group(), m.kind(), &json);
            w.status = health(m.group(), m.kind(), &json);
        }
        Seen::Object(None) => {
            w.status = Health::InProgress("not found (deleted meanwhile?)".into())
        }
        Seen::Routed(routed) => w.routed = Some(routed),
        Seen::Unreadable(e) => w.status = Health::InProgress(format!("cannot read it: {e}")),
    }
    let must_route = w.selects_pods && ctx.app.rollout.require_endpoints;
    let now = match w.status.clone() {
        Health::Current if must_route && w.routed != Some(true) => {
            if w.routed.is_none() {
                w.routed = Some(false);
                watches.push(endpoints(ctx, m, i));
            }
            Health::InProgress(NO_ENDPOINTS.into())
        }
        status => status,
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

/// A watch of the Endpoints of Service `m`, the `i`th object waited for: whether they
/// route to a ready address, as kube-proxy would.
fn endpoints(
    ctx: &Ctx<'_>,
    m: &crate::manifest::Manifest,
    i: usize,
) -> BoxStream<'static, (usize, Seen)> {
    let ns = m.namespace_or_default();
    let api: Api<Endpoints> = Api::namespaced(ctx.cluster.client.clone(), ns);
    let routed = |e: Option<Endpoints>| {
        let json = e.and_then(|e| serde_json::to_value(e).ok());
        Seen::Routed(json.is_some_and(|e| routes(&e)))
    };
    let watch = watch_object(api, m.name()).default_backoff();
    watch.map(move |e| (i, seen(e.map(routed)))).boxed()
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
