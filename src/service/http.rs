//! The HTTP endpoint (`[agent] listen`): `GET /healthz` (the process answers), `GET
//! /readyz` (the cluster answers), `GET /metrics` (Prometheus) and `POST /hooks/<app>`, a
//! webhook that starts a sync, signed like GitHub's (`X-Hub-Signature-256: sha256=<hex
//! HMAC-SHA256 of the body>`). Bodies over 1 MiB are refused before they are read.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::metrics::Metrics;
use crate::history::Trigger;
use crate::shutdown::{stopped, Signal};

/// Largest webhook body read.
pub const MAX_BODY: usize = 1 << 20;

/// A webhook target: the app's secret and its trigger channel.
#[derive(Clone)]
pub struct Hook {
    /// The HMAC key; `None`: the app has no webhook.
    pub secret: Option<Vec<u8>>,
    /// The app's repository: a push triggers every app of it.
    pub repo: String,
    /// Where sync requests go.
    pub trigger: mpsc::Sender<Trigger>,
}

/// What the endpoint serves.
pub struct Endpoint {
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// Webhook targets by app, replaced on reload.
    pub hooks: RwLock<HashMap<String, Hook>>,
    /// For readiness.
    pub client: kube::Client,
}

/// Serves until `shutdown` turns true.
pub async fn serve(listener: TcpListener, endpoint: Arc<Endpoint>, mut shutdown: Signal) {
    loop {
        let (stream, _) = tokio::select! {
            () = stopped(&mut shutdown) => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "http accept failed");
                    continue;
                }
            },
        };
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(handle(&endpoint, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "http connection ended");
            }
        });
    }
}

fn reply(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())));
    *r.status_mut() = status;
    r
}

async fn handle(endpoint: &Endpoint, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => {
            match tokio::time::timeout(Duration::from_secs(3), endpoint.client.apiserver_version())
                .await
            {
                Ok(Ok(_)) => reply(StatusCode::OK, "ok\n"),
                Ok(Err(e)) => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("cluster unreachable: {e}\n"),
                ),
                Err(_) => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "cluster unreachable: no answer in 3s\n",
                ),
            }
        }
        (&Method::GET, "/metrics") => {
            let mut r = reply(StatusCode::OK, endpoint.metrics.render());
            r.headers_mut().insert(
                "content-type",
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (&Method::POST, p) if p.starts_with("/hooks/") => {
            webhook(endpoint, &p["/hooks/".len()..], req).await
        }
        _ => reply(StatusCode::NOT_FOUND, "not found\n"),
    }
}

async fn webhook(endpoint: &Endpoint, app: &str, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let hook = endpoint.hooks.read().ok().and_then(|h| h.get(app).cloned());
    let Some((secret, repo)) = hook.and_then(|h| Some((h.secret?, h.repo))) else {
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
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, "body over 1 MiB\n"),
    };
    let Some(signature) = signature else {
        return reply(StatusCode::UNAUTHORIZED, "missing X-Hub-Signature-256\n");
    };
    if !crate::body_hmac::matches(&secret, &body, &signature) {
        tracing::warn!(app, "webhook with a wrong signature refused");
        return reply(StatusCode::UNAUTHORIZED, "signature does not match\n");
    }
    // The push is the repository's: every app of it syncs. A full channel already holds
    // a sync request: that sync sees this push too.
    let mut apps = Vec::new();
    if let Ok(hooks) = endpoint.hooks.read() {
        for (name, hook) in hooks.iter().filter(|(_, h)| h.repo == repo) {
            let _ = hook.trigger.try_send(Trigger::Webhook);
            apps.push(name.as_str());
        }
        if apps.len() > 1 {
            return reply(
                StatusCode::ACCEPTED,
                format!(
                    "sync of {} requested ({})\n",
                    crate::plural(apps.len(), "app"),
                    apps.join(", ")
                ),
            );
        }
    }
    reply(StatusCode::ACCEPTED, format!("sync of {app} requested\n"))
}
