//! `berth plan`: what a sync would do now, without writing anything.

use std::path::Path;
use std::process::ExitCode;

use berth::config;
use berth::sync::{Preview, Syncer};

use super::sync::select;

/// Arguments of `berth plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Apps to plan (default: all).
    pub apps: Vec<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Show Secret values in the diffs (masked as `***` otherwise).
    #[arg(long)]
    pub show_secrets: bool,
    /// Exit 2 when a sync would change something (0: nothing, 1: an error), as `terraform
    /// plan -detailed-exitcode` does, for scripts.
    #[arg(long)]
    pub detailed_exitcode: bool,
}

/// How the plan is printed.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people.
    Text,
    /// One JSON object per app.
    Json,
}

/// Runs `berth plan`: exit code 1 when a sync would fail.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    super::reach_cluster(&config).await?;
    let syncer = Syncer::connect(&config, false).await?;
    let (mut ok, mut changes) = (true, false);
    for app in select(&config.apps, &args.apps)? {
        let progress = |line: &str| eprintln!("{}: {line}", app.name);
        let preview = syncer.preview(app, args.show_secrets, &progress).await;
        ok &= preview.errors.is_empty();
        changes |= preview.objects.iter().any(|o| o.action != "kept");
        match args.output {
            Format::Json => println!("{}", serde_json::to_string(&preview)?),
            Format::Text => print!("{}", text(&preview)),
        }
    }
    Ok(match (ok, changes && args.detailed_exitcode) {
        (false, _) => ExitCode::FAILURE,
        (true, true) => ExitCode::from(2),
        (true, false) => ExitCode::SUCCESS,
    })
}

fn text(p: &Preview) -> String {
    let commit = p
        .commit
        .as_ref()
        .map(|c| format!("{} {:?}", c.short(), c.subject))
        .unwrap_or_else(|| "-".into());
    let mut out = format!("{}: commit {commit}\n", p.app);
    if let Some(held) = &p.held {
        out += &format!("  held: {held} (berth sync --force applies it anyway)\n");
    }
    for o in &p.objects {
        out += &format!("  {}\n", o.line());
        for line in o.diff.iter().flat_map(|d| d.lines()) {
            out += &format!("    {line}\n");
        }
    }
    out += &format!("  {} unchanged\n", p.unchanged);
    for d in &p.deployments {
        let from = d
            .revision_from
            .map(|r| format!("revision {r} → "))
            .unwrap_or_default();
        let reuse = d
            .reuses
            .as_ref()
            .map(|rs| format!(", back to ReplicaSet {rs}"))
            .unwrap_or_default();
        out += &format!(
            "  {}/{}: {from}revision {}{reuse}; {} replicas {}, maxSurge {}, maxUnavailable {}\n    STEP   NEW   OLD\n",
            d.deployment.namespace_or_default(),
            d.deployment.name,
            d.revision_to,
            d.strategy,
            d.replicas,
            d.max_surge,
            d.max_unavailable
        );
        for (i, s) in d.steps.iter().enumerate() {
            out += &format!("    {:<6} {:<5} {}\n", i + 1, s.new, s.old);
        }
    }
    for e in &p.errors {
        out += &format!("  error: {e}\n");
    }
    out
}
