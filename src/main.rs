//! The `berth` command line: parses arguments, sets up logging, runs one command.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "berth",
    version,
    about = "GitOps reconciliation agent: git drives a Kubernetes cluster",
    propagate_version = true
)]
struct Cli {
    /// The configuration file.
    #[arg(long, global = true, env = "BERTH_CONFIG", default_value = berth::config::DEFAULT_PATH)]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent: sync every app on its interval and on new commits, until stopped.
    Run,
    /// Sync the named apps (all by default) once, in the foreground.
    Sync(cli::sync::Args),
    /// Show the sync history (newest first), or one record with `history show ID`.
    History(cli::history::Args),
    /// Per app the last sync, per Deployment its revision, readiness and rollout phase.
    Status(cli::status::Args),
    /// What a sync would do now: each object's action and each rollout's predicted steps.
    Plan(cli::plan::Args),
    /// Roll a Deployment back to an earlier revision (the previous one by default).
    Rollback(cli::rollback::Args),
    /// Load and check the configuration, and render every app from a local checkout.
    Validate(cli::validate::Args),
    /// Run the manifest pipeline on a folder, a file or stdin (-) and print the objects.
    Render(cli::render::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The daemon logs what it does; one-shot commands print it and log only problems.
    let level = if matches!(cli.command, Command::Run) {
        "info"
    } else {
        "warn"
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .init();
    let result = match cli.command {
        Command::Run => runtime().and_then(|rt| rt.block_on(cli::run::run(&cli.config))),
        Command::Sync(args) => {
            runtime().and_then(|rt| rt.block_on(cli::sync::run(&cli.config, args)))
        }
        Command::History(args) => cli::history::run(&cli.config, args),
        Command::Status(args) => {
            runtime().and_then(|rt| rt.block_on(cli::status::run(&cli.config, args)))
        }
        Command::Plan(args) => {
            runtime().and_then(|rt| rt.block_on(cli::plan::run(&cli.config, args)))
        }
        Command::Rollback(args) => {
            runtime().and_then(|rt| rt.block_on(cli::rollback::run(&cli.config, args)))
        }
        Command::Validate(args) => cli::validate::run(&cli.config, args),
        Command::Render(args) => cli::render::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
