//! The status page's HTML, rendered on the server: the apps (`/`), one app (`/apps/NAME`)
//! and one sync (`/apps/NAME/syncs/ID`). Every text from a record, a commit or the
//! cluster is escaped; no inline script or style (the CSP forbids both): `page.js` keeps
//! the parts marked `data-field` live, `page.css` draws them.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use jiff::Timestamp;

use super::board::{AppState, State};
use super::escape::esc;
use crate::history::{short_age, CommitInfo, Page, SyncRecord};
use crate::live::LiveApp;
use crate::manifest::ObjectKey;

/// `/apps/NAME` with NAME escaped for a URL path and for HTML (app names are DNS-like).
fn app_href(app: &str) -> String {
    format!("/apps/{}", esc(app))
}

/// The page around `main`.
fn layout(title: &str, page: &str, app: Option<&str>, crumbs: &str, main: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{title} · berth</title>
<link rel="icon" href="/assets/favicon.svg?v={version}" type="image/svg+xml">
<link rel="stylesheet" href="/assets/page.css?v={version}">
<script src="/assets/page.js?v={version}" defer></script>
</head>
<body data-page="{page}"{app}>
<header>
<nav aria-label="Breadcrumb"><a href="/" class="brand">berth</a>{crumbs}</nav>
{live}
</header>
<main>
{main}
</main>
<footer>berth {version} · read-only</footer>
</body>
</html>
"#,
        title = esc(title),
        app = app.map_or(String::new(), |a| format!(r#" data-app="{}""#, esc(a))),
        // Pages that follow the agent say whether they do.
        live = if matches!(page, "index" | "app") {
            r#"<span id="live" class="live" role="status" aria-live="polite">not live</span>"#
        } else {
            ""
        },
    )
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

/// A `<time>` the script keeps current.
fn time(at: Timestamp, now: Timestamp) -> String {
    format!(
        r#"<time datetime="{at}" title="{at}">{}</time>"#,
        age(at, now)
    )
}

/// The word an app's row is filtered by and coloured with: what it does now, else how
/// its last sync ended.
pub fn status_word(app: &AppState) -> &'static str {
    match (app.state, &app.held, &app.last) {
        (State::Syncing, _, _) => "syncing",
        (State::Waiting, _, _) => "waiting",
        (State::Idle, Some(_), _) => "held",
        (State::Idle, None, Some(last)) => last.outcome.as_str(),
        (State::Idle, None, None) => "never",
    }
}

/// What the filter's outcome list offers.
const STATUS_WORDS: [&str; 9] = [
    "succeeded",
    "failed",
    "no-change",
    "interrupted",
    "rolled-back",
    "held",
    "syncing",
    "waiting",
    "never",
];

fn status_cell(app: &AppState, now: Timestamp) -> String {
    let word = status_word(app);
    let mut cell = format!(r#"<span class="badge {word}">{word}</span>"#);
    let detail = match app.state {
        State::Syncing => {
            let mut d = app.step.clone().unwrap_or_else(|| "starting".into());
            if let Some(line) = &app.activity {
                let _ = write!(d, ": {line}");
            }
            Some(d)
        }
        State::Waiting => app.waiting.clone(),
        State::Idle => app
            .held
            .clone()
            .or_else(|| app.last.as_ref().and_then(|l| l.error.clone())),
    };
    if let Some(d) = detail {
        let _ = write!(cell, r#" <span class="detail">{}</span>"#, esc(&d));
    }
    if let (State::Syncing | State::Waiting, Some(since)) = (app.state, app.since) {
        let _ = write!(cell, r#" <span class="dim">{}</span>"#, time(since, now));
    }
    cell
}

fn commit_cell(commit: Option<&CommitInfo>, now: Timestamp) -> String {
    match commit {
        None => "-".into(),
        Some(c) => format!(
            r#"<code title="{sha}">{short}</code> {subject}<br><span class="dim">{author} · {when}</span>"#,
            sha = esc(&c.sha),
            short = esc(c.short()),
            subject = esc(&c.subject),
            author = esc(author_name(&c.author)),
            when = time(c.time, now),
        ),
    }
}

/// `Name` of `Name <email>`.
fn author_name(author: &str) -> &str {
    author.split(" <").next().unwrap_or(author)
}

fn health_cell(app: &AppState) -> String {
    match &app.health {
        None => r#"<span class="dim">…</span>"#.into(),
        Some(h) if h.total == 0 => format!("{} objects", h.managed),
        Some(h) => {
            let class = if h.failed > 0 {
                "bad"
            } else if h.ready < h.total {
                "warn"
            } else {
                "good"
            };
            format!(
                r#"<span class="{class}">{}/{} ready</span>"#,
                h.ready, h.total
            )
        }
    }
}

fn next_cell(app: &AppState, now: Timestamp) -> String {
    match (app.state, app.next_sync) {
        (State::Idle, Some(at)) => time(at, now),
        _ => "-".into(),
    }
}

/// The filter of `/`: a name part and a status word.
#[derive(Debug, Default)]
pub struct Filter {
    /// Part of the app's name.
    pub name: String,
    /// One of [`STATUS_WORDS`], or empty.
    pub outcome: String,
}

impl Filter {
    fn keeps(&self, app: &AppState) -> bool {
        app.name.contains(&self.name)
            && (self.outcome.is_empty() || status_word(app) == self.outcome)
    }
}

/// `/`: every app.
pub fn index(apps: &[AppState], filter: &Filter, now: Timestamp) -> String {
    let mut main = String::from(
        r#"<h1>Apps</h1>
<form class="filters" role="search" method="get" action="/">
<label>Name <input type="search" name="name" id="filter-name" autocomplete="off" value=""#,
    );
    main.push_str(&esc(&filter.name));
    main.push_str(
        r#""></label>
<label>Outcome <select name="outcome" id="filter-outcome"><option value="">any</option>"#,
    );
    for word in STATUS_WORDS {
        let selected = if filter.outcome == word {
            " selected"
        } else {
            ""
        };
        let _ = write!(main, r#"<option value="{word}"{selected}>{word}</option>"#);
    }
    main.push_str(
        r#"</select></label>
<button type="submit">Filter</button>
</form>
"#,
    );
    let shown = apps.iter().filter(|a| filter.keeps(a)).count();
    let _ = write!(
        main,
        r#"<p id="count" class="dim">{shown} of {} apps</p>
<div class="scroll"><table class="apps">
<caption class="sr-only">Every app: its last sync, what it does now, its health and its next sync</caption>
<thead><tr><th scope="col">App</th><th scope="col" class="wide">Repository and path</th><th scope="col">Commit</th><th scope="col">Outcome</th><th scope="col">Health</th><th scope="col">Next sync</th></tr></thead>
<tbody>
"#,
        apps.len()
    );
    for app in apps {
        let hidden = if filter.keeps(app) { "" } else { " hidden" };
        let _ = writeln!(
            main,
            r#"<tr data-app="{name}" data-status="{word}"{hidden}><th scope="row"><a href="{href}">{name}</a></th><td class="wide">{repo}<br><span class="dim">{path}</span></td><td data-field="commit">{commit}</td><td data-field="status">{status}</td><td data-field="health">{health}</td><td data-field="next">{next}</td></tr>"#,
            name = esc(&app.name),
            word = status_word(app),
            href = app_href(&app.name),
            repo = esc(&app.repo),
            path = esc(&app.path),
            commit = commit_cell(app.last.as_ref().and_then(|l| l.commit.as_ref()), now),
            status = status_cell(app, now),
            health = health_cell(app),
            next = next_cell(app, now),
        );
    }
    main.push_str("</tbody></table></div>");
    layout("Apps", "index", None, "", &main)
}

/// What the cluster said of an app for its page: its objects, or why it could not say
/// (shared: an answer is reused for a while).
pub type Live = Result<LiveApp, std::sync::Arc<Unanswered>>;

/// Why the cluster could not say what an app holds.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    /// A read failed.
    #[error(transparent)]
    Read(#[from] crate::cluster::ClusterError),
    /// No answer in time.
    #[error("no answer within {}s", .0.as_secs())]
    Timeout(std::time::Duration),
}

/// `/apps/NAME`: the app, its objects and Deployments, a page of its history.
pub fn app(
    app: &AppState,
    live: &Live,
    last: Option<&SyncRecord>,
    history: &Page,
    before: Option<&str>,
    now: Timestamp,
) -> String {
    let name = esc(&app.name);
    let mut main = format!(
        r#"<h1>{name}</h1>
<dl class="facts">
<dt>Repository</dt><dd>{repo}</dd>
<dt>Path</dt><dd>{path}</dd>
<dt>Outcome</dt><dd data-field="status">{status}</dd>
<dt>Commit</dt><dd data-field="commit">{commit}</dd>
<dt>Health</dt><dd data-field="health">{health}</dd>
<dt>Next sync</dt><dd data-field="next">{next}</dd>
</dl>
"#,
        repo = esc(&app.repo),
        path = esc(&app.path),
        status = status_cell(app, now),
        commit = commit_cell(app.last.as_ref().and_then(|l| l.commit.as_ref()), now),
        health = health_cell(app),
        next = next_cell(app, now),
    );
    objects_section(&mut main, live, last);
    history_section(&mut main, &app.name, history, before, now);
    layout(
        &app.name,
        "app",
        Some(&app.name),
        &format!(" / {name}"),
        &main,
    )
}

fn objects_section(main: &mut String, live: &Live, last: Option<&SyncRecord>) {
    main.push_str(r#"<section aria-labelledby="objects-h"><h2 id="objects-h">Objects</h2>"#);
    let live = match live {
        Ok(live) => live,
        Err(why) => {
            let _ = write!(
                main,
                r#"<p class="bad">The cluster did not answer: {}</p></section>"#,
                esc(&why.to_string())
            );
            return;
        }
    };
    if let Some(held) = &live.held {
        let _ = write!(main, r#"<p class="bad">Held: {}</p>"#, esc(held));
    }
    // Looked up by key, once each: an app may hold thousands of objects.
    let actions: HashMap<&ObjectKey, &str> = last
        .iter()
        .flat_map(|r| &r.objects)
        .map(|o| (&o.key, o.action.as_str()))
        .collect();
    let health: HashMap<&str, &str> = live
        .objects
        .iter()
        .map(|o| (o.object.as_str(), o.health.as_str()))
        .collect();
    let phases: HashMap<&str, &str> = live
        .deployments
        .iter()
        .map(|d| (d.name.as_str(), d.phase.as_str()))
        .collect();
    main.push_str(r#"<div class="scroll"><table>
<thead><tr><th scope="col">Kind</th><th scope="col">Namespace/name</th><th scope="col">Last sync</th><th scope="col">Health</th></tr></thead><tbody>
"#);
    let mut rows: Vec<(&str, String, &str, &str)> = Vec::new();
    for key in &live.keys {
        let found = if key.group == "apps" && key.kind == "Deployment" {
            let name = format!("{}/{}", key.namespace_or_default(), key.name);
            phases.get(name.as_str()).copied()
        } else {
            health.get(key.to_string().as_str()).copied()
        };
        let action = actions.get(key).copied().unwrap_or("unchanged");
        rows.push((&key.kind, place(key), action, found.unwrap_or("-")));
    }
    let managed: HashSet<&ObjectKey> = live.keys.iter().collect();
    for pruned in last
        .iter()
        .flat_map(|r| &r.objects)
        .filter(|o| !managed.contains(&o.key))
    {
        rows.push((
            &pruned.key.kind,
            place(&pruned.key),
            pruned.action.as_str(),
            "-",
        ));
    }
    for (kind, place, action, health) in &rows {
        let class = health_class(health);
        let _ = writeln!(
            main,
            r#"<tr><td>{}</td><td>{}</td><td>{}</td><td class="{class}">{}</td></tr>"#,
            esc(kind),
            esc(place),
            esc(action),
            esc(health)
        );
    }
    main.push_str("</tbody></table></div>");
    if !live.deployments.is_empty() {
        main.push_str(r#"<h3>Deployments</h3><div class="scroll"><table>
<thead><tr><th scope="col">Deployment</th><th scope="col">Revision</th><th scope="col">Ready</th><th scope="col">Up-to-date</th><th scope="col">Phase</th></tr></thead><tbody>
"#);
        for d in &live.deployments {
            let _ = writeln!(
                main,
                r#"<tr><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td class="{}">{}</td></tr>"#,
                esc(&d.name),
                d.revision.map_or("-".into(), |r| r.to_string()),
                d.ready,
                d.replicas,
                d.updated,
                health_class(&d.phase),
                esc(&d.phase)
            );
        }
        main.push_str("</tbody></table></div>");
    }
    main.push_str("</section>");
}

/// `namespace/name`, or `name` for a cluster-wide object.
fn place(key: &ObjectKey) -> String {
    key.namespace
        .as_ref()
        .map_or(key.name.clone(), |ns| format!("{ns}/{}", key.name))
}

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

fn history_section(
    main: &mut String,
    app: &str,
    page: &Page,
    before: Option<&str>,
    now: Timestamp,
) {
    main.push_str(r#"<section aria-labelledby="history-h"><h2 id="history-h">History</h2><div class="scroll"><table class="history">
<thead><tr><th scope="col">Started</th><th scope="col">Commit</th><th scope="col">Trigger</th><th scope="col">Outcome</th><th scope="col">Changes</th><th scope="col">Took</th></tr></thead><tbody id="history">
"#);
    for r in &page.records {
        let _ = writeln!(
            main,
            r#"<tr data-record="{id}"><td><a href="{href}/syncs/{id}">{when}</a></td><td>{commit}</td><td>{trigger}</td><td><span class="badge {outcome}">{outcome}</span>{errors}</td><td>{changes}</td><td>{took}</td></tr>"#,
            id = esc(&r.id),
            href = app_href(app),
            when = time(r.started_at, now),
            commit = r.commit.as_ref().map_or("-".into(), |c| format!(
                r#"<code>{}</code> {}"#,
                esc(c.short()),
                esc(&c.subject)
            )),
            trigger = r.trigger.as_str(),
            outcome = r.outcome.as_str(),
            errors = if r.errors > 0 {
                format!(
                    r#" <span class="bad">{}</span>"#,
                    crate::plural(r.errors, "error")
                )
            } else {
                String::new()
            },
            changes = r.changes,
            took = duration(r.duration_ms),
        );
    }
    main.push_str("</tbody></table></div>");
    if page.records.is_empty() {
        main.push_str(r#"<p class="dim">No sync recorded yet.</p>"#);
    }
    let mut links = Vec::new();
    if before.is_some() {
        links.push(format!(r#"<a href="{}">Newest</a>"#, app_href(app)));
    }
    if let (true, Some(last)) = (page.more, page.records.last()) {
        links.push(format!(
            r#"<a href="{}?before={}" rel="next">Older</a>"#,
            app_href(app),
            esc(&last.id)
        ));
    }
    if !links.is_empty() {
        let _ = write!(
            main,
            r#"<nav class="pages" aria-label="History pages">{}</nav>"#,
            links.join(" ")
        );
    }
    main.push_str("</section>");
}

fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// `/apps/NAME/syncs/ID`: one record.
pub fn sync(r: &SyncRecord, now: Timestamp) -> String {
    let name = esc(&r.app);
    let mut main = format!(
        r#"<h1>Sync {id} of {name}</h1>
<dl class="facts">
<dt>Outcome</dt><dd><span class="badge {outcome}">{outcome}</span></dd>
<dt>Trigger</dt><dd>{trigger}</dd>
<dt>Started</dt><dd>{started}</dd>
<dt>Took</dt><dd>{took}</dd>
<dt>Commit</dt><dd>{commit}</dd>
<dt>Signature</dt><dd>{signature}</dd>
"#,
        id = esc(&r.id),
        outcome = r.outcome.as_str(),
        trigger = r.trigger.as_str(),
        started = time(r.started_at, now),
        took = duration(r.duration_ms),
        commit = commit_cell(r.commit.as_ref(), now),
        signature =
            r.signature
                .as_ref()
                .map_or("not checked ([app.verify] is off)".into(), |s| format!(
                    "{} key of {} <code>{}</code>",
                    esc(&s.format),
                    esc(&s.signer),
                    esc(&s.fingerprint)
                )),
    );
    if let Some(previous) = &r.previous_commit {
        let _ = write!(
            main,
            "<dt>Previous commit</dt><dd><code>{}</code></dd>",
            esc(&previous[..previous.len().min(12)])
        );
    }
    if let Some(note) = &r.history_rewritten {
        let _ = write!(
            main,
            r#"<dt>History</dt><dd class="warn">{}</dd>"#,
            esc(note)
        );
    }
    if let Some(note) = &r.note {
        let _ = write!(main, "<dt>Note</dt><dd>{}</dd>", esc(note));
    }
    if let Some(host) = &r.host {
        let _ = write!(main, "<dt>Host</dt><dd>{}</dd>", esc(host));
    }
    main.push_str("</dl>\n");
    if !r.errors.is_empty() {
        main.push_str(r#"<section aria-labelledby="errors-h"><h2 id="errors-h">Errors</h2><ul class="errors">"#);
        for e in &r.errors {
            let origin = e.source.as_ref().map_or(String::new(), |s| {
                format!(r#" <span class="dim">({})</span>"#, esc(s))
            });
            let _ = write!(main, "<li>{}{origin}</li>", esc(&e.message));
        }
        main.push_str("</ul></section>");
    }
    for ro in &r.rollouts {
        rollout_section(&mut main, ro);
    }
    table_section(
        &mut main,
        "Objects",
        &["Action", "Kind", "Namespace/name", "From", "Note"],
        r.objects.iter().map(|o| {
            vec![
                o.action.as_str().to_string(),
                o.key.kind.clone(),
                place(&o.key),
                o.source.clone().unwrap_or_default(),
                o.note.clone().unwrap_or_default(),
            ]
        }),
        &format!("{} unchanged objects not listed.", r.unchanged),
    );
    table_section(
        &mut main,
        "Health",
        &["Object", "Outcome", "Ready after", "Message"],
        r.health.iter().map(|h| {
            vec![
                h.key.to_string(),
                h.outcome.clone(),
                h.ready_ms.map_or("-".into(), duration),
                h.message.clone(),
            ]
        }),
        "",
    );
    table_section(
        &mut main,
        "Hooks",
        &["Phase", "Object", "Outcome", "Took", "Message"],
        r.hooks.iter().map(|h| {
            vec![
                h.phase.clone(),
                h.key.to_string(),
                h.outcome.clone(),
                duration(h.ms),
                h.message.clone(),
            ]
        }),
        "",
    );
    table_section(
        &mut main,
        "Waves",
        &["Wave", "Objects", "Outcome", "Took"],
        r.waves.iter().map(|w| {
            vec![
                w.wave.to_string(),
                w.objects.to_string(),
                w.outcome.clone(),
                duration(w.ms),
            ]
        }),
        "",
    );
    let crumbs = format!(
        r#" / <a href="{}">{name}</a> / {}"#,
        app_href(&r.app),
        esc(&r.id)
    );
    layout(
        &format!("{} sync {}", r.app, r.id),
        "sync",
        Some(&r.app),
        &crumbs,
        &main,
    )
}

fn rollout_section(main: &mut String, ro: &crate::history::RolloutRecord) {
    let d = &ro.deployment;
    let title = format!("{}/{}", d.namespace_or_default(), d.name);
    let _ = write!(
        main,
        r#"<section class="rollout"><h2>Rollout of {t}</h2>
<p>Revision {from} → {to} ({engine} engine): <span class="badge {outcome}">{outcome}</span> {message}</p>
"#,
        t = esc(&title),
        from = ro.revision_from.map_or("-".into(), |r| r.to_string()),
        to = ro.rollout.revision.map_or("-".into(), |r| r.to_string()),
        engine = esc(&ro.engine),
        outcome = ro.rollout.outcome.as_str(),
        message = esc(&ro.rollout.message),
    );
    if !ro.images_to.is_empty() {
        let _ = write!(
            main,
            r#"<p class="dim">Images: {} → {}</p>"#,
            esc(&ro.images_from.join(", ")),
            esc(&ro.images_to.join(", "))
        );
    }
    main.push_str(&super::chart::rollout(
        ro,
        &format!("Rollout of {title}: pods of the new and old ReplicaSets over time"),
    ));
    main.push_str(r#"<p class="legend" aria-hidden="true"><span class="key new-ready"></span>new ReplicaSet ready <span class="key new-wanted"></span>new wanted <span class="key old-ready"></span>old available <span class="key old-wanted"></span>old wanted <span class="key desired"></span>desired</p>"#);
    if let Some(back) = &ro.rollback {
        let _ = write!(
            main,
            r#"<p class="warn">{} — <span class="badge {o}">{o}</span></p>"#,
            esc(&back.message),
            o = back.rollout.outcome.as_str()
        );
    }
    main.push_str("</section>");
}

fn table_section(
    main: &mut String,
    title: &str,
    columns: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
    note: &str,
) {
    let mut body = String::new();
    for row in rows {
        body.push_str("<tr>");
        for cell in row {
            let _ = write!(body, "<td>{}</td>", esc(&cell));
        }
        body.push_str("</tr>\n");
    }
    if body.is_empty() && note.is_empty() {
        return;
    }
    let id = title.to_lowercase();
    let _ = write!(
        main,
        r#"<section aria-labelledby="{id}-h"><h2 id="{id}-h">{title}</h2>"#
    );
    if !body.is_empty() {
        main.push_str(r#"<div class="scroll"><table><thead><tr>"#);
        for c in columns {
            let _ = write!(main, r#"<th scope="col">{c}</th>"#);
        }
        let _ = write!(main, "</tr></thead><tbody>\n{body}</tbody></table></div>");
    }
    if !note.is_empty() {
        let _ = write!(main, r#"<p class="dim">{}</p>"#, esc(note));
    }
    main.push_str("</section>");
}

/// A page that says what went wrong (404 and the like).
pub fn message(title: &str, text: &str) -> String {
    layout(
        title,
        "message",
        None,
        "",
        &format!("<h1>{}</h1><p>{}</p>", esc(title), esc(text)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Outcome, RecordError, SyncRecord, Trigger};

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
            !html.contains("<script>alert") && !html.contains("<img"),
            "{html}"
        );
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("&quot;quote&quot; &amp; &lt;img"), "{html}");
        // No inline script or style anywhere: the CSP would refuse it.
        assert!(
            !html.contains("<script>") && !html.contains("style="),
            "{html}"
        );
    }

    fn key(group: &str, kind: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: group.into(),
            kind: kind.into(),
            namespace: Some("shop".into()),
            name: name.into(),
        }
    }

    #[test]
    fn each_object_shows_its_last_action_and_its_health_now() {
        use crate::history::{Action, ObjectAction};
        use crate::live::{DeploymentStatus, ObjectStatus};
        let (web, api, config, gone) = (
            key("apps", "Deployment", "web"),
            key("", "Service", "api"),
            key("", "ConfigMap", "settings"),
            key("", "ConfigMap", "old"),
        );
        let live = LiveApp {
            held: None,
            deployments: vec![DeploymentStatus {
                name: "shop/web".into(),
                revision: Some(3),
                ready: 2,
                replicas: 3,
                updated: 3,
                phase: "progressing".into(),
            }],
            objects: vec![ObjectStatus {
                object: api.to_string(),
                health: "failed: no endpoints".into(),
            }],
            keys: vec![web.clone(), api, config],
        };
        let now = Timestamp::now();
        let action = |key: &ObjectKey, action| ObjectAction {
            key: key.clone(),
            action,
            source: None,
            note: None,
        };
        let last = SyncRecord {
            objects: vec![
                action(&web, Action::Configured),
                action(&gone, Action::Pruned),
            ],
            ..SyncRecord::new("r1".into(), "shop", Trigger::Cli, now, None)
        };
        let mut html = String::new();
        objects_section(&mut html, &Ok(live), Some(&last));
        let rows: Vec<&str> = html.lines().filter(|l| l.starts_with("<tr><td>")).collect();
        assert_eq!(
            rows[..4],
            [
                r#"<tr><td>Deployment</td><td>shop/web</td><td>configured</td><td class="warn">progressing</td></tr>"#,
                r#"<tr><td>Service</td><td>shop/api</td><td>unchanged</td><td class="bad">failed: no endpoints</td></tr>"#,
                r#"<tr><td>ConfigMap</td><td>shop/settings</td><td>unchanged</td><td class="dim">-</td></tr>"#,
                r#"<tr><td>ConfigMap</td><td>shop/old</td><td>pruned</td><td class="dim">-</td></tr>"#,
            ]
        );
        // The Deployments' table: revision, READY, UP-TO-DATE, phase.
        assert_eq!(
            rows[4],
            r#"<tr><td>shop/web</td><td>3</td><td>2/3</td><td>3</td><td class="warn">progressing</td></tr>"#
        );
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
