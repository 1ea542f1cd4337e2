//! `berth status`'s canaries: per app whose canary runs (or was cut short and is held),
//! its step, weight, the pods of each version, what holds it and each check's last
//! measurement.
use berth::rollout::gate::Standing;

use super::AppStatus;
use crate::cli::history::table;

/// The canaries among `statuses`, a row each; nothing when none runs.
pub(super) fn print_canaries(statuses: &[AppStatus]) {
    let head = [
        "APP",
        "DEPLOYMENT",
        "STEP",
        "WEIGHT",
        "NEW/OLD",
        "HOLDING",
        "LAST MEASUREMENTS",
    ]
    .map(String::from);
    let rows: Vec<[String; 7]> = (statuses.iter())
        .filter_map(|s| Some(row(&s.app, s.canary.as_ref()?)))
        .collect();
    if rows.is_empty() {
        return;
    }
    println!();
    print!("{}", table(&[vec![head], rows].concat()));
}

fn row(app: &str, c: &Standing) -> [String; 7] {
    let measured: Vec<String> = (c.checks.iter())
        .map(|m| {
            let value = (m.measurement.value.as_ref()).map_or("-".into(), ToString::to_string);
            let passed = if m.measurement.passed {
                "passed"
            } else {
                "failed"
            };
            format!("{} {value} {passed}", m.check)
        })
        .collect();
    [
        app.to_string(),
        c.deployment.clone(),
        format!("{}/{}", c.step, c.of),
        format!("{} %", c.weight),
        format!("{}/{}", c.new, c.old),
        c.holding.clone().unwrap_or_else(|| "pods coming up".into()),
        if measured.is_empty() {
            "-".into()
        } else {
            measured.join(", ")
        },
    ]
}
