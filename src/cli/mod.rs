//! One module per `berth` command.

pub mod canary;
pub mod history;
pub mod images;
pub mod init;
pub mod plan;
pub mod render;
pub mod rollback;
pub mod run;
pub mod status;
pub mod suspend;
pub mod sync;
pub mod validate;

/// How long a one-shot command waits for its notifications to be delivered.
pub const NOTIFY_FLUSH: std::time::Duration = std::time::Duration::from_secs(10);

/// Who runs the command, and where (`ops@host`), as notes and requests say it.
pub fn user_at_host() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| rustix::process::getuid().as_raw().to_string());
    format!("{user}@{}", berth::service::lease::host_name())
}

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

/// Loads the configuration with each app set's apps as the set listed them last (no
/// repository read): what the commands that read the state and the cluster see.
///
/// # Errors
/// As [`berth::config::load`].
pub fn load_listed(path: &std::path::Path) -> anyhow::Result<berth::config::Config> {
    let file = berth::config::load(path)?;
    Ok(berth::fleet::expand_remembered(&file))
}

/// The configuration with each app set's apps at its repository's commit (fetched now;
/// at `revision` when given), and the sets' listings; each set's problem said (`app set
/// NAME: …`).
pub async fn with_sets(
    file: &berth::config::Config,
    revision: Option<&str>,
) -> (berth::config::Config, Vec<berth::fleet::Listing>) {
    use berth::fleet;
    let sources = berth::source::shared::Sources::of(&file.agent);
    let since = std::time::Instant::now();
    let mut listings = Vec::new();
    for set in &file.app_sets {
        listings.push(fleet::list(&sources, file, set, since, revision).await);
    }
    let kept = |name: &str| {
        let set = file.app_sets.iter().find(|s| s.name == name);
        set.map(|s| fleet::remembered_apps(file, s))
            .unwrap_or_default()
    };
    let config = fleet::expand(file, &mut listings, &kept);
    for listing in &listings {
        if let Some(problem) = &listing.problem {
            say(format_args!("app set {}: {problem}", listing.set));
        }
    }
    for refused in &config.refused {
        say(refused);
    }
    for unknown in fleet::unknown_dependencies(&config) {
        say(unknown);
    }
    (config, listings)
}

/// How long a command at a terminal waits for a cluster's first answer.
pub const REACH_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// At a terminal, a cluster that is down is one clear line within seconds (the API
/// server's address and the cause), not a minute of retries: one-shot commands ask the
/// clusters of their apps once, side by side, before their first request. Returns each
/// cluster that did not answer within 5 s, by name.
pub async fn unreachable(
    config: &berth::config::Config,
    apps: &[&berth::config::AppConfig],
) -> std::collections::BTreeMap<String, berth::cluster::ClusterError> {
    let probes = config
        .clusters_of(apps)
        .into_iter()
        .map(|(cluster, _)| async move {
            let answer = berth::cluster::client::probe(cluster, REACH_WITHIN).await;
            (cluster.name().to_string(), answer.err())
        });
    futures::future::join_all(probes)
        .await
        .into_iter()
        .filter_map(|(name, error)| Some((name, error?)))
        .collect()
}

/// As [`unreachable`], for a command that needs every cluster of `apps`: the first that
/// did not answer is the error (named when there are several).
///
/// # Errors
/// A cluster of `apps` did not answer within 5 s.
pub async fn reach_clusters(
    config: &berth::config::Config,
    apps: &[&berth::config::AppConfig],
) -> anyhow::Result<()> {
    match unreachable(config, apps).await.into_iter().next() {
        None => Ok(()),
        Some((name, error)) => Err(in_cluster(config, &name, error)),
    }
}

/// `error`, naming the cluster when several are configured.
pub fn in_cluster(
    config: &berth::config::Config,
    cluster: &str,
    error: impl std::fmt::Display,
) -> anyhow::Error {
    match config.cluster {
        berth::config::Clusters::One(_) => anyhow::anyhow!("{error}"),
        berth::config::Clusters::Many(_) => anyhow::anyhow!("cluster {cluster}: {error}"),
    }
}
