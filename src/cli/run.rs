//! `berth run`: the daemon. SIGTERM/SIGINT stop it within seconds (a sync in flight
//! stops at its next step and is recorded interrupted), SIGHUP reloads the configuration.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use berth::agent::{self, Signals};
use berth::config;
use berth::sync::Syncer;
use tokio::signal::unix::{signal, SignalKind};

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    super::own_state(&config, "run")?;
    // Each app renders its files again at each sync: those unchanged are not decoded again.
    berth::manifest::decode::keep_decoded();
    let syncer = Syncer::connect(&config, true).await?.notify(&config)?;
    // A cluster that is down does not stop the agent: it serves /healthz (alive), /readyz
    // says the cluster is unreachable, and each app's next sync finds it back.
    let apps: Vec<&config::AppConfig> = config.apps.iter().map(AsRef::as_ref).collect();
    let down = super::unreachable(&config, &apps).await;
    if down.is_empty() {
        tracing::info!("connected to the cluster");
    }
    for (name, error) in down {
        let error = super::in_cluster(&config, &name, error);
        tracing::error!(
            "{error:#}; serving /healthz meanwhile (/readyz follows the first cluster listed), and its apps' syncs try again on their interval"
        );
    }
    let (stop, shutdown) = berth::shutdown::channel();
    let (reload_tx, reload) = tokio::sync::mpsc::channel(1);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => {
                    let _ = reload_tx.try_send(());
                }
            }
        }
        let _ = stop.send(true);
    });
    agent::run(
        config_path.to_path_buf(),
        config,
        syncer,
        Signals { shutdown, reload },
    )
    .await?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// `berth reload`: SIGHUP to the running agent (its pid file is in the state directory).
pub fn reload(config_path: &Path) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    let pid_file = agent::pid_file(&config);
    let pid = running_berth(&pid_file)?;
    let answers = agent::reload_answer(&config.agent.state_dir);
    let before = read_answer(&answers);
    // SAFETY: kill(2) on the pid the running agent wrote for exactly this.
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        anyhow::bail!(
            "cannot signal berth (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    println!(
        "asked berth (pid {pid}) to reload {}",
        config_path.display()
    );
    let waited = std::time::Instant::now();
    while waited.elapsed() < RELOAD_WAIT {
        match read_answer(&answers) {
            Some(answer) if Some(&answer) != before.as_ref() => {
                if answer.taken {
                    println!("{}", answer.message);
                    return Ok(ExitCode::SUCCESS);
                }
                eprintln!("error: {}", answer.message);
                return Ok(ExitCode::FAILURE);
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }
    anyhow::bail!(
        "berth (pid {pid}) did not answer within {}s: its log (journalctl -u berth) says whether the new configuration was taken",
        RELOAD_WAIT.as_secs()
    )
}

/// The pid of the running agent, from its pid file: read without following a link, no
/// further than 64 bytes, and only a process (above 1) that is a running berth: a pid
/// file left behind by a killed agent, or written by someone else, signals nothing.
///
/// # Errors
/// No such file, not a pid, or no berth runs as that pid.
fn running_berth(pid_file: &Path) -> anyhow::Result<i32> {
    use std::io::Read;
    let mut text = String::new();
    berth::state::open_state(pid_file)
        .and_then(|f| f.take(64).read_to_string(&mut text))
        .with_context(|| {
            format!(
                "no running berth found ({} cannot be read): is `berth run` up?",
                pid_file.display()
            )
        })?;
    let pid = text
        .trim()
        .parse::<i32>()
        .ok()
        .filter(|pid| *pid > 1)
        .with_context(|| format!("{} does not hold a pid", pid_file.display()))?;
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if name.trim_end() != "berth" {
        anyhow::bail!(
            "no running berth found: {} names pid {pid}, which is not berth (left by an agent that was killed?): is `berth run` up?",
            pid_file.display()
        );
    }
    Ok(pid)
}

/// How long `berth reload` waits for the agent's answer (a reload that changes the
/// cluster waits for the running syncs to end).
const RELOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The agent's last answer to a reload, if it is readable (a state file: not followed
/// through a link, read no further than 64 KiB).
fn read_answer(path: &Path) -> Option<agent::ReloadAnswer> {
    use std::io::Read;
    let mut text = Vec::new();
    berth::state::open_state(path)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut text)
        .ok()?;
    serde_json::from_slice(&text).ok()
}
