//! `berth run`: the daemon.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use berth::config;
use berth::sync::Syncer;
use tokio::signal::unix::{signal, SignalKind};

/// Runs until SIGTERM or SIGINT; the sync in progress finishes first.
pub async fn run(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    let syncer = Arc::new(Syncer::connect(&config, true).await?);
    let version = syncer
        .client
        .apiserver_version()
        .await
        .context("the cluster is not reachable (check [cluster] in the configuration)")?;
    tracing::info!(server = %version.git_version, apps = config.apps.len(), "connected to the cluster");
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutting down: the syncs in progress finish first");
        let _ = stop.send(true);
    });
    berth::agent::run(&config, syncer, shutdown).await;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}
