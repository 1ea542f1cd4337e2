//! The status page (`[agent] status_page = true`), served read-only by the agent's HTTP
//! endpoint beside `/healthz` and the webhooks:
//!
//! - `/`: the apps, a page at a time (`html::index`); `/apps/NAME`: its objects, Deployments and history
//!   (`html::app`); `/apps/NAME/syncs/ID`: one record, each rollout drawn as a chart
//!   (`html::sync`, `chart.rs`); all rendered from the templates of `templates/`;
//! - `/api/apps[?page=N]`, `/api/apps/NAME`, `/api/apps/NAME/syncs[?before=ID]`,
//!   `/api/apps/NAME/syncs/ID`: the same as JSON; `/api/events[?app=NAME|?page=N]`:
//!   server-sent events, the page's apps at once and then each change (`events.rs`,
//!   `docs/status-page.md`); `/` and the lists are a page of apps at a time;
//! - `/assets/page.css` and `/assets/page.js`, compiled into the binary.
//!
//! What it shows comes from the [`Board`] the app loops keep in memory, the history log
//! (read a page at a time, every line bounded) and, for one app's page, the cluster read
//! then (`live::live_app`). The health summary of `/` is read from the cluster
//! one app at a time, and only while someone looks ([`StatusPage::refresh`]). Nothing on
//! it changes anything; no answer holds a Secret's value, the kubeconfig or a secret of
//! the configuration; every answer carries a CSP without inline script, no framing and
//! nosniff; with `status_page_credentials`, every request needs one of them.

mod answer;
pub mod auth;
pub mod board;
mod chart;
mod events;
pub mod html;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use hyper::{header, Response};
use jiff::Timestamp;

use crate::config::{AppConfig, Config, Published};
use crate::history::{HistoryLog, SyncRecord};
use crate::live::live_app;
use crate::service::http::{Body, Pages};
use crate::shutdown::{stopped, Signal};
use crate::sync::Syncer;
use answer::{
    addressed, asset, json, misnamed, no_app, no_record, page, paged, param, unauthorized,
};
pub use auth::{AuthError, Credentials};
use board::AppState;
pub use board::Board;

/// Records per page of an app's history.
const PAGE: usize = 25;
/// How long the cluster has to answer for one app's page.
const LIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer from the cluster about one app is reused.
const LIVE_REUSE: Duration = Duration::from_secs(2);
/// A health summary older than this is read again while someone looks.
const HEALTH_AGE: Duration = Duration::from_secs(30);
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
    /// The apps the sets make that do not run, and why (the first [`REFUSED_SHOWN`]), and
    /// how many there are.
    refused: RwLock<(Vec<String>, usize)>,
    /// The configuration's app sets, whose problems `/` reads from `state_dir`.
    sets: RwLock<Vec<String>>,
    state_dir: std::path::PathBuf,
}

/// The refused apps `/` names at most.
const REFUSED_SHOWN: usize = 50;

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
            refused: RwLock::new((Vec::new(), 0)),
            sets: RwLock::new(Vec::new()),
            state_dir: config.agent.state_dir.clone(),
        };
        page.set_apps(config);
        Ok(page)
    }

    /// Follows the configuration the agent publishes: the board takes each reload's
    /// apps, until shutdown.
    pub async fn follow(self: Arc<Self>, mut config: Published, mut shutdown: Signal) {
        loop {
            tokio::select! {
                () = stopped(&mut shutdown) => return,
                changed = config.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let config = config.borrow_and_update().clone();
                    self.set_apps(&config);
                }
            }
        }
    }

    /// The configuration's apps (at start and on each reload), each with its cluster.
    fn set_apps(&self, config: &Config) {
        let apps: Vec<AppConfig> = (config.apps.iter())
            .map(|a| AppConfig {
                cluster: Some(config.cluster_of(a).name().to_string()),
                ..(**a).clone()
            })
            .collect();
        self.board
            .set_apps(&apps, |app| self.history.newest(app).ok().flatten());
        if let Ok(mut answers) = self.answers.lock() {
            answers.retain(|name, _| apps.iter().any(|a| &a.name == name));
        }
        let shown = config
            .refused
            .iter()
            .take(REFUSED_SHOWN)
            .map(ToString::to_string);
        if let Ok(mut refused) = self.refused.write() {
            *refused = (shown.collect(), config.refused.len());
        }
        if let Ok(mut sets) = self.sets.write() {
            *sets = config.app_sets.iter().map(|s| s.name.clone()).collect();
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
        let Some(cluster) = syncer.cluster_of(app) else {
            return Err(Arc::new(html::Unanswered::Unconfigured(app.to_string())));
        };
        let read = live_app(
            &cluster.client,
            &cluster.kinds,
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
        match parts.as_slice() {
            ["api", api @ ..] => self.api(api, query, closes).await,
            parts => self.html(parts, query).await,
        }
    }

    /// A page (`/`, `/apps/…`) or an asset, by its path's `parts`.
    async fn html(&self, parts: &[&str], query: &str) -> Option<Response<Body>> {
        let now = Timestamp::now();
        Some(match parts {
            [] | [""] => page(html::index(&self.index_page(query), now)),
            ["assets", "page.css"] => asset(CSS, "text/css; charset=utf-8"),
            ["assets", "page.js"] => asset(JS, "text/javascript; charset=utf-8"),
            ["assets", "favicon.svg"] | ["favicon.ico"] => asset(ICON, "image/svg+xml"),
            ["apps", app] => self.app_page(app, param(query, "before"), now).await,
            ["apps", app, "syncs", id] => match self.record(app, id).await {
                Some(record) => page(html::sync(&record, now)),
                None => no_record(app, id, false),
            },
            _ => return None,
        })
    }

    /// `/apps/NAME`, its history older than the record `before` when given.
    async fn app_page(&self, app: &str, before: Option<String>, now: Timestamp) -> Response<Body> {
        let last = self
            .read_log(app, |log, app| log.newest(app).ok().flatten())
            .await;
        let Some(state) = self.app_state(app, last.as_ref()).await else {
            return no_app(app, false);
        };
        let live = self.live(app).await;
        let history = self.page_of(app, before.clone()).await;
        page(html::app(
            &state,
            &live,
            last.as_ref(),
            &history,
            before.as_deref(),
            now,
        ))
    }

    /// An answer of `/api/`, by the path's `parts` after it.
    async fn api(
        self: &Arc<Self>,
        parts: &[&str],
        query: &str,
        closes: tokio::time::Instant,
    ) -> Option<Response<Body>> {
        Some(match parts {
            ["apps"] => paged(self.index_page(query)),
            ["apps", app] => {
                let last = self.read_log(app, |l, app| l.newest(app).ok().flatten());
                let Some(state) = self.app_state(app, last.await.as_ref()).await else {
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
            ["apps", app, "syncs"] => {
                if self.app_state(app, None).await.is_none() {
                    return Some(no_app(app, true));
                }
                json(&self.page_of(app, param(query, "before")).await)
            }
            ["apps", app, "syncs", id] => match self.record(app, id).await {
                Some(record) => json(&record),
                None => no_record(app, id, true),
            },
            ["events"] => {
                let names = match param(query, "app") {
                    Some(app) => vec![app],
                    None => (self.index_page(query).apps.into_iter())
                        .map(|a| a.name)
                        .collect(),
                };
                self.events(names, closes)
            }
            _ => return None,
        })
    }

    /// The page of `/` a query asks for (`?page=N`, from 1, and the filter's
    /// `name`, `outcome` and `cluster`): what `/`, `/api/apps` and `/api/events` answer,
    /// [`html::PAGE_APPS`] apps at most.
    fn index_page(&self, query: &str) -> html::IndexPage {
        let filter = html::Filter {
            name: param(query, "name").unwrap_or_default(),
            outcome: param(query, "outcome").unwrap_or_default(),
            cluster: param(query, "cluster").unwrap_or_default(),
        };
        let number = param(query, "page")
            .and_then(|p| p.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1);
        let offset = (number - 1).saturating_mul(html::PAGE_APPS);
        let (apps, kept) = self
            .board
            .page(|a| filter.keeps(a), offset, html::PAGE_APPS);
        let all = self.board.count();
        let (refused, refused_count) = self.refused.read().map(|r| r.clone()).unwrap_or_default();
        html::IndexPage {
            filter,
            number,
            apps,
            kept,
            all,
            clusters: self.board.clusters(),
            refused,
            refused_count,
            held_sets: self.held_sets(),
            images: self.image_policies(),
            writes: self.write_backs(),
        }
    }

    /// The image policies as their last scan left them (read when `/` is asked for).
    fn image_policies(&self) -> Vec<html::ImagePolicyRow> {
        let state = crate::images::state::read(&self.state_dir);
        (state.policies.iter())
            .map(|(policy, kept)| html::ImagePolicyRow {
                policy: policy.clone(),
                latest: kept.latest_said(),
                failed: kept.failed_said(),
                paused: kept.paused.len(),
            })
            .collect()
    }

    /// The newest five image write-backs.
    fn write_backs(&self) -> Vec<html::WriteBackRow> {
        let writes = crate::images::log::read(&self.state_dir);
        (writes.iter().rev().take(5))
            .map(|w| html::WriteBackRow {
                at: w.at.to_string(),
                commit: crate::source::short(&w.commit).to_string(),
                branch: w.branch.clone(),
                changes: w.said(),
            })
            .collect()
    }

    /// Each app set that keeps its last apps, with why (a small file a set, read when
    /// `/` is asked for: a listing that changes nothing publishes no configuration).
    fn held_sets(&self) -> Vec<String> {
        let sets = self.sets.read().map(|s| s.clone()).unwrap_or_default();
        (sets.iter())
            .filter_map(|set| {
                let problem = crate::fleet::problem_of(&self.state_dir, set)?;
                Some(format!("app set {set}: {problem}"))
            })
            .collect()
    }

    /// `app` as the board has it, or — removed from the configuration, its history kept —
    /// as its newest record `last` says.
    async fn app_state(&self, app: &str, last: Option<&SyncRecord>) -> Option<AppState> {
        if let Some(state) = self.board.app(app) {
            return Some(state);
        }
        let kept = self.read_log(app, |log, app| log.apps().iter().any(|a| a == app));
        kept.await.then(|| AppState::removed(app, last))
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
