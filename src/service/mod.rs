//! Running as a service: [`notify`] (the systemd notify protocol and watchdog),
//! [`metrics`] (Prometheus), [`http`] (health, readiness, metrics, webhooks) and
//! [`lease`] (leader election between several berth hosts) and [`shards`] (apps shared out
//! across several hosts).

pub mod http;
pub mod lease;
pub mod metrics;
pub mod notify;
pub mod shards;
