//! `[[analysis]]` and each app's `[app.rollout]` strategy.

use std::collections::BTreeSet;

use super::Problems;
use crate::config::Config;

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
        if let Err(e) = app.rollout.progressive(&known) {
            problems.add(format!("app[{i}].rollout"), e.to_string());
        }
    }
}
