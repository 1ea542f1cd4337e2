//! The `berth` command line: parses arguments, sets up logging, runs one command.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use berth::config::LogFormat;
use berth::rollout::gate::Verb;
use clap::{CommandFactory, Parser, Subcommand};

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
    /// Log format (default: the configuration's agent.log_format; auto is journald under
    /// systemd, else text).
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent: sync every app on its interval and on new commits, until stopped.
    Run,
    /// Ask the running agent to reload its configuration (SIGHUP).
    Reload,
    /// Sync the named apps (all by default) once, in the foreground.
    Sync(cli::sync::Args),
    /// Show the sync history (newest first), or one record with `history show ID`.
    History(cli::history::Args),
    /// Per app the last sync, per Deployment its revision, readiness and rollout phase.
    Status(cli::status::Args),
    /// What a sync would do now: each object's action and each rollout's predicted steps.
    #[command(disable_version_flag = true)]
    Plan(cli::plan::Args),
    /// Roll a Deployment back to an earlier revision (the previous one by default).
    Rollback(cli::rollback::Args),
    /// Stop syncing the named apps, their objects left as they are, until `berth resume`.
    Suspend(cli::suspend::Args),
    /// Sync the named apps again after `berth suspend`.
    Resume(cli::suspend::Args),
    /// End the pause of the step the app's canary holds at: it goes on to its checks and
    /// the next step.
    Promote(cli::canary::Args),
    /// Abort the app's canary: the old version back at its full size, the app held at its
    /// previous commit.
    Abort(cli::canary::Args),
    /// Image policies: the newest tag each sees, the tag in git, what the next scan would
    /// commit (`--dry-run`: the diff); `resume POLICY`, `forget POLICY TAG`, `history`.
    Images(cli::images::Args),
    /// Load and check the configuration, and render the commit each app's ref names.
    Validate(cli::validate::Args),
    /// Run the manifest pipeline on a folder, a file, stdin (-), an oci:// artifact or a
    /// Helm repository's chart (--repo) and print the objects.
    #[command(disable_version_flag = true)]
    Render(Box<cli::render::Args>),
    /// Write a starter configuration for one app (to --config), and say what to run next.
    Init(cli::init::Args),
    /// Print shell completions: `berth completions bash > /etc/bash_completion.d/berth`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (berth.1, and berth-COMMAND.1 for each command) into DIR.
    #[command(hide = true)]
    Manpage { dir: PathBuf },
}

fn main() -> ExitCode {
    // glibc gives each thread that allocates its own arena (up to 8 per core), and memory
    // freed in one is not reused by the others: two arenas keep `berth run`'s resident set
    // near its heap with a few threads contending for a lock at most.
    // SAFETY: a malloc setting made before any thread starts.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    // berth's state holds Secret manifests: whatever berth or a library creates is its
    // user's only (0700 folders, 0600 files), not only under the shipped unit's UMask=.
    berth::state::restrict_umask();
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Run
            | Command::Sync(_)
            | Command::Plan(_)
            | Command::Rollback(_)
            | Command::Validate(_)
    ) {
        // Only the commands that read repositories: libgit2's first use costs about 45 ms
        // (OpenSSL reads the system's CA bundle), which `berth render`, `status` and
        // `history` need not pay.
        berth::source::git::read_repositories_of_other_users();
    }
    if !matches!(
        cli.command,
        Command::Run | Command::Sync(_) | Command::Rollback(_)
    ) {
        // A reader that closes the pipe early (`berth history | head -1`) ends the
        // command quietly, as it does git and kubectl. Commands that write to the cluster
        // keep going and print through `cli::say`, which drops what nobody reads.
        // SAFETY: restoring the default disposition of one signal before any thread runs.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let log_format = init_logging(&cli);
    let result = dispatch(cli);
    match result {
        Ok(code) => code,
        Err(e) => {
            // One format per stream: with JSON logs, the last error is a JSON line too.
            if log_format == LogFormat::Json {
                tracing::error!(target: "berth", error = format!("{e:#}"), "failed");
            } else {
                eprintln!("error: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Runs the command.
fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run => runtime().and_then(|rt| rt.block_on(cli::run::run(&cli.config))),
        Command::Reload => cli::run::reload(&cli.config),
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
        Command::Suspend(args) => cli::suspend::run(&cli.config, args, true),
        Command::Resume(args) => cli::suspend::run(&cli.config, args, false),
        Command::Promote(args) => cli::canary::run(&cli.config, args, Verb::Promote),
        Command::Abort(args) => cli::canary::run(&cli.config, args, Verb::Abort),
        Command::Images(args) => {
            runtime().and_then(|rt| rt.block_on(cli::images::run(&cli.config, args)))
        }
        Command::Validate(args) => cli::validate::run(&cli.config, args),
        Command::Render(args) => cli::render::run(*args),
        Command::Init(args) => cli::init::run(&cli.config, args),
        Command::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "berth", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Manpage { dir } => {
            clap_mangen::generate_to(Cli::command(), &dir)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The daemon logs what it does; one-shot commands print it and log only problems.
/// Under systemd (`$JOURNAL_STREAM`) `auto` writes native journald entries, whose fields
/// (`APP=`, `COMMIT=`, `OUTCOME=`, …) `journalctl -u berth APP=guestbook` filters on.
///
/// Only berth's own events are logged unless `RUST_LOG` asks for more: its dependencies'
/// lines (kube's "failed with status 500" for a dry run berth reports itself) would say
/// the same thing twice, less clearly. Colour only when stderr is a terminal.
fn init_logging(cli: &Cli) -> LogFormat {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    let daemon = matches!(cli.command, Command::Run);
    let configured = || {
        berth::config::load(&cli.config)
            .ok()
            .map(|c| c.agent.log_format)
    };
    let format = match cli
        .log_format
        .or_else(|| daemon.then(configured).flatten())
        .unwrap_or(LogFormat::Auto)
    {
        LogFormat::Auto if std::env::var_os("JOURNAL_STREAM").is_some() => LogFormat::Journald,
        LogFormat::Auto => LogFormat::Text,
        f => f,
    };
    let level = if daemon { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| format!("off,berth={level}").into());
    let registry = tracing_subscriber::registry().with(filter);
    let text = || {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
    };
    match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .init(),
        LogFormat::Journald => match tracing_journald::layer() {
            Ok(journald) => registry
                .with(journald.with_syslog_identifier("berth".into()))
                .init(),
            Err(_) => registry.with(text()).init(),
        },
        _ => registry.with(text()).init(),
    }
    format
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
