//! `berth validate`: load and check the configuration, then render every app from a local
//! checkout (or `--dir`) without a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use berth::config::{self, AppConfig, Config};
use berth::manifest::{Builder, BuiltinScopes, Manifest};
use berth::notifications;
use berth::source::git;
use berth::source::verify::Trust;

/// Arguments of `berth validate`.
#[derive(clap::Args)]
pub struct Args {
    /// Render every app from this folder instead of its checkout.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Runs `berth validate`.
pub fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    println!(
        "config {}: ok ({})",
        config_path.display(),
        berth::plural(config.apps.len(), "app")
    );
    let mut failed = !trusted_keys(&config) | !receivers(&config);
    for app in &config.apps {
        if let (None, Some(path)) = (&args.dir, git::local_path(&app.repo)) {
            if !path.exists() {
                failed = true;
                println!(
                    "app {}: repository path {} does not exist",
                    app.name,
                    path.display()
                );
                continue;
            }
        }
        let Some(root) = args.dir.clone().or_else(|| local_checkout(&config, app)) else {
            println!(
                "app {}: skipped, no local checkout (run `berth sync {0}` first, or pass --dir)",
                app.name
            );
            continue;
        };
        let rendered = Builder::for_app(app, &config.agent, &root, &BuiltinScopes)
            .map_err(anyhow::Error::from)
            .and_then(|b| Ok(b.render()?));
        match rendered {
            Ok(manifests) => println!(
                "app {}: {} from {} ({})",
                app.name,
                berth::plural(manifests.len(), "object"),
                root.display(),
                kinds(&manifests)
            ),
            Err(e) => {
                failed = true;
                println!("app {}: {} — {e}", app.name, root.display());
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Reads each app's `[app.verify]` keys; false when one cannot be used.
fn trusted_keys(config: &Config) -> bool {
    let mut ok = true;
    for app in &config.apps {
        match Trust::load(&app.verify) {
            Ok(None) => {}
            Ok(Some(trust)) => {
                let (openpgp, ssh) = trust.counts();
                println!(
                    "app {}: commits must be signed by one of {} and {}",
                    app.name,
                    berth::plural(openpgp, "OpenPGP key"),
                    berth::plural(ssh, "SSH signer")
                );
            }
            Err(e) => {
                ok = false;
                println!("app {}: [app.verify] {e}", app.name);
            }
        }
    }
    ok
}

/// Reads each `[[notify]]` receiver's address and secrets; false when one cannot be used.
fn receivers(config: &Config) -> bool {
    let mut ok = true;
    for (i, n) in config.notify.iter().enumerate() {
        match notifications::secrets(n, i) {
            Ok(s) => {
                let events: Vec<&str> = n.events.iter().map(|e| e.as_str()).collect();
                println!(
                    "{}: {:?} receiver, events {}{}",
                    s.name,
                    n.format,
                    events.join(", "),
                    if s.secret.is_some() { ", signed" } else { "" }
                );
            }
            Err(e) => {
                ok = false;
                println!("{e}");
            }
        }
    }
    ok
}

/// The repository itself when it is a local path, else the agent's cached checkout.
fn local_checkout(config: &Config, app: &AppConfig) -> Option<PathBuf> {
    match git::local_path(&app.repo) {
        Some(local) => local.is_dir().then_some(local),
        None => git::latest_tree(&config.agent.state_dir, &app.repo),
    }
}

fn kinds(manifests: &[Manifest]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in manifests {
        *counts.entry(m.kind()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}
