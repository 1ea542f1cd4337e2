//! `berth rollback APP DEPLOYMENT [--to-revision N] [--no-wait]`.

use std::path::Path;
use std::process::ExitCode;

use berth::history::Outcome;
use berth::sync::{RollbackRequest, Syncer};

use super::sync::{select, summary};

/// Arguments of `berth rollback`.
#[derive(clap::Args)]
pub struct Args {
    /// The app.
    pub app: String,
    /// The Deployment: NAME or NAMESPACE/NAME.
    pub deployment: String,
    /// The revision to restore (default: the previous one).
    #[arg(long)]
    pub to_revision: Option<i64>,
    /// Do not wait for the rollout.
    #[arg(long)]
    pub no_wait: bool,
}

/// Runs `berth rollback`.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = super::load_listed(config_path)?;
    super::own_state(&config, "rollback")?;
    let app = select(&config.apps, std::slice::from_ref(&args.app))?[0];
    super::reach_clusters(&config, &[app]).await?;
    let syncer = Syncer::connect(&config, false).await?.notify(&config)?;
    let request = RollbackRequest {
        deployment: &args.deployment,
        to_revision: args.to_revision,
        wait: !args.no_wait,
    };
    let print = |line: &str| super::say(format_args!("{}: {line}", app.name));
    let record = syncer.rollback(app, &request, &super::lines(print)).await?;
    syncer.notifications.flush(super::NOTIFY_FLUSH).await;
    if let Some(note) = &record.note {
        super::say(format_args!("note: {note}"));
    }
    super::say(summary(&record));
    Ok(match record.outcome {
        Outcome::RolledBack | Outcome::NoChange => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    })
}
