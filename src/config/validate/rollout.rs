//! `[[analysis]]` and each app's `[app.rollout]` strategy.

use std::collections::BTreeSet;

use super::Problems;
use crate::config::{check_steps, Config, Strategy};

/// Each check well-formed and uniquely named; each canary's steps rising to 100 % and
/// naming checks that exist.
pub(super) fn rollouts(config: &Config, problems: &mut Problems) {
    let mut known = BTreeSet::new();
    for (i, check) in config.analyses.iter().enumerate() {
        let key = |k: &str| format!("analysis[{i}].{k}");
        if !known.insert(check.name.as_str()) {
            let said = format!("duplicate analysis name {:?}", check.name);
            problems.add(key("name"), said);
        }
        for (k, what) in check.problems() {
            problems.add(key(k), what);
        }
    }
    for (i, app) in config.apps.iter().enumerate() {
        let rollout = &app.rollout;
        let key = format!("app[{i}].rollout.steps");
        match rollout.strategy {
            Strategy::Canary => {
                if let Err(e) = check_steps(&rollout.steps, &known) {
                    problems.add(key, e.to_string());
                }
            }
            Strategy::Rolling if !rollout.steps.is_empty() => {
                problems.add(key, "steps are a canary's: set strategy = \"canary\"");
            }
            Strategy::Rolling => {}
        }
    }
}
