//! One module per `berth` command.

pub mod history;
pub mod plan;
pub mod render;
pub mod rollback;
pub mod run;
pub mod status;
pub mod sync;
pub mod validate;

/// How long a one-shot command waits for its notifications to be delivered.
pub const NOTIFY_FLUSH: std::time::Duration = std::time::Duration::from_secs(10);

/// Prints one line of a command that writes to the cluster: a closed stdout (`berth sync
/// | head -1`) must not stop a sync half way, so what nobody reads is dropped.
pub fn say(line: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// A sync's progress, its lines printed by `print` (the steps it enters are not shown).
pub fn lines(
    print: impl Fn(&str) + Send + Sync,
) -> impl Fn(berth::sync::Progress<'_>) + Send + Sync {
    move |progress| {
        if let berth::sync::Progress::Line { text, .. } = progress {
            print(text);
        }
    }
}

/// Refuses to run `command` on a `state_dir` another user owns (see
/// [`berth::state::owned_by_me`]): before anything is written there.
///
/// # Errors
/// The state folder is someone else's.
pub fn own_state(config: &berth::config::Config, command: &str) -> anyhow::Result<()> {
    berth::state::owned_by_me(&config.agent.state_dir, command)?;
    Ok(())
}

/// At a terminal, a cluster that is down is one clear line within seconds (the API
/// server's address and the cause), not a minute of retries: one-shot commands ask it once
/// before their first request.
///
/// # Errors
/// The API server did not answer within 5 s.
pub async fn reach_cluster(config: &berth::config::Config) -> anyhow::Result<()> {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(5);
    berth::cluster::client::probe(&config.cluster, WITHIN).await?;
    Ok(())
}
