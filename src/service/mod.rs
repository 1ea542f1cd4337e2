//! Running as a service: [`control`] (the thread the endpoint and the watchdog run on,
//! apart from the syncs), [`notify`] (the systemd notify protocol and watchdog),
//! [`metrics`] (Prometheus), [`http`] (health, readiness, metrics, webhooks) with
//! [`listener`] (which connections it takes: caps, timeouts, descriptors) and
//! [`readiness`] (the cluster asked at most once a second), [`lease`] (leader election
//! between several berth hosts) and [`shards`] (apps shared out across several hosts).

pub mod control;
pub mod http;
pub mod lease;
pub mod listener;
pub mod metrics;
pub mod notify;
pub mod readiness;
pub mod shards;
pub mod stall;
