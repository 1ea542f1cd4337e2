//! `berth status`: per app the last sync and the sync in flight, and per Deployment its
//! revision, readiness and rollout phase, like `kubectl get`; `-o json` prints the same as
//! one JSON object per app.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use berth::cluster::discovery::SharedKinds;
use berth::cluster::{client, ClusterError};
use berth::config::{self, AppConfig};
use berth::history::{HistoryLog, Outcome, SyncRecord};
use berth::live::{live_app, DeploymentStatus, LiveApp, ObjectStatus};
use berth::service::shards;
use berth::sync::{syncing, Marker};
use kube::api::Api;
use serde::Serialize;

use berth::history::short_age;

use super::history::table;
use super::sync::select;

mod canary;
mod sets;
use canary::print_canaries;
use sets::{of_set, print_previews, print_sets};

/// Arguments of `berth status`.
#[derive(clap::Args)]
pub struct Args {
    /// Apps to show (default: all).
    pub apps: Vec<String>,
    /// The apps of this app set, with the ref and commit of each preview.
    #[arg(long = "set", value_name = "SET", conflicts_with = "apps")]
    pub set: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// How the status is printed.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Tables, like `kubectl get`: a reason cut at 80 characters.
    Table,
    /// The tables with each reason whole.
    Wide,
    /// One JSON object per app, a line each (fields: see [`AppStatus`]).
    Json,
}

/// One app's status, as `-o json` prints it.
#[derive(Serialize)]
struct AppStatus {
    /// The app.
    app: String,
    /// The cluster it is synced to (`default` for a lone `[cluster]`).
    cluster: String,
    /// The app set that makes it, `null` for a written `[[app]]`.
    set: Option<String>,
    /// The ref it is a preview of (`refs/pull/7/head`), `null` when it is none.
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    /// Why its cluster was not reached, `null` when it was.
    unreachable: Option<String>,
    /// Why it is suspended (`by ops@host at …`, `in the configuration`), `null` when it
    /// is not.
    suspended: Option<String>,
    /// The host that syncs the app: this machine's name, or with sharding the host the
    /// assignment gives it (`null` when the cluster, which holds the members, was not
    /// reached).
    host: Option<String>,
    /// The last recorded sync, `null` when never synced.
    last: Option<LastSync>,
    /// The sync in flight, `null` when none runs.
    syncing: Option<Syncing>,
    /// Where its canary stands, `null` when none runs or is held.
    canary: Option<berth::rollout::gate::Standing>,
    /// What the agent's app waits on before it syncs (`waiting on infra: rollout failed at
    /// 3f2a1c0 …`), `null` when it does not wait.
    waiting: Option<String>,
    /// Why the app is held, `null` when it is not (or the cluster was not reached).
    held: Option<String>,
    /// Why the app is not simply synced, in one line: why it is held, what it waits on,
    /// or why its last sync failed (its first error); `null` when nothing is amiss.
    reason: Option<String>,
    /// The app's Deployments (`null` when the cluster was not reached).
    deployments: Option<Vec<DeploymentStatus>>,
    /// Every other object with a notion of readiness (`null` likewise).
    objects: Option<Vec<ObjectStatus>>,
}

/// The last recorded sync of an app.
#[derive(Serialize)]
struct LastSync {
    record: String,
    commit: Option<String>,
    outcome: String,
    started_at: jiff::Timestamp,
    finished_at: jiff::Timestamp,
}

/// The sync in flight (its marker in the app's lock file).
#[derive(Serialize)]
struct Syncing {
    record: String,
    commit: Option<String>,
    step: berth::sync::Step,
    started_at: jiff::Timestamp,
    pid: u32,
}

/// Runs `berth status`. The last sync of each app comes from the local history and the
/// sync in flight from its lock file; when the cluster cannot be reached, that part is
/// still shown and the command says so.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = super::load_listed(config_path)?;
    let selected = match &args.set {
        Some(set) => of_set(&config, set)?,
        None => select(&config.apps, &args.apps)?,
    };
    let log = HistoryLog::new(&config.agent.state_dir);
    let live = live(&config, &selected).await;
    let mut statuses = Vec::new();
    for (i, app) in selected.iter().enumerate() {
        let host = match &live.hosts {
            _ if !config.agent.sharding => Some(berth::service::lease::host_name()),
            Some(hosts) => Some(hosts.get(&app.name).cloned().unwrap_or_else(|| "-".into())),
            None => None,
        };
        let down = live.down.get(config.cluster_of(app).name());
        let unreachable = down.map(|down| down.cause.clone());
        let read = live.apps[i].as_ref();
        statuses.push(app_status(&config, app, &log, read, unreachable, host)?);
    }
    match args.output {
        Output::Json => {
            for s in &statuses {
                println!("{}", serde_json::to_string(s)?);
            }
        }
        Output::Table | Output::Wide => {
            print_tables(&statuses, &config, args.output == Output::Wide);
            print_canaries(&statuses);
            if args.set.is_some() {
                print_previews(&statuses);
            }
        }
    }
    let held = print_sets(&config, &args, &selected);
    for (name, down) in &live.down {
        match config.cluster {
            config::Clusters::One(_) => eprintln!(
                "error: the cluster is unavailable ({}): held apps and Deployments are not shown; the table above is the local history (check [cluster] in {})",
                down.error,
                config_path.display()
            ),
            config::Clusters::Many(_) => eprintln!(
                "error: cluster {name} is unavailable ({}): its apps' held state and Deployments are not shown; their rows are the local history (check its [[cluster]] in {})",
                down.error,
                config_path.display()
            ),
        }
    }
    Ok(if live.down.is_empty() && held == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One app's status: its last sync (the local history), the sync in flight (its lock
/// file), what it waits for, and what its cluster says of it (`live`, when it answered;
/// else why it did not, `unreachable`).
fn app_status(
    config: &config::Config,
    app: &AppConfig,
    log: &HistoryLog,
    live: Option<&LiveApp>,
    unreachable: Option<String>,
    host: Option<String>,
) -> anyhow::Result<AppStatus> {
    let record = log.newest(&app.name)?;
    let last = record.as_ref().map(|r| LastSync {
        record: r.id.clone(),
        commit: r.commit.as_ref().map(|c| c.sha.clone()),
        outcome: r.outcome.as_str().to_string(),
        started_at: r.started_at,
        finished_at: r.finished_at,
    });
    let in_flight = syncing(&config.agent.state_dir, &app.name).map(|m: Marker| Syncing {
        record: m.id,
        commit: m.commit.map(|c| c.sha),
        step: m.step,
        started_at: m.started_at,
        pid: m.pid,
    });
    let waiting = berth::sync::waiting_note(&config.agent.state_dir, &app.name);
    let suspended = berth::suspend::suspended(&config.agent.state_dir, app);
    let held = live.and_then(|l| l.held.clone());
    let reason = unreachable
        .as_ref()
        .map(|cause| format!("unreachable ({cause})"))
        .or_else(|| suspended.as_ref().map(|why| format!("suspended {why}")))
        .or_else(|| held.as_ref().map(|h| format!("held: {h}")))
        .or_else(|| waiting.clone())
        .or_else(|| record.as_ref().and_then(why_not_synced));
    Ok(AppStatus {
        app: app.name.clone(),
        cluster: config.cluster_of(app).name().to_string(),
        set: app.set.clone(),
        git_ref: app.preview.clone(),
        unreachable,
        suspended,
        host,
        last,
        syncing: in_flight,
        canary: berth::rollout::gate::standing(&config.agent.state_dir, &app.name),
        waiting,
        held,
        reason,
        deployments: live.map(|l| l.deployments.clone()),
        objects: live.map(|l| l.objects.clone()),
    })
}

fn print_tables(statuses: &[AppStatus], config: &config::Config, wide: bool) {
    let now = jiff::Timestamp::now();
    // The CLUSTER column with several clusters, HOST with sharding.
    let columns = |row: [String; 7]| -> Vec<String> {
        let fleet = matches!(config.cluster, config::Clusters::Many(_));
        let sharded = config.agent.sharding;
        row.into_iter()
            .enumerate()
            .filter(|(i, _)| (*i != 1 || fleet) && (*i != 2 || sharded))
            .map(|(_, cell)| cell)
            .collect()
    };
    let head = [
        "APP", "CLUSTER", "HOST", "COMMIT", "OUTCOME", "AGE", "REASON",
    ];
    let mut apps = vec![columns(head.map(String::from))];
    let mut deployments = vec![[
        "APP",
        "DEPLOYMENT",
        "REVISION",
        "READY",
        "UP-TO-DATE",
        "PHASE",
    ]
    .map(String::from)];
    let mut others = vec![["APP", "OBJECT", "HEALTH"].map(String::from)];
    for s in statuses {
        apps.push(columns(app_row(s, now, wide)));
        deployments.extend(
            s.deployments
                .iter()
                .flatten()
                .map(|d| deployment_row(&s.app, d)),
        );
        for o in s.objects.iter().flatten() {
            others.push([s.app.clone(), o.object.clone(), o.health.clone()]);
        }
    }
    print!("{}", table(&apps));
    if deployments.len() > 1 {
        println!();
        print!("{}", table(&deployments));
    }
    if others.len() > 1 {
        println!();
        print!("{}", table(&others));
    }
    if let Some(policies) = super::images::status_rows(config) {
        println!();
        print!("{}", table(&policies));
    }
}

/// An app's row: its cluster, its host, its last commit, what it does now (or how its
/// last sync ended), how long ago, and why it is not synced.
fn app_row(s: &AppStatus, now: jiff::Timestamp, wide: bool) -> [String; 7] {
    let age = |t: jiff::Timestamp| short_age(now.duration_since(t).try_into().unwrap_or_default());
    let short = |sha: &str| berth::source::short(sha).to_string();
    let last = s.last.as_ref();
    let outcome = match (&s.syncing, last) {
        // What runs now, not the last record: that commit may be the one being replaced.
        (Some(now_syncing), _) => format!(
            "syncing {}: {} ({})",
            now_syncing.commit.as_deref().map_or("?".into(), short),
            now_syncing.step,
            age(now_syncing.started_at)
        ),
        (None, _) if s.suspended.is_some() => "suspended".into(),
        (None, _) if s.waiting.is_some() => "waiting".into(),
        (None, Some(l)) => l.outcome.clone(),
        (None, None) => "never synced".into(),
    };
    [
        s.app.clone(),
        s.cluster.clone(),
        s.host.clone().unwrap_or_else(|| "-".into()),
        last.and_then(|l| l.commit.as_deref())
            .map_or("-".into(), short),
        outcome,
        last.map_or("-".into(), |l| age(l.started_at)),
        s.reason.as_deref().map_or("-".into(), |r| bounded(r, wide)),
    ]
}

/// A reason as a row holds it: whole with `-o wide`, else its first 80 characters.
fn bounded(reason: &str, wide: bool) -> String {
    const WIDTH: usize = 80;
    match reason.char_indices().nth(WIDTH) {
        Some((cut, _)) if !wide => format!("{}… (-o wide)", &reason[..cut]),
        _ => reason.to_string(),
    }
}

/// A Deployment's row: its revision, READY, UP-TO-DATE and phase.
fn deployment_row(app: &str, d: &DeploymentStatus) -> [String; 6] {
    let missing = d.phase == "missing";
    [
        app.to_string(),
        d.name.clone(),
        d.revision.map_or("-".into(), |r| r.to_string()),
        if missing {
            "-".into()
        } else {
            format!("{}/{}", d.ready, d.replicas)
        },
        if missing {
            "-".into()
        } else {
            d.updated.to_string()
        },
        d.phase.clone(),
    ]
}

/// Why the last sync did not end well, in one line: its note when held, else its first
/// error (its first line, at most 200 characters, and how many more there are).
fn why_not_synced(r: &SyncRecord) -> Option<String> {
    match r.outcome {
        Outcome::Held => r.note.clone(),
        Outcome::RolledBack if r.errors.is_empty() => None,
        Outcome::Failed | Outcome::Interrupted | Outcome::RolledBack => {
            let first = r.errors.first().map_or_else(
                || r.outcome.as_str().to_string(),
                |e| e.message.lines().next().unwrap_or_default().to_string(),
            );
            let mut line: String = first.chars().take(200).collect();
            if line.len() < first.len() {
                line.push('…');
            }
            if r.errors.len() > 1 {
                line.push_str(&format!(" (and {} more)", r.errors.len() - 1));
            }
            Some(line)
        }
        _ => None,
    }
}

/// How long `berth status` waits for the cluster before showing the local part alone.
const CLUSTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// What the clusters say of the apps.
struct Live {
    /// With sharding: the host the assignment gives each app (`None` when the first
    /// cluster, which holds the members, was not reached).
    hosts: Option<BTreeMap<String, String>>,
    /// One per app asked about, in order (`None` when its cluster was not reached).
    apps: Vec<Option<LiveApp>>,
    /// The clusters not reached, by name.
    down: BTreeMap<String, Down>,
}

/// Why a cluster was not reached.
struct Down {
    /// The cause, for the app's row.
    cause: String,
    /// The whole error, with what to check.
    error: String,
}

impl Down {
    fn of(e: &anyhow::Error) -> Self {
        let cause = match e.downcast_ref::<ClusterError>() {
            Some(ClusterError::Unreachable { cause, .. }) => cause.clone(),
            _ => format!("{e:#}"),
        };
        Down {
            cause,
            error: format!("{e:#}"),
        }
    }
}

/// Asks each cluster of `apps` about its apps, side by side, each within
/// [`CLUSTER_TIMEOUT`]: a cluster that is down costs the others nothing.
async fn live(config: &config::Config, apps: &[&config::AppConfig]) -> Live {
    let clusters = config.clusters_of(apps);
    let reads = clusters.iter().map(|(cluster, of)| {
        let named: Vec<&str> = of.iter().map(|&i| apps[i].name.as_str()).collect();
        async move {
            let read = read_cluster(config, cluster, &named);
            match tokio::time::timeout(CLUSTER_TIMEOUT, read).await {
                Ok(answer) => answer,
                Err(_) => Err(anyhow::anyhow!(
                    "no answer within {}s",
                    CLUSTER_TIMEOUT.as_secs()
                )),
            }
        }
    });
    let mut live = Live {
        hosts: None,
        apps: apps.iter().map(|_| None).collect(),
        down: BTreeMap::new(),
    };
    let hosts = async {
        if !config.agent.sharding {
            return None;
        }
        tokio::time::timeout(CLUSTER_TIMEOUT, hosts(config))
            .await
            .ok()?
            .ok()
    };
    let (answers, hosts) = tokio::join!(futures::future::join_all(reads), hosts);
    live.hosts = hosts;
    for ((cluster, of), answer) in clusters.into_iter().zip(answers) {
        match answer {
            Ok(read) => of
                .into_iter()
                .zip(read)
                .for_each(|(i, a)| live.apps[i] = Some(a)),
            Err(e) => {
                live.down.insert(cluster.name().to_string(), Down::of(&e));
            }
        }
    }
    live
}

/// What one cluster says of its apps (`apps`, by name).
async fn read_cluster(
    config: &config::Config,
    cluster: &config::ClusterConfig,
    apps: &[&str],
) -> anyhow::Result<Vec<LiveApp>> {
    // A cluster that is down is said at once, not after the whole timeout.
    client::probe(cluster, super::REACH_WITHIN).await?;
    let client = client::connect(cluster).await?;
    // Discovery only when an app holds a kind beyond Deployments to show.
    let kinds = SharedKinds::new(client.clone());
    let mut live = Vec::new();
    for app in apps {
        let ns = &config.agent.inventory_namespace;
        live.push(live_app(&client, &kinds, ns, app).await?);
    }
    Ok(live)
}

/// With sharding: the host each app belongs to, as the live members share them out.
/// The members' Leases live in the first cluster listed.
async fn hosts(config: &config::Config) -> anyhow::Result<BTreeMap<String, String>> {
    let client = client::connect(&config.cluster.list()[0]).await?;
    let leases = Api::namespaced(client, &config.agent.inventory_namespace);
    let members = shards::live_members(&leases, &config.agent.lease_name).await?;
    let names: Vec<String> = config.apps.iter().map(|a| a.name.clone()).collect();
    Ok(shards::assign(&names, &members)
        .into_iter()
        .map(|(app, host)| (app, host.to_string()))
        .collect())
}
