//! `/apps/NAME`: one app, its objects and Deployments as the cluster has them now, and a
//! page of its history (`app.html`).

use std::collections::{HashMap, HashSet};

use askama::Template;
use jiff::Timestamp;

use super::{duration, place, rendered, Cells, Frame, Time};
use crate::history::{Page, Summary, SyncRecord};
use crate::live::{DeploymentStatus, LiveApp};
use crate::manifest::ObjectKey;
use crate::page::board::AppState;

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
    /// The app is no longer configured (removed, or no longer made by its set).
    #[error("app {0} is no longer configured")]
    Unconfigured(String),
}

/// The app's objects as the cluster has them, each with what its last sync did.
struct Objects<'a> {
    /// Why the app is held, when it is.
    held: Option<&'a str>,
    rows: Vec<ObjectRow<'a>>,
    deployments: &'a [DeploymentStatus],
}

/// One object: kind, `namespace/name`, its last sync's action, its health now.
struct ObjectRow<'a> {
    kind: &'a str,
    place: String,
    action: &'a str,
    health: &'a str,
}

/// One record of the history.
struct HistoryRow<'a> {
    record: &'a Summary,
    started: Time,
    took: String,
    /// "2 errors", when it had any.
    errors: Option<String>,
}

/// `/apps/NAME`.
#[derive(Template)]
#[template(path = "app.html")]
struct AppPage<'a> {
    frame: Frame<'a>,
    app: &'a AppState,
    cells: Cells<'a>,
    /// The objects, or why the cluster did not say.
    objects: Result<Objects<'a>, &'a Unanswered>,
    history: Vec<HistoryRow<'a>>,
    /// A page older than the newest: link to the newest.
    newest: bool,
    /// The record older pages start before, when there are any.
    older: Option<&'a str>,
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
    rendered(&AppPage {
        frame: Frame {
            title: app.name.clone(),
            page: "app",
            app: Some(&app.name),
        },
        app,
        cells: Cells::new(app, now),
        objects: match live {
            Ok(live) => Ok(objects(live, last)),
            Err(why) => Err(why.as_ref()),
        },
        history: history
            .records
            .iter()
            .map(|record| HistoryRow {
                record,
                started: Time::new(record.started_at, now),
                took: duration(record.duration_ms),
                errors: (record.errors > 0).then(|| crate::plural(record.errors, "error")),
            })
            .collect(),
        newest: before.is_some(),
        older: history
            .records
            .last()
            .filter(|_| history.more)
            .map(|r| r.id.as_str()),
    })
}

/// Every object the app manages, then those its last sync pruned.
fn objects<'a>(live: &'a LiveApp, last: Option<&'a SyncRecord>) -> Objects<'a> {
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
    let mut rows: Vec<ObjectRow> = live
        .keys
        .iter()
        .map(|key| {
            let found = if key.group == "apps" && key.kind == "Deployment" {
                let name = format!("{}/{}", key.namespace_or_default(), key.name);
                phases.get(name.as_str()).copied()
            } else {
                health.get(key.to_string().as_str()).copied()
            };
            ObjectRow {
                kind: &key.kind,
                place: place(key),
                action: actions.get(key).copied().unwrap_or("unchanged"),
                health: found.unwrap_or("-"),
            }
        })
        .collect();
    let managed: HashSet<&ObjectKey> = live.keys.iter().collect();
    rows.extend(
        last.iter()
            .flat_map(|r| &r.objects)
            .filter(|o| !managed.contains(&o.key))
            .map(|pruned| ObjectRow {
                kind: &pruned.key.kind,
                place: place(&pruned.key),
                action: pruned.action.as_str(),
                health: "-",
            }),
    );
    Objects {
        held: live.held.as_deref(),
        rows,
        deployments: &live.deployments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Trigger;
    use crate::page::html::health_class;

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
        use crate::live::ObjectStatus;
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
        let objects = objects(&live, Some(&last));
        let rows: Vec<_> = (objects.rows.iter())
            .map(|o| (o.kind, o.place.as_str(), o.action, o.health))
            .collect();
        assert_eq!(
            rows,
            [
                ("Deployment", "shop/web", "configured", "progressing"),
                ("Service", "shop/api", "unchanged", "failed: no endpoints"),
                ("ConfigMap", "shop/settings", "unchanged", "-"),
                ("ConfigMap", "shop/old", "pruned", "-"),
            ]
        );
        let classes: Vec<_> = rows.iter().map(|r| health_class(r.3)).collect();
        assert_eq!(classes, ["warn", "bad", "dim", "dim"]);
    }
}
