//! `berth suspend` and `berth resume`: the named apps (or every app of a cluster or set) are left
//! alone by `berth run` and `berth sync` until resumed; kept in `state_dir`.

use std::path::Path;
use std::process::ExitCode;

use berth::config::{self, AppConfig};
use berth::suspend::Target;

use super::sync::select;

/// Arguments of `berth suspend` and `berth resume`.
#[derive(clap::Args)]
pub struct Args {
    /// The apps.
    pub apps: Vec<String>,
    /// Every app of this cluster (a `[[cluster]]`'s name).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Every app this set generates (an `[[app_set]]`'s name).
    #[arg(long)]
    pub set: Option<String>,
}

/// Runs `berth suspend` (`suspend`) or `berth resume`.
pub fn run(config_path: &Path, args: Args, suspend: bool) -> anyhow::Result<ExitCode> {
    let config = super::load_listed(config_path)?;
    let verb = if suspend { "suspend" } else { "resume" };
    super::own_state(&config, verb)?;
    let apps = chosen(&config, &args, verb)?;
    let state = &config.agent.state_dir;
    let by = super::user_at_host();
    if let Some(set) = &args.set {
        // The set itself: its apps now, and those its folders add later.
        let target = Target::Set(set);
        let said = if suspend {
            berth::suspend::suspend(state, target, &by)?;
            "suspended: its apps now, and any it makes later"
        } else if berth::suspend::resume(state, target)? {
            "resumed"
        } else {
            "was not suspended by berth suspend --set"
        };
        super::say(format_args!("app set {set} {said}"));
    }
    for app in apps {
        let target = Target::App(&app.name);
        let said = if suspend {
            berth::suspend::suspend(state, target, &by)?;
            "suspended"
        } else if !berth::suspend::resume(state, target)? {
            "was not suspended by berth suspend"
        } else {
            "resumed"
        };
        super::say(format_args!("app {} {said}", app.name));
        if !suspend && app.suspend {
            super::say(format_args!(
                "app {}: still suspended by suspend = true in {}",
                app.name,
                config_path.display()
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The apps named, or those of `--cluster`; at least one.
fn chosen<'a>(
    config: &'a config::Config,
    args: &Args,
    verb: &str,
) -> anyhow::Result<Vec<&'a AppConfig>> {
    let mut apps = if args.apps.is_empty() {
        Vec::new()
    } else {
        select(&config.apps, &args.apps)?
    };
    if let Some(cluster) = &args.cluster {
        if config.cluster.named(cluster).is_none() {
            let names: Vec<&str> = config.cluster.list().iter().map(|c| c.name()).collect();
            anyhow::bail!(
                "no cluster named {cluster:?} in the configuration (clusters: {})",
                names.join(", ")
            );
        }
        let of = config
            .apps
            .iter()
            .filter(|a| config.cluster_of(a).name() == cluster);
        apps.extend(
            of.filter(|a| !args.apps.contains(&a.name))
                .map(AsRef::as_ref),
        );
    }
    if let Some(set) = &args.set {
        if !config.app_sets.iter().any(|s| &s.name == set) {
            let names: Vec<&str> = config.app_sets.iter().map(|s| s.name.as_str()).collect();
            anyhow::bail!(
                "no app set named {set:?} in the configuration (sets: {})",
                names.join(", ")
            );
        }
        let of = config.apps.iter().filter(|a| a.set.as_ref() == Some(set));
        let named = of.filter(|a| !apps.iter().any(|b| b.name == a.name));
        apps.extend(named.map(AsRef::as_ref).collect::<Vec<_>>());
        // A set is suspended as a whole, even before it makes an app.
        return Ok(apps);
    }
    if apps.is_empty() {
        match (&args.cluster, &args.set) {
            (Some(cluster), _) => anyhow::bail!("no app is synced to cluster {cluster}"),
            (None, _) => anyhow::bail!("name the apps to {verb} (or --cluster NAME for every app of a cluster, --set NAME for every app of a set)"),
        }
    }
    Ok(apps)
}
