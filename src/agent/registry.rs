//! The running apps, in one place: each app's trigger, heartbeat, webhook key and last word
//! (`STATUS=`), and the set loops that a push to their repository lists. Everything that
//! asks which apps run here, or how they are, reads it: the webhooks (through
//! [`Webhooks`]), `STATUS=`, the watchdog, drift repair, suspensions and dependents; the
//! status page is told through it what each app does. An app enters when its loop starts
//! and leaves when it stops, in `apps.rs`, and nowhere else.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::mpsc;

use super::status::{status_text, Said};
use super::TICK;
use crate::history::{SyncRecord, Trigger};
use crate::page::StatusPage;
use crate::service::http::Webhooks;
use crate::service::notify::Notifier;

/// An app loop's sign of life, for the watchdog.
#[derive(Default)]
pub struct Heartbeat {
    last_ms: AtomicI64,
    busy_since_ms: AtomicI64,
}

fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

impl Heartbeat {
    pub(super) fn beat(&self) {
        self.last_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// Whether a sync runs.
    fn is_busy(&self) -> bool {
        self.busy_since_ms.load(Ordering::Relaxed) != 0
    }

    pub(super) fn busy(&self, busy: bool) {
        self.busy_since_ms
            .store(if busy { now_ms() } else { 0 }, Ordering::Relaxed);
        self.beat();
    }

    /// Alive: idle and beating, or in a sync that is younger than `sync_timeout`.
    fn alive(&self, sync_timeout: Duration, period: Duration) -> bool {
        let now = now_ms();
        match self.busy_since_ms.load(Ordering::Relaxed) {
            0 => {
                now - self.last_ms.load(Ordering::Relaxed)
                    < period.as_millis() as i64 + TICK.as_millis() as i64
            }
            since => now - since < sync_timeout.as_millis() as i64,
        }
    }
}

/// A running app.
struct Running {
    trigger: mpsc::Sender<Trigger>,
    heart: Arc<Heartbeat>,
    /// Its webhook's key; `None`: the app has no webhook.
    secret: Option<Vec<u8>>,
    /// Its repository's URL: a push to it triggers the app (unless `by_set`).
    repo: String,
    /// A preview: its set's listing wakes it when its ref moves, not every push to the
    /// repository.
    by_set: bool,
    /// Its last word, once it said one.
    said: Option<Said>,
}

/// A running set loop: a push to its repository lists the set.
struct Listener {
    trigger: mpsc::Sender<Trigger>,
    repo: String,
}

#[derive(Default)]
struct Entries {
    apps: BTreeMap<String, Running>,
    sets: BTreeMap<String, Listener>,
    /// The image policies' repositories (`oci://HOST/PATH`) and names: a registry's push
    /// to one wakes the image scans.
    images: Vec<(String, String)>,
    /// The policies a registry said it pushed to since the last scan.
    pushed_images: BTreeSet<String>,
}

/// The running apps and set loops.
pub(super) struct Registry {
    entries: Mutex<Entries>,
    /// Where `STATUS=` and the agent's other words to systemd go.
    pub(super) notifier: Notifier,
    page: Option<Arc<StatusPage>>,
    /// Wakes the image scans (a registry pushed to a policy's repository:
    /// [`Registry::pushed_images`] says which).
    pub(super) image_pushed: tokio::sync::Notify,
}

impl Registry {
    /// No app yet; `STATUS=` said through `notifier`, the page (if any) told of each app.
    pub(super) fn new(notifier: Notifier, page: Option<Arc<StatusPage>>) -> Self {
        Registry {
            entries: Mutex::default(),
            image_pushed: tokio::sync::Notify::new(),
            notifier,
            page,
        }
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `app` runs, woken through `trigger`, with a webhook keyed by `secret` (if any) for
    /// pushes to `repo`: its heartbeat, beating from now.
    pub(super) fn enter(
        &self,
        app: &str,
        trigger: mpsc::Sender<Trigger>,
        secret: Option<Vec<u8>>,
        (repo, by_set): (String, bool),
    ) -> Arc<Heartbeat> {
        let heart = Arc::new(Heartbeat::default());
        heart.beat();
        let running = Running {
            trigger,
            heart: heart.clone(),
            secret,
            repo,
            by_set,
            said: None,
        };
        self.entries().apps.insert(app.to_string(), running);
        heart
    }

    /// `app` stopped: no trigger, webhook, heartbeat or word of it.
    pub(super) fn leave(&self, app: &str) {
        self.entries().apps.remove(app);
        self.publish_status();
    }

    /// Set `set`'s loop runs, listing on pushes to `repo`.
    pub(super) fn enter_set(&self, set: &str, trigger: mpsc::Sender<Trigger>, repo: String) {
        let listener = Listener { trigger, repo };
        self.entries().sets.insert(set.to_string(), listener);
    }

    /// Set `set`'s loop stopped.
    pub(super) fn leave_set(&self, set: &str) {
        self.entries().sets.remove(set);
    }

    /// Wakes `app` with `trigger`, if it runs here; whether it took it (a full channel
    /// already holds a trigger: that sync sees this one's cause too).
    pub(super) fn wake(&self, app: &str, trigger: Trigger) -> bool {
        let entries = self.entries();
        entries
            .apps
            .get(app)
            .is_some_and(|r| r.trigger.try_send(trigger).is_ok())
    }

    /// The image policies whose repositories' pushes wake the scans: (repository, name).
    pub(super) fn image_policies(&self, policies: Vec<(String, String)>) {
        self.entries().images = policies;
    }

    /// The policies a registry pushed to since this was last asked.
    pub(super) fn pushed_images(&self) -> BTreeSet<String> {
        std::mem::take(&mut self.entries().pushed_images)
    }

    /// Whether `app` runs here.
    pub(super) fn runs(&self, app: &str) -> bool {
        self.entries().apps.contains_key(app)
    }

    /// Whether `app` runs here and is in a sync.
    pub(super) fn is_busy(&self, app: &str) -> bool {
        let entries = self.entries();
        entries.apps.get(app).is_some_and(|r| r.heart.is_busy())
    }

    /// The apps whose loops are stuck: not beating within `period`, or in a sync older
    /// than `sync_timeout`.
    pub(super) fn stuck(&self, sync_timeout: Duration, period: Duration) -> Vec<String> {
        let entries = self.entries();
        let stuck = entries.apps.iter();
        let stuck = stuck.filter(|(_, r)| !r.heart.alive(sync_timeout, period));
        stuck.map(|(app, _)| app.clone()).collect()
    }

    /// `app`'s sync starts (it may wait for a place first).
    pub(super) fn syncing(&self, app: &str) {
        if let Some(page) = &self.page {
            page.board.syncing(app);
        }
    }

    /// A line of `app`'s sync, in `step`.
    pub(super) fn progress(&self, app: &str, step: Option<&str>, line: &str) {
        if let Some(page) = &self.page {
            page.board.progress(app, step, line);
        }
    }

    /// `app`'s sync ended with `record`; the next one is due at `next`.
    pub(super) fn synced(&self, app: &str, record: &SyncRecord, next: Timestamp) {
        self.say(app, Said::of(record));
        if let Some(page) = &self.page {
            page.board.synced(app, record, next);
        }
    }

    /// `app` waits: `why` (a dependency not ready, a window closed).
    pub(super) fn waiting(&self, app: &str, why: &str) {
        self.say(app, Said::new(format!("{app}: {why}"), false));
        if let Some(page) = &self.page {
            page.board.waiting(app, why);
        }
    }

    /// `app` is suspended, for `why`.
    pub(super) fn suspended(&self, app: &str, why: &str) {
        self.say(app, Said::new(format!("{app}: suspended"), false));
        if let Some(page) = &self.page {
            page.board.suspended(app, why);
        }
    }

    fn say(&self, app: &str, said: Said) {
        if let Some(running) = self.entries().apps.get_mut(app) {
            running.said = Some(said);
        }
        self.publish_status();
    }

    /// `STATUS=`, for systemd: nothing is built outside it.
    pub(super) fn publish_status(&self) {
        if !self.notifier.is_on() {
            return;
        }
        let text = {
            let entries = self.entries();
            let said: Vec<&Said> = entries
                .apps
                .values()
                .filter_map(|r| r.said.as_ref())
                .collect();
            status_text(&said, Timestamp::now())
        };
        if let Some(text) = text {
            self.notifier.send(&format!("STATUS={text}"));
        }
    }
}

impl Webhooks for Registry {
    fn key(&self, app: &str) -> Option<(Vec<u8>, String)> {
        let entries = self.entries();
        let running = entries.apps.get(app)?;
        Some((running.secret.clone()?, running.repo.clone()))
    }

    fn push(&self, repo: &str) -> Vec<String> {
        let mut entries = self.entries();
        for set in entries.sets.values().filter(|s| s.repo == repo) {
            let _ = set.trigger.try_send(Trigger::Webhook);
        }
        let pushed: Vec<String> = (entries.images.iter())
            .filter(|(image, _)| image == repo)
            .map(|(_, name)| name.clone())
            .collect();
        if !pushed.is_empty() {
            entries.pushed_images.extend(pushed.iter().cloned());
            self.image_pushed.notify_one();
        }
        let policies = pushed
            .into_iter()
            .map(|name| format!("image policy {name}"));
        let apps = (entries.apps.iter()).filter(|(_, r)| r.repo == repo && !r.by_set);
        apps.map(|(app, running)| {
            // A full channel already holds a sync request: that sync sees this push too.
            let _ = running.trigger.try_send(Trigger::Webhook);
            app.clone()
        })
        .chain(policies)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        Registry::new(Notifier::from_env(), None)
    }

    #[test]
    fn a_push_wakes_every_app_and_set_of_its_repository_and_only_those() {
        let registry = registry();
        let (web, mut web_rx) = mpsc::channel(1);
        let (api, mut api_rx) = mpsc::channel(1);
        let (other, mut other_rx) = mpsc::channel(1);
        let (set, mut set_rx) = mpsc::channel(1);
        let (preview, mut preview_rx) = mpsc::channel(1);
        registry.enter("web", web, Some(b"k".to_vec()), ("git@x:a".into(), false));
        registry.enter("api", api, None, ("git@x:a".into(), false));
        registry.enter(
            "other",
            other,
            Some(b"o".to_vec()),
            ("git@x:b".into(), false),
        );
        registry.enter(
            "pr-1",
            preview,
            Some(b"p".to_vec()),
            ("git@x:a".into(), true),
        );
        registry.enter_set("teams", set, "git@x:a".into());
        assert_eq!(registry.key("web"), Some((b"k".to_vec(), "git@x:a".into())));
        assert_eq!(registry.key("api"), None, "no secret, no webhook");
        assert_eq!(registry.push("git@x:a"), ["api", "web"]);
        assert!(web_rx.try_recv().is_ok() && api_rx.try_recv().is_ok());
        assert!(set_rx.try_recv().is_ok());
        assert!(other_rx.try_recv().is_err());
        assert!(
            preview_rx.try_recv().is_err(),
            "a preview is woken by its set's listing"
        );
        assert_eq!(
            registry.key("pr-1"),
            Some((b"p".to_vec(), "git@x:a".into()))
        );
        registry.leave("web");
        registry.leave_set("teams");
        assert_eq!(registry.key("web"), None);
        assert_eq!(registry.push("git@x:a"), ["api"]);
        assert!(set_rx.try_recv().is_err());
    }

    #[test]
    fn an_app_that_left_is_neither_woken_nor_watched() {
        let registry = registry();
        let (tx, mut rx) = mpsc::channel(1);
        let heart = registry.enter("web", tx, None, (String::new(), false));
        heart.busy(true);
        assert!(registry.is_busy("web"));
        assert!(registry.wake("web", Trigger::Drift));
        assert!(!registry.wake("web", Trigger::Drift), "the channel is full");
        assert!(rx.try_recv().is_ok());
        let hour = Duration::from_secs(3600);
        assert!(registry.stuck(hour, hour).is_empty());
        assert_eq!(registry.stuck(Duration::ZERO, hour), ["web"]);
        registry.leave("web");
        assert!(!registry.is_busy("web") && !registry.wake("web", Trigger::Drift));
        assert!(registry.stuck(Duration::ZERO, hour).is_empty());
    }
}
