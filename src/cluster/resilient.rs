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
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Bytes;
use kube::client::Body;
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

/// Sends `req` (first on `ready`, then on `again`), retrying what may pass on a second
/// try, within the policy's bounds.
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
        // After a failed connection, the attempts left share what remains of
        // `request_timeout`; a watch is not bounded.
        let limit = match lost_before {
            false => policy.request_timeout,
            true => (policy.request_timeout.saturating_sub(started.elapsed()))
                .max(Duration::from_millis(100)),
        };
        let sent = Instant::now();
        let result = bounded(call, (!watch).then_some(limit)).await;
        if result.is_ok() {
            reach.answered();
        }
        let (why, server_wait, lost, result) = match judge(result, policy, reach, sent).await {
            Tried::Done(result) => return result,
            Tried::Retry(why, server_wait, lost, result) => (why, server_wait, lost, result),
        };
        lost_before |= lost;
        let retry = retry_policy(policy, reach, lost, started);
        let wait = retry.next(attempt, started.elapsed(), server_wait);
        let (Some(kept), Some(wait)) = (next.as_ref(), wait) else {
            return result;
        };
        let (method, path, retry_in_ms) =
            (kept.method(), kept.uri().path(), wait.as_millis() as u64);
        if lost {
            tracing::debug!(%method, path, error = %why, retry_in_ms, attempt = attempt + 1, "API request failed; retrying");
        } else {
            tracing::warn!(%method, path, error = %why, retry_in_ms, attempt = attempt + 1, "API request failed; retrying");
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = reach.stopped() => return result,
        }
    }
    unreachable!("the attempts loop returns")
}

/// `call`'s answer, within `limit` when there is one.
async fn bounded<T>(
    call: impl Future<Output = Result<T, BoxError>>,
    limit: Option<Duration>,
) -> Result<T, BoxError> {
    let Some(limit) = limit else {
        return call.await;
    };
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r,
        Err(_) => Err(Box::new(TimedOut(limit)) as BoxError),
    }
}

/// How one attempt ended: returned as it is, or retried — why (for the log), how long the
/// server asked to wait, whether the server could not be reached, and what to return when
/// no retry is left.
enum Tried<B> {
    Done(Result<Answer<B>, BoxError>),
    Retry(String, Option<Duration>, bool, Result<Answer<B>, BoxError>),
}

/// What an attempt's result calls for: a 500 (but for an invalid request), a 429 or 503,
/// or a connection that failed is retried; anything else is returned.
async fn judge<B>(
    result: Result<Response<B>, BoxError>,
    policy: Resilience,
    reach: &Reach,
    sent: Instant,
) -> Tried<B>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match result {
        Ok(res) if res.status() == StatusCode::INTERNAL_SERVER_ERROR => {
            let (parts, body) = res.into_parts();
            let body = read_error(body, policy.request_timeout).await;
            let why = format!("{}: {}", parts.status, String::from_utf8_lossy(&body));
            let invalid = invalid_request(&body);
            let res = Ok(Response::from_parts(parts, Either::Right(Full::new(body))));
            if invalid {
                return Tried::Done(res);
            }
            Tried::Retry(why, None, false, res)
        }
        Ok(res) if transient_status(res.status().as_u16()) => {
            let (why, wait) = (res.status().to_string(), retry_after(res.headers()));
            Tried::Retry(why, wait, false, Ok(res.map(Either::Left)))
        }
        Ok(res) => Tried::Done(Ok(res.map(Either::Left))),
        Err(e) if transient_error(e.as_ref()) => {
            let cause = root_cause(e.as_ref());
            reach.unreached(&cause, sent);
            let e = Unreachable {
                server: reach.server().to_string(),
                cause: cause.clone(),
            };
            Tried::Retry(cause, None, true, Err(Box::new(e) as BoxError))
        }
        Err(e) => Tried::Done(Err(e)),
    }
}

/// How long a request may be retried: answers (429, 5xx) for `retry_for`; a server that
/// cannot be reached (`lost`) until `request_timeout` after the outage began (a restart is
/// ridden out, a long outage fails each request at once once that has passed).
fn retry_policy(policy: Resilience, reach: &Reach, lost: bool, started: Instant) -> Policy {
    let within = match reach.down_since().filter(|_| lost) {
        Some(since) => (since + policy.request_timeout)
            .saturating_duration_since(started)
            .min(policy.request_timeout),
        None => policy.retry_for,
    };
    Policy {
        backoff: BACKOFF,
        retries: u32::MAX,
        within: within.min(policy.retry_for),
    }
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

mod reach;
#[cfg(test)]
mod tests;

pub use reach::Reach;
