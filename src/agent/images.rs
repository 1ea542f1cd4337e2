//! The image updates' loop: every policy's registry listed at its interval, the fields of
//! the apps this host runs written back (one commit per repository branch), and the apps
//! following a branch that received a commit woken at once (`Trigger::Image`), so a tag
//! pushed to the registry is applied within a scan and a sync.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Shared;
use crate::config::{AppConfig, Config};
use crate::history::Trigger;
use crate::images::scan::{Report, Scanner};
use crate::shutdown::{stopped, Signal};

/// Starts the loop: it scans until shutdown, reading each configuration published.
pub(super) fn start(
    shared: &Arc<Shared>,
    publish: &watch::Sender<Arc<Config>>,
    shutdown: &Signal,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(shared.clone(), publish.subscribe(), shutdown.clone()))
}

async fn run(
    shared: Arc<Shared>,
    mut published: watch::Receiver<Arc<Config>>,
    mut shutdown: Signal,
) {
    let mut scanner = Scanner::default();
    let host = crate::service::lease::host_name();
    let mut pushed = false;
    loop {
        let config = published.borrow_and_update().clone();
        let wait = next_scan(&config);
        let images = (config.image_policies.iter())
            .map(|p| (format!("oci://{}", p.image), p.name.clone()))
            .collect();
        shared.registry.image_policies(images);
        let apps: Vec<Arc<AppConfig>> = (config.apps.iter())
            .filter(|a| a.image_updates.is_some() && shared.registry.runs(&a.name))
            .cloned()
            .collect();
        if wait.is_some() && !apps.is_empty() {
            // A registry's push notification: every policy listed now.
            let report = scanner.scan(&config, &apps, pushed, false).await;
            tell(&shared, &report, &host);
        }
        let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
        pushed = false;
        tokio::select! {
            () = stopped(&mut shutdown) => return,
            Ok(()) = published.changed() => {}
            () = sleep => {}
            () = shared.registry.image_pushed.notified() => pushed = true,
        }
    }
}

/// Says what a scan did (the receivers told of each tag skipped and each commit pushed),
/// and wakes the apps of each branch that received a commit.
fn tell(shared: &Shared, report: &Report, host: &str) {
    let notifications = &shared.syncer().notifications;
    for (policy, tag, app) in &report.failed {
        tracing::warn!(
            policy,
            tag,
            app,
            "image tag skipped from now on: its rollout failed and was rolled back"
        );
        notifications.observe_image_skipped(app, host, policy, tag);
    }
    for branch in report.pushed() {
        let Some((commit, changes)) = branch.said() else {
            continue;
        };
        for app in &branch.apps {
            notifications.observe_image_update(app, host, &commit, &changes);
            shared.registry.wake(app, Trigger::Image);
        }
    }
}

/// How long until the next scan: the shortest policy interval (`None`: no policy, or no
/// app takes updates).
fn next_scan(config: &Config) -> Option<Duration> {
    if !config.apps.iter().any(|a| a.image_updates.is_some()) {
        return None;
    }
    config.image_policies.iter().map(|p| p.interval).min()
}
