//! The daemon's tasks beside the apps: the HTTP endpoint, the watchdog, the outage
//! prober, leader election and the shards' membership.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{AgentError, Shared, TICK};
use crate::cluster::Cluster;
use crate::config::Config;
use crate::page::StatusPage;
use crate::service::control::Control;
use crate::service::http::{self, Endpoint};
use crate::service::lease::{self, Elector};
use crate::service::listener;
use crate::service::metrics::Metrics;
use crate::service::notify::watchdog_period;
use crate::service::shards::Membership;
use crate::shutdown::{stopped, Signal};
use crate::sync::Syncer;

/// How often berth asks an unreachable API server whether it answers again.
const OUTAGE_POLL: Duration = Duration::from_secs(2);

/// While a cluster's API server is unreachable, asks it for its version every
/// [`OUTAGE_POLL`]: its first answer ends the outage (said once, by the client), and the
/// apps whose last sync the outage failed sync again at once (their loops wait on
/// [`Reach::back`]). Each cluster is watched on its own: one's outage delays no other's.
///
/// [`Reach::back`]: crate::cluster::resilient::Reach::back
pub(super) async fn outages(shared: Arc<Shared>, shutdown: Signal) {
    while !crate::shutdown::is_stopped(&shutdown) {
        // The syncer of now: a reload may bring other clusters.
        let syncer = shared.syncer();
        let watches = syncer
            .fleet
            .iter()
            .map(|cluster| ride_out(&shared, &syncer, cluster, shutdown.clone()));
        futures::future::join_all(watches).await;
    }
}

/// Watches one cluster of `syncer` until a reload replaces the syncer or shutdown comes,
/// asking its API server every [`OUTAGE_POLL`] while it is unreachable.
async fn ride_out(shared: &Shared, syncer: &Arc<Syncer>, cluster: &Cluster, mut shutdown: Signal) {
    while Arc::ptr_eq(&shared.syncer(), syncer) {
        tokio::select! {
            () = cluster.reach.lost() => {}
            () = tokio::time::sleep(OUTAGE_POLL * 15) => continue,
            () = stopped(&mut shutdown) => return,
        }
        while cluster.reach.is_down() && Arc::ptr_eq(&shared.syncer(), syncer) {
            tokio::select! {
                _ = cluster.client.apiserver_version() => {}
                () = stopped(&mut shutdown) => return,
            }
            tokio::select! {
                () = cluster.reach.back() => {}
                () = tokio::time::sleep(OUTAGE_POLL) => {}
                () = stopped(&mut shutdown) => return,
            }
        }
    }
}

/// The daemon's background tasks: the watchdog, the watch on outages, and with leader election or sharding the
/// task that holds the Lease (telling `leader`) or the membership (telling `members`).
pub(super) fn start_background(
    control: &Control,
    config: &Config,
    shared: &Arc<Shared>,
    syncer: &Syncer,
    leader: watch::Sender<bool>,
    members: watch::Sender<Vec<String>>,
    shutdown: &Signal,
) -> Vec<tokio::task::JoinHandle<()>> {
    // The leader and membership Leases live in the first cluster listed.
    let home = &syncer.fleet.first().client;
    let mut background = vec![
        control.spawn(watchdog(
            shared.clone(),
            config.agent.sync_timeout,
            shutdown.clone(),
        )),
        tokio::spawn(outages(shared.clone(), shutdown.clone())),
    ];
    if config.agent.leader_election {
        let elector = Elector {
            api: kube::Api::namespaced(home.clone(), &config.agent.inventory_namespace),
            name: config.agent.lease_name.clone(),
            identity: lease::identity(),
            duration: config.agent.lease_duration,
        };
        tracing::info!(lease = %elector.name, identity = %elector.identity, "leader election on: waiting for the lease");
        background.push(tokio::spawn(elector.run(leader, shutdown.clone())));
    }
    if let Some(shard) = &shared.shard {
        let membership = Membership {
            api: kube::Api::namespaced(home.clone(), &shard.namespace),
            group: config.agent.lease_name.clone(),
            identity: shard.identity.clone(),
            duration: shard.duration,
        };
        tracing::info!(group = %membership.group, identity = %membership.identity, "sharding on: the apps are shared out across the live berth hosts");
        background.push(tokio::spawn(membership.run(members, shutdown.clone())));
    }
    background
}

pub(super) fn start_http(
    control: &Control,
    config: &Config,
    open_files: u64,
    metrics: &Arc<Metrics>,
    syncer: &Syncer,
    page: Option<Arc<StatusPage>>,
    shutdown: &Signal,
) -> Result<Option<Arc<Endpoint>>, AgentError> {
    let Some(address) = config.agent.listen else {
        return Ok(None);
    };
    // Bound here, served on the control lane (its socket registered with the lane's runtime).
    let bound = std::net::TcpListener::bind(address).and_then(|tcp| {
        tcp.set_nonblocking(true)?;
        let _lane = control.enter();
        tokio::net::TcpListener::from_std(tcp)
    });
    let tcp = bound.map_err(|source| AgentError::Listen { address, source })?;
    // Ready while the first cluster answers: the one that holds the Leases.
    let home = syncer.fleet.first().client.clone();
    let endpoint = Arc::new(Endpoint::new(metrics.clone(), home));
    if let Some(page) = page {
        let _ = endpoint.pages.set(Arc::new(page));
        tracing::info!(%address, "serving the status page on / (read-only)");
    }
    let cap = listener::connection_cap(config.agent.max_connections, open_files);
    if cap < config.agent.max_connections {
        tracing::warn!(
            max_connections = cap,
            open_files,
            "agent.max_connections lowered: descriptors are kept for the syncs (raise LimitNOFILE= to serve more)"
        );
    }
    tracing::info!(%address, max_connections = cap, "serving /healthz, /readyz, /metrics and /hooks/<app>");
    let listener = listener::Listener::new(tcp, cap);
    control.spawn(http::serve(listener, endpoint.clone(), shutdown.clone()));
    Ok(Some(endpoint))
}

/// Pings the watchdog while every app loop is alive, and refreshes `STATUS=`.
pub(super) async fn watchdog(shared: Arc<Shared>, sync_timeout: Duration, mut shutdown: Signal) {
    let period = watchdog_period();
    let every = period.map_or(TICK * 10, |p| (p / 2).min(TICK * 10));
    let mut warned = false;
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => return,
            () = tokio::time::sleep(every) => {}
        }
        shared.registry.publish_status();
        let Some(period) = period else { continue };
        let stuck = shared.registry.stuck(sync_timeout, period);
        if stuck.is_empty() {
            shared.notify("WATCHDOG=1");
            warned = false;
        } else if !warned {
            tracing::error!(apps = %stuck.join(","), "app loop stuck (a sync running longer than agent.sync_timeout): no more watchdog pings, systemd will restart berth");
            warned = true;
        }
    }
}
