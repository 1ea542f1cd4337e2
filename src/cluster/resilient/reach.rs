//! Whether a client's API server answers ([`Reach`]), shared by all its requests.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use super::STOP_GRACE;

/// Whether a client's API server answers, shared by all its requests: the first request
/// that cannot connect (refused, reset, no answer within `request_timeout`) marks it
/// unreachable and says so once; the first answer of any kind marks it back and says
/// that once. A request that cannot connect is retried until `request_timeout` after the
/// outage began (a restart of the API server is ridden out), then fails naming the server
/// and the cause — in a longer outage each request fails at once — and what is waiting
/// learns of its end from [`Reach::back`]. [`Reach::stop`] cuts requests and retries
/// short (the daemon's shutdown).
#[derive(Debug)]
pub struct Reach {
    /// The cluster's name, as messages name it.
    cluster: String,
    server: String,
    /// Whether outages are logged (not for a command's one-shot probe, which says it).
    logged: bool,
    down_since: Mutex<Option<Instant>>,
    /// How many outages began.
    outages: std::sync::atomic::AtomicU64,
    down: watch::Sender<bool>,
    stopping: watch::Sender<bool>,
}

impl Reach {
    /// The reach of `cluster`'s API server at `server` (its name and URL, as messages
    /// name them).
    pub fn new(cluster: &str, server: &str) -> Arc<Reach> {
        Self::with_log(cluster, server, true)
    }

    /// As [`Reach::new`], without logging outages: for a probe whose caller says them.
    pub fn quiet(server: &str) -> Arc<Reach> {
        Self::with_log("", server, false)
    }

    fn with_log(cluster: &str, server: &str, logged: bool) -> Arc<Reach> {
        Arc::new(Reach {
            logged,
            cluster: cluster.to_string(),
            server: server.to_string(),
            down_since: Mutex::new(None),
            outages: std::sync::atomic::AtomicU64::new(0),
            down: watch::Sender::new(false),
            stopping: watch::Sender::new(false),
        })
    }

    /// The server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// True from a failed connection until the next answer.
    pub fn is_down(&self) -> bool {
        *self.down.borrow()
    }

    /// How many outages began so far: a sync that failed while the count changed was
    /// failed by an outage, even when the server answers again by its end.
    pub fn outages(&self) -> u64 {
        self.outages.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// When the outage began, while there is one.
    pub(super) fn down_since(&self) -> Option<Instant> {
        self.down_since.lock().ok().and_then(|s| *s)
    }

    /// Resolves once the server is unreachable.
    pub async fn lost(&self) {
        let _ = self.down.subscribe().wait_for(|down| *down).await;
    }

    /// Resolves once the server answers again (at once when it is not down).
    pub async fn back(&self) {
        let _ = self.down.subscribe().wait_for(|down| !*down).await;
    }

    /// berth is stopping: no more waits between retries (a request ends with its last
    /// error), and no wait for an answer past [`STOP_GRACE`], or at all while the server
    /// is unreachable (the request ends with [`Stopping`]). A server that answers is
    /// given the grace: an interrupted sync stores its inventory.
    pub fn stop(&self) {
        self.stopping.send_replace(true);
    }

    pub(super) async fn stopped(&self) {
        let _ = self.stopping.subscribe().wait_for(|stop| *stop).await;
    }

    /// Resolves [`STOP_GRACE`] after berth started stopping, or at once while the server
    /// is unreachable.
    pub(super) async fn given_up(&self) {
        self.stopped().await;
        tokio::select! {
            () = self.lost() => {}
            () = tokio::time::sleep(STOP_GRACE) => {}
        }
    }

    pub(super) fn answered(&self) {
        // Every answer passes here: no lock while the server is up.
        if !self.is_down() {
            return;
        }
        let since = self.down_since.lock().ok().and_then(|mut s| s.take());
        if let Some(since) = since {
            let secs = since.elapsed().as_secs();
            if self.logged {
                tracing::info!(cluster = %self.cluster, server = %self.server, unreachable_s = secs, "cluster {}: the API server at {} answers again (unreachable for {secs}s, since its first unanswered request)", self.cluster, self.server);
            }
            self.down.send_replace(false);
        }
    }

    /// The server did not answer a request sent at `sent`: the outage is counted from the
    /// first such request (a request that timed out was sent `request_timeout` before).
    pub(super) fn unreached(&self, cause: &str, sent: Instant) {
        let first = self.down_since.lock().is_ok_and(|mut s| {
            let first = s.is_none();
            *s = Some(s.map_or(sent, |since| since.min(sent)));
            first
        });
        if first {
            self.outages
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.logged {
                tracing::warn!(cluster = %self.cluster, server = %self.server, error = %cause, "cluster {}: the API server at {} is unreachable: {cause}; syncs fail until it answers again", self.cluster, self.server);
            }
            self.down.send_replace(true);
        }
    }
}
