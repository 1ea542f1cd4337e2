//! Telling people what happened: each sync record becomes events ([`events`]) — a failed
//! sync, a failed or rolled-back rollout, a held app, a recovery, a sync that changed
//! something — sent to the `[[notify]]` receivers that want them, in their format
//! ([`payload`]), by one task per receiver ([`deliver`]). A sync only puts a message on a
//! queue: it never waits for a receiver.

pub mod deliver;
pub mod events;
pub mod payload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use globset::GlobSet;

use crate::config::{NotifyConfig, NotifyEvent, NotifyFormat};
use crate::history::{Outcome, SyncRecord};
use deliver::{Counts, Delivery, Receiver};
use events::Problems;

/// A receiver's setting that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{receiver}: {key}: {message}")]
pub struct NotifyError {
    /// `notify[<index>]` and its name.
    pub receiver: String,
    /// The setting.
    pub key: String,
    /// What is wrong (never the secret itself).
    pub message: String,
}

/// A receiver's secrets, read from their files and environment variables.
pub struct Secrets {
    /// Its name.
    pub name: String,
    /// Its address.
    pub url: String,
    /// The HMAC key.
    pub secret: Option<Vec<u8>>,
    /// The bearer token.
    pub token: Option<String>,
}

/// Reads receiver `index`'s address and secrets, and checks the address.
///
/// # Errors
/// A file cannot be read, a variable is unset or empty, the address is not an http(s) URL.
pub fn secrets(config: &NotifyConfig, index: usize) -> Result<Secrets, NotifyError> {
    let name = config
        .name
        .clone()
        .unwrap_or_else(|| format!("notify[{index}]"));
    let receiver = match &config.name {
        Some(n) => format!("notify[{index}] ({n})"),
        None => format!("notify[{index}]"),
    };
    let fail = |key: String, message: String| NotifyError {
        receiver: receiver.clone(),
        key,
        message,
    };
    // A secret from its file (setting `<what>_file`) or variable (`<what>_env`).
    let read = |what: &str, file: &Option<PathBuf>, env: &Option<String>| {
        let (key, value) = match (file, env) {
            (Some(path), _) => (
                format!("{what}_file"),
                std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display())),
            ),
            (None, Some(var)) => (
                format!("{what}_env"),
                std::env::var(var).map_err(|_| format!("environment variable {var} is not set")),
            ),
            (None, None) => return Ok(None),
        };
        let value = value.map_err(|m| fail(key.clone(), m))?;
        let value = value.trim().to_string();
        if value.is_empty() {
            return Err(fail(key, "is empty".into()));
        }
        Ok(Some(value))
    };
    let url = match &config.url {
        Some(url) => url.clone(),
        None => read("url", &config.url_file, &config.url_env)?.ok_or_else(|| {
            fail(
                "url".into(),
                "no address: give url, url_file or url_env".into(),
            )
        })?,
    };
    crate::config::check_notify_url(&url).map_err(|e| fail("url".into(), e.to_string()))?;
    let url = match config.format {
        NotifyFormat::Alertmanager => payload::alertmanager_url(&url),
        _ => url,
    };
    Ok(Secrets {
        name,
        url,
        secret: read("secret", &config.secret_file, &config.secret_env)?.map(String::into_bytes),
        token: read("token", &config.token_file, &config.token_env)?,
    })
}

/// One receiver, as the syncs see it.
struct Target {
    name: String,
    format: NotifyFormat,
    events: Vec<NotifyEvent>,
    apps: Option<GlobSet>,
    link: Option<String>,
    queue: tokio::sync::mpsc::Sender<Delivery>,
    counts: Arc<Counts>,
}

/// The receivers and what was sent to them.
pub struct Notifications {
    targets: Vec<Target>,
    problems: Option<Mutex<Problems>>,
    /// Messages queued and not yet settled, and a wake-up when one settles.
    pending: Arc<(AtomicUsize, tokio::sync::Notify)>,
}

impl Notifications {
    /// No receivers.
    pub fn none() -> Self {
        Notifications {
            targets: Vec::new(),
            problems: None,
            pending: Arc::default(),
        }
    }

    /// Starts a task for each receiver (within a tokio runtime); the open problems are
    /// kept in `state_dir`.
    ///
    /// # Errors
    /// A receiver's address or secrets cannot be read, or the https client cannot be made.
    pub fn start(configs: &[NotifyConfig], state_dir: &Path) -> Result<Self, NotifyError> {
        if configs.is_empty() {
            return Ok(Notifications::none());
        }
        let client = deliver::client().map_err(|e| NotifyError {
            receiver: "notify".into(),
            key: "url".into(),
            message: format!("cannot read the system's trusted certificates: {e}"),
        })?;
        let pending: Arc<(AtomicUsize, tokio::sync::Notify)> = Arc::default();
        let mut targets = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            let s = secrets(config, i)?;
            let (queue, rx) = tokio::sync::mpsc::channel(config.queue.max(1));
            let counts = Arc::new(Counts::default());
            let receiver = Receiver {
                name: s.name.clone(),
                url: s.url,
                secret: s.secret,
                token: s.token,
                timeout: config.timeout,
                retries: config.retries,
            };
            tokio::spawn(deliver::run(
                receiver,
                client.clone(),
                rx,
                counts.clone(),
                pending.clone(),
            ));
            targets.push(Target {
                name: s.name,
                format: config.format,
                events: config.events.clone(),
                apps: config.apps.set().ok().flatten(),
                link: config.link.clone(),
                queue,
                counts,
            });
        }
        crate::state::private_dir(state_dir).map_err(|e| NotifyError {
            receiver: "notify".into(),
            key: "state_dir".into(),
            message: e.to_string(),
        })?;
        Ok(Notifications {
            targets,
            problems: Some(Mutex::new(Problems::load(state_dir))),
            pending,
        })
    }

    /// Queues the messages record `r` makes for the receivers that want them; never waits.
    pub fn observe(&self, r: &SyncRecord) {
        self.send(|p| p.messages(r, jiff::Timestamp::now()));
    }

    /// Queues what an app set's listing on `host` says (`problem`: why it keeps its last
    /// apps, or `None` when it listed its commit): one `set_held` for its apps, not one
    /// failure each.
    pub fn observe_set(&self, set: &str, problem: Option<&str>, host: &str) {
        self.send(|p| p.set_messages(set, problem, host, jiff::Timestamp::now()));
    }

    /// Queues `image_updated` for `app`: berth on `host` pushed `commit`, making `changes`.
    pub fn observe_image_update(&self, app: &str, host: &str, commit: &str, changes: &str) {
        let updated = NotifyEvent::ImageUpdated;
        let message = events::Message::of(updated, app, host, Outcome::Succeeded)
            .with_commit(commit, changes);
        self.send(|_| vec![message]);
    }

    /// Queues `image_skipped` for `app` (seen on `host`): `policy` skips `tag` from now on.
    pub fn observe_image_skipped(&self, app: &str, host: &str, policy: &str, tag: &str) {
        let skipped = NotifyEvent::ImageSkipped;
        let mut message = events::Message::of(skipped, app, host, Outcome::RolledBack);
        message.errors.push(format!("image policy {policy}: tag {tag} is not written again (its rollout failed and was rolled back); berth images forget {policy} {tag} lets it"));
        self.send(|_| vec![message]);
    }

    /// Queues `preview_created` (`created`) or `preview_removed` for the preview `app` of
    /// `git_ref` at commit `sha`, seen on `host`.
    pub fn observe_preview(
        &self,
        app: &str,
        (git_ref, sha): (&str, &str),
        created: bool,
        host: &str,
    ) {
        let event = match created {
            true => NotifyEvent::PreviewCreated,
            false => NotifyEvent::PreviewRemoved,
        };
        let message =
            events::Message::of(event, app, host, Outcome::Succeeded).with_commit(sha, git_ref);
        self.send(|_| vec![message]);
    }

    /// Queues the messages `make` decides, given what was sent before.
    fn send(&self, make: impl FnOnce(&mut Problems) -> Vec<events::Message>) {
        let Some(problems) = &self.problems else {
            return;
        };
        let messages = match problems.lock() {
            Ok(mut p) => make(&mut p),
            Err(_) => return,
        };
        for m in &messages {
            for t in &self.targets {
                let wanted = t.events.contains(&m.event)
                    && t.apps.as_ref().is_none_or(|g| g.is_match(&m.app));
                if !wanted {
                    continue;
                }
                let Some(body) = payload::body(t.format, m, t.link.as_deref()) else {
                    continue;
                };
                let delivery = Delivery {
                    body: body.to_string().into(),
                    event: m.event.as_str(),
                };
                self.pending.0.fetch_add(1, Ordering::AcqRel);
                if t.queue.try_send(delivery).is_err() {
                    self.pending.0.fetch_sub(1, Ordering::AcqRel);
                    t.counts.dropped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(receiver = %t.name, event = m.event.as_str(), app = %m.app, "notification dropped: the receiver's queue is full");
                }
            }
        }
    }

    /// Waits until every queued message is sent or given up, up to `limit` (a one-shot
    /// command's last step); false (and a warning) when some were still on their way.
    pub async fn flush(&self, limit: Duration) -> bool {
        let settled = async {
            loop {
                let woken = self.pending.1.notified();
                if self.pending.0.load(Ordering::Acquire) == 0 {
                    return;
                }
                woken.await;
            }
        };
        let settled = tokio::time::timeout(limit, settled).await.is_ok();
        if !settled {
            tracing::warn!(
                unsent = self.pending.0.load(Ordering::Acquire),
                "notifications still on their way after {}s: not waiting longer",
                limit.as_secs()
            );
        }
        settled
    }

    /// The receivers' counters in the Prometheus text format.
    pub fn metrics(&self) -> String {
        if self.targets.is_empty() {
            return String::new();
        }
        let mut out = String::new();
        for (name, help, read) in [
            (
                "berth_notifications_sent_total",
                "Notifications a receiver accepted.",
                (|c: &Counts| &c.sent) as fn(&Counts) -> &std::sync::atomic::AtomicU64,
            ),
            (
                "berth_notifications_failed_total",
                "Notifications given up on after the last retry, or refused.",
                |c: &Counts| &c.failed,
            ),
            (
                "berth_notifications_dropped_total",
                "Notifications dropped because the receiver's queue was full.",
                |c: &Counts| &c.dropped,
            ),
        ] {
            out += &format!("# HELP {name} {help}\n# TYPE {name} counter\n");
            for t in &self.targets {
                let n = read(&t.counts).load(Ordering::Relaxed);
                out += &format!("{name}{{receiver=\"{}\"}} {n}\n", t.name);
            }
        }
        out
    }
}
