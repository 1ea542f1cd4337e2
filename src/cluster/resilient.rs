//! Bounded waits and retries for every request to the API server, as one tower layer
//! under the kube [`Client`](kube::Client): each request (a watch excepted) has a
//! deadline, and a transient failure — 429 (honouring `Retry-After`), 500, 502, 503, 504,
//! a refused, reset or closed connection, a timeout — is sent again after an exponential
//! backoff with jitter, until `retry_for` has passed. Everything berth sends is safe to
//! repeat: server-side apply and dry runs are idempotent, a repeated delete finds the
//! object gone, a repeated create finds it there. A watch is not retried here: kube's
//! watcher re-lists and re-watches with its own backoff. A 500 is read before it is
//! retried: one whose message says the request itself is invalid (an older API server
//! answers server-side apply's schema errors with 500) is final.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Bytes;
use kube::client::Body;
use tokio::sync::watch;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::retry::{transient_status, Backoff, Policy};

/// The delay before a retry: from 200 ms, doubling, up to [`MAX_BACKOFF`].
const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(200),
    max: MAX_BACKOFF,
};
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a request may still wait for its answer once berth is stopping (systemd's
/// stop waits 90 s by default; an outage must not hold it that long).
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// The most of a 500's body read to tell a final answer from a transient one.
const MAX_ERROR_BODY: usize = 64 << 10;

/// An answer as the inner service gave it, or a 500 whose body was read.
pub type Answer<B> = Response<Either<B, Full<Bytes>>>;

/// How long requests may take and how long failing ones are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resilience {
    /// One attempt's deadline (watches have none).
    pub request_timeout: Duration,
    /// Transient failures are retried until this much time has passed since the first
    /// attempt.
    pub retry_for: Duration,
}

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
    server: String,
    /// Whether outages are logged (not for a command's one-shot probe, which says it).
    logged: bool,
    down_since: Mutex<Option<Instant>>,
    down: watch::Sender<bool>,
    stopping: watch::Sender<bool>,
}

impl Reach {
    /// The reach of the API server at `server` (its URL, as messages name it).
    pub fn new(server: &str) -> Arc<Reach> {
        Self::with_log(server, true)
    }

    /// As [`Reach::new`], without logging outages: for a probe whose caller says them.
    pub fn quiet(server: &str) -> Arc<Reach> {
        Self::with_log(server, false)
    }

    fn with_log(server: &str, logged: bool) -> Arc<Reach> {
        Arc::new(Reach {
            logged,
            server: server.to_string(),
            down_since: Mutex::new(None),
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

    /// When the outage began, while there is one.
    fn down_since(&self) -> Option<Instant> {
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

    async fn stopped(&self) {
        let _ = self.stopping.subscribe().wait_for(|stop| *stop).await;
    }

    /// Resolves [`STOP_GRACE`] after berth started stopping, or at once while the server
    /// is unreachable.
    async fn given_up(&self) {
        self.stopped().await;
        tokio::select! {
            () = self.lost() => {}
            () = tokio::time::sleep(STOP_GRACE) => {}
        }
    }

    fn answered(&self) {
        // Every answer passes here: no lock while the server is up.
        if !self.is_down() {
            return;
        }
        let since = self.down_since.lock().ok().and_then(|mut s| s.take());
        if let Some(since) = since {
            let secs = since.elapsed().as_secs();
            if self.logged {
                tracing::info!(server = %self.server, unreachable_s = secs, "the API server at {} answers again (unreachable for {secs}s)", self.server);
            }
            self.down.send_replace(false);
        }
    }

    fn unreached(&self, cause: &str) {
        let first = self.down_since.lock().is_ok_and(|mut s| {
            let first = s.is_none();
            s.get_or_insert_with(Instant::now);
            first
        });
        if first {
            if self.logged {
                tracing::warn!(server = %self.server, error = %cause, "the API server at {} is unreachable: {cause}; syncs fail until it answers again", self.server);
            }
            self.down.send_replace(true);
        }
    }
}

/// The layer that adds [`Resilience`] to a client's service, telling `reach` whether the
/// server answers.
#[derive(Debug, Clone)]
pub struct ResilientLayer {
    /// The bounds.
    pub policy: Resilience,
    /// Whether the server answers.
    pub reach: Arc<Reach>,
}

impl<S> Layer<S> for ResilientLayer {
    type Service = Resilient<S>;

    fn layer(&self, inner: S) -> Resilient<S> {
        Resilient {
            inner,
            policy: self.policy,
            reach: self.reach.clone(),
        }
    }
}

/// A service that times out and retries its requests (see the module's documentation).
#[derive(Debug, Clone)]
pub struct Resilient<S> {
    inner: S,
    policy: Resilience,
    reach: Arc<Reach>,
}

/// The deadline of one attempt passed.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {0:?}")]
pub struct TimedOut(Duration);

/// A request that could not connect: the server and the innermost cause.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach the API server at {server}: {cause}")]
pub struct Unreachable {
    server: String,
    cause: String,
}

/// A request cut short because berth is stopping.
#[derive(Debug, thiserror::Error)]
#[error("berth is stopping: the request to the API server was not finished")]
pub struct Stopping;

/// The innermost cause of a failure (`Connection refused (os error 111)`), not a chain of
/// wrappers.
pub fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<Request<Body>> for Resilient<S>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Answer<B>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Answer<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The service made ready by poll_ready takes the first attempt.
        let fresh = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, fresh);
        let (again, policy, reach) = (self.inner.clone(), self.policy, self.reach.clone());
        Box::pin(async move {
            tokio::select! {
                sent = send(ready, again, req, policy, &reach) => sent,
                () = reach.given_up() => Err(Box::new(Stopping) as BoxError),
            }
        })
    }
}

async fn send<S, B>(
    ready: S,
    mut again: S,
    req: Request<Body>,
    policy: Resilience,
    reach: &Reach,
) -> Result<Answer<B>, BoxError>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError>,
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let watch = is_watch(&req);
    let started = Instant::now();
    let mut lost_before = false;
    let mut ready = Some(ready);
    let mut next = Some(req);
    for attempt in 0u32.. {
        let Some(req) = next.take() else {
            unreachable!("a request is always kept for the next attempt")
        };
        next = if watch { None } else { copy(&req) };
        let call = match ready.take() {
            Some(mut s) => s.call(req),
            None => again.ready().await?.call(req),
        };
        let result = if watch {
            call.await
        } else {
            // After a failed connection, the attempts left share what remains of
            // `request_timeout`.
            let limit = match lost_before {
                false => policy.request_timeout,
                true => (policy.request_timeout.saturating_sub(started.elapsed()))
                    .max(Duration::from_millis(100)),
            };
            match tokio::time::timeout(limit, call).await {
                Ok(r) => r,
                Err(_) => Err(Box::new(TimedOut(limit)) as BoxError),
            }
        };
        if result.is_ok() {
            reach.answered();
        }
        let mut lost = false;
        let (why, server_wait, result) = match result {
            Ok(res) if res.status() == StatusCode::INTERNAL_SERVER_ERROR => {
                let (parts, body) = res.into_parts();
                let body = read_error(body, policy.request_timeout).await;
                let why = format!("{}: {}", parts.status, String::from_utf8_lossy(&body));
                let invalid = invalid_request(&body);
                let res = Ok(Response::from_parts(parts, Either::Right(Full::new(body))));
                if invalid {
                    return res;
                }
                (why, None, res)
            }
            Ok(res) if transient_status(res.status().as_u16()) => (
                res.status().to_string(),
                retry_after(res.headers()),
                Ok(res.map(Either::Left)),
            ),
            Ok(res) => return Ok(res.map(Either::Left)),
            Err(e) if transient_error(e.as_ref()) => {
                let cause = root_cause(e.as_ref());
                reach.unreached(&cause);
                lost = true;
                let e = Unreachable {
                    server: reach.server.clone(),
                    cause: cause.clone(),
                };
                (cause, None, Err(Box::new(e) as BoxError))
            }
            Err(e) => return Err(e),
        };
        // Answers (429, 5xx) are retried for `retry_for`; a server that cannot be reached
        // until `request_timeout` after the outage began (a restart is ridden out, a long
        // outage fails each request at once once that has passed).
        let within = match reach.down_since().filter(|_| lost) {
            Some(since) => (since + policy.request_timeout)
                .saturating_duration_since(started)
                .min(policy.request_timeout),
            None => policy.retry_for,
        };
        let retry = Policy {
            backoff: BACKOFF,
            retries: u32::MAX,
            within: within.min(policy.retry_for),
        };
        lost_before |= lost;
        let wait = retry.next(attempt, started.elapsed(), server_wait);
        let (Some(kept), Some(wait)) = (next.as_ref(), wait) else {
            return result;
        };
        if lost {
            tracing::debug!(method = %kept.method(), path = kept.uri().path(), error = %why, retry_in_ms = wait.as_millis() as u64, attempt = attempt + 1, "API request failed; retrying");
        } else {
            tracing::warn!(method = %kept.method(), path = kept.uri().path(), error = %why, retry_in_ms = wait.as_millis() as u64, attempt = attempt + 1, "API request failed; retrying");
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = reach.stopped() => return result,
        }
    }
    unreachable!("the attempts loop returns")
}

fn is_watch<T>(req: &Request<T>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// A copy of a request whose body is in memory (every request berth sends).
fn copy(req: &Request<Body>) -> Option<Request<Body>> {
    let mut copy = Request::new(req.body().try_clone()?);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

/// A 500's body, as much of it as arrives within `timeout` (up to [`MAX_ERROR_BODY`]).
async fn read_error<B>(body: B, timeout: Duration) -> Bytes
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let read = Limited::new(body, MAX_ERROR_BODY).collect();
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        _ => Bytes::new(),
    }
}

/// A 500 that the same request would get again: server-side apply could not make a typed
/// object of it (a field the schema does not declare, a value of the wrong type), which
/// API servers before v1.22 report as an internal error.
fn invalid_request(body: &[u8]) -> bool {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|status| Some(status.get("message")?.as_str()?.to_string()))
        .unwrap_or_default();
    message.contains("failed to create typed patch object")
}

/// A lost connection or a timeout; not a TLS or configuration error, which would fail
/// the same way again.
fn transient_error(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind as Kind;
    let mut cause = Some(e);
    while let Some(e) = cause {
        if e.is::<TimedOut>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                Kind::ConnectionRefused
                    | Kind::ConnectionReset
                    | Kind::ConnectionAborted
                    | Kind::BrokenPipe
                    | Kind::TimedOut
                    | Kind::UnexpectedEof
                    | Kind::NotConnected
            );
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() || h.is_closed() {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

/// `Retry-After` in seconds, as the API server sends it with 429.
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.min(MAX_BACKOFF.as_secs() * 6)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        for attempt in 0..8 {
            let full = (BACKOFF.base * 2u32.pow(attempt)).min(MAX_BACKOFF);
            for _ in 0..20 {
                let b = BACKOFF.delay(attempt);
                assert!(b >= full / 2 && b <= full, "attempt {attempt}: {b:?}");
            }
        }
        assert_eq!(BACKOFF.delay(40).max(MAX_BACKOFF), MAX_BACKOFF);
    }

    #[test]
    fn watches_are_told_apart() {
        let req = |uri: &str| Request::get(uri).body(()).unwrap();
        assert!(is_watch(&req("/api/v1/pods?watch=true&resourceVersion=1")));
        assert!(!is_watch(&req("/api/v1/pods?labelSelector=watch%3Dtrue")));
        assert!(!is_watch(&req("/api/v1/pods")));
    }

    #[test]
    fn transient_answers_and_errors() {
        assert!(transient_status(StatusCode::TOO_MANY_REQUESTS.as_u16()));
        assert!(transient_status(StatusCode::SERVICE_UNAVAILABLE.as_u16()));
        assert!(!transient_status(StatusCode::CONFLICT.as_u16()));
        assert!(!transient_status(StatusCode::UNPROCESSABLE_ENTITY.as_u16()));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(transient_error(&reset));
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(!transient_error(&denied));
        assert!(transient_error(&TimedOut(Duration::from_secs(1))));
        let mut h = http::HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
    }

    /// A service answering `statuses` in turn (the last one for ever), counting calls;
    /// status 0 never answers.
    fn answering(
        statuses: &'static [u16],
        message: &'static [u8],
    ) -> (
        impl Service<
                Request<Body>,
                Response = Response<Full<Bytes>>,
                Error = BoxError,
                Future = impl Send + 'static,
            > + Clone
            + Send
            + 'static,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::Ordering;
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let service = tower::service_fn(move |_req: Request<Body>| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            let status = statuses[n.min(statuses.len() - 1)];
            async move {
                if status == 0 {
                    futures::future::pending::<()>().await;
                }
                let body = Full::new(Bytes::from_static(message));
                Ok::<_, BoxError>(Response::builder().status(status).body(body).unwrap())
            }
        });
        (service, calls)
    }

    async fn send_one(
        statuses: &'static [u16],
        policy: Resilience,
    ) -> (Result<Answer<Full<Bytes>>, BoxError>, usize) {
        send_answering(statuses, b"", policy).await
    }

    async fn send_answering(
        statuses: &'static [u16],
        message: &'static [u8],
        policy: Resilience,
    ) -> (Result<Answer<Full<Bytes>>, BoxError>, usize) {
        let (service, calls) = answering(statuses, message);
        let mut service = ResilientLayer {
            policy,
            reach: Reach::new("https://test/"),
        }
        .layer(service);
        let req = Request::patch("/api/v1/namespaces/shop/configmaps/a")
            .body(Body::from(b"{}".to_vec()))
            .unwrap();
        let result = service.ready().await.unwrap().call(req).await;
        (result, calls.load(std::sync::atomic::Ordering::SeqCst))
    }

    const PATIENT: Resilience = Resilience {
        request_timeout: Duration::from_secs(5),
        retry_for: Duration::from_secs(30),
    };

    #[tokio::test]
    async fn transient_answers_are_sent_again_until_one_succeeds() {
        let (result, calls) = send_one(&[503, 429, 200], PATIENT).await;
        assert_eq!(result.unwrap().status(), 200);
        assert_eq!(calls, 3);
    }

    #[tokio::test]
    async fn a_500_for_an_invalid_request_is_final_and_keeps_its_message() {
        let invalid = br#"{"kind":"Status","status":"Failure","message":"failed to create typed patch object: .data.x: expected string, got &value.valueUnstructured{Value:1}","reason":"InternalError","code":500}"#;
        let (result, calls) = send_answering(&[500, 200], invalid, PATIENT).await;
        let answer = result.unwrap();
        assert_eq!(answer.status(), 500);
        assert_eq!(calls, 1);
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        assert!(String::from_utf8_lossy(&body).contains(".data.x: expected string"));
        let busy = br#"{"kind":"Status","message":"etcdserver: request timed out","code":500}"#;
        let (result, calls) = send_answering(&[500, 200], busy, PATIENT).await;
        assert_eq!(result.unwrap().status(), 200);
        assert_eq!(calls, 2);
    }

    #[tokio::test]
    async fn a_refusal_is_not_sent_again() {
        let (result, calls) = send_one(&[422, 200], PATIENT).await;
        assert_eq!(result.unwrap().status(), 422);
        assert_eq!(calls, 1);
    }

    /// A server that does not answer fails the request within `request_timeout`,
    /// however long `retry_for` is, naming the server and the cause.
    #[tokio::test]
    async fn a_request_that_hangs_fails_within_request_timeout_naming_the_server() {
        let brief = Resilience {
            request_timeout: Duration::from_millis(100),
            retry_for: Duration::from_secs(60),
        };
        let clock = Instant::now();
        let (result, calls) = send_one(&[0], brief).await;
        let e = result.unwrap_err().to_string();
        assert_eq!(
            e,
            "cannot reach the API server at https://test/: no answer within 100ms"
        );
        assert_eq!(calls, 1);
        assert!(
            clock.elapsed() < Duration::from_millis(500),
            "{:?}",
            clock.elapsed()
        );
    }

    /// The first failed connection marks the server down, the next answer marks it back;
    /// in a known outage a request is tried once; `stop` ends a request in flight.
    #[tokio::test]
    async fn reach_follows_outages_and_stop_cuts_requests_short() {
        let reach = Reach::new("https://test/");
        let refused = tower::service_fn(|_req: Request<Body>| async {
            Err::<Response<Full<Bytes>>, BoxError>(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            )))
        });
        let policy = Resilience {
            request_timeout: Duration::from_millis(400),
            retry_for: Duration::from_secs(60),
        };
        let layer = ResilientLayer {
            policy,
            reach: reach.clone(),
        };
        let req = || Request::get("/version").body(Body::empty()).unwrap();
        let mut down = layer.layer(refused);
        let clock = Instant::now();
        let e = down.ready().await.unwrap().call(req()).await.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot reach the API server at https://test/: ")
                && e.to_string().to_lowercase().contains("connection refused"),
            "{e}"
        );
        assert!(reach.is_down());
        assert!(clock.elapsed() <= Duration::from_millis(600));
        // An outage older than request_timeout: one attempt, at once.
        tokio::time::sleep(policy.request_timeout).await;
        let clock = Instant::now();
        down.ready().await.unwrap().call(req()).await.unwrap_err();
        assert!(clock.elapsed() < Duration::from_millis(100));

        let (answers, _) = answering(&[200], b"");
        let mut up = layer.layer(answers);
        up.ready().await.unwrap().call(req()).await.unwrap();
        assert!(!reach.is_down());
        reach.back().await;

        // Stopping: an answer still comes; in an outage nothing waits.
        reach.stop();
        up.ready().await.unwrap().call(req()).await.unwrap();
        let clock = Instant::now();
        down.ready().await.unwrap().call(req()).await.unwrap_err();
        let (hangs, _) = answering(&[0], b"");
        let e = layer
            .layer(hangs)
            .ready()
            .await
            .unwrap()
            .call(req())
            .await
            .unwrap_err();
        assert!(e.is::<Stopping>(), "{e}");
        assert!(clock.elapsed() < Duration::from_millis(500));
    }
}
