//! `berth status`: per app the last sync, and per Deployment its revision, readiness and
//! rollout phase, like `kubectl get`.

use std::path::Path;
use std::process::ExitCode;

use berth::cluster::{client, inventory};
use berth::config;
use berth::history::HistoryLog;
use berth::rollout::revisions::REVISION;
use berth::rollout::status::phase;
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

/// Runs `berth status`.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    let client = client::connect(&config.cluster).await?;
    let log = HistoryLog::new(&config.agent.state_dir);
    let now = jiff::Timestamp::now();
    let mut apps = vec![["APP", "COMMIT", "OUTCOME", "AGE", "HELD"].map(String::from)];
    let mut deployments = vec![[
        "APP",
        "DEPLOYMENT",
        "REVISION",
        "READY",
        "UP-TO-DATE",
        "PHASE",
    ]
    .map(String::from)];
    for app in select(&config.apps, &args.apps)? {
        let last = log.read(&app.name)?.pop();
        let inv = inventory::load(&client, &config.agent.inventory_namespace, &app.name)
            .await?
            .unwrap_or_default();
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
            inv.held
                .as_ref()
                .map(|h| h.reason.clone())
                .unwrap_or_else(|| "-".into()),
        ]);
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
                deployments.push([
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
            let revision = d
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION))
                .cloned()
                .unwrap_or_else(|| "-".into());
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let status = d.status.as_ref();
            deployments.push([
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
    print!("{}", table(&apps));
    if deployments.len() > 1 {
        println!();
        print!("{}", table(&deployments));
    }
    Ok(ExitCode::SUCCESS)
}
