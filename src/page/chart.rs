//! A rollout's timeline drawn as an SVG chart, on the server (no script, no library): the
//! pods of the new and old ReplicaSets over time, ready against wanted, where a rollback
//! began, and a canary's steps — each step's hold (its pause and checks) shaded with its
//! weight, each measurement a dot, passed or failed. Colours and dashes come from the stylesheet's classes (the page's CSP
//! allows no inline style).

use std::fmt::Write;

use askama::Template;
use jiff::Timestamp;

use crate::history::{CanaryStepRecord, RolloutRecord, TimelineStep};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 36.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// One line of the chart: a point's value, if it has one.
type Series = fn(&Point) -> Option<i32>;

/// One point: milliseconds since the rollout began, and the sizes then.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    ms: f64,
    new_wanted: i32,
    new_ready: i32,
    old_wanted: i32,
    old_ready: i32,
    desired: Option<i32>,
}

/// The series, and where the rollback began (ms), if one followed.
fn points(r: &RolloutRecord) -> (Vec<Point>, Option<f64>, f64) {
    let start = r.rollout.started_at;
    let ms = |t: Timestamp| t.duration_since(start).as_millis() as f64;
    let mut all: Vec<Point> = r
        .rollout
        .steps
        .iter()
        .map(|s: &TimelineStep| Point {
            ms: ms(s.at),
            new_wanted: s.new_replicas,
            new_ready: s.new_ready,
            old_wanted: s.old_replicas,
            old_ready: s.old_available,
            desired: s.desired,
        })
        .collect();
    let mut end = ms(r.rollout.finished_at);
    let mut rollback_at = None;
    if let Some(back) = &r.rollback {
        rollback_at = Some(ms(back.rollout.started_at));
        // The rollback's new ReplicaSet is the one restored (this rollout's old one), its
        // old one the ReplicaSet that failed (this rollout's new one).
        all.extend(back.rollout.steps.iter().map(|s| Point {
            ms: ms(s.at),
            new_wanted: s.old_replicas,
            new_ready: s.old_available,
            old_wanted: s.new_replicas,
            old_ready: s.new_ready,
            desired: s.desired,
        }));
        end = end.max(ms(back.rollout.finished_at));
    }
    let end = all.iter().map(|p| p.ms).fold(end, f64::max).max(1.0);
    (all, rollback_at, end)
}

/// One rollout's chart (`chart.svg`): the frame, the axes, a line per series and the
/// rollback's mark.
#[derive(Template)]
#[template(path = "chart.svg")]
pub struct Chart {
    width: f64,
    height: f64,
    /// The plot's edges.
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    /// For the title and the description.
    id: String,
    title: String,
    /// The chart in words.
    desc: String,
    /// Pods up the side: each value, and its height.
    ticks: Vec<(i32, f64)>,
    /// Time along the bottom: where, and the label.
    times: Vec<(f64, String)>,
    /// Each series: its class, and its step line's points.
    lines: Vec<(&'static str, String)>,
    rollback: Option<RollbackMark>,
    /// A canary's holds: where each begins, its width, its label (`20 %`).
    holds: Vec<(f64, f64, String)>,
    /// A canary's measurements: where, `check-passed` or `check-failed`, what it read.
    measured: Vec<(f64, &'static str, String)>,
}

/// Where a rollback began: the line's place, and its label's.
struct RollbackMark {
    x: f64,
    label_x: f64,
    /// `end` or `start`: the label on the side of the line with more room.
    anchor: &'static str,
    revision: i64,
}

/// The chart of one rollout: an SVG element with a title and a description.
pub fn rollout(r: &RolloutRecord, title: &str) -> Chart {
    let (points, rollback_at, end) = points(r);
    let top = points
        .iter()
        .flat_map(|p| {
            [
                p.new_wanted,
                p.new_ready,
                p.old_wanted,
                p.old_ready,
                p.desired.unwrap_or(0),
            ]
        })
        .max()
        .unwrap_or(0)
        .max(1);
    let x = |ms: f64| LEFT + ms / end * (WIDTH - LEFT - RIGHT);
    let y = |n: i32| HEIGHT - BOTTOM - f64::from(n) / f64::from(top) * (HEIGHT - TOP - BOTTOM);
    let series: [(&str, Series); 5] = [
        ("desired", |p| p.desired),
        ("old-wanted", |p| Some(p.old_wanted)),
        ("old-ready", |p| Some(p.old_ready)),
        ("new-wanted", |p| Some(p.new_wanted)),
        ("new-ready", |p| Some(p.new_ready)),
    ];
    Chart {
        width: WIDTH,
        height: HEIGHT,
        left: LEFT,
        right: WIDTH - RIGHT,
        top: TOP,
        bottom: HEIGHT - BOTTOM,
        id: chart_id(r),
        title: title.to_string(),
        desc: describe(r, &points, rollback_at),
        ticks: ticks(top).into_iter().map(|n| (n, y(n))).collect(),
        times: [0.0, end / 2.0, end]
            .map(|ms| (x(ms).clamp(LEFT + 10.0, WIDTH - RIGHT - 14.0), seconds(ms)))
            .into(),
        lines: series
            .into_iter()
            .map(|(class, value)| (class, steps(&points, end, value, &x, &y)))
            .filter(|(_, path)| !path.is_empty())
            .collect(),
        rollback: (rollback_at.zip(r.rollback.as_ref()))
            .map(|(at, back)| RollbackMark::new(x(at), back.to_revision)),
        holds: holds(r, end, &x),
        measured: measured(&r.canary, r.rollout.started_at, &x),
    }
}

/// Each canary step's hold, from when it stood until its pause and checks were over (the
/// chart's end when the rollout ended first): its place, its width, its weight.
fn holds(r: &RolloutRecord, end: f64, x: &dyn Fn(f64) -> f64) -> Vec<(f64, f64, String)> {
    let start = r.rollout.started_at;
    let ms = |t: Timestamp| t.duration_since(start).as_millis() as f64;
    (r.canary.iter())
        .map(|s| {
            let from = x(ms(s.at));
            let to = x(s.done_at.map_or(end, ms));
            let width = tenth((to - from).max(1.0));
            (tenth(from), width, format!("{} %", s.weight))
        })
        .collect()
}

/// `v` to a tenth: a place on the chart.
fn tenth(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Each measurement of a canary's `steps`: its place, its class, and what it read.
fn measured(
    steps: &[CanaryStepRecord],
    start: Timestamp,
    x: &dyn Fn(f64) -> f64,
) -> Vec<(f64, &'static str, String)> {
    let checks = steps.iter().flat_map(|s| s.checks.iter());
    checks
        .flat_map(|c| c.measurements.iter().map(move |m| (c, m)))
        .map(|(c, m)| {
            let class = if m.passed {
                "check-passed"
            } else {
                "check-failed"
            };
            let value = m.value.as_ref().map_or("-".into(), ToString::to_string);
            let why = m.why.as_deref().map_or(String::new(), |w| format!(": {w}"));
            let at = tenth(x(m.at.duration_since(start).as_millis() as f64));
            (at, class, format!("{} {value}{why}", c.name))
        })
        .collect()
}

impl RollbackMark {
    /// The mark of a rollback to `revision` that began at `x`.
    fn new(x: f64, revision: i64) -> Self {
        // The label on the side of the line with more room.
        let (label_x, anchor) = if x > WIDTH / 2.0 {
            (x - 6.0, "end")
        } else {
            (x + 6.0, "start")
        };
        RollbackMark {
            x,
            label_x,
            anchor,
            revision,
        }
    }
}

/// A stable id for the chart's title and description.
fn chart_id(r: &RolloutRecord) -> String {
    let name: String = r
        .deployment
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("chart-{name}-{}", &r.hash_to[..r.hash_to.len().min(10)])
}

/// The chart in words, for screen readers.
fn describe(r: &RolloutRecord, points: &[Point], rollback_at: Option<f64>) -> String {
    let last = points.last();
    let mut text = format!(
        "{} steps over {}; it ended {}",
        points.len(),
        seconds(
            r.rollout
                .finished_at
                .duration_since(r.rollout.started_at)
                .as_millis() as f64
        ),
        r.rollout.outcome.as_str()
    );
    if let (Some(at), Some(back)) = (rollback_at, &r.rollback) {
        let _ = write!(
            text,
            "; rolled back to revision {} at {}, which ended {}",
            back.to_revision,
            seconds(at),
            back.rollout.outcome.as_str()
        );
    }
    if let Some(p) = last {
        let _ = write!(
            text,
            "; last seen: new ReplicaSet {}/{} ready, old {}/{} available",
            p.new_ready, p.new_wanted, p.old_ready, p.old_wanted
        );
    }
    for s in &r.canary {
        let _ = write!(text, "; step {} at {} %", s.step + 1, s.weight);
        for c in &s.checks {
            let passed = c.measurements.iter().filter(|m| m.passed).count();
            let of = c.measurements.len();
            let _ = write!(text, ", {} {passed} of {of} passed", c.name);
        }
    }
    text
}

/// A step line: each value holds until the next point, the last until `end`.
fn steps(
    points: &[Point],
    end: f64,
    value: Series,
    x: &dyn Fn(f64) -> f64,
    y: &dyn Fn(i32) -> f64,
) -> String {
    let mut path = String::new();
    let mut previous: Option<i32> = None;
    for p in points {
        let Some(v) = value(p) else { continue };
        if let Some(before) = previous {
            let _ = write!(path, "{:.1},{:.1} ", x(p.ms), y(before));
        }
        let _ = write!(path, "{:.1},{:.1} ", x(p.ms), y(v));
        previous = Some(v);
    }
    if let Some(v) = previous {
        let _ = write!(path, "{:.1},{:.1}", x(end), y(v));
    }
    path.trim_end().to_string()
}

/// Up to six round values from 0 to `top`.
fn ticks(top: i32) -> Vec<i32> {
    let step = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
        .into_iter()
        .find(|s| top / s <= 5)
        .unwrap_or(top.max(1));
    (0..=top).step_by(step as usize).collect()
}

fn seconds(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else if ms < 10_000.0 {
        format!("{:.1}s", ms / 1000.0)
    } else {
        format!("{:.0}s", ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{FollowedRollout, RollbackRecord, RolloutOutcome};
    use crate::manifest::ObjectKey;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn step(ms: i64, new: (i32, i32), old: (i32, i32)) -> TimelineStep {
        TimelineStep {
            at: at(ms),
            new_replicas: new.0,
            new_ready: new.1,
            new_available: new.1,
            old_replicas: old.0,
            old_available: old.1,
            desired: Some(3),
        }
    }

    fn followed(
        outcome: RolloutOutcome,
        from: i64,
        to: i64,
        steps: Vec<TimelineStep>,
    ) -> FollowedRollout {
        FollowedRollout {
            outcome,
            message: String::new(),
            revision: Some(2),
            replica_set: None,
            started_at: at(from),
            finished_at: at(to),
            steps,
        }
    }

    fn failed_then_rolled_back() -> RolloutRecord {
        RolloutRecord {
            deployment: ObjectKey {
                group: "apps".into(),
                kind: "Deployment".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
            },
            engine: "cluster".into(),
            revision_from: Some(1),
            replica_set_from: None,
            hash_from: None,
            images_from: vec![],
            hash_to: "5d8f7c9b6".into(),
            images_to: vec![],
            rollout: followed(
                RolloutOutcome::Failed,
                0,
                10_000,
                vec![step(0, (1, 0), (3, 3)), step(2_000, (1, 0), (2, 2))],
            ),
            rollback: Some(RollbackRecord {
                to_revision: 1,
                commit: None,
                message: "rolled back".into(),
                rollout: followed(
                    RolloutOutcome::Complete,
                    10_000,
                    14_000,
                    vec![step(12_000, (3, 3), (0, 0))],
                ),
            }),
            canary: Vec::new(),
        }
    }

    #[test]
    fn a_rollback_is_marked_where_it_began_and_the_lines_swap_back() {
        let svg = rollout(&failed_then_rolled_back(), "shop/web <script>")
            .render()
            .unwrap();
        assert!(svg.contains("rollback to revision 1"), "{svg}");
        assert!(
            svg.contains("&#60;script&#62;") && !svg.contains("<script>"),
            "{svg}"
        );
        // The rollback starts at 10 s of 14 s: 36 + 10/14 × 592.
        assert!(svg.contains(r#"x1="458.857"#), "{svg}");
        assert!(svg.contains(r#"text-anchor="end">rollback"#), "{svg}");
        // After it, the new (failed) ReplicaSet is wanted at 0 and the old one at 3.
        let (points, rollback_at, end) = points(&failed_then_rolled_back());
        assert_eq!(rollback_at, Some(10_000.0));
        assert_eq!(end, 14_000.0);
        let last = points.last().unwrap();
        assert_eq!(
            (last.new_wanted, last.old_wanted, last.old_ready),
            (0, 3, 3)
        );
        assert!(
            svg.contains("rolled back to revision 1 at 10s, which ended complete"),
            "{svg}"
        );
    }

    #[test]
    fn a_canarys_holds_are_shaded_and_its_measurements_marked() {
        use crate::history::{CheckRecord, Measurement, Value};
        let mut r = failed_then_rolled_back();
        let measurement = |ms, passed, value| Measurement {
            at: at(ms),
            value: Some(Value::Number(value)),
            passed,
            why: (!passed).then(|| format!("{value}, over the max 0.05")),
        };
        r.canary = vec![CanaryStepRecord {
            step: 0,
            weight: 20,
            new: 1,
            old: 2,
            at: at(2_000),
            done_at: None,
            checks: vec![CheckRecord {
                name: "errors".into(),
                passed: false,
                measurements: vec![
                    measurement(4_000, true, 0.01),
                    measurement(6_000, false, 0.3),
                ],
            }],
        }];
        let svg = rollout(&r, "shop/web").render().unwrap();
        // Held from 2 s to the chart's end (14 s): 36 + 2/14 × 592, 12/14 × 592 wide.
        assert!(
            svg.contains(r#"<rect class="hold" x="120.6" y="12" width="507.4""#),
            "{svg}"
        );
        assert!(svg.contains(">20 %</text>"), "{svg}");
        assert!(svg.contains(r#"class="check-passed""#), "{svg}");
        assert!(
            svg.contains("<title>errors 0.3: 0.3, over the max 0.05</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("step 1 at 20 %, errors 1 of 2 passed"),
            "{svg}"
        );
    }

    #[test]
    fn a_value_holds_until_the_next_point() {
        let r = failed_then_rolled_back();
        let (points, _, end) = points(&r);
        let x = |ms: f64| ms / 1000.0;
        let y = |n: i32| f64::from(n);
        let line = steps(&points[..2], end, |p| Some(p.old_wanted), &x, &y);
        assert_eq!(line, "0.0,3.0 2.0,3.0 2.0,2.0 14.0,2.0");
    }

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(ticks(3), [0, 1, 2, 3]);
        assert_eq!(ticks(12), [0, 5, 10]);
        assert_eq!(ticks(100), [0, 20, 40, 60, 80, 100]);
    }
}
