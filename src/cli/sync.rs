//! `berth sync`: one sync of the named apps (all by default) in the foreground.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use berth::config::{self, AppConfig};
use berth::fleet::{self, Transition};
use berth::history::{Outcome, SyncRecord, Trigger};
use berth::plural;
use berth::sync::{Progress, SyncOptions, Syncer};
use tokio::signal::unix::{signal, SignalKind};

/// Arguments of `berth sync`.
#[derive(clap::Args)]
pub struct Args {
    /// Apps to sync (default: all).
    pub apps: Vec<String>,
    /// Sync once and exit (what `berth sync` always does; kept for scripts).
    #[arg(long)]
    pub once: bool,
    /// Apply the commit even though its rollout failed before (the app is held), and
    /// compare an app with the cluster even when the new commit changes none of its files.
    #[arg(long)]
    pub force: bool,
    /// Apply and prune without following rollouts (as `kubectl apply` does); failed
    /// rollouts are then neither seen nor rolled back.
    #[arg(long)]
    pub no_wait: bool,
    /// Apply the commit even though it does not descend from the last applied one (the
    /// branch or tag was moved back, or rewritten): refused otherwise.
    #[arg(long)]
    pub accept_rewind: bool,
    /// Sync the apps the named ones depend on (`depends_on`) too, first.
    #[arg(long)]
    pub with_deps: bool,
}

/// Runs `berth sync`: the apps in dependency order, each once every app it depends on is
/// ready, independent ones side by side (at most `agent.max_concurrent_syncs`); exit code
/// 1 when any app failed or did not sync because an app it depends on is not ready.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let file = config::load(config_path)?;
    super::own_state(&file, "sync")?;
    let (config, listings) = super::with_sets(&file, None).await;
    let sets_listed = listings.iter().all(|l| l.problem.is_none()) && config.refused.is_empty();
    let mut apps = select(&config.apps, &args.apps)?;
    if args.with_deps {
        let named: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
        let wanted = config::order::with_dependencies(&config.apps, &named);
        apps = config
            .apps
            .iter()
            .filter(|a| wanted.contains(&a.name))
            .map(Arc::as_ref)
            .collect();
    }
    let (apps, all_reached) = set_aside(&config, apps)
        .await?
        .unwrap_or((Vec::new(), true));
    // With no app to sync, the sets' removals are still made, and their listings kept.
    if apps.is_empty() && (!args.apps.is_empty() || config.app_sets.is_empty()) {
        return Ok(exit_code(sets_listed));
    }
    let syncer = Syncer::connect(&config, false).await?.notify(&config)?;
    for listing in &listings {
        fleet::note_problem(&file.agent.state_dir, listing);
        let problem = listing.problem.as_ref().map(ToString::to_string);
        (syncer.notifications).observe_set(&listing.set, problem.as_deref(), &syncer.host);
    }
    let shutdown = stopped_by_signals()?;
    let options = SyncOptions {
        force: args.force,
        wait: !args.no_wait,
        accept_rewind: args.accept_rewind,
        ..SyncOptions::new(Trigger::Cli)
    };
    let mut ok = all_reached && sets_listed;
    if args.apps.is_empty() {
        ok &= take_listings(&syncer, &file, &config, &listings, &shutdown).await;
    }
    let ended = in_order(&syncer, &apps, options, args.with_deps, &shutdown).await;
    syncer.notifications.flush(super::NOTIFY_FLUSH).await;
    for (record, synced) in &ended {
        super::say(summary(record));
        ok &= *synced
            && matches!(
                record.outcome,
                Outcome::Succeeded | Outcome::NoChange | Outcome::Held
            );
    }
    Ok(exit_code(ok))
}

/// Turns true on Ctrl-C or SIGTERM: the sync stops at its next step and records what it
/// wrote.
fn stopped_by_signals() -> anyhow::Result<berth::shutdown::Signal> {
    let (stop, shutdown) = berth::shutdown::channel();
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("interrupted: finishing the current step…");
        let _ = stop.send(true);
    });
    Ok(shutdown)
}

fn exit_code(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Acts on what each set's listing changed since it listed last — renamed folders'
/// objects handed over to the new folders' apps before either syncs, the apps it no longer
/// makes removed — through the executor the agent uses too, and keeps each listing whose
/// changes all went through (one with a problem changes nothing). False when an act
/// failed.
async fn take_listings(
    syncer: &Syncer,
    file: &config::Config,
    config: &config::Config,
    listings: &[fleet::Listing],
    shutdown: &berth::shutdown::Signal,
) -> bool {
    let say = |app: &str, progress: Progress<'_>| {
        if let Progress::Line { text, .. } = progress {
            super::say(format_args!("{app}: {text}"));
        }
    };
    let mut ok = true;
    for (set, listing) in file.app_sets.iter().zip(listings) {
        let state_dir = &file.agent.state_dir;
        let transition = match fleet::remembered(state_dir, &set.name) {
            Some(before) => {
                let had = fleet::remembered_apps(file, set);
                Transition::between(file, set, &before, &had, listing, config)
            }
            None => Transition::default(),
        };
        let executed = fleet::execute(syncer, &transition, None, shutdown, &say).await;
        for failed in executed
            .records
            .iter()
            .filter(|r| r.outcome != Outcome::Succeeded)
        {
            super::say(summary(failed));
        }
        if executed.ok() {
            fleet::remember(state_dir, listing);
        }
        ok &= executed.ok();
    }
    ok
}

/// Sets aside, saying why, the apps `berth sync` leaves: the suspended ones, and those
/// whose cluster does not answer. Returns the others and whether every cluster answered;
/// `None` when every app is suspended.
///
/// # Errors
/// No app's cluster answered: the first cluster's error.
async fn set_aside<'a>(
    config: &'a config::Config,
    apps: Vec<&'a AppConfig>,
) -> anyhow::Result<Option<(Vec<&'a AppConfig>, bool)>> {
    let state = &config.agent.state_dir;
    let mut active = Vec::new();
    for app in apps {
        match berth::suspend::suspended(state, app) {
            Some(why) => {
                let name = &app.name;
                super::say(format_args!(
                    "{name}: suspended ({why}): not synced (berth resume {name})"
                ));
            }
            None => active.push(app),
        }
    }
    if active.is_empty() {
        return Ok(None);
    }
    let down = super::unreachable(config, &active).await;
    let (reached, cut_off): (Vec<&AppConfig>, Vec<&AppConfig>) = active
        .into_iter()
        .partition(|app| !down.contains_key(config.cluster_of(app).name()));
    if let (true, Some((name, error))) = (reached.is_empty(), down.iter().next()) {
        return Err(super::in_cluster(config, name, error));
    }
    for app in &cut_off {
        let cluster = config.cluster_of(app).name();
        let error = super::in_cluster(config, cluster, &down[cluster]);
        super::say(format_args!("{}: {error}; not synced", app.name));
    }
    Ok(Some((reached, cut_off.is_empty())))
}

/// Syncs `apps`, each once every app it depends on that is among them has ended; one whose
/// dependency is not ready then is recorded held, not synced (`false`). Returns each
/// app's record in the order the apps were given.
async fn in_order(
    syncer: &Syncer,
    apps: &[&AppConfig],
    options: SyncOptions,
    with_deps: bool,
    shutdown: &berth::shutdown::Signal,
) -> Vec<(SyncRecord, bool)> {
    use futures::stream::{FuturesUnordered, StreamExt};
    let mut ended = std::collections::BTreeMap::new();
    let mut running = FuturesUnordered::new();
    let mut pending: Vec<&AppConfig> = apps.to_vec();
    loop {
        let (ready, blocked): (Vec<&AppConfig>, Vec<&AppConfig>) =
            pending.into_iter().partition(|app| {
                app.depends_on
                    .iter()
                    .all(|d| ended.contains_key(d) || !apps.iter().any(|a| &a.name == d))
            });
        pending = blocked;
        running.extend(
            ready
                .into_iter()
                .map(|app| one(syncer, app, options, with_deps, shutdown)),
        );
        let Some((name, result)) = running.next().await else {
            break;
        };
        ended.insert(name, result);
    }
    apps.iter().filter_map(|a| ended.remove(&a.name)).collect()
}

/// One app of `berth sync`: synced when every app it depends on is ready, else recorded
/// held.
async fn one<'a>(
    syncer: &'a Syncer,
    app: &'a AppConfig,
    options: SyncOptions,
    with_deps: bool,
    shutdown: &'a berth::shutdown::Signal,
) -> (String, (SyncRecord, bool)) {
    let name = app.name.clone();
    let print = move |line: &str| super::say(format_args!("{name}: {line}"));
    if let Some(waiting) = syncer.waiting_on(app, &options).await {
        print(&if with_deps {
            format!("{waiting}; not synced (what it depends on was synced first and is not ready: see above)")
        } else {
            format!(
                "{waiting}; not synced (berth sync --with-deps {} syncs what it depends on first)",
                app.name
            )
        });
        return (
            app.name.clone(),
            (syncer.held_by(app, options, &waiting), false),
        );
    }
    let _slot = syncer.slots.acquire().await;
    let record = syncer
        .sync(app, options, shutdown, &super::lines(print))
        .await;
    (app.name.clone(), (record, true))
}

pub fn select<'a>(
    apps: &'a [Arc<AppConfig>],
    names: &[String],
) -> anyhow::Result<Vec<&'a AppConfig>> {
    if names.is_empty() {
        return Ok(apps.iter().map(Arc::as_ref).collect());
    }
    names
        .iter()
        .map(|n| {
            apps.iter()
                .find(|a| &a.name == n)
                .map(Arc::as_ref)
                .ok_or_else(|| {
                    let known: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
                    anyhow::anyhow!(
                        "no app named {n:?} in the configuration (apps: {})",
                        known.join(", ")
                    )
                })
        })
        .collect()
}

/// The last line of a sync: outcome, commit, counts, and where to look on failure.
pub fn summary(r: &SyncRecord) -> String {
    let commit = r.short_commit().to_string();
    let secs = r.duration_ms as f64 / 1000.0;
    match r.outcome {
        Outcome::NoChange => format!(
            "{}: no change at {commit} ({}, {secs:.1}s)",
            r.app,
            plural(r.unchanged, "object")
        ),
        Outcome::Succeeded => format!("{}: synced {commit} in {secs:.1}s: {}", r.app, counts(r)),
        Outcome::Held => match (&r.commit, &r.note) {
            // Not synced: an app it depends on is not ready.
            (None, Some(note)) => format!("{}: held: {note}; nothing applied", r.app),
            _ => format!("{}: held at {commit}: nothing applied", r.app),
        },
        Outcome::RolledBack if r.errors.is_empty() => format!(
            "{}: rolled back in {secs:.1}s; held at commit {commit}",
            r.app
        ),
        Outcome::RolledBack => format!(
            "{}: ROLLED BACK at {commit} after {secs:.1}s with {}, and held there; details: berth history show {}",
            r.app,
            plural(r.errors.len(), "error"),
            r.id
        ),
        Outcome::Failed | Outcome::Interrupted => format!(
            "{}: {} at {commit} after {secs:.1}s with {}; details: berth history show {}",
            r.app,
            r.outcome.as_str().to_uppercase(),
            plural(r.errors.len(), "error"),
            r.id
        ),
    }
}

/// `1 created, 2 configured, 5 unchanged, 1 pruned`.
pub fn counts(r: &SyncRecord) -> String {
    use berth::history::Action;
    let mut parts = Vec::new();
    for action in [Action::Created, Action::Configured] {
        let n = r.objects.iter().filter(|o| o.action == action).count();
        if n > 0 {
            parts.push(format!("{n} {}", action.as_str()));
        }
    }
    parts.push(format!("{} unchanged", r.unchanged));
    for action in [Action::Pruned, Action::Kept, Action::Failed] {
        let n = r.objects.iter().filter(|o| o.action == action).count();
        if n > 0 {
            parts.push(format!("{n} {}", action.as_str()));
        }
    }
    parts.join(", ")
}
