//! `berth status`'s app sets: a set's apps (`--set`), its previews' refs, the apps the
//! sets make that do not run, and the sets held.
use berth::config::{self, AppConfig};

use super::{AppStatus, Args, Output};

/// The apps of the set `name`, as it listed them last.
pub(super) fn of_set<'a>(
    config: &'a config::Config,
    name: &str,
) -> anyhow::Result<Vec<&'a AppConfig>> {
    if !config.app_sets.iter().any(|s| s.name == name) {
        let sets: Vec<&str> = config.app_sets.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!(
            "no app set named {name:?} in the configuration (app sets: {})",
            sets.join(", ")
        );
    }
    let apps = config
        .apps
        .iter()
        .filter(|a| a.set.as_deref() == Some(name));
    Ok(apps.map(|a| &**a).collect())
}

/// The previews among `statuses`, each with its ref and the commit it synced last.
pub(super) fn print_previews(statuses: &[AppStatus]) {
    let head = ["PREVIEW", "REF", "COMMIT", "LAST SYNC"].map(String::from);
    let rows: Vec<[String; 4]> = (statuses.iter())
        .filter_map(|s| {
            let last = s.last.as_ref();
            let commit = last
                .and_then(|l| l.commit.as_deref())
                .map(berth::source::short);
            Some([
                s.app.clone(),
                s.git_ref.clone()?,
                commit.unwrap_or("-").to_string(),
                last.map_or("-".into(), |l| l.outcome.clone()),
            ])
        })
        .collect();
    if !rows.is_empty() {
        println!();
        print!(
            "{}",
            crate::cli::history::table(&[vec![head], rows].concat())
        );
    }
}

/// Prints the apps the sets make that do not run, and the sets that keep their last apps
/// rather than their commit's (the empty-set guard, a listing that failed): every one, or
/// with apps named, theirs. Returns how many sets are held.
pub(super) fn print_sets(config: &config::Config, args: &Args, selected: &[&AppConfig]) -> usize {
    let named = |r: &&config::Refused| match &args.set {
        Some(set) => &r.set == set,
        None => args.apps.is_empty() || args.apps.contains(&r.app),
    };
    for refused in config.refused.iter().filter(named) {
        match args.output {
            Output::Json => println!(
                "{}",
                serde_json::json!({"app": refused.app, "cluster": refused.cluster, "refused": refused.why})
            ),
            Output::Table | Output::Wide => println!("refused: {refused}"),
        }
    }
    let shown = |set: &str| match &args.set {
        Some(only) => only == set,
        None => args.apps.is_empty() || selected.iter().any(|a| a.set.as_deref() == Some(set)),
    };
    let mut held = 0;
    for set in config.app_sets.iter().filter(|set| shown(&set.name)) {
        let Some(problem) = berth::fleet::problem_of(&config.agent.state_dir, &set.name) else {
            continue;
        };
        held += 1;
        match args.output {
            Output::Json => println!("{}", serde_json::json!({"set": set.name, "held": problem})),
            Output::Table | Output::Wide => {
                eprintln!("error: app set {}: {problem}", set.name);
            }
        }
    }
    held
}
