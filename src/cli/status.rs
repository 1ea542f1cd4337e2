//! `berth status`: per app the last sync, and per Deployment its revision, readiness and
//! rollout phase, like `kubectl get`.

use std::path::Path;
use std::process::ExitCode;

use berth::cluster::discovery::ClusterKinds;
use berth::cluster::{api_for, client, inventory};
use berth::config;
use berth::history::HistoryLog;
use berth::rollout::health::{health, waits_for, Health};
use berth::rollout::phase::phase;
use berth::rollout::revisions::revision_of;
use berth::service::shards;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use super::history::{short_age, table};
use super::sync::select;

/// Arguments of `berth status`.
#[derive(clap::Args)]
pub struct Args {
    /// Apps to show (default: all).
    pub apps: Vec<String>,
}

/// Runs `berth status`. The last sync of each app comes from the local history; when the
/// cluster cannot be reached, that part is still shown and the command says so.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    let selected = select(&config.apps, &args.apps)?;
    let log = HistoryLog::new(&config.agent.state_dir);
    let now = jiff::Timestamp::now();
    let live = tokio::time::timeout(CLUSTER_TIMEOUT, live(&config, &selected))
        .await
        .unwrap_or_else(|_| {
            Err(anyhow::anyhow!(
                "no answer within {}s",
                CLUSTER_TIMEOUT.as_secs()
            ))
        });
    let mut apps = vec![["APP", "COMMIT", "OUTCOME", "AGE", "HELD"].map(String::from)];
    for (i, app) in selected.iter().enumerate() {
        let last = log.read(&app.name)?.pop();
        let held = match &live {
            Ok(live) => live.held[i].clone().unwrap_or_else(|| "-".into()),
            Err(_) => "?".into(),
        };
        apps.push([
            app.name.clone(),
            last.as_ref()
                .map_or("-".into(), |r| r.short_commit().to_string()),
            last.as_ref()
                .map(|r| r.outcome.as_str().to_string())
                .unwrap_or_else(|| "never synced".into()),
            last.as_ref()
                .map(|r| {
                    short_age(
                        now.duration_since(r.started_at)
                            .try_into()
                            .unwrap_or_default(),
                    )
                })
                .unwrap_or_else(|| "-".into()),
            held,
        ]);
    }
    let hosts = live.as_ref().ok().and_then(|l| l.hosts.as_ref());
    match hosts {
        // With sharding: which live host the assignment gives each app.
        Some(hosts) => {
            let rows: Vec<[String; 6]> = apps
                .into_iter()
                .enumerate()
                .map(|(i, [a, b, c, d, e])| {
                    let host = match i {
                        0 => "HOST".to_string(),
                        _ => hosts.get(&a).cloned().unwrap_or_else(|| "-".into()),
                    };
                    [a, host, b, c, d, e]
                })
                .collect();
            print!("{}", table(&rows));
        }
        None => print!("{}", table(&apps)),
    }
    match live {
        Ok(live) => {
            if live.deployments.len() > 1 {
                println!();
                print!("{}", table(&live.deployments));
            }
            if live.others.len() > 1 {
                println!();
                print!("{}", table(&live.others));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "error: the cluster is unavailable ({e:#}): held apps and Deployments are not shown; the table above is the local history (check [cluster] in {})",
                config_path.display()
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

/// How long `berth status` waits for the cluster before showing the local part alone.
const CLUSTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// What the cluster says of the apps: why each is held, a row per Deployment, and a row
/// per other object with a notion of readiness (its health, as a sync waits for it).
struct Live {
    /// With sharding: the host the assignment gives each app.
    hosts: Option<std::collections::BTreeMap<String, String>>,
    held: Vec<Option<String>>,
    deployments: Vec<[String; 6]>,
    others: Vec<[String; 3]>,
}

async fn live(config: &config::Config, apps: &[&config::AppConfig]) -> anyhow::Result<Live> {
    let client = client::connect(&config.cluster).await?;
    // Discovery only when an app holds a kind beyond Deployments to show.
    let mut kinds: Option<ClusterKinds> = None;
    let mut live = Live {
        hosts: None,
        others: vec![["APP", "OBJECT", "HEALTH"].map(String::from)],
        held: Vec::new(),
        deployments: vec![[
            "APP",
            "DEPLOYMENT",
            "REVISION",
            "READY",
            "UP-TO-DATE",
            "PHASE",
        ]
        .map(String::from)],
    };
    if config.agent.sharding {
        let leases = Api::namespaced(client.clone(), &config.agent.inventory_namespace);
        let members = shards::live_members(&leases, &config.agent.lease_name).await?;
        let names: Vec<String> = config.apps.iter().map(|a| a.name.clone()).collect();
        let owners = shards::assign(&names, &members);
        live.hosts = Some(
            owners
                .into_iter()
                .map(|(app, host)| (app, host.to_string()))
                .collect(),
        );
    }
    for app in apps {
        let inv = inventory::load(&client, &config.agent.inventory_namespace, &app.name)
            .await?
            .map(|s| s.inventory)
            .unwrap_or_default();
        live.held.push(inv.held.as_ref().map(|h| h.reason.clone()));
        for e in inv
            .objects
            .iter()
            .filter(|e| waits_for(&e.key.group, &e.key.kind))
        {
            if kinds.is_none() {
                kinds = Some(ClusterKinds::discover(&client).await?);
            }
            let resolved = kinds
                .as_ref()
                .and_then(|k| k.resolve_kind(&e.api_version, &e.key.kind));
            let Some(resolved) = resolved else {
                continue;
            };
            let api = api_for(&client, &resolved, e.key.namespace.as_deref());
            let shown = match api.get_opt(&e.key.name).await? {
                None => "missing".to_string(),
                Some(obj) => {
                    let json = serde_json::to_value(&obj).unwrap_or_default();
                    match health(&e.key.group, &e.key.kind, &json) {
                        Health::Current => "ready".into(),
                        Health::InProgress(m) => format!("waiting: {m}"),
                        Health::Failed(m) => format!("failed: {m}"),
                    }
                }
            };
            live.others
                .push([app.name.clone(), e.key.to_string(), shown]);
        }
        for key in inv
            .objects
            .iter()
            .map(|e| &e.key)
            .filter(|k| k.group == "apps" && k.kind == "Deployment")
        {
            let ns = key.namespace.as_deref().unwrap_or("default");
            let Some(d) = Api::<Deployment>::namespaced(client.clone(), ns)
                .get_opt(&key.name)
                .await?
            else {
                live.deployments.push([
                    app.name.clone(),
                    format!("{ns}/{}", key.name),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "missing".into(),
                ]);
                continue;
            };
            let generation = d.metadata.generation.unwrap_or(0);
            let (p, _) = phase(&d, generation);
            let revision = revision_of(&d.metadata).map_or("-".into(), |r| r.to_string());
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let status = d.status.as_ref();
            live.deployments.push([
                app.name.clone(),
                format!("{ns}/{}", key.name),
                revision,
                format!(
                    "{}/{want}",
                    status.and_then(|s| s.ready_replicas).unwrap_or(0)
                ),
                status
                    .and_then(|s| s.updated_replicas)
                    .unwrap_or(0)
                    .to_string(),
                p.as_str().to_string(),
            ]);
        }
    }
    Ok(live)
}
