//! Apps shared out across several berth hosts (`[agent] sharding = true`), through the
//! cluster's own Leases and nothing else:
//!
//! - **Membership**: each host keeps a Lease `<lease_name>-member-<hash>` in
//!   `inventory_namespace` (labelled `berth.dev/shard-group=<lease_name>`), renewed every
//!   third of `lease_duration`; the live members are those renewed within it. A clean exit
//!   deletes the host's Lease, so the others take its apps at once.
//! - **Assignment** ([`assign`]): a consistent hash with bounded loads, as Argo CD's
//!   newest sharding algorithm: apps and members are points on a ring (each member
//!   [`VNODES`] times); each app goes to the first member clockwise that has fewer than
//!   ⌈(1+ε)·apps/members⌉ apps ([`EPSILON`] = 0.25). Every host computes the same
//!   assignment from the same membership; a member joining or leaving moves few apps.
//! - **Fencing** ([`Fence`]): a host syncs an app only while holding the app's Lease
//!   `berth-app-<app>` (taken with the Lease's resourceVersion, renewed during the sync,
//!   released after it). During a hand-over the new owner waits until the old one's sync
//!   is over (or its Lease expired, when it died), so one app never has two writers.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use tokio::sync::watch;

use super::lease::{expired, Elector};
use crate::shutdown::{stopped, Signal};

/// How far above the mean a member's share may grow: no member gets more than
/// ⌈(1 + ε)·apps/members⌉ apps.
pub const EPSILON: f64 = 0.25;
/// Points per member on the ring.
pub const VNODES: usize = 100;
/// The label that groups the membership Leases of one set of hosts.
pub const GROUP_LABEL: &str = "berth.dev/shard-group";

fn point(s: &str) -> u64 {
    let hash = crate::digest::sha256(s.as_bytes());
    u64::from_be_bytes(hash[..8].try_into().unwrap_or_default())
}

/// The most apps one member may get.
pub fn capacity(apps: usize, members: usize) -> usize {
    if members == 0 {
        return 0;
    }
    ((1.0 + EPSILON) * apps as f64 / members as f64).ceil() as usize
}

/// Which member syncs each app: a consistent hash with bounded loads (see the module's
/// documentation). The same apps and members give the same answer on every host; no
/// member gets more than [`capacity`]. Empty when there are no members.
pub fn assign<'a>(apps: &[String], members: &'a [String]) -> BTreeMap<String, &'a str> {
    let mut ring: Vec<(u64, usize)> = members
        .iter()
        .enumerate()
        .flat_map(|(i, m)| (0..VNODES).map(move |v| (point(&format!("{m}#{v}")), i)))
        .collect();
    ring.sort_unstable();
    let cap = capacity(apps.len(), members.len());
    let mut load = vec![0usize; members.len()];
    let mut sorted: Vec<&String> = apps.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut owners = BTreeMap::new();
    for app in sorted {
        let start = ring.partition_point(|(p, _)| *p < point(app));
        let owner = (0..ring.len())
            .map(|k| ring[(start + k) % ring.len()].1)
            .find(|&m| load[m] < cap);
        if let Some(m) = owner {
            load[m] += 1;
            owners.insert(app.clone(), members[m].as_str());
        }
    }
    owners
}

/// This host's membership of the shard group.
pub struct Membership {
    /// Leases in `inventory_namespace`.
    pub api: Api<Lease>,
    /// `agent.lease_name`: hosts with the same name share the apps.
    pub group: String,
    /// This host (`hostname/pid`).
    pub identity: String,
    /// A member not renewed for this long is gone.
    pub duration: Duration,
}

impl Membership {
    fn lease_name(&self) -> String {
        let hex = crate::digest::hex(&crate::digest::sha256(self.identity.as_bytes())[..5]);
        format!("{}-member-{hex}", self.group)
    }

    /// Renews this host's Lease (one server-side apply).
    async fn renew(&self) -> Result<(), kube::Error> {
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.lease_name(),
                "labels": { GROUP_LABEL: self.group },
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration.as_secs(),
                "renewTime": MicroTime(Timestamp::now()),
            },
        });
        self.api
            .patch(
                &self.lease_name(),
                &PatchParams::apply("berth").force(),
                &Patch::Apply(lease),
            )
            .await
            .map(drop)
    }

    /// Renews and reads the membership every third of the lease duration, publishing the
    /// live members, until `shutdown`; then deletes this host's Lease.
    pub async fn run(self, members: watch::Sender<Vec<String>>, mut shutdown: Signal) {
        let period = self.duration / 3;
        loop {
            let live = match self.renew().await {
                Ok(()) => live_members(&self.api, &self.group).await,
                Err(e) => Err(e),
            };
            match live {
                Ok(mut live) => {
                    if !live.contains(&self.identity) {
                        live.push(self.identity.clone());
                        live.sort();
                    }
                    members.send_if_modified(|m| {
                        let changed = *m != live;
                        *m = live;
                        changed
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot renew or read the shard membership; keeping the last one");
                }
            }
            tokio::select! {
                () = stopped(&mut shutdown) => break,
                () = tokio::time::sleep(period) => {}
            }
        }
        let _ = self
            .api
            .delete(&self.lease_name(), &DeleteParams::default())
            .await;
    }
}

/// The live members of shard group `group`, sorted.
///
/// # Errors
/// The Leases could not be listed.
pub async fn live_members(api: &Api<Lease>, group: &str) -> Result<Vec<String>, kube::Error> {
    let now = Timestamp::now();
    let leases = api
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={group}")))
        .await?;
    let mut live: Vec<String> = leases
        .items
        .into_iter()
        .filter_map(|l| l.spec)
        .filter(|s| !expired(s, now))
        .filter_map(|s| s.holder_identity)
        .collect();
    live.sort();
    live.dedup();
    Ok(live)
}

/// What a sharded host needs to take an app's Lease: its identity, and where and for how
/// long the Leases are held.
#[derive(Debug, Clone)]
pub struct Shard {
    /// This host's identity.
    pub identity: String,
    /// The namespace of the Leases (`agent.inventory_namespace`).
    pub namespace: String,
    /// How long a claim lasts unrenewed (`agent.lease_duration`).
    pub duration: Duration,
}

impl Shard {
    /// Takes `app`'s Lease in the cluster of `client` (the first listed), waiting while
    /// another host holds it; `None` when `shutdown` comes first.
    pub async fn fence(
        &self,
        client: kube::Client,
        app: &str,
        shutdown: &mut Signal,
    ) -> Option<Fence> {
        let api = Api::namespaced(client, &self.namespace);
        Fence::take(api, app, &self.identity, self.duration, shutdown).await
    }
}

/// An app's Lease, held by this host for one sync.
pub struct Fence {
    elector: Elector,
    renewing: tokio::task::JoinHandle<()>,
}

/// The name of an app's Lease.
pub fn app_lease(app: &str) -> String {
    format!("berth-app-{app}")
}

impl Fence {
    /// Takes the app's Lease, waiting while another host holds it (its sync in progress,
    /// or until its claim expires); `None` when `shutdown` comes first. Renewed every
    /// third of `duration` until released.
    pub async fn take(
        api: Api<Lease>,
        app: &str,
        identity: &str,
        duration: Duration,
        shutdown: &mut Signal,
    ) -> Option<Fence> {
        let elector = Elector {
            api,
            name: app_lease(app),
            identity: identity.to_string(),
            duration,
        };
        // Each state is said once, not every half second.
        let (mut waiting, mut failing) = (false, false);
        loop {
            match elector.round().await {
                Ok(true) => break,
                Ok(false) => {
                    if !std::mem::replace(&mut waiting, true) {
                        tracing::info!(
                            app,
                            "waiting: another host holds the app's Lease (a hand-over)"
                        );
                    }
                }
                Err(e) => {
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(app, error = %e, "cannot take the app's Lease; trying again (check the RBAC for leases)");
                    }
                }
            }
            tokio::select! {
                () = stopped(shutdown) => return None,
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        let renewer = elector.clone();
        let renewing = tokio::spawn(async move {
            loop {
                tokio::time::sleep(duration / 3).await;
                if !matches!(renewer.round().await, Ok(true)) {
                    tracing::warn!(lease = %renewer.name, "cannot renew the app's Lease during its sync");
                }
            }
        });
        Some(Fence { elector, renewing })
    }

    /// Stops renewing and gives the Lease up, so the next holder need not wait.
    pub async fn release(self) {
        self.renewing.abort();
        self.elector.release().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn loads(owners: &BTreeMap<String, &str>) -> BTreeMap<String, usize> {
        let mut loads = BTreeMap::new();
        for m in owners.values() {
            *loads.entry(m.to_string()).or_default() += 1;
        }
        loads
    }

    fn moved(a: &BTreeMap<String, &str>, b: &BTreeMap<String, &str>) -> usize {
        a.iter().filter(|(app, m)| b.get(*app) != Some(*m)).count()
    }

    #[test]
    fn every_app_has_one_owner_and_no_owner_more_than_its_bound() {
        let apps = names("app-", 1000);
        for n in [1, 2, 3, 7] {
            let members = names("host-", n);
            let owners = assign(&apps, &members);
            assert_eq!(owners.len(), 1000);
            let most = loads(&owners).into_values().max().unwrap();
            assert!(most <= capacity(1000, n), "{n} members: {most} apps on one");
        }
        assert!(assign(&apps, &[]).is_empty());
        let members = names("host-", 3);
        assert_eq!(
            assign(&apps, &members),
            assign(&apps, &members),
            "the same answer on every host"
        );
    }

    #[test]
    fn a_member_joining_or_leaving_moves_few_apps() {
        let apps = names("app-", 1000);
        let three = names("host-", 3);
        let four = names("host-", 4);
        let before = assign(&apps, &three);
        let after = assign(&apps, &four);
        let to_new = after.values().filter(|m| **m == "host-3").count();
        let others = moved(&before, &after) - to_new;
        // The newcomer takes about its share; among the others, the bound shuffles few.
        assert!(
            (200..=313).contains(&to_new),
            "{to_new} apps to the newcomer"
        );
        assert!(others <= 100, "{others} apps moved between the old members");
        // One leaving: its apps move, and few others.
        let left = assign(&apps, &three[..2]);
        let orphans = before.values().filter(|m| **m == "host-2").count();
        let others = moved(&before, &left) - orphans;
        assert!(
            others <= 150,
            "{others} apps of the remaining members moved"
        );
    }
}
