//! `/apps/NAME/syncs/ID`: one record — its facts, errors, rollouts (each drawn as a
//! chart), objects, health, hooks and waves (`sync.html`).

use askama::Template;
use jiff::Timestamp;

use super::{duration, place, rendered, Commit, Frame, Time};
use crate::history::{
    HookRecord, ObjectAction, ObjectHealth, RolloutRecord, SyncRecord, WaveRecord,
};
use crate::page::chart;

/// One rollout of the record, with its chart.
struct Rollout<'a> {
    record: &'a RolloutRecord,
    /// The Deployment's `namespace/name`.
    title: String,
    /// The chart's SVG, rendered (and escaped) by its own template.
    chart: String,
}

/// A table of the record: a title, its columns and rows, a note under it.
struct Table {
    title: &'static str,
    columns: &'static [&'static str],
    rows: Vec<Vec<String>>,
    note: String,
}

impl Table {
    /// A table of `rows` (a note under it, when not empty).
    fn new(
        title: &'static str,
        columns: &'static [&'static str],
        rows: impl Iterator<Item = Vec<String>>,
        note: String,
    ) -> Self {
        Table {
            title,
            columns,
            rows: rows.collect(),
            note,
        }
    }

    /// The id its heading is known by (`objects-h`, …).
    fn id(&self) -> String {
        self.title.to_lowercase()
    }
}

/// `/apps/NAME/syncs/ID`.
#[derive(Template)]
#[template(path = "sync.html")]
struct SyncPage<'a> {
    frame: Frame<'a>,
    r: &'a SyncRecord,
    started: Time,
    took: String,
    commit: Option<Commit<'a>>,
    /// The previous commit's first 12 characters.
    previous: Option<&'a str>,
    rollouts: Vec<Rollout<'a>>,
    /// The tables with rows or a note.
    tables: Vec<Table>,
}

/// `/apps/NAME/syncs/ID`: one record.
pub fn sync(r: &SyncRecord, now: Timestamp) -> String {
    rendered(&SyncPage {
        frame: Frame {
            title: format!("{} sync {}", r.app, r.id),
            page: "sync",
            app: Some(&r.app),
        },
        r,
        started: Time::new(r.started_at, now),
        took: duration(r.duration_ms),
        commit: r.commit.as_ref().map(|c| Commit::new(c, now)),
        previous: r.previous_commit.as_deref().map(|p| &p[..p.len().min(12)]),
        rollouts: r.rollouts.iter().map(rollout).collect(),
        tables: tables(r)
            .into_iter()
            .filter(|t| !t.rows.is_empty() || !t.note.is_empty())
            .collect(),
    })
}

/// A rollout's section: the record, the Deployment it names and its chart.
fn rollout(record: &RolloutRecord) -> Rollout<'_> {
    let d = &record.deployment;
    let title = format!("{}/{}", d.namespace_or_default(), d.name);
    let chart = rendered(&chart::rollout(
        record,
        &format!("Rollout of {title}: pods of the new and old ReplicaSets over time"),
    ));
    Rollout {
        record,
        title,
        chart,
    }
}

/// The record's objects, health checks, hooks and waves.
fn tables(r: &SyncRecord) -> [Table; 4] {
    let unchanged = format!("{} unchanged objects not listed.", r.unchanged);
    [
        Table::new(
            "Objects",
            &["Action", "Kind", "Namespace/name", "From", "Note"],
            r.objects.iter().map(object_row),
            unchanged,
        ),
        Table::new(
            "Health",
            &["Object", "Outcome", "Ready after", "Message"],
            r.health.iter().map(health_row),
            String::new(),
        ),
        Table::new(
            "Hooks",
            &["Phase", "Object", "Outcome", "Took", "Message"],
            r.hooks.iter().map(hook_row),
            String::new(),
        ),
        Table::new(
            "Waves",
            &["Wave", "Objects", "Outcome", "Took"],
            r.waves.iter().map(wave_row),
            String::new(),
        ),
    ]
}

/// An object's line: action, kind, place, source file and note.
fn object_row(o: &ObjectAction) -> Vec<String> {
    vec![
        o.action.as_str().to_string(),
        o.key.kind.clone(),
        place(&o.key),
        o.source.clone().unwrap_or_default(),
        o.note.clone().unwrap_or_default(),
    ]
}

/// An object waited for: how it ended, when it was ready and what it said.
fn health_row(h: &ObjectHealth) -> Vec<String> {
    vec![
        h.key.to_string(),
        h.outcome.clone(),
        h.ready_ms.map_or("-".into(), duration),
        h.message.clone(),
    ]
}

/// A hook's run: its phase, object, outcome, time and message.
fn hook_row(h: &HookRecord) -> Vec<String> {
    vec![
        h.phase.clone(),
        h.key.to_string(),
        h.outcome.clone(),
        duration(h.ms),
        h.message.clone(),
    ]
}

/// A wave: its objects, how it ended and how long it took.
fn wave_row(w: &WaveRecord) -> Vec<String> {
    vec![
        w.wave.to_string(),
        w.objects.to_string(),
        w.outcome.clone(),
        duration(w.ms),
    ]
}
