//! Prometheus metrics, in the text exposition format, fed from sync records: syncs by app
//! and outcome, sync and rollout durations (histograms), last successful sync, objects
//! managed, rollouts by outcome, git fetch duration, apply requests.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use crate::history::{Outcome, SyncRecord};
use crate::notifications::Notifications;

const SYNC_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];
const FETCH_BUCKETS: [f64; 8] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0];

#[derive(Default, Clone)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, buckets: &[f64], v: f64) {
        self.counts.resize(buckets.len(), 0);
        for (i, b) in buckets.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

#[derive(Default)]
struct State {
    syncs: BTreeMap<(String, &'static str), u64>,
    sync_seconds: BTreeMap<String, Histogram>,
    fetch_seconds: BTreeMap<String, Histogram>,
    rollout_seconds: BTreeMap<String, Histogram>,
    last_success: BTreeMap<String, f64>,
    managed: BTreeMap<String, u64>,
    rollouts: BTreeMap<(String, &'static str), u64>,
    requests: BTreeMap<String, u64>,
    /// With sharding: this host's apps and the live members.
    shard: Option<(usize, usize)>,
    /// The `[[notify]]` receivers, whose counters are rendered too.
    notifications: Option<Arc<Notifications>>,
}

/// A record's app and cluster, as labels: `app="shop",cluster="east"`.
fn labels(r: &SyncRecord) -> String {
    let cluster = r.cluster.as_deref().unwrap_or("default");
    format!("app=\"{}\",cluster=\"{cluster}\"", r.app)
}

/// The agent's metrics.
#[derive(Default)]
pub struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    /// Counts one sync.
    pub fn observe(&self, r: &SyncRecord) {
        let Ok(mut s) = self.state.lock() else { return };
        let app = labels(r);
        *s.syncs
            .entry((app.clone(), r.outcome.as_str()))
            .or_default() += 1;
        s.sync_seconds
            .entry(app.clone())
            .or_default()
            .observe(&SYNC_BUCKETS, r.duration_ms as f64 / 1000.0);
        if let Some(ms) = r.fetch_ms {
            s.fetch_seconds
                .entry(app.clone())
                .or_default()
                .observe(&FETCH_BUCKETS, ms as f64 / 1000.0);
        }
        *s.requests.entry(app.clone()).or_default() += r.requests;
        if matches!(r.outcome, Outcome::Succeeded | Outcome::NoChange) {
            s.last_success
                .insert(app.clone(), r.finished_at.as_millisecond() as f64 / 1000.0);
            s.managed.insert(app.clone(), r.managed() as u64);
        }
        for ro in &r.rollouts {
            *s.rollouts
                .entry((app.clone(), ro.rollout.outcome.as_str()))
                .or_default() += 1;
            let secs = ro
                .rollout
                .finished_at
                .duration_since(ro.rollout.started_at)
                .as_secs_f64();
            s.rollout_seconds
                .entry(app.clone())
                .or_default()
                .observe(&SYNC_BUCKETS, secs);
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let Ok(s) = self.state.lock() else {
            return String::new();
        };
        let mut out = String::new();
        counters(&mut out, &s);
        durations(&mut out, &s);
        gauges(&mut out, &s);
        requests_and_shards(&mut out, &s);
        if let Some(n) = &s.notifications {
            out += &n.metrics();
        }
        out
    }

    /// The receivers whose counters `/metrics` shows (replaced on a configuration reload).
    pub fn notifications(&self, n: Arc<Notifications>) {
        if let Ok(mut s) = self.state.lock() {
            s.notifications = Some(n);
        }
    }

    /// With sharding: how many apps this host has, among how many live members.
    pub fn shard(&self, apps: usize, members: usize) {
        if let Ok(mut s) = self.state.lock() {
            s.shard = Some((apps, members));
        }
    }
}

fn gauge(out: &mut String, name: &str, help: &str, values: &BTreeMap<String, f64>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (app, v) in values {
        let _ = writeln!(out, "{name}{{{app}}} {v}");
    }
}

fn histogram(
    out: &mut String,
    name: &str,
    help: &str,
    buckets: &[f64],
    values: &BTreeMap<String, Histogram>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (app, h) in values {
        for (b, n) in buckets.iter().zip(&h.counts) {
            let _ = writeln!(out, "{name}_bucket{{{app},le=\"{b}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{{app},le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(
            out,
            "{name}_sum{{{app}}} {}\n{name}_count{{{app}}} {}",
            h.sum, h.count
        );
    }
}

/// The counters of syncs and rollouts, by outcome.
fn counters(out: &mut String, s: &State) {
    let pairs = |out: &mut String,
                 name: &str,
                 help: &str,
                 map: &BTreeMap<(String, &'static str), u64>,
                 label: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for ((app, v), n) in map {
            let _ = writeln!(out, "{name}{{{app},{label}=\"{v}\"}} {n}");
        }
    };
    pairs(
        out,
        "berth_syncs_total",
        "Sync attempts by app and outcome.",
        &s.syncs,
        "outcome",
    );
    pairs(
        out,
        "berth_rollouts_total",
        "Deployment rollouts followed, by app and outcome.",
        &s.rollouts,
        "outcome",
    );
}

/// The write requests sent, and with sharding this host's share of the apps.
fn requests_and_shards(out: &mut String, s: &State) {
    let _ = writeln!(out, "# HELP berth_apply_requests_total Write requests sent to the API server (dry runs, applies, prunes, inventory).\n# TYPE berth_apply_requests_total counter");
    for (app, n) in &s.requests {
        let _ = writeln!(out, "berth_apply_requests_total{{{app}}} {n}");
    }
    if let Some((apps, members)) = s.shard {
        let _ = writeln!(out, "# HELP berth_shard_apps Apps assigned to this host ([agent] sharding).\n# TYPE berth_shard_apps gauge\nberth_shard_apps {apps}");
        let _ = writeln!(out, "# HELP berth_shard_members Live berth hosts sharing the apps.\n# TYPE berth_shard_members gauge\nberth_shard_members {members}");
    }
}

/// The histograms: how long syncs, rollouts and fetches take.
fn durations(out: &mut String, s: &State) {
    histogram(
        out,
        "berth_sync_duration_seconds",
        "Duration of a sync.",
        &SYNC_BUCKETS,
        &s.sync_seconds,
    );
    histogram(
        out,
        "berth_rollout_duration_seconds",
        "Duration of a rollout.",
        &SYNC_BUCKETS,
        &s.rollout_seconds,
    );
    histogram(
        out,
        "berth_git_fetch_duration_seconds",
        "Duration of a git fetch and checkout.",
        &FETCH_BUCKETS,
        &s.fetch_seconds,
    );
}

/// The gauges of the last good sync and of the objects managed.
fn gauges(out: &mut String, s: &State) {
    gauge(
        out,
        "berth_last_successful_sync_timestamp_seconds",
        "When the app last synced successfully (Unix time).",
        &s.last_success,
    );
    let managed: BTreeMap<String, f64> = s
        .managed
        .iter()
        .map(|(k, v)| (k.clone(), *v as f64))
        .collect();
    gauge(
        out,
        "berth_managed_objects",
        "Objects the app manages.",
        &managed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{SyncRecord, Trigger};

    #[test]
    fn a_sync_shows_up_in_the_exposition() {
        let now = jiff::Timestamp::now();
        let record: SyncRecord = serde_json::from_value(serde_json::json!({
            "id": "x", "app": "shop", "trigger": "cli", "started_at": now, "finished_at": now,
            "duration_ms": 1500, "cluster": "east", "commit": null, "previous_commit": null, "outcome": "succeeded",
            "unchanged": 3, "objects": [], "errors": [], "fetch_ms": 40, "requests": 7
        }))
        .unwrap();
        assert_eq!(record.trigger, Trigger::Cli);
        let m = Metrics::default();
        m.observe(&record);
        let text = m.render();
        assert!(
            text.contains(
                "berth_syncs_total{app=\"shop\",cluster=\"east\",outcome=\"succeeded\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "berth_sync_duration_seconds_bucket{app=\"shop\",cluster=\"east\",le=\"2.5\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "berth_sync_duration_seconds_bucket{app=\"shop\",cluster=\"east\",le=\"1\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("berth_managed_objects{app=\"shop\",cluster=\"east\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("berth_apply_requests_total{app=\"shop\",cluster=\"east\"} 7"),
            "{text}"
        );
        assert!(
            text.contains(
                "berth_git_fetch_duration_seconds_count{app=\"shop\",cluster=\"east\"} 1"
            ),
            "{text}"
        );
    }
}
