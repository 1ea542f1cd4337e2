//! `berth promote APP` and `berth abort APP`: a request left in `state_dir` for the sync
//! driving the app's canary (see [`berth::rollout::gate`]), which takes it within a
//! second: promote ends the step's pause, abort brings the old version back at its full
//! size and holds the app at its previous commit, as a failed check does.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use berth::rollout::gate::{self, Asked, Verb};

use super::sync::select;

/// How long the command waits for the sync to take its request.
const TAKEN_WITHIN: Duration = Duration::from_secs(10);

/// Arguments of `berth promote` and `berth abort`.
#[derive(clap::Args)]
pub struct Args {
    /// The app whose canary it is.
    pub app: String,
}

/// Runs `berth promote` or `berth abort` (`verb`).
pub fn run(config_path: &Path, args: Args, verb: Verb) -> anyhow::Result<ExitCode> {
    let config = super::load_listed(config_path)?;
    let command = match verb {
        Verb::Promote => "promote",
        Verb::Abort => "abort",
    };
    super::own_state(&config, command)?;
    let app = &select(&config.apps, std::slice::from_ref(&args.app))?[0].name;
    let state = &config.agent.state_dir;
    let Some(standing) = gate::standing(state, app) else {
        anyhow::bail!(
            "app {app} has no canary running: nothing to {command} (berth status {app} shows its rollouts)"
        );
    };
    let at = format!(
        "{}: step {} of {} ({} %)",
        standing.deployment, standing.step, standing.of, standing.weight
    );
    if verb == Verb::Promote && !standing.paused {
        let holding = standing.holding.as_deref().unwrap_or("its pods coming up");
        anyhow::bail!("{at} is not paused ({holding}): berth promote ends a step's pause; berth abort {app} ends the canary");
    }
    let asked = Asked {
        verb,
        version: standing.version.clone(),
        step: standing.step,
        by: super::user_at_host(),
    };
    gate::ask(state, app, &asked)?;
    if berth::sync::syncing(state, app).is_none() {
        super::say(format_args!(
            "{at}: {command} asked; no sync drives the canary now: the next one takes it"
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let end = Instant::now() + TAKEN_WITHIN;
    while gate::is_asked(state, app) {
        if Instant::now() > end {
            anyhow::bail!(
                "{at}: {command} asked, but the sync driving the canary has not taken it within {}s (journalctl -u berth says why)",
                TAKEN_WITHIN.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    match verb {
        Verb::Promote => super::say(format_args!("{at}: promoted")),
        Verb::Abort => super::say(format_args!(
            "{at}: aborted; the old version comes back at its full size (berth status {app} follows it)"
        )),
    }
    Ok(ExitCode::SUCCESS)
}
