//! The status page (`[agent] status_page = true`), served read-only by the agent's HTTP
//! endpoint beside `/healthz` and the webhooks:
//!
//! - `/`: every app (`html::index`); `/apps/NAME`: its objects, Deployments and history
//!   (`html::app`); `/apps/NAME/syncs/ID`: one record, each rollout drawn as a chart
//!   (`html::sync`, `chart.rs`);
//! - `/api/apps`, `/api/apps/NAME`, `/api/apps/NAME/syncs[?before=ID]`,
//!   `/api/apps/NAME/syncs/ID`: the same as JSON; `/api/events[?app=NAME]`: server-sent
//!   events, every app's state at once and then each change (`docs/status-page.md`);
//! - `/assets/page.css` and `/assets/page.js`, compiled into the binary.
//!
//! What it shows comes from the [`Board`] the app loops keep in memory, the history log
//! (read a page at a time, every line bounded) and, for one app's page, the cluster read
//! then (`live::live_app`). The health summary of `/` is read from the cluster
//! one app at a time, and only while someone looks ([`StatusPage::refresh`]). Nothing on
//! it changes anything; no answer holds a Secret's value, the kubeconfig or a secret of
//! the configuration; every answer carries a CSP without inline script, no framing and
//! nosniff; with `status_page_credentials`, every request needs one of them.

pub mod auth;
pub mod board;
mod chart;
mod escape;
pub mod html;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use hyper::body::Bytes;
use hyper::{header, Response, StatusCode};
use jiff::Timestamp;

use crate::config::{AppConfig, Config};
use crate::history::HistoryLog;
use crate::live::live_app;
use crate::service::http::{full, Body, Pages};
use crate::shutdown::{stopped, Signal};
use crate::sync::Syncer;
pub use auth::{AuthError, Credentials};
pub use board::Board;

/// Records per page of an app's history.
const PAGE: usize = 25;
/// How long the cluster has to answer for one app's page.
const LIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer from the cluster about one app is reused.
const LIVE_REUSE: Duration = Duration::from_secs(2);
/// A health summary older than this is read again while someone looks.
const HEALTH_AGE: Duration = Duration::from_secs(30);
/// Changes this close together go out as one event.
const COALESCE: Duration = Duration::from_millis(100);
/// Someone looks: a request came this recently, or an event stream is open.
const LOOKING: Duration = Duration::from_secs(60);

const CSS: &str = include_str!("assets/page.css");
const JS: &str = include_str!("assets/page.js");
const ICON: &str = include_str!("assets/favicon.svg");

/// The status page.
pub struct StatusPage {
    /// What the app loops tell.
    pub board: Board,
    history: HistoryLog,
    syncer: RwLock<Arc<Syncer>>,
    credentials: Option<Credentials>,
    /// When someone last looked (ms since the epoch).
    viewed_ms: AtomicI64,
    /// Each app's last answer from the cluster, and when: asked again after
    /// [`LIVE_REUSE`], so that requests in a burst cost the cluster one read.
    answers: std::sync::Mutex<HashMap<String, (Instant, html::Live)>>,
}

impl StatusPage {
    /// The page of `config`'s agent, reading the cluster through `syncer`.
    ///
    /// # Errors
    /// `status_page_credentials` cannot be read or holds none.
    pub fn new(config: &Config, syncer: Arc<Syncer>) -> Result<Self, AuthError> {
        let credentials = config
            .agent
            .status_page_credentials
            .as_deref()
            .map(Credentials::read)
            .transpose()?;
        let page = StatusPage {
            board: Board::default(),
            history: HistoryLog::new(&config.agent.state_dir),
            syncer: RwLock::new(syncer),
            credentials,
            viewed_ms: AtomicI64::new(0),
            answers: std::sync::Mutex::new(HashMap::new()),
        };
        page.set_apps(&config.apps);
        Ok(page)
    }

    /// The configuration's apps (at start and on each reload).
    pub fn set_apps(&self, apps: &[AppConfig]) {
        self.board
            .set_apps(apps, |app| self.history.newest(app).ok().flatten());
        if let Ok(mut answers) = self.answers.lock() {
            answers.retain(|name, _| apps.iter().any(|a| &a.name == name));
        }
    }

    /// The client a reload made.
    pub fn set_syncer(&self, syncer: Arc<Syncer>) {
        if let Ok(mut s) = self.syncer.write() {
            *s = syncer;
        }
    }

    fn syncer(&self) -> Arc<Syncer> {
        self.syncer
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    fn looked(&self) {
        self.viewed_ms
            .store(Timestamp::now().as_millisecond(), Ordering::Relaxed);
    }

    fn looking(&self) -> bool {
        Timestamp::now().as_millisecond() - self.viewed_ms.load(Ordering::Relaxed)
            < LOOKING.as_millis() as i64
    }

    /// What the cluster says of `app` now (within [`LIVE_TIMEOUT`]; an answer younger
    /// than [`LIVE_REUSE`] is reused); the board's health summary follows.
    async fn live(&self, app: &str) -> html::Live {
        let reused = self.answers.lock().ok().and_then(|a| {
            a.get(app)
                .filter(|(at, _)| at.elapsed() < LIVE_REUSE)
                .map(|(_, live)| live.clone())
        });
        if let Some(live) = reused {
            return live;
        }
        let live = self.read_live(app).await;
        if let Ok(mut answers) = self.answers.lock() {
            answers.insert(app.to_string(), (Instant::now(), live.clone()));
        }
        live
    }

    async fn read_live(&self, app: &str) -> html::Live {
        let syncer = self.syncer();
        let read = live_app(
            &syncer.client,
            &syncer.kinds,
            &syncer.agent.inventory_namespace,
            app,
        );
        let live = match tokio::time::timeout(LIVE_TIMEOUT, read).await {
            Ok(Ok(live)) => live,
            Ok(Err(e)) => return Err(Arc::new(e.into())),
            Err(_) => return Err(Arc::new(html::Unanswered::Timeout(LIVE_TIMEOUT))),
        };
        self.board.health(app, &live, Timestamp::now());
        Ok(live)
    }

    /// Keeps the health summaries of `/` fresh while someone looks: the stalest app's
    /// objects read, one app at a time and at most five a second (one a second when
    /// the cluster does not answer), none while nobody looks.
    pub async fn refresh(self: Arc<Self>, mut shutdown: Signal) {
        loop {
            let stale = self
                .looking()
                .then(|| {
                    let age = jiff::SignedDuration::try_from(HEALTH_AGE).unwrap_or_default();
                    self.board.stalest_health(Timestamp::now() - age)
                })
                .flatten();
            let pause = match stale {
                Some(app) if self.live(&app).await.is_ok() => Duration::from_millis(200),
                _ => Duration::from_secs(1),
            };
            tokio::select! {
                () = stopped(&mut shutdown) => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    async fn route(
        self: &Arc<Self>,
        request: &http::request::Parts,
        closes: tokio::time::Instant,
    ) -> Option<Response<Body>> {
        let path = request.uri.path();
        let query = request.uri.query().unwrap_or("");
        let protected = path == "/"
            || path == "/favicon.ico"
            || path.starts_with("/apps/")
            || path.starts_with("/api/")
            || path.starts_with("/assets/");
        if !protected {
            return None;
        }
        let header = |name| request.headers.get(name).and_then(|v| v.to_str().ok());
        match &self.credentials {
            Some(credentials) if !credentials.allows(header(header::AUTHORIZATION)) => {
                return Some(unauthorized());
            }
            // Open to whoever reaches `listen`: only under an address, so that a web page
            // elsewhere cannot read it through a name it points at 127.0.0.1.
            None if !addressed(header(header::HOST)) => return Some(misnamed()),
            _ => {}
        }
        self.looked();
        let parts: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
        let now = Timestamp::now();
        Some(match parts.as_slice() {
            [] | [""] => {
                let filter = html::Filter {
                    name: param(query, "name").unwrap_or_default(),
                    outcome: param(query, "outcome").unwrap_or_default(),
                };
                page(html::index(&self.board.apps(), &filter, now))
            }
            ["assets", "page.css"] => asset(CSS, "text/css; charset=utf-8"),
            ["assets", "page.js"] => asset(JS, "text/javascript; charset=utf-8"),
            ["assets", "favicon.svg"] | ["favicon.ico"] => asset(ICON, "image/svg+xml"),
            ["apps", app] => {
                let Some(state) = self.board.app(app) else {
                    return Some(no_app(app, false));
                };
                let before = param(query, "before");
                let live = self.live(app).await;
                let history = self.page_of(app, before.clone()).await;
                let last = self
                    .read_log(app, |log, app| log.newest(app).ok().flatten())
                    .await;
                page(html::app(
                    &state,
                    &live,
                    last.as_ref(),
                    &history,
                    before.as_deref(),
                    now,
                ))
            }
            ["apps", app, "syncs", id] => match self.record(app, id).await {
                Some(record) => page(html::sync(&record, now)),
                None => no_record(app, id, false),
            },
            ["api", "apps"] => json(&self.board.apps()),
            ["api", "apps", app] => {
                let Some(state) = self.board.app(app) else {
                    return Some(no_app(app, true));
                };
                let live = self.live(app).await;
                let history = self.page_of(app, None).await;
                json(&serde_json::json!({
                    "app": state,
                    "live": live.as_ref().ok(),
                    "live_error": live.as_ref().err().map(ToString::to_string),
                    "history": history,
                }))
            }
            ["api", "apps", app, "syncs"] => {
                if self.board.app(app).is_none() {
                    return Some(no_app(app, true));
                }
                json(&self.page_of(app, param(query, "before")).await)
            }
            ["api", "apps", app, "syncs", id] => match self.record(app, id).await {
                Some(record) => json(&record),
                None => no_record(app, id, true),
            },
            ["api", "events"] => self.events(param(query, "app"), closes),
            _ => return None,
        })
    }

    /// `read` of `app`'s history log, off the endpoint's threads (a log is files).
    async fn read_log<T: Default + Send + 'static>(
        &self,
        app: &str,
        read: impl FnOnce(&HistoryLog, &str) -> T + Send + 'static,
    ) -> T {
        let (log, app) = (self.history.clone(), app.to_string());
        tokio::task::spawn_blocking(move || read(&log, &app))
            .await
            .unwrap_or_default()
    }

    /// A page of `app`'s history, older than the record `before` when given.
    async fn page_of(&self, app: &str, before: Option<String>) -> crate::history::Page {
        self.read_log(app, move |log, app| {
            log.page(app, before.as_deref(), PAGE).unwrap_or_default()
        })
        .await
    }

    /// The record `id` of `app`, when `app` is one of the configuration's.
    async fn record(&self, app: &str, id: &str) -> Option<crate::history::SyncRecord> {
        self.board.app(app)?;
        let id = id.to_string();
        self.read_log(app, move |log, app| log.find(app, &id).ok().flatten())
            .await
    }

    /// `/api/events`: `event: apps` with every app (or the one asked for), then an
    /// `event: app` with the apps each change touched, until a moment before the
    /// connection `closes` (the browser reconnects after `retry`).
    fn events(
        self: &Arc<Self>,
        only: Option<String>,
        closes: tokio::time::Instant,
    ) -> Response<Body> {
        struct Stream {
            page: Arc<StatusPage>,
            changed: tokio::sync::watch::Receiver<u64>,
            seen: Option<u64>,
            only: Option<String>,
            until: tokio::time::Instant,
        }
        let until = closes - Duration::from_secs(1);
        let start = Stream {
            page: self.clone(),
            changed: self.board.changed(),
            seen: None,
            only,
            until,
        };
        let frames = futures::stream::unfold(start, |mut s| async move {
            let keep =
                |apps: Vec<board::AppState>, only: &Option<String>| -> Vec<board::AppState> {
                    apps.into_iter()
                        .filter(|a| only.as_ref().is_none_or(|o| &a.name == o))
                        .collect()
                };
            let Some(seen) = s.seen else {
                s.seen = Some(*s.changed.borrow_and_update());
                let apps = keep(s.page.board.apps(), &s.only);
                let text = format!("retry: 500\nevent: apps\ndata: {}\n\n", to_json(&apps));
                return Some((Ok(hyper::body::Frame::data(Bytes::from(text))), s));
            };
            loop {
                s.page.looked();
                match tokio::time::timeout_at(s.until, s.changed.changed()).await {
                    Ok(Ok(())) => {}
                    _ => return None, // time is up, or the agent stops
                }
                // A sync says several lines at once: one event for them.
                tokio::time::sleep(COALESCE).await;
                let version = *s.changed.borrow_and_update();
                let apps = keep(s.page.board.since(seen), &s.only);
                s.seen = Some(version);
                if !apps.is_empty() {
                    let text = format!("event: app\ndata: {}\n\n", to_json(&apps));
                    return Some((Ok(hyper::body::Frame::data(Bytes::from(text))), s));
                }
            }
        });
        let mut r = Response::new(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(frames),
        ));
        secure(&mut r, "text/event-stream; charset=utf-8");
        r
    }
}

impl Pages for Arc<StatusPage> {
    fn answer<'a>(
        &'a self,
        request: &'a http::request::Parts,
        closes: tokio::time::Instant,
    ) -> BoxFuture<'a, Option<Response<Body>>> {
        Box::pin(self.route(request, closes))
    }
}

/// The value of `key` in a query string, percent-decoded (`+` a space); at most 256 bytes.
fn param(query: &str, key: &str) -> Option<String> {
    let (_, value) = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == key)?;
    let mut end = value.len().min(256);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Some(value[..end].to_string())
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// The headers of every answer: what the page may load (nothing inline, nothing from
/// elsewhere), no framing, no sniffing, no caching, no referrer.
fn secure(r: &mut Response<Body>, content_type: &'static str) {
    let h = r.headers_mut();
    let mut set = |name: &'static str, value: &'static str| {
        h.insert(name, header::HeaderValue::from_static(value));
    };
    set("content-type", content_type);
    set(
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    );
    set("x-frame-options", "DENY");
    set("x-content-type-options", "nosniff");
    set("referrer-policy", "no-referrer");
    set("cache-control", "no-store");
}

fn answer(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &'static str,
) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    secure(&mut r, content_type);
    r
}

fn page(html: String) -> Response<Body> {
    answer(StatusCode::OK, html, "text/html; charset=utf-8")
}

fn json<T: serde::Serialize>(value: &T) -> Response<Body> {
    answer(StatusCode::OK, to_json(value), "application/json")
}

fn asset(text: &'static str, content_type: &'static str) -> Response<Body> {
    answer(StatusCode::OK, text, content_type)
}

fn unauthorized() -> Response<Body> {
    let mut r = answer(
        StatusCode::UNAUTHORIZED,
        "the status page needs a user and password, or a bearer token (agent.status_page_credentials)\n",
        "text/plain; charset=utf-8",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Basic realm=\"berth\", charset=\"UTF-8\""),
    );
    r
}

/// Whether a request's `Host` is an IP address or `localhost` (with a port or not).
fn addressed(host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

fn misnamed() -> Response<Body> {
    answer(
        StatusCode::FORBIDDEN,
        "without agent.status_page_credentials the status page answers only under an address (http://127.0.0.1:PORT/) or localhost: set credentials to serve it under a name\n",
        "text/plain; charset=utf-8",
    )
}

fn not_found(title: &str, text: &str, api: bool) -> Response<Body> {
    if api {
        let body = to_json(&serde_json::json!({ "error": text }));
        answer(StatusCode::NOT_FOUND, body, "application/json")
    } else {
        answer(
            StatusCode::NOT_FOUND,
            html::message(title, text),
            "text/html; charset=utf-8",
        )
    }
}

fn no_app(app: &str, api: bool) -> Response<Body> {
    not_found(
        "No such app",
        &format!("No app named {app:?} in the configuration."),
        api,
    )
}

fn no_record(app: &str, id: &str, api: bool) -> Response<Body> {
    not_found(
        "No such sync",
        &format!("The history of {app:?} holds no record {id:?} (kept: agent.history_keep, agent.history_max_age)."),
        api,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_credentials_only_an_address_or_localhost_is_answered() {
        for host in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST",
            "[::1]:9464",
            "10.0.0.7",
        ] {
            assert!(addressed(Some(host)), "{host}");
        }
        for host in [
            "evil.example:9464",
            "127.0.0.1.nip.io",
            "localhost.evil.example",
            "",
        ] {
            assert!(!addressed(Some(host)), "{host}");
        }
        assert!(!addressed(None));
    }

    #[test]
    fn query_values_are_decoded_and_bounded() {
        assert_eq!(
            param("name=shop+web&outcome=failed", "outcome").as_deref(),
            Some("failed")
        );
        assert_eq!(param("name=shop+web", "name").as_deref(), Some("shop web"));
        assert_eq!(param("name=a%2Fb%3C", "name").as_deref(), Some("a/b<"));
        assert_eq!(param("name=100%", "name").as_deref(), Some("100%"));
        assert_eq!(param("name=%zz", "name").as_deref(), Some("%zz"));
        assert_eq!(param("x=1", "name"), None);
        assert_eq!(
            param(&format!("name={}", "a".repeat(5000)), "name")
                .unwrap()
                .len(),
            256
        );
    }
}
