//! The HTTP endpoint (`[agent] listen`): `GET /healthz` (the process answers), `GET
//! /readyz` (the cluster answers; [`super::readiness`]), `GET /metrics` (Prometheus) and
//! `POST /hooks/<app>`, a webhook that starts a sync, signed like GitHub's
//! (`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`). Bodies over 1 MiB are
//! refused before they are read; a body must arrive within its lane's time (5 s, or 1 s
//! in the overflow lane), and at most [`MAX_BODY_READS`] are read at once.
//!
//! Every other GET goes to the [`Pages`] the agent serves beside these (the status page),
//! when it serves any.
//!
//! Which connections are served, and for how long, is [`super::listener`]'s.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::Semaphore;

use super::listener::{Admitted, Lane, Listener, MAX_HEAD};
use super::metrics::Metrics;
use super::readiness::Readiness;
use super::stall::{WriteStall, WRITE_STALL};
use crate::shutdown::Signal;

/// Largest webhook body read.
pub const MAX_BODY: usize = 1 << 20;
/// Webhook bodies read at once: at most this many MiB are held for them.
pub const MAX_BODY_READS: usize = 8;
/// How long a connection whose lifetime is over has to finish the request in flight.
const GRACE: Duration = Duration::from_secs(5);

/// An answer's body: whole, or a stream (server-sent events).
pub type Body = BoxBody<Bytes, Infallible>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// Pages served beside the endpoint's own paths: asked for every GET the endpoint does not
/// answer itself; `None` is a 404.
pub trait Pages: Send + Sync {
    /// The answer to `request` (its head: the pages read no body); a stream must end
    /// before `closes`, when the connection's lifetime does.
    fn answer<'a>(
        &'a self,
        request: &'a http::request::Parts,
        closes: tokio::time::Instant,
    ) -> BoxFuture<'a, Option<Response<Body>>>;
}

/// Where webhooks go: the running apps, looked up at each request.
pub trait Webhooks: Send + Sync {
    /// The app's webhook key and its repository's URL; `None`: no webhook for the app.
    fn key(&self, app: &str) -> Option<(Vec<u8>, String)>;
    /// Requests a sync of everything that follows `repo` (a full inbox already holds
    /// one); the apps' names.
    fn push(&self, repo: &str) -> Vec<String>;
}

/// What the endpoint serves.
pub struct Endpoint {
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Where webhooks go, set once when the agent starts (until then: no webhook).
    pub webhooks: std::sync::OnceLock<Arc<dyn Webhooks>>,
    /// For `/readyz`.
    pub readiness: Readiness,
    /// The pages served beside (the status page), set once when the agent starts.
    pub pages: std::sync::OnceLock<Arc<dyn Pages>>,
    /// Places to read a webhook body in.
    body_reads: Semaphore,
}

impl Endpoint {
    /// An endpoint with no webhooks yet, asking `client`'s cluster for readiness.
    pub fn new(metrics: Arc<Metrics>, client: kube::Client) -> Self {
        Endpoint {
            metrics,
            webhooks: std::sync::OnceLock::new(),
            readiness: Readiness::new(client),
            pages: std::sync::OnceLock::new(),
            body_reads: Semaphore::new(MAX_BODY_READS),
        }
    }
}

/// Serves until `shutdown` turns true.
pub async fn serve(mut listener: Listener, endpoint: Arc<Endpoint>, mut shutdown: Signal) {
    while let Some(admitted) = listener.next(&mut shutdown).await {
        tokio::spawn(connection(endpoint.clone(), admitted));
    }
}

/// One connection, within its lane's head timeout and lifetime.
async fn connection(endpoint: Arc<Endpoint>, admitted: Admitted) {
    let Admitted {
        stream,
        lane,
        place,
        standing,
    } = admitted;
    let closes = tokio::time::Instant::now() + lane.lifetime();
    let in_flight = standing.clone();
    let service = hyper::service::service_fn(move |req| {
        let endpoint = endpoint.clone();
        let busy = in_flight.busy();
        async move {
            let answer = handle(&endpoint, lane, closes, req).await;
            drop(busy);
            Ok::<_, Infallible>(answer)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(lane.head_timeout())
        .keep_alive(lane.keep_alive())
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(WriteStall::new(stream, WRITE_STALL)), service);
    tokio::pin!(conn);
    let ended = loop {
        tokio::select! {
            ended = tokio::time::timeout_at(closes, conn.as_mut()) => break match ended {
                Ok(ended) => ended,
                Err(_) => {
                    // Its time is up: an idle keep-alive closes now, a request in flight
                    // is answered first (for a moment at most).
                    conn.as_mut().graceful_shutdown();
                    tokio::time::timeout(GRACE, conn).await.unwrap_or(Ok(()))
                }
            },
            // Closed to make room for a new connection, unless a request is in flight.
            () = standing.evicted() => if standing.idle() {
                break Ok(());
            },
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "http connection ended");
    }
    drop(place);
}

fn reply(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(full(body.into()));
    *r.status_mut() = status;
    r
}

async fn handle(
    endpoint: &Endpoint,
    lane: Lane,
    closes: tokio::time::Instant,
    req: Request<Incoming>,
) -> Response<Body> {
    // HEAD is GET without the body (probes and monitors send it).
    if req.method() == Method::HEAD {
        let (mut parts, body) = req.into_parts();
        parts.method = Method::GET;
        let mut r = Box::pin(handle(
            endpoint,
            lane,
            closes,
            Request::from_parts(parts, body),
        ))
        .await;
        *r.body_mut() = full(Bytes::new());
        return r;
    }
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => match endpoint.readiness.check().await {
            Ok(()) => reply(StatusCode::OK, "ok\n"),
            Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        (&Method::GET, "/metrics") => {
            // From the readiness check (at most one request a second).
            let reachable = u8::from(endpoint.readiness.check().await.is_ok());
            let text = format!(
                "{}# HELP berth_cluster_reachable Whether the API server answers (1) or not (0).\n# TYPE berth_cluster_reachable gauge\nberth_cluster_reachable {reachable}\n",
                endpoint.metrics.render()
            );
            let mut r = reply(StatusCode::OK, text);
            r.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (&Method::POST, p) if p.starts_with("/hooks/") => {
            webhook(endpoint, lane, &p["/hooks/".len()..], req).await
        }
        (&Method::GET, _) => {
            let (parts, _) = req.into_parts();
            let page = match endpoint.pages.get() {
                Some(pages) => pages.answer(&parts, closes).await,
                None => None,
            };
            page.unwrap_or_else(|| reply(StatusCode::NOT_FOUND, "not found\n"))
        }
        _ => reply(StatusCode::NOT_FOUND, "not found\n"),
    }
}

async fn webhook(
    endpoint: &Endpoint,
    lane: Lane,
    app: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let webhooks = endpoint.webhooks.get();
    let Some((webhooks, (secret, repo))) = webhooks.and_then(|w| Some((w, w.key(app)?))) else {
        return reply(
            StatusCode::NOT_FOUND,
            format!("no webhook for app {app:?}\n"),
        );
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return reply(StatusCode::PAYLOAD_TOO_LARGE, "body over 1 MiB\n");
    }
    let signature = req
        .headers()
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match read_body(endpoint, lane, req.into_body()).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let Some(signature) = signature else {
        return reply(StatusCode::UNAUTHORIZED, "missing X-Hub-Signature-256\n");
    };
    if !crate::body_hmac::matches(&secret, &body, &signature) {
        tracing::warn!(app, "webhook with a wrong signature refused");
        return reply(StatusCode::UNAUTHORIZED, "signature does not match\n");
    }
    // The push is the repository's: every app of it syncs. A registry's notification
    // names the sources it pushed to: every app of each.
    let apps = match crate::source::registry::notification::pushed(&body) {
        Some(sources) => sources.iter().flat_map(|s| webhooks.push(s)).collect(),
        None => webhooks.push(&repo),
    };
    match apps.as_slice() {
        [] => reply(
            StatusCode::ACCEPTED,
            "no running app follows what was pushed\n",
        ),
        [one] => reply(StatusCode::ACCEPTED, format!("sync of {one} requested\n")),
        _ => reply(
            StatusCode::ACCEPTED,
            format!(
                "sync of {} requested ({})\n",
                crate::plural(apps.len(), "app"),
                apps.join(", ")
            ),
        ),
    }
}

/// The webhook's body: within the lane's time, in one of [`MAX_BODY_READS`] places, at
/// most [`MAX_BODY`] bytes.
async fn read_body(
    endpoint: &Endpoint,
    lane: Lane,
    body: Incoming,
) -> Result<Bytes, Response<Body>> {
    // No waiting for a place: a sender that is slow would make everyone wait.
    let Ok(_place) = endpoint.body_reads.try_acquire() else {
        let mut busy = reply(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many webhooks at once\n",
        );
        busy.headers_mut()
            .insert("retry-after", hyper::header::HeaderValue::from_static("1"));
        return Err(busy);
    };
    let timeout = lane.body_timeout();
    match tokio::time::timeout(timeout, Limited::new(body, MAX_BODY).collect()).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(_)) => Err(reply(StatusCode::PAYLOAD_TOO_LARGE, "body over 1 MiB\n")),
        Err(_) => Err(reply(
            StatusCode::REQUEST_TIMEOUT,
            format!("the body did not arrive within {}s\n", timeout.as_secs()),
        )),
    }
}
