//! `berth validate`: load and check the configuration, then render what a sync would: each
//! app's configured ref, fetched into the repository's cache as a sync fetches it (or a
//! folder given with `--dir`, such as a working tree), without a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use berth::config::{self, AppConfig, Config, GitRef};
use berth::manifest::helm::{chart_in, Helm};
use berth::manifest::{Builder, BuiltinScopes, Manifest};
use berth::notifications;
use berth::source::git;
use berth::source::verify::Trust;

/// Arguments of `berth validate`.
#[derive(clap::Args)]
pub struct Args {
    /// Render every app from this folder (a working tree, say) instead of the commit its
    /// configured ref names.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Runs `berth validate`.
pub fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    if args.dir.is_none() {
        // It fetches each app's commit into state_dir.
        super::own_state(&config, "validate")?;
    }
    println!(
        "config {}: ok ({})",
        config_path.display(),
        berth::plural(config.apps.len(), "app")
    );
    let mut failed = !trusted_keys(&config) | !receivers(&config);
    for app in &config.apps {
        failed |= !renders(&config, app, args.dir.as_ref());
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Renders one app as a sync would and says what it made; false when it cannot.
fn renders(config: &Config, app: &AppConfig, dir: Option<&PathBuf>) -> bool {
    let Some((root, shown)) = source_of(config, app, dir) else {
        return false;
    };
    let kube_version = config.cluster_of(app).kube_version.as_deref();
    let rendered = Builder::for_app(app, &config.agent, &root, &BuiltinScopes)
        .map_err(anyhow::Error::from)
        .and_then(|b| Ok(b.capabilities(kube_version, Vec::new().into()).render()?));
    if kube_version.is_none()
        && Helm::renders(app)
        && app.path.iter().any(|p| chart_in(&root.join(p)))
    {
        println!("app {}: note: its chart is rendered for helm's default Kubernetes version ([cluster] kube_version sets your cluster's)", app.name);
    }
    match rendered {
        Ok(manifests) => {
            println!(
                "app {}: {} from {shown} ({})",
                app.name,
                berth::plural(manifests.len(), "object"),
                kinds(&manifests)
            );
            true
        }
        Err(e) => {
            println!("app {}: {shown} — {e}", app.name);
            false
        }
    }
}

/// The folder an app renders from and its name (`--dir`, or its ref fetched); None, said why.
fn source_of(config: &Config, app: &AppConfig, dir: Option<&PathBuf>) -> Option<(PathBuf, String)> {
    if let (None, Some(path)) = (dir, git::local_path(&app.repo)) {
        if !path.exists() {
            println!(
                "app {}: repository path {} does not exist",
                app.name,
                path.display()
            );
            return None;
        }
    }
    match dir {
        Some(dir) => Some((dir.clone(), dir.display().to_string())),
        None => match git::fetch(
            app,
            &config.agent.state_dir,
            git::TreeLimits::of(&config.agent),
        ) {
            Ok(checkout) => {
                let shown = format!("{} at {}", what(app), checkout.commit.short());
                Some((checkout.dir, shown))
            }
            Err(e) => {
                println!("app {}: {e}", app.name);
                None
            }
        },
    }
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

/// The ref the app follows, as a sync names it.
fn what(app: &AppConfig) -> String {
    match app.git_ref() {
        GitRef::DefaultBranch => "the default branch".into(),
        GitRef::Branch(b) => format!("branch {b}"),
        GitRef::Tag(t) => format!("tag {t}"),
        GitRef::Commit(c) => format!("commit {c}"),
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
