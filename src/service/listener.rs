//! Which connections the HTTP endpoint takes, so that a flood of clients (slow ones
//! above all) can neither exhaust berth's memory or file descriptors nor silence
//! `/healthz`:
//!
//! - **The steady lane**: up to `[agent] max_connections` (default 512) connections at
//!   once; each has 10 s for a request head, 5 s for a webhook body and 60 s in all,
//!   keep-alive included (then it is closed once its request in flight is answered).
//! - **The overflow lane**: when those are taken, [`OVERFLOW`] (32) more, each served one
//!   request with 1 s for its head and its body, and 5 s in all. A probe that sends its
//!   request at once (`/healthz`, `/readyz`, `/metrics`) is answered during a flood of
//!   slow clients, which hold an overflow place for a second at most.
//! - **Beyond both**, the oldest connection with no request in flight (one that connected
//!   and sent nothing, or an idle keep-alive) is closed to make room for the new one,
//!   which waits [`EVICT_WAIT`] for its place; only when every connection is busy is the
//!   new one closed at once. A flood of idle connections then only pushes itself out:
//!   a probe that sends its request at once is answered however many arrive a second.
//! - **File descriptors**: `berth run` raises its soft `RLIMIT_NOFILE` to the hard limit
//!   ([`raise_open_files`]; at most 2^20). The endpoint holds at most its connections, the
//!   overflow lane and the listener, and [`connection_cap`] lowers `max_connections` so
//!   that [`FD_RESERVE`] (1024) descriptors stay for the syncs (git, the API server's
//!   connections, kustomize, files); under a limit of 2048 or less, the endpoint keeps to
//!   a quarter of it (256 of 1024, 64 of 256).
//! - **Accept errors** (`EMFILE` and the like) pause the loop, 100 ms doubling up to 1 s,
//!   and are logged once per streak, as is the connection limit being reached.
//!
//! Each connection in the endpoint costs about 20 KiB (its task and a request-head buffer
//! of at most [`MAX_HEAD`]); webhook bodies (up to 1 MiB each) are read a few at a time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::shutdown::{stopped, Signal};

/// Connections served beyond `max_connections`, with short timeouts (see the module doc).
pub const OVERFLOW: usize = 32;
/// How long a new connection waits for the place of the idle one closed for it.
pub const EVICT_WAIT: Duration = Duration::from_millis(200);
/// File descriptors kept for everything but the endpoint.
pub const FD_RESERVE: u64 = 1024;
/// The largest request head read (hyper's buffer); a longer head is refused.
pub const MAX_HEAD: usize = 16 << 10;
/// The highest soft `RLIMIT_NOFILE` berth asks for (Linux's default `nr_open`).
const MAX_OPEN_FILES: u64 = 1 << 20;
/// The first pause after an accept error; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(100);
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// A streak of refusals or errors that ended this long ago is logged again when a new
/// one starts; a flood that comes and goes writes a line a minute, not a line a second.
const LOG_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// Raises the soft limit of open files to the hard limit (at most 2^20) and returns the
/// soft limit now in force.
pub fn raise_open_files() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    // No limit (`None`) is infinity.
    let current = limit.current.unwrap_or(u64::MAX);
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(MAX_OPEN_FILES);
    if current < wanted {
        let raised = Rlimit {
            current: Some(wanted),
            maximum: limit.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            tracing::debug!(from = current, to = wanted, "raised the open files limit");
            return wanted;
        }
    }
    current
}

/// The steady lane's size: `configured`, lowered so that the endpoint (its connections,
/// the overflow lane and the listener) leaves [`FD_RESERVE`] of `open_files`, or takes a
/// quarter of it when it is that small; at least 1.
pub fn connection_cap(configured: usize, open_files: u64) -> usize {
    let budget = open_files
        .saturating_sub(FD_RESERVE)
        .max(open_files / 4)
        .saturating_sub(OVERFLOW as u64 + 1);
    configured
        .min(usize::try_from(budget).unwrap_or(usize::MAX))
        .max(1)
}

/// How a connection is served: see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Under `max_connections`.
    Steady,
    /// Beyond it: one request, short timeouts.
    Overflow,
}

impl Lane {
    /// How long the request head may take to arrive.
    pub fn head_timeout(self) -> Duration {
        match self {
            Lane::Steady => Duration::from_secs(10),
            Lane::Overflow => Duration::from_secs(1),
        }
    }

    /// How long a webhook body may take to arrive.
    pub fn body_timeout(self) -> Duration {
        match self {
            Lane::Steady => Duration::from_secs(5),
            Lane::Overflow => Duration::from_secs(1),
        }
    }

    /// How long the connection may stay open, idle keep-alive included.
    pub fn lifetime(self) -> Duration {
        match self {
            Lane::Steady => Duration::from_secs(60),
            Lane::Overflow => Duration::from_secs(5),
        }
    }

    /// Whether the connection serves more than one request.
    pub fn keep_alive(self) -> bool {
        self == Lane::Steady
    }
}

/// An accepted connection and its place in a lane, freed when it is dropped.
pub struct Admitted {
    /// The client's stream.
    pub stream: TcpStream,
    /// How it is served.
    pub lane: Lane,
    /// The place it holds.
    pub place: OwnedSemaphorePermit,
    /// Its requests in flight, and the signal that closes it to make room.
    pub standing: Arc<Standing>,
}

/// A connection's standing, shared by its task and the listener.
#[derive(Default)]
pub struct Standing {
    busy: AtomicUsize,
    evict: tokio::sync::Notify,
}

impl Standing {
    /// A request is in flight until the guard is dropped.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// Whether no request is in flight.
    pub fn idle(&self) -> bool {
        self.busy.load(Ordering::SeqCst) == 0
    }

    /// Resolves when the listener asks this connection to make room (it then closes if
    /// it is [`idle`](Self::idle)).
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

/// A request in flight on a connection (see [`Standing::busy`]).
pub struct Busy(Arc<Standing>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The endpoint's listening socket with its lanes.
pub struct Listener {
    tcp: TcpListener,
    steady: Arc<Semaphore>,
    overflow: Arc<Semaphore>,
    /// Every connection admitted, oldest first (those gone are forgotten now and then).
    admitted: VecDeque<Weak<Standing>>,
    /// The places of both lanes.
    places: usize,
    failing: Streak,
    full: Streak,
}

impl Listener {
    /// `tcp` serving at most `cap` connections in the steady lane (see [`connection_cap`]).
    pub fn new(tcp: TcpListener, cap: usize) -> Self {
        Listener {
            tcp,
            steady: Arc::new(Semaphore::new(cap)),
            overflow: Arc::new(Semaphore::new(OVERFLOW)),
            admitted: VecDeque::new(),
            places: cap + OVERFLOW,
            failing: Streak::new("http accept failing: pausing between tries (logged once until accepting works again)"),
            full: Streak::new("http connection limit reached: new connections are closed at once (agent.max_connections)"),
        }
    }

    /// The next connection with a place in a lane; `None` once `shutdown` turns true.
    /// Connections without a place are closed as they come.
    pub async fn next(&mut self, shutdown: &mut Signal) -> Option<Admitted> {
        let mut pause = FIRST_PAUSE;
        loop {
            let accepted = tokio::select! {
                () = stopped(shutdown) => return None,
                accepted = self.tcp.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                // The client gave up between connecting and being accepted: nothing to
                // pause for.
                Err(e) if is_per_connection(&e) => continue,
                Err(e) => {
                    self.failing.hit(&e);
                    tokio::select! {
                        () = stopped(shutdown) => return None,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(MAX_PAUSE);
                    continue;
                }
            };
            self.failing.end();
            pause = FIRST_PAUSE;
            let admitted = match self.place() {
                Some(admitted) => Some(admitted),
                None => self.make_room().await,
            };
            match admitted {
                Some((place, lane)) => {
                    if lane == Lane::Steady {
                        self.full.end();
                    }
                    let standing = Arc::new(Standing::default());
                    self.remember(&standing);
                    return Some(Admitted {
                        stream,
                        lane,
                        place,
                        standing,
                    });
                }
                None => self
                    .full
                    .hit(&"every place of both lanes is taken, each by a request in flight"),
            }
        }
    }

    /// A free place, in the steady lane first.
    fn place(&self) -> Option<(OwnedSemaphorePermit, Lane)> {
        [
            (&self.steady, Lane::Steady),
            (&self.overflow, Lane::Overflow),
        ]
        .into_iter()
        .find_map(|(lane, kind)| Some((lane.clone().try_acquire_owned().ok()?, kind)))
    }

    /// Closes the oldest connection with no request in flight and takes its place, within
    /// [`EVICT_WAIT`]; `None` when every connection is busy.
    async fn make_room(&mut self) -> Option<(OwnedSemaphorePermit, Lane)> {
        let at = self
            .admitted
            .iter()
            .position(|w| w.upgrade().is_some_and(|s| s.idle()))?;
        let victim = self.admitted.remove(at)?.upgrade()?;
        victim.evict.notify_one();
        drop(victim);
        let (steady, overflow) = (self.steady.clone(), self.overflow.clone());
        let freed = async {
            tokio::select! {
                Ok(place) = steady.acquire_owned() => Some((place, Lane::Steady)),
                Ok(place) = overflow.acquire_owned() => Some((place, Lane::Overflow)),
                else => None,
            }
        };
        tokio::time::timeout(EVICT_WAIT, freed).await.ok().flatten()
    }

    /// Keeps `standing` among the admitted; those gone are forgotten whenever the list
    /// outgrows twice the places of both lanes (at most as many connections are alive).
    fn remember(&mut self, standing: &Arc<Standing>) {
        if self.admitted.len() > 2 * self.places {
            self.admitted.retain(|w| w.strong_count() > 0);
        }
        self.admitted.push_back(Arc::downgrade(standing));
    }
}

fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted
    )
}

/// Events of one kind logged once per streak: the first as a warning, the end with a
/// count.
struct Streak {
    what: &'static str,
    count: u64,
    logged: bool,
    last_logged: Option<Instant>,
}

impl Streak {
    fn new(what: &'static str) -> Self {
        Streak {
            what,
            count: 0,
            logged: false,
            last_logged: None,
        }
    }

    fn hit(&mut self, detail: &dyn std::fmt::Display) {
        if self.count == 0
            && self
                .last_logged
                .is_none_or(|at| at.elapsed() >= LOG_AGAIN_AFTER)
        {
            tracing::warn!(detail = %detail, "{}", self.what);
            self.logged = true;
        }
        self.count += 1;
    }

    fn end(&mut self) {
        if self.logged {
            tracing::info!(times = self.count, "over: {}", self.what);
            self.last_logged = Some(Instant::now());
        }
        self.count = 0;
        self.logged = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_reserve_or_three_quarters_of_the_descriptors() {
        assert_eq!(connection_cap(512, 1 << 20), 512);
        assert_eq!(connection_cap(10, 1 << 20), 10);
        // 1500 - 1024 = 476 over a quarter (375), less the overflow lane and listener.
        assert_eq!(connection_cap(512, 1500), 476 - 33);
        assert_eq!(connection_cap(512, 1024), 256 - 33);
        assert_eq!(connection_cap(512, 256), 64 - 33);
        assert_eq!(connection_cap(512, 16), 1);
    }
}
