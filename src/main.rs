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
    /// Load and check the configuration, and render every app from a local checkout.
    Validate(cli::validate::Args),
    /// Run the manifest pipeline on a folder, a file or stdin (-) and print the objects.
    Render(cli::render::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let result = match cli.command {
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
