//! The TOML configuration: its schema and defaults, [`parse`] (text in, no I/O),
//! [`load`] (read a file, parse, validate) and [`Config::validate`].
//!
//! Every error names the key path (`app[1].rollout.timeout`) and, once loaded from a file,
//! the file and line.
//!
//! Over 450 lines only with its tests (about 160 lines: the schema's defaults, the shipped
//! `config/berth.toml`, and each error); the code is about 400.

mod credentials;
mod error;
mod globs;
mod validate;

pub use error::{io_message, ConfigError, Problem};
use error::{toml_error, unknown_field};
pub use globs::{compile_globs, Globs};
pub use validate::{check_notify_url, check_repo_path, is_dns_label, ValueError};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// Where `berth` looks for its configuration when neither `--config` nor `BERTH_CONFIG`
/// names one.
pub const DEFAULT_PATH: &str = "/etc/berth/berth.toml";

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Settings of the agent process.
    #[serde(default)]
    pub agent: AgentConfig,
    /// How to reach the cluster.
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// The applications: one git source each.
    #[serde(default, rename = "app")]
    pub apps: Vec<AppConfig>,
    /// Where berth tells people what happened.
    #[serde(default, rename = "notify")]
    pub notify: Vec<NotifyConfig>,
}

/// `[[notify]]`: a receiver of sync outcomes (a webhook, a chat channel, Alertmanager).
/// Secrets (a chat webhook's URL, a token, the signing key) come from files or environment
/// variables, never from the configuration itself.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The name in logs and metrics (default `notify[<index>]`).
    pub name: Option<String>,
    /// The receiver's address, when it holds no secret.
    pub url: Option<String>,
    /// File holding the address (a Slack or Mattermost webhook URL is a secret).
    #[serde(default, deserialize_with = "credentials::file")]
    pub url_file: Option<PathBuf>,
    /// Environment variable holding the address.
    pub url_env: Option<String>,
    /// The payload.
    #[serde(default)]
    pub format: NotifyFormat,
    /// The events sent (default: every one but `synced`).
    #[serde(default = "default_events")]
    pub events: Vec<NotifyEvent>,
    /// Only these apps (globs; default all).
    #[serde(default)]
    pub apps: Globs,
    /// File holding the key of the `X-Berth-Signature-256` header (HMAC-SHA256 of the body).
    #[serde(default, deserialize_with = "credentials::file")]
    pub secret_file: Option<PathBuf>,
    /// Environment variable holding that key.
    pub secret_env: Option<String>,
    /// File holding a bearer token sent as `Authorization: Bearer …`.
    #[serde(default, deserialize_with = "credentials::file")]
    pub token_file: Option<PathBuf>,
    /// Environment variable holding that token.
    pub token_env: Option<String>,
    /// How long one request may take.
    #[serde(default = "notify_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// Retries after a network error, a 5xx or a 429 (with exponential backoff and jitter).
    #[serde(default = "notify_retries")]
    pub retries: u32,
    /// Messages waiting for this receiver; more are dropped (and counted).
    #[serde(default = "notify_queue")]
    pub queue: usize,
    /// A link sent with each message: `{app}`, `{commit}` and `{record}` are replaced.
    pub link: Option<String>,
}

/// What a `[[notify]]` receiver is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    /// berth's own versioned JSON document (`docs/notifications.md`).
    #[default]
    Json,
    /// Slack or Mattermost incoming-webhook text.
    Slack,
    /// Alerts POSTed to Alertmanager's `/api/v2/alerts`, resolved on recovery.
    Alertmanager,
}

/// A sync outcome people are told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyEvent {
    /// A sync failed before or while applying (fetch, signature, render, apply, health).
    SyncFailed,
    /// A Deployment's rollout failed and was left as it is (`on_failure = "halt"`).
    RolloutFailed,
    /// A Deployment was rolled back: after a failed rollout, or by `berth rollback`.
    RolledBack,
    /// The app synced successfully after one of the above.
    Recovered,
    /// A sync applied changes.
    Synced,
    /// The app waits for a new commit after a failed rollout.
    Held,
}

impl NotifyEvent {
    /// The name used in configuration and payloads.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::SyncFailed => "sync_failed",
            NotifyEvent::RolloutFailed => "rollout_failed",
            NotifyEvent::RolledBack => "rolled_back",
            NotifyEvent::Recovered => "recovered",
            NotifyEvent::Synced => "synced",
            NotifyEvent::Held => "held",
        }
    }
}

fn default_events() -> Vec<NotifyEvent> {
    use NotifyEvent::*;
    vec![SyncFailed, RolloutFailed, RolledBack, Recovered, Held]
}

fn notify_timeout() -> Duration {
    Duration::from_secs(10)
}

fn notify_retries() -> u32 {
    5
}

fn notify_queue() -> usize {
    100
}

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
    /// How long one kustomize run may take.
    #[serde(deserialize_with = "duration")]
    pub render_timeout: Duration,
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
            render_timeout: Duration::from_secs(60),
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

/// `[cluster]`: how to reach the Kubernetes API.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
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
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            kubeconfig: None,
            context: None,
            request_timeout: Duration::from_secs(30),
            retry_for: Duration::from_secs(60),
            max_requests_in_flight: 64,
        }
    }
}

/// `[[app]]`: one git source and what to do with it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    /// The app's name: a DNS label, used in labels and the inventory's name.
    pub name: String,
    /// `https://…`, `ssh://…`, `git@host:path`, `file://…` or a local path.
    pub repo: String,
    /// Follow this branch (the remote's default branch when no ref is given).
    pub branch: Option<String>,
    /// Follow this tag.
    pub tag: Option<String>,
    /// Pin this full commit SHA.
    pub commit: Option<String>,
    /// Folders (or files) in the repository to render, relative to its root.
    #[serde(default = "root_path", deserialize_with = "one_or_many")]
    pub path: Vec<String>,
    /// Only files matching one of these globs (relative to the repository root) are read.
    #[serde(default)]
    pub include: Globs,
    /// Files matching one of these globs are skipped.
    #[serde(default)]
    pub exclude: Globs,
    /// Only objects whose `Kind/name` matches one of these globs are kept.
    #[serde(default)]
    pub include_objects: Globs,
    /// Objects whose `Kind/name` matches one of these globs are dropped.
    #[serde(default)]
    pub exclude_objects: Globs,
    /// Namespace for namespaced objects that name none.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Delete objects that an earlier commit applied and this one no longer holds.
    #[serde(default)]
    pub prune: bool,
    /// Allow a commit that holds no objects to prune every object of the app.
    #[serde(default)]
    pub allow_empty: bool,
    /// Take back the fields git sets that another field manager took (git wins, as Argo
    /// CD's self-heal and Flux do; each taken back is recorded); false: a conflict fails
    /// the sync instead.
    #[serde(default = "yes")]
    pub force_conflicts: bool,
    /// Credentials for the repository.
    #[serde(default)]
    pub auth: AuthConfig,
    /// File holding the webhook's HMAC secret (`POST /hooks/<app>`); no secret, no webhook.
    #[serde(default, deserialize_with = "credentials::file")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Environment variable holding the webhook's HMAC secret.
    pub webhook_secret_env: Option<String>,
    /// How changed Deployments are rolled out.
    #[serde(default)]
    pub rollout: RolloutConfig,
    /// How the app's folders are rendered: a folder with a kustomization by kustomize
    /// (`auto`), every folder as plain manifests (`plain`), or kustomize only.
    #[serde(default)]
    pub render: RenderMode,
    /// Let kustomizations reach remote resources (URLs, git repositories).
    #[serde(default)]
    pub allow_remote_bases: bool,
    /// Apply a branch or tag that moved to a commit not descending from the last applied
    /// one (refused by default: a force-push could replay any older signed commit).
    #[serde(default)]
    pub allow_rewind: bool,
    /// Which commits may be applied: only those signed by a trusted key, or any.
    #[serde(default)]
    pub verify: VerifyConfig,
    /// Where the app may write (`[app.scope]`), checked before the dry run.
    #[serde(default)]
    pub scope: ScopeConfig,
    /// A ServiceAccount (`namespace/name`) that every request made for the app
    /// impersonates, so that the API server's RBAC decides what the app may write.
    pub service_account: Option<String>,
    /// A user that every request made for the app impersonates (instead of a
    /// ServiceAccount).
    pub user: Option<String>,
    /// Groups impersonated with `user` or `service_account`.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `[app.scope]`: the namespaces and cluster-scoped kinds an app may write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScopeConfig {
    /// Namespaces (globs) the app's objects may be in; unset: the app's own `namespace`
    /// alone; `["*"]`: any.
    pub namespaces: Option<Vec<String>>,
    /// Cluster-scoped kinds the app may write (`"*"`: any). A Namespace whose name
    /// `namespaces` allows needs no entry.
    pub cluster_kinds: Vec<String>,
}

impl AppConfig {
    /// The namespace globs of `[app.scope]`, the app's own namespace when unset.
    pub fn scope_namespaces(&self) -> Vec<String> {
        self.scope
            .namespaces
            .clone()
            .unwrap_or_else(|| vec![self.namespace.clone()])
    }
}

/// `[app.verify]`: apply only commits signed by a trusted key (OpenPGP or SSH).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyConfig {
    /// `head`: the commit about to be applied must carry a valid signature; `off`.
    pub mode: VerifyMode,
    /// Armored OpenPGP public keys: files, or a glob in the last part of a path
    /// (`/etc/berth/keys/*.asc`).
    pub openpgp_keys: Vec<String>,
    /// SSH signing keys in git's `allowed_signers` format (`gpg.ssh.allowedSignersFile`).
    #[serde(default, deserialize_with = "credentials::file")]
    pub ssh_allowed_signers: Option<PathBuf>,
}

/// Whether commits are verified.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// Any commit is applied.
    #[default]
    Off,
    /// The commit about to be applied must be signed by a trusted key.
    Head,
    /// The annotated tag the app follows (`tag = …`) must be signed by a trusted key; its
    /// signature vouches for the commit it points at.
    Tag,
}

/// How an app's folders are rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RenderMode {
    /// A folder holding `kustomization.yaml` (`.yml`, `Kustomization`) is rendered by
    /// kustomize; other folders are read as plain manifests.
    #[default]
    Auto,
    /// Every file is a plain manifest, kustomization files included.
    Plain,
    /// Every path must be a kustomization.
    Kustomize,
}

/// Which commit of its repository an app follows (validation allows at most one of
/// `branch`, `tag` and `commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitRef<'a> {
    /// The remote's default branch (its `HEAD`).
    DefaultBranch,
    /// A branch's newest commit.
    Branch(&'a str),
    /// The commit a tag names.
    Tag(&'a str),
    /// One commit, by its full SHA.
    Commit(&'a str),
}

impl AppConfig {
    /// The ref this app follows.
    pub fn git_ref(&self) -> GitRef<'_> {
        match (&self.tag, &self.commit, &self.branch) {
            (Some(tag), _, _) => GitRef::Tag(tag),
            (None, Some(sha), _) => GitRef::Commit(sha),
            (None, None, Some(branch)) => GitRef::Branch(branch),
            (None, None, None) => GitRef::DefaultBranch,
        }
    }
}

/// `[app.auth]`: how to authenticate to the repository. Secrets come from files or
/// environment variables, never from the configuration itself.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// User name for https (a token usually takes any name, e.g. `x-access-token`) or ssh
    /// (default: the URL's, else `git`).
    pub username: Option<String>,
    /// File holding the https password or token.
    #[serde(default, deserialize_with = "credentials::file")]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the https password or token.
    pub password_env: Option<String>,
    /// Private key for ssh.
    #[serde(default, deserialize_with = "credentials::file")]
    pub ssh_key_file: Option<PathBuf>,
    /// known_hosts file that ssh host keys are verified against.
    #[serde(default, deserialize_with = "credentials::file")]
    pub known_hosts: Option<PathBuf>,
}

/// Where ssh host keys are looked up when `known_hosts` is not set.
pub const DEFAULT_KNOWN_HOSTS: &str = "/etc/berth/known_hosts";

fn root_path() -> Vec<String> {
    vec![".".to_string()]
}

fn default_namespace() -> String {
    "default".to_string()
}

fn yes() -> bool {
    true
}

/// `[app.rollout]`: how changed Deployments are followed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    /// Who runs the rolling steps.
    pub engine: RolloutEngine,
    /// How long a rollout may take before it counts as failed.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// What to do when a rollout fails.
    pub on_failure: OnFailure,
    /// Wait for every Service with a selector to have ready endpoints (otherwise a
    /// Service without any is only reported as a warning).
    pub require_endpoints: bool,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            engine: RolloutEngine::Cluster,
            timeout: Duration::from_secs(300),
            on_failure: OnFailure::Rollback,
            require_endpoints: false,
        }
    }
}

/// Who runs a Deployment's rolling steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutEngine {
    /// The cluster's Deployment controller; berth follows it.
    Cluster,
    /// berth runs the Deployment controller's algorithm itself.
    Agent,
}

/// What happens after a failed rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Restore the previous revision's pod template.
    Rollback,
    /// Leave it as it is and stop syncing the app until a new commit.
    Halt,
    /// Record the failure and go on.
    Continue,
}

/// Parses configuration text. Does not validate it: see [`Config::validate`].
///
/// # Errors
/// Invalid TOML, unknown keys, missing required keys and badly formed values, each
/// naming the key path, line and column.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(text, String::new(), &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let mut key = e.path().to_string();
        if let Some(field) = unknown_field(e.inner().message())
            .filter(|f| key != *f && !key.ends_with(&format!(".{f}")))
        {
            key = if key == "." || key.is_empty() {
                field.to_string()
            } else {
                format!("{key}.{field}")
            };
        }
        toml_error(text, key, e.inner())
    })
}

/// Reads, parses and validates a configuration file.
///
/// # Errors
/// The file cannot be read, or [`parse`] or [`Config::validate`] fails; the error names
/// the file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let config = parse(&text).map_err(|e| e.in_file(path))?;
    config
        .validate()
        .map_err(|e| e.located(&text).in_file(path))?;
    Ok(config)
}

impl Config {
    /// The app of that name.
    pub fn app(&self, name: &str) -> Option<&AppConfig> {
        self.apps.iter().find(|a| a.name == name)
    }
}

fn listen<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    if text == "off" {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        serde::de::Error::custom(format!(
            "{text:?} is not an address like 127.0.0.1:9464 (or \"off\")"
        ))
    })
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {text:?} ({e}): write a number and a unit, like 30s, 5m or 1h"
        ))
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

fn byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match SizeValue::deserialize(d)? {
        SizeValue::Bytes(n) => Ok(n),
        SizeValue::Text(t) => parse_byte_size(&t).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid size {t:?}: write bytes or a number and a unit, like 512KiB or 4MiB"
            ))
        }),
    }
}

/// Parses `4MiB`, `512 KiB`, `10MB` or a plain number of bytes.
pub fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(factor)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[[app]]
name = "guestbook"
repo = "https://example.com/guestbook.git"
"#;

    fn parse_err(text: &str) -> String {
        parse(text).expect_err("should not parse").to_string()
    }

    fn invalid(text: &str) -> String {
        parse(text)
            .expect("parses")
            .validate()
            .expect_err("should not validate")
            .to_string()
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse(MINIMAL).unwrap();
        c.validate().unwrap();
        assert_eq!(c.agent.field_manager, "berth");
        assert_eq!(c.agent.interval, Duration::from_secs(60));
        assert_eq!(c.agent.max_file_size, 4 << 20);
        let app = &c.apps[0];
        assert_eq!(app.path, vec!["."]);
        assert_eq!(app.namespace, "default");
        assert!(!app.prune);
        assert_eq!(app.rollout.engine, RolloutEngine::Cluster);
        assert_eq!(app.rollout.on_failure, OnFailure::Rollback);
    }

    #[test]
    fn the_shipped_example_config_is_valid_and_complete() {
        let text = include_str!("../../config/berth.toml");
        let c = parse(text).unwrap();
        c.validate().unwrap();
        let app = &c.apps[0];
        assert_eq!(app.rollout.timeout, Duration::from_secs(300));
        assert_eq!(c.agent, AgentConfig::default(), "documented defaults drift");
    }

    #[test]
    fn unknown_key_names_its_path_and_line() {
        let e = parse_err(&format!("{MINIMAL}[app.rollout]\nengin = \"agent\"\n"));
        assert!(e.contains("app[0].rollout.engin"), "{e}");
        assert!(e.contains("unknown field"), "{e}");
        assert!(e.starts_with("6:"), "{e}");
    }

    #[test]
    fn unknown_top_level_table_is_refused() {
        let e = parse_err("[agnet]\ninterval = \"1m\"\n");
        assert!(e.contains("agnet"), "{e}");
    }

    #[test]
    fn bad_duration_names_key_and_explains() {
        let e = parse_err(&format!(
            "{MINIMAL}[app.rollout]\ntimeout = \"5 parsecs\"\n"
        ));
        assert!(e.contains("app[0].rollout.timeout"), "{e}");
        assert!(e.contains("invalid duration \"5 parsecs\""), "{e}");
    }

    #[test]
    fn missing_required_key() {
        let e = parse_err("[[app]]\nname = \"x\"\n");
        assert!(
            e.contains("app[0]") && e.contains("missing field `repo`"),
            "{e}"
        );
    }

    #[test]
    fn bad_enum_value() {
        let e = parse_err(&format!("{MINIMAL}[app.rollout]\non_failure = \"panic\"\n"));
        assert!(e.contains("app[0].rollout.on_failure"), "{e}");
    }

    #[test]
    fn duplicate_app_names() {
        let e = invalid(&format!("{MINIMAL}{MINIMAL}"));
        assert!(
            e.contains("app[1].name: duplicate app name \"guestbook\""),
            "{e}"
        );
    }

    #[test]
    fn more_than_one_ref() {
        let e = invalid(&format!("{MINIMAL}branch = \"main\"\ntag = \"v1\"\n"));
        assert!(e.contains("at most one of branch, tag and commit"), "{e}");
    }

    #[test]
    fn short_commit_is_refused() {
        let e = invalid(&format!("{MINIMAL}commit = \"abc1234\"\n"));
        assert!(e.contains("app[0].commit"), "{e}");
    }

    #[test]
    fn escaping_paths_are_refused() {
        let e = invalid(&format!(
            "{MINIMAL}path = [\"deploy/../../etc\", \"/etc\"]\n"
        ));
        assert!(
            e.contains("\"deploy/../../etc\" escapes the repository root"),
            "{e}"
        );
        assert!(e.contains("\"/etc\" is absolute"), "{e}");
        assert!(check_repo_path("a/../b").is_ok());
    }

    #[test]
    fn bad_app_name_and_glob() {
        let e = invalid("[[app]]\nname = \"Guest_Book\"\nrepo = \"x\"\ninclude = [\"a[\"]\n");
        assert!(e.contains("app[0].name"), "{e}");
        assert!(e.contains("app[0].include: invalid glob"), "{e}");
    }

    #[test]
    fn sizes_accept_units_and_numbers() {
        assert_eq!(parse_byte_size("4MiB"), Some(4 << 20));
        assert_eq!(parse_byte_size("512 KiB"), Some(512 << 10));
        assert_eq!(parse_byte_size("1000"), Some(1000));
        assert_eq!(parse_byte_size("4 parsecs"), None);
        let c = parse("[agent]\nmax_file_size = 1024\nmax_app_size = \"1GiB\"\n").unwrap();
        assert_eq!(
            (c.agent.max_file_size, c.agent.max_app_size),
            (1024, 1 << 30)
        );
        let e = parse_err("[agent]\nmax_file_size = \"lots\"\n");
        assert!(
            e.contains("agent.max_file_size") && e.contains("invalid size"),
            "{e}"
        );
    }

    #[test]
    fn path_may_be_a_single_string() {
        let c = parse(&format!("{MINIMAL}path = \"deploy\"\n")).unwrap();
        assert_eq!(c.apps[0].path, vec!["deploy"]);
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.toml");
        std::fs::write(&path, format!("{MINIMAL}{MINIMAL}")).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}:", path.display())), "{e}");
        let e = load(&dir.path().join("missing.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read config file"), "{e}");
    }
}
