//! Waiting for the health of every applied object that has a notion of readiness but is
//! no Deployment (those are followed step by step in `rollouts.rs`): StatefulSets,
//! DaemonSets, Jobs, claims, load balancers, Services' endpoints (a warning unless
//! `rollout.require_endpoints`) and custom resources with kstatus conditions, up to the
//! app's `rollout.timeout`. One that fails or times out fails the sync, and the
//! inventory keeps the previous commit and the entries those objects had before, so every
//! next sync of that commit applies them and waits again.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Endpoints, Pod};
use kube::api::{Api, DynamicObject};

use super::{Run, Stop, SyncError, Write};
use crate::cluster::api_for;
use crate::health::{health, routes, selects_pods, waits_for, Health, NO_ENDPOINTS};
use crate::history::ObjectHealth;
use crate::manifest::ObjectKey;
use crate::plan::Inventory;

/// How often the objects waited for are read again.
const POLL: Duration = Duration::from_millis(500);
/// How long a Service may take to get endpoints before the warning.
const ENDPOINTS_GRACE: Duration = Duration::from_secs(5);

/// One object being waited for.
struct Waiting<'w> {
    write: &'w Write,
    api: Api<DynamicObject>,
    /// What its status said last.
    last: Option<Health>,
    ended: Option<ObjectHealth>,
    /// A Service with a selector: its endpoints are checked too.
    selects_pods: bool,
}

impl Run<'_> {
    /// Waits until every object waited for is ready, one fails, or the timeout passes.
    pub(super) async fn wait_healthy(
        &mut self,
        writes: &[Write],
        old: &Inventory,
        next: &mut Inventory,
    ) -> Result<(), Stop> {
        let mut waiting: Vec<Waiting> = writes
            .iter()
            .filter(|w| w.applied.is_some())
            .filter(|w| waits_for(w.target.manifest.group(), w.target.manifest.kind()))
            .map(|w| {
                let m = &w.target.manifest;
                let api = api_for(&self.syncer.client, &w.target.resolved, m.namespace());
                Waiting {
                    write: w,
                    api,
                    last: None,
                    ended: None,
                    selects_pods: false,
                }
            })
            .collect();
        if waiting.is_empty() || !self.options.wait {
            return Ok(());
        }
        let started = Instant::now();
        let timeout = self.app.rollout.timeout;
        loop {
            for w in waiting.iter_mut().filter(|w| w.ended.is_none()) {
                self.check(w, started).await;
            }
            let open = waiting.iter().filter(|w| w.ended.is_none()).count();
            if open == 0 {
                break;
            }
            let over = if self.interrupted().is_err() {
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
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let all_ready = waiting
            .iter()
            .all(|w| w.ended.as_ref().is_some_and(|h| h.outcome == "ready"));
        if all_ready && !self.app.rollout.require_endpoints {
            self.warn_without_endpoints(&waiting).await;
        }
        let unready: Vec<ObjectKey> = waiting
            .iter()
            .filter(|w| w.ended.as_ref().is_none_or(|h| h.outcome != "ready"))
            .map(|w| w.write.target.manifest.key())
            .collect();
        let mut failed = false;
        for w in waiting {
            let Some(h) = w.ended else { continue };
            match h.outcome.as_str() {
                "failed" => {
                    self.fail(SyncError::Unhealthy {
                        key: h.key.clone(),
                        what: "failed".into(),
                        reason: h.message.clone(),
                    });
                    failed = true;
                }
                "timed-out" => {
                    self.fail(SyncError::Unhealthy {
                        key: h.key.clone(),
                        what: format!(
                            "did not become ready within {}",
                            humantime::format_duration(timeout)
                        ),
                        reason: h.message.clone(),
                    });
                    failed = true;
                }
                _ => {}
            }
            self.rec.health.push(h);
        }
        if failed || self.interrupted().is_err() {
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

    /// Reads one object and notes where it stands; says so when that changed.
    async fn check(&self, w: &mut Waiting<'_>, started: Instant) {
        let m = &w.write.target.manifest;
        let now = match w.api.get_opt(m.name()).await {
            Ok(Some(obj)) => {
                let json = serde_json::to_value(&obj).unwrap_or_default();
                match health(m.group(), m.kind(), &json) {
                    Health::Current if selects_pods(m.group(), m.kind(), &json) => {
                        w.selects_pods = true;
                        if self.app.rollout.require_endpoints
                            && !self
                                .has_endpoints(m.namespace().unwrap_or("default"), m.name())
                                .await
                        {
                            Health::InProgress(NO_ENDPOINTS.into())
                        } else {
                            Health::Current
                        }
                    }
                    h => h,
                }
            }
            Ok(None) => Health::InProgress("not found (deleted meanwhile?)".into()),
            Err(e) => Health::InProgress(format!("cannot read it: {e}")),
        };
        if w.last.as_ref() != Some(&now) {
            let line = match &now {
                Health::Current => "ready".to_string(),
                Health::InProgress(m) => format!("waiting: {m}"),
                Health::Failed(m) => format!("failed: {m}"),
            };
            (self.report)(&format!("{}: {line}", m.key().kubectl()));
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
}

impl Run<'_> {
    /// Whether a Service has ready endpoints, as kube-proxy would route it.
    async fn has_endpoints(&self, ns: &str, name: &str) -> bool {
        let api: Api<Endpoints> = Api::namespaced(self.syncer.client.clone(), ns);
        api.get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|e| serde_json::to_value(e).ok())
            .is_some_and(|e| routes(&e))
    }

    /// Whether a ready pod matches the Service's selector.
    async fn selects_ready_pod(&self, ns: &str, service: &crate::manifest::Manifest) -> bool {
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
        let api: Api<Pod> = Api::namespaced(self.syncer.client.clone(), ns);
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
    async fn warn_without_endpoints(&self, waiting: &[Waiting<'_>]) {
        let grace = Instant::now() + ENDPOINTS_GRACE;
        for w in waiting.iter().filter(|w| w.selects_pods) {
            let m = &w.write.target.manifest;
            let ns = m.namespace().unwrap_or("default");
            let mut routed = self.has_endpoints(ns, m.name()).await;
            // The grace is for the endpoints controller to catch up with ready pods; with
            // none selected (e.g. scaled to zero) there is nothing to wait for.
            let expected = !routed && self.selects_ready_pod(ns, &w.write.target.manifest).await;
            while expected && !routed && Instant::now() < grace && self.interrupted().is_ok() {
                tokio::time::sleep(POLL).await;
                routed = self.has_endpoints(ns, m.name()).await;
            }
            if !routed {
                (self.report)(&format!(
                    "{}: warning: no ready endpoints (set rollout.require_endpoints = true to wait for them)",
                    m.key().kubectl()
                ));
            }
        }
    }
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
