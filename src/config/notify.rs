//! `[[notify]]`: the receivers of sync outcomes, their formats and events, with their
//! defaults.
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::credentials;
use super::values::duration;
use super::Globs;

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
    /// An app set keeps its last apps: its commit generates none (the empty-set guard),
    /// or it cannot be listed.
    SetHeld,
    /// berth committed and pushed an image update to the app's repository.
    ImageUpdated,
    /// An image tag is skipped from now on: its rollout failed and was rolled back.
    ImageSkipped,
    /// An app set made a preview for a ref that appeared (a pull request opened).
    PreviewCreated,
    /// An app set removed a preview: its ref is gone (a pull request closed or merged)
    /// or expired.
    PreviewRemoved,
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
            NotifyEvent::SetHeld => "set_held",
            NotifyEvent::ImageUpdated => "image_updated",
            NotifyEvent::ImageSkipped => "image_skipped",
            NotifyEvent::PreviewCreated => "preview_created",
            NotifyEvent::PreviewRemoved => "preview_removed",
        }
    }
}

fn default_events() -> Vec<NotifyEvent> {
    use NotifyEvent::*;
    vec![
        SyncFailed,
        RolloutFailed,
        RolledBack,
        Recovered,
        Held,
        SetHeld,
        ImageUpdated,
        ImageSkipped,
        PreviewCreated,
        PreviewRemoved,
    ]
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
