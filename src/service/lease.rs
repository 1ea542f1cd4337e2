//! Leader election with a `coordination.k8s.io/v1` Lease, so several hosts can run berth
//! for one cluster: only the holder applies. The holder renews every third of the lease
//! duration; when it stops (or dies), another takes over once the lease has expired —
//! at once when the holder released it on a clean exit. Writes use the Lease's
//! resourceVersion, so two hosts never both win a round.

use std::time::Duration;

use crate::shutdown::{stopped, Signal};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

/// One host's claim on a Lease.
#[derive(Clone)]
pub struct Elector {
    /// The Lease.
    pub api: Api<Lease>,
    /// Its name.
    pub name: String,
    /// Who this host is (`hostname/pid`).
    pub identity: String,
    /// How long a claim holds without renewal.
    pub duration: Duration,
}

/// This machine's name.
pub fn host_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    host.trim().to_string()
}

/// This host's identity: hostname and pid.
pub fn identity() -> String {
    format!("{}/{}", host_name(), std::process::id())
}

impl Elector {
    /// Tries to take or keep the Lease once; true when this host holds it afterwards.
    ///
    /// # Errors
    /// A request failed (a lost race is `Ok(false)`, not an error).
    pub async fn round(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(self.claim(None, now)),
            };
            return self.create(&lease).await;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let free = spec.holder_identity.as_deref().is_none_or(str::is_empty) || expired(&spec, now);
        if !mine && !free {
            return Ok(false);
        }
        lease.spec = Some(
            self.claim(Some(&spec).filter(|_| mine), now)
                .with_transitions(&spec, mine),
        );
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Creates the Lease; the first host on a fresh cluster creates its namespace too (no
    /// sync has made berth's namespace yet, and a standby never syncs before it leads).
    async fn create(&self, lease: &Lease) -> Result<bool, kube::Error> {
        let mut created = self.api.create(&PostParams::default(), lease).await;
        if let (Err(kube::Error::Api(s)), Some(ns)) = (&created, self.api.namespace()) {
            if s.code == 404 {
                let namespaces: Api<Namespace> = Api::all(self.api.clone().into_client());
                let namespace = Namespace {
                    metadata: kube::api::ObjectMeta {
                        name: Some(ns.to_string()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                match namespaces.create(&PostParams::default(), &namespace).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    made => drop(made?),
                }
                created = self.api.create(&PostParams::default(), lease).await;
            }
        }
        match created {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn claim(&self, kept: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.duration.as_secs() as i32),
            acquire_time: kept
                .and_then(|s| s.acquire_time.clone())
                .or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: kept.and_then(|s| s.lease_transitions),
            ..LeaseSpec::default()
        }
    }

    /// Gives the Lease up (on a clean exit) so another host takes over at once.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await {
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                spec.holder_identity = None;
                let _ = self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await;
            }
        }
    }

    /// Runs rounds every third of the lease duration, publishing leadership, until
    /// `shutdown`; then releases the Lease.
    pub async fn run(self, leader: watch::Sender<bool>, mut shutdown: Signal) {
        let period = self.duration / 3;
        loop {
            let holding = match self.round().await {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(error = %e, lease = %self.name, "leader election round failed");
                    false
                }
            };
            leader.send_if_modified(|l| {
                let changed = *l != holding;
                *l = holding;
                changed
            });
            tokio::select! {
                () = stopped(&mut shutdown) => break,
                () = tokio::time::sleep(period) => {}
            }
        }
        self.release().await;
    }
}

trait Transitions {
    fn with_transitions(self, old: &LeaseSpec, kept: bool) -> Self;
}

impl Transitions for LeaseSpec {
    /// A new holder counts one more transition.
    fn with_transitions(mut self, old: &LeaseSpec, kept: bool) -> Self {
        self.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + i32::from(!kept));
        self
    }
}

/// A claim not renewed within its duration (or never renewed).
pub(super) fn expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    spec.renew_time
        .as_ref()
        .is_none_or(|t| t.0 + duration < now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_after_its_duration() {
        let now = Timestamp::now();
        let spec = |secs_ago: i64| LeaseSpec {
            holder_identity: Some("other".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(now - SignedDuration::from_secs(secs_ago))),
            ..LeaseSpec::default()
        };
        assert!(!expired(&spec(5), now));
        assert!(expired(&spec(16), now));
        assert!(expired(&LeaseSpec::default(), now));
        let taken = spec(16).with_transitions(
            &LeaseSpec {
                lease_transitions: Some(2),
                ..LeaseSpec::default()
            },
            false,
        );
        assert_eq!(taken.lease_transitions, Some(3));
    }
}
