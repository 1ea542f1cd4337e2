//! The status page's HTML, rendered on the server from the templates of
//! `src/page/templates/` (askama, which escapes every value it is given): the apps (`/`,
//! `index.rs`), one app (`/apps/NAME`, `app.rs`) and one sync (`/apps/NAME/syncs/ID`,
//! `sync.rs`); here, the frame around them and the parts they share. No inline script or
//! style (the CSP forbids both): `page.js` keeps the parts marked `data-field` live,
//! `page.css` draws them.

mod app;
mod index;
mod sync;

use askama::Template;
use jiff::Timestamp;

use super::board::{AppState, HealthSummary, State};
use crate::history::{short_age, CommitInfo};
use crate::manifest::ObjectKey;
pub use app::{app, Live, Unanswered};
pub use index::{index, Filter, ImagePolicyRow, IndexPage, WriteBackRow, PAGE_APPS};
pub use sync::sync;

/// The version the page names (and its assets carry, so that an upgrade reloads them).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the page around each page's `main` says of it.
struct Frame<'a> {
    /// The title, before ` · berth`.
    title: String,
    /// `index`, `app`, `sync` or `message` (`data-page`, for the script).
    page: &'static str,
    /// The app the page is about (`data-app`).
    app: Option<&'a str>,
}

impl Frame<'_> {
    /// Whether the page follows the agent (and says whether it does).
    fn follows(&self) -> bool {
        matches!(self.page, "index" | "app")
    }
}

/// "3m ago", "in 40s".
pub fn age(at: Timestamp, now: Timestamp) -> String {
    let secs = now.duration_since(at).as_secs();
    let span = short_age(std::time::Duration::from_secs(secs.unsigned_abs()));
    if secs >= 0 {
        format!("{span} ago")
    } else {
        format!("in {span}")
    }
}

/// A moment, as a `time` element the script keeps current shows it.
struct Time {
    at: Timestamp,
    /// [`age`] when the page was rendered.
    age: String,
}

impl Time {
    /// `at`, as seen at `now`.
    fn new(at: Timestamp, now: Timestamp) -> Self {
        Time {
            at,
            age: age(at, now),
        }
    }
}

/// The word an app's row is filtered by and coloured with: what it does now, else how
/// its last sync ended.
pub fn status_word(app: &AppState) -> &'static str {
    match (app.state, &app.held, &app.last) {
        (State::Syncing, _, _) => "syncing",
        (State::Waiting, _, _) => "waiting",
        (State::Suspended, _, _) => "suspended",
        (State::Idle, Some(_), _) => "held",
        (State::Idle, None, Some(last)) => last.outcome.as_str(),
        (State::Idle, None, None) => "never",
    }
}

/// What the filter's outcome list offers.
const STATUS_WORDS: [&str; 10] = [
    "succeeded",
    "failed",
    "no-change",
    "interrupted",
    "rolled-back",
    "held",
    "syncing",
    "waiting",
    "suspended",
    "never",
];

/// A commit as a cell shows it: short SHA, subject, author and age.
struct Commit<'a> {
    info: &'a CommitInfo,
    /// `Name` of `Name <email>`.
    author: &'a str,
    when: Time,
}

impl<'a> Commit<'a> {
    /// `info`, as seen at `now`.
    fn new(info: &'a CommitInfo, now: Timestamp) -> Self {
        Commit {
            info,
            author: info.author.split(" <").next().unwrap_or(&info.author),
            when: Time::new(info.time, now),
        }
    }
}

/// An app's parts that the script keeps live (`data-field`): its status, last commit,
/// health and next sync (`cells.html`).
struct Cells<'a> {
    /// [`status_word`].
    word: &'static str,
    /// The step and progress of a sync, what it waits on, why it is held or its last
    /// error.
    detail: Option<String>,
    /// Since when it syncs or waits.
    since: Option<Time>,
    commit: Option<Commit<'a>>,
    health: Option<&'a HealthSummary>,
    next: Option<Time>,
}

impl<'a> Cells<'a> {
    /// `app`'s, as seen at `now`.
    fn new(app: &'a AppState, now: Timestamp) -> Self {
        let detail = match app.state {
            State::Syncing => {
                let step = app.step.as_deref().unwrap_or("starting");
                Some(match &app.activity {
                    Some(line) => format!("{step}: {line}"),
                    None => step.to_string(),
                })
            }
            State::Waiting => app.waiting.clone(),
            State::Suspended => app.suspended.clone(),
            State::Idle => app
                .held
                .clone()
                .or_else(|| app.last.as_ref().and_then(|l| l.error.clone())),
        };
        let busy = matches!(
            app.state,
            State::Syncing | State::Waiting | State::Suspended
        );
        Cells {
            word: status_word(app),
            detail,
            since: app.since.filter(|_| busy).map(|at| Time::new(at, now)),
            commit: app
                .last
                .as_ref()
                .and_then(|l| l.commit.as_ref())
                .map(|c| Commit::new(c, now)),
            health: app.health.as_ref(),
            next: (app.state == State::Idle)
                .then_some(app.next_sync)
                .flatten()
                .map(|at| Time::new(at, now)),
        }
    }

    /// How the health summary is coloured.
    fn health_class(&self) -> &'static str {
        match self.health {
            Some(h) if h.failed > 0 => "bad",
            Some(h) if h.ready < h.total => "warn",
            _ => "good",
        }
    }
}

/// `namespace/name`, or `name` for a cluster-wide object.
fn place(key: &ObjectKey) -> String {
    key.namespace
        .as_ref()
        .map_or(key.name.clone(), |ns| format!("{ns}/{}", key.name))
}

/// How an object's health is coloured.
fn health_class(health: &str) -> &'static str {
    if health == "ready" || health == "complete" {
        "good"
    } else if health.starts_with("failed") || health == "missing" {
        "bad"
    } else if health == "-" {
        "dim"
    } else {
        "warn"
    }
}

/// "850ms", "12.3s".
fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// A page's text, or what askama could not render (a value's `Display` failed, which
/// none of the page's does): the page is a string either way.
fn rendered(page: &impl Template) -> String {
    page.render()
        .unwrap_or_else(|e| format!("the page could not be rendered: {e}\n"))
}

/// The page of [`message`].
#[derive(Template)]
#[template(path = "message.html")]
struct Message<'a> {
    frame: Frame<'a>,
    text: &'a str,
}

/// A page that says what went wrong (404 and the like).
pub fn message(title: &str, text: &str) -> String {
    rendered(&Message {
        frame: Frame {
            title: title.to_string(),
            page: "message",
            app: None,
        },
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Outcome, RecordError, SyncRecord, Trigger};

    #[test]
    fn several_clusters_make_a_column_and_a_filter() {
        let board = crate::page::board::Board::default();
        let app = |name: &str, cluster: &str| {
            let body = format!("name = \"{name}\"\nrepo = \"/r\"\ncluster = \"{cluster}\"");
            crate::config::test_app(&body)
        };
        board.set_apps(&[app("web-east", "east"), app("web-west", "west")], |_| {
            None
        });
        let page = |cluster: &str| {
            let filter = Filter {
                cluster: cluster.into(),
                ..Filter::default()
            };
            let (apps, kept) = board.page(|a| filter.keeps(a), 0, PAGE_APPS);
            let all = board.count();
            let clusters = board.clusters();
            IndexPage {
                filter,
                number: 1,
                apps,
                kept,
                all,
                clusters,
                refused: vec![
                    "app a-b (app set a, folder x/b, cluster east): the name \"a-b\" is made by …"
                        .into(),
                ],
                refused_count: 2,
                held_sets: vec!["app set shop: it generates no app at commit 1a2b3c4 where it generated 6 apps before: none is removed …".into()],
                images: Vec::new(),
                writes: Vec::new(),
            }
        };
        let html = index(&page("west"), Timestamp::now());
        assert!(html.contains("<th scope=\"col\">Cluster</th>"), "{html}");
        assert!(
            html.contains("<option value=\"west\" selected>west</option>"),
            "{html}"
        );
        assert!(!html.contains("data-app=\"web-east\""), "{html}");
        assert!(html.contains(">1 of 2 apps</p>"), "{html}");
        assert!(!html.contains("pager"), "one page: {html}");
        assert!(
            html.contains("Refused (2)") && html.contains("app a-b (app set a, folder x/b"),
            "{html}"
        );
        assert!(
            html.contains("Held app sets (1)")
                && html.contains("app set shop: it generates no app at commit 1a2b3c4"),
            "{html}"
        );
        // One cluster: neither.
        board.set_apps(&[app("web-east", "east")], |_| None);
        let html = index(&page(""), Timestamp::now());
        assert!(!html.contains("Cluster"), "{html}");
    }

    #[test]
    fn image_policies_and_write_backs_are_shown_escaped() {
        let html = index(
            &IndexPage {
                filter: Filter::default(),
                number: 1,
                apps: Vec::new(),
                kept: 0,
                all: 0,
                clusters: Vec::new(),
                refused: Vec::new(),
                refused_count: 0,
                held_sets: Vec::new(),
                images: vec![super::ImagePolicyRow {
                    policy: "shop".into(),
                    latest: "1.4.2".into(),
                    failed: "1.5.0<script>".into(),
                    paused: 1,
                }],
                writes: vec![super::WriteBackRow {
                    at: "2026-11-28T21:00:00Z".into(),
                    commit: "47f4997".into(),
                    branch: "main".into(),
                    changes: "shop 1.4.1 → 1.4.2".into(),
                }],
            },
            Timestamp::now(),
        );
        let row = "<th scope=\"row\">shop</th><td>1.4.2</td><td class=\"bad\">1.5.0&#60;script&#62;</td><td>1</td>";
        assert!(html.contains(row), "{html}");
        assert!(
            html.contains("<code>47f4997</code> to main: shop 1.4.1 → 1.4.2"),
            "{html}"
        );
    }

    #[test]
    fn many_apps_are_a_page_at_a_time_with_links_that_keep_the_filter() {
        let board = crate::page::board::Board::default();
        let apps: Vec<crate::config::AppConfig> = (0..PAGE_APPS * 2 + 1)
            .map(|i| crate::config::test_app(&format!("name = \"app-{i:04}\"\nrepo = \"/r\"")))
            .collect();
        board.set_apps(&apps, |_| None);
        let filter = Filter {
            name: "app-".into(),
            ..Filter::default()
        };
        let (page, kept) = board.page(|a| filter.keeps(a), PAGE_APPS, PAGE_APPS);
        let html = index(
            &IndexPage {
                filter,
                number: 2,
                apps: page,
                kept,
                all: kept,
                clusters: board.clusters(),
                refused: Vec::new(),
                refused_count: 0,
                held_sets: Vec::new(),
                images: Vec::new(),
                writes: Vec::new(),
            },
            Timestamp::now(),
        );
        assert_eq!(html.matches("<tr data-app=").count(), PAGE_APPS);
        assert!(html.contains("data-app=\"app-0250\"") && !html.contains("data-app=\"app-0249\""));
        assert!(html.contains("page 2 of 3"), "{html}");
        assert!(
            html.contains("href=\"?name=app-&#38;page=1\" rel=\"prev\""),
            "{html}"
        );
        assert!(
            html.contains("href=\"?name=app-&#38;page=3\" rel=\"next\""),
            "{html}"
        );
    }

    #[test]
    fn text_from_git_and_the_cluster_is_escaped() {
        let now = Timestamp::now();
        let record = SyncRecord {
            commit: Some(CommitInfo {
                sha: "0123456789abcdef0123456789abcdef01234567".into(),
                author: "Eve <eve@example.com>".into(),
                time: now,
                subject: "<script>alert(1)</script>".into(),
            }),
            errors: vec![RecordError {
                message: "bad \"quote\" & <img src=x onerror=alert(1)>".into(),
                source: Some("a.yaml:1".into()),
            }],
            outcome: Outcome::Failed,
            ..SyncRecord::new("r1".into(), "shop", Trigger::Cli, now, None)
        };
        let html = sync(&record, now);
        assert!(
            html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{html}"
        );
        assert!(html.contains("&#34;quote&#34; &#38; &#60;img"), "{html}");
        // Nothing from the record is markup, and no inline script or style anywhere: the
        // CSP would refuse it.
        let inline = ["<script>", "<img", "style="];
        assert!(!inline.iter().any(|i| html.contains(i)), "{html}");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let at = |s: i64| Timestamp::from_second(1_700_000_000 + s).unwrap();
        assert_eq!(age(at(-5), now), "5s ago");
        assert_eq!(age(at(-300), now), "5m ago");
        assert_eq!(age(at(40), now), "in 40s");
        assert_eq!(age(at(-3 * 86_400), now), "3d ago");
    }
}
