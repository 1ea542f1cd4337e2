//! `[agent]` (the agent process: state, intervals, limits, the endpoint, leases) and
//! `[cluster]` or `[[cluster]]` (how to reach the cluster, or each of several), with their
//! defaults.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::credentials;
use super::values::{byte_size, duration, listen};

/// `[agent]`: settings of the agent process.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Where repositories, inventories' local copies and the history log live.
    pub state_dir: PathBuf,
    /// How often each app is synced when nothing else triggers it.
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
    /// Up to this much random delay is added to each interval, so apps spread out.
    #[serde(deserialize_with = "duration")]
    pub jitter: Duration,
    /// The server-side apply field manager; changing it orphans the fields the old one owned.
    pub field_manager: String,
    /// Log output format.
    pub log_format: LogFormat,
    /// Largest manifest file read; a larger one is an error.
    #[serde(deserialize_with = "byte_size")]
    pub max_file_size: u64,
    /// Largest total of manifest bytes one app may render.
    #[serde(deserialize_with = "byte_size")]
    pub max_app_size: u64,
    /// Most objects one app may render; reading stops past it.
    pub max_objects: usize,
    /// Requests in flight at once while applying one stage.
    pub concurrency: usize,
    /// Apps syncing at once; the others queue, first come first served.
    pub max_concurrent_syncs: usize,
    /// Namespace of the inventory ConfigMaps (`berth-inventory-<app>`); created if missing.
    pub inventory_namespace: String,
    /// Sync history records kept per app.
    pub history_keep: usize,
    /// Sync history records older than this are dropped.
    #[serde(deserialize_with = "duration")]
    pub history_max_age: Duration,
    /// Address of the HTTP endpoint (health, metrics, webhooks); `None` (`"off"` in the
    /// file) disables it.
    #[serde(deserialize_with = "listen")]
    pub listen: Option<SocketAddr>,
    /// Connections the HTTP endpoint serves at once (lowered to keep file descriptors for
    /// the syncs); 32 more get one request each with short timeouts, the rest are closed.
    pub max_connections: usize,
    /// A sync running longer than this counts as stuck: the systemd watchdog stops.
    #[serde(deserialize_with = "duration")]
    pub sync_timeout: Duration,
    /// Only the holder of a Lease in the cluster applies (for several berth hosts).
    pub leader_election: bool,
    /// Share the apps out across every berth host with the same `lease_name` (membership
    /// Leases, a consistent hash with bounded loads, a Lease per app as the fence).
    pub sharding: bool,
    /// The Lease's name (in `inventory_namespace`); with sharding, the group's name.
    pub lease_name: String,
    /// How long a Lease holds without renewal; another host takes over after that.
    #[serde(deserialize_with = "duration")]
    pub lease_duration: Duration,
    /// The command that renders a kustomization, run as `COMMAND DIR` (e.g.
    /// `"kustomize build"`); unset: `kustomize build` when a `kustomize` binary is on
    /// PATH, else `kubectl kustomize`.
    pub kustomize: Option<String>,
    /// The helm program (a path, or a name on PATH); unset: `helm` on PATH.
    pub helm: Option<String>,
    /// Chart repositories (`https://charts.example.com/stable`) and OCI registries' paths
    /// (`oci://registry.example.com/charts`) whose charts a chart's dependencies may
    /// download, as its `Chart.lock` pins them: once per lock, into `state_dir/charts`,
    /// reached with the app's `[app.registry]`. Empty: every dependency must be vendored
    /// in `charts/`.
    pub allow_remote_charts: Vec<String>,
    /// How long one kustomize or helm run may take (its wall-clock time, and its CPU
    /// time).
    #[serde(deserialize_with = "duration")]
    pub render_timeout: Duration,
    /// The most memory one kustomize or helm run may have (`RLIMIT_DATA`, with what it
    /// starts).
    #[serde(deserialize_with = "byte_size")]
    pub render_memory: u64,
    /// Serve the read-only status page (`/`, `/apps/NAME`, `/api/…`) on `listen`.
    pub status_page: bool,
    /// Who may read the status page: a file of `USER:PASSWORD` lines (HTTP basic auth,
    /// for browsers) and bare `TOKEN` lines (`Authorization: Bearer TOKEN`), or
    /// `credential:NAME`. Unset: anyone who reaches `listen` (loopback only).
    #[serde(default, deserialize_with = "credentials::file")]
    pub status_page_credentials: Option<PathBuf>,
    /// Credentials are required on a loopback `listen` too: on a host with other local
    /// users (who can reach 127.0.0.1), the page would show them what `state_dir` (0700)
    /// keeps from them. `status_page_credentials` must then be set.
    pub status_page_credentials_on_loopback: bool,
}

/// The memory one kustomize or helm run may have by default: a render of thousands of
/// objects takes a few hundred MiB; a Go program reserves about 700 MiB of address space
/// to start, which `RLIMIT_DATA` does not count. Its code, stacks and what its collector
/// has not yet given back come on top: helm stopped at this limit held up to 751 MiB
/// resident, and at 768 MiB up to 963 MiB, too near 1 GiB (docs/security.md).
pub const DEFAULT_RENDER_MEMORY: u64 = 640 << 20;

impl AgentConfig {
    /// The settings that differ in `new` and that only a restart takes (the endpoint,
    /// the status page, the Leases, the state folder, the log format): a reload keeps the
    /// running ones and says so.
    pub fn restart_only(&self, new: &AgentConfig) -> Vec<&'static str> {
        let differs = [
            ("state_dir", self.state_dir != new.state_dir),
            ("log_format", self.log_format != new.log_format),
            ("listen", self.listen != new.listen),
            (
                "max_connections",
                self.max_connections != new.max_connections,
            ),
            ("status_page", self.status_page != new.status_page),
            (
                "status_page_credentials",
                self.status_page_credentials != new.status_page_credentials
                    || self.status_page_credentials_on_loopback
                        != new.status_page_credentials_on_loopback,
            ),
            (
                "leader_election",
                self.leader_election != new.leader_election,
            ),
            ("sharding", self.sharding != new.sharding),
            (
                "lease_name",
                self.lease_name != new.lease_name || self.lease_duration != new.lease_duration,
            ),
        ];
        differs
            .into_iter()
            .filter_map(|(key, differs)| differs.then_some(key))
            .collect()
    }

    /// `self` with the settings only a restart takes (those of [`restart_only`]) as
    /// `running` has them: what a reload runs, so that the next reload compares with what
    /// runs, not with what an earlier reload asked for.
    ///
    /// [`restart_only`]: AgentConfig::restart_only
    pub fn keeping_running(self, running: &AgentConfig) -> AgentConfig {
        AgentConfig {
            state_dir: running.state_dir.clone(),
            log_format: running.log_format,
            listen: running.listen,
            max_connections: running.max_connections,
            status_page: running.status_page,
            status_page_credentials: running.status_page_credentials.clone(),
            status_page_credentials_on_loopback: running.status_page_credentials_on_loopback,
            leader_election: running.leader_election,
            sharding: running.sharding,
            lease_name: running.lease_name.clone(),
            lease_duration: running.lease_duration,
            ..self
        }
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            state_dir: PathBuf::from("/var/lib/berth"),
            interval: Duration::from_secs(60),
            jitter: Duration::from_secs(10),
            field_manager: "berth".to_string(),
            log_format: LogFormat::Auto,
            max_file_size: 4 << 20,
            max_app_size: 64 << 20,
            max_objects: 20_000,
            concurrency: 16,
            max_concurrent_syncs: 8,
            inventory_namespace: "berth-system".to_string(),
            history_keep: 1000,
            history_max_age: Duration::from_secs(90 * 24 * 3600),
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 9464))),
            max_connections: 512,
            sync_timeout: Duration::from_secs(30 * 60),
            leader_election: false,
            sharding: false,
            lease_name: "berth".to_string(),
            lease_duration: Duration::from_secs(15),
            kustomize: None,
            helm: None,
            allow_remote_charts: Vec::new(),
            render_timeout: Duration::from_secs(60),
            render_memory: DEFAULT_RENDER_MEMORY,
            status_page: false,
            status_page_credentials: None,
            status_page_credentials_on_loopback: false,
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// journald under systemd (`$JOURNAL_STREAM` set), else text.
    Auto,
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
    /// Native journald entries with structured fields (`APP=`, `COMMIT=`, …).
    Journald,
}

/// `[cluster]` (the one cluster, named `default`) or `[[cluster]]` (several, each named:
/// apps say which they go to).
#[derive(Debug, Clone, PartialEq)]
pub enum Clusters {
    /// `[cluster]`, or none: the one cluster.
    One(ClusterConfig),
    /// `[[cluster]]`: each a table of its own.
    Many(Vec<ClusterConfig>),
}

impl Default for Clusters {
    fn default() -> Self {
        Clusters::One(ClusterConfig::default())
    }
}

impl Clusters {
    /// Every cluster, in the configuration's order.
    pub fn list(&self) -> &[ClusterConfig] {
        match self {
            Clusters::One(one) => std::slice::from_ref(one),
            Clusters::Many(many) => many,
        }
    }

    /// Every cluster, to change in place.
    pub fn list_mut(&mut self) -> &mut [ClusterConfig] {
        match self {
            Clusters::One(one) => std::slice::from_mut(one),
            Clusters::Many(many) => many,
        }
    }

    /// The cluster of that name.
    pub fn named(&self, name: &str) -> Option<&ClusterConfig> {
        self.list().iter().find(|c| c.name() == name)
    }

    /// The key path of the `i`th cluster's `key`: `cluster.key` or `cluster[i].key`.
    pub fn key(&self, i: usize, key: &str) -> String {
        match self {
            Clusters::One(_) => format!("cluster.{key}"),
            Clusters::Many(_) => format!("cluster[{i}].{key}"),
        }
    }
}

/// A table is `[cluster]`, an array of tables `[[cluster]]`; either keeps serde's key
/// paths in its errors.
impl<'de> Deserialize<'de> for Clusters {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = Clusters;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a [cluster] table or [[cluster]] tables")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Clusters, A::Error> {
                let one = serde::de::value::MapAccessDeserializer::new(map);
                ClusterConfig::deserialize(one).map(Clusters::One)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Clusters, A::Error> {
                let many = serde::de::value::SeqAccessDeserializer::new(seq);
                Vec::deserialize(many).map(Clusters::Many)
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// One cluster: how to reach its Kubernetes API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Its name, a DNS label that apps and sets name (`[[cluster]]`); `default` when unset.
    pub name: Option<String>,
    /// Labels an `[[app_set]]`'s `clusters` selects by.
    pub labels: BTreeMap<String, String>,
    /// A kubeconfig file; unset means `$KUBECONFIG`, `~/.kube/config`, then in-cluster.
    #[serde(default, deserialize_with = "credentials::file")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; unset means the current context.
    pub context: Option<String>,
    /// How long one request (not a watch) may take before it counts as failed.
    #[serde(deserialize_with = "duration")]
    pub request_timeout: Duration,
    /// How long a request failing transiently (429, 5xx, a lost connection, a timeout) is
    /// retried, with exponential backoff and jitter, before the sync fails.
    #[serde(deserialize_with = "duration")]
    pub retry_for: Duration,
    /// Requests to the API server in flight at once, across every app (watches count
    /// only until their answer starts); the others queue.
    pub max_requests_in_flight: usize,
    /// The Kubernetes version charts are rendered for when no cluster is asked (`berth
    /// validate`): `.Capabilities.KubeVersion`, such as `"1.31"` or `"v1.31.2"`. A sync
    /// always uses the cluster's own.
    pub kube_version: Option<String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            name: None,
            labels: BTreeMap::new(),
            kubeconfig: None,
            context: None,
            request_timeout: Duration::from_secs(30),
            retry_for: Duration::from_secs(60),
            max_requests_in_flight: 64,
            kube_version: None,
        }
    }
}

impl ClusterConfig {
    /// Its name: `default` when it has none (a lone `[cluster]`).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("default")
    }
}
