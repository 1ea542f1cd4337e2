//! The image updates' loop: every policy's registry listed at its interval, the fields of
//! the apps this host runs written back (one commit per repository branch), and the apps
//! following a branch that received a commit woken at once (`Trigger::Image`), so a tag
//! pushed to the registry is applied within a scan and a sync.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::Shared;
use crate::config::{AppConfig, Config};
use crate::history::Trigger;
use crate::images::scan::{Listed, Report, Scanner};
use crate::shutdown::{stopped, Signal};

/// The least time between two scans a registry's notifications start: a flood of them
/// (each signed, but naming what it likes) lists each repository at most once a second.
const PUSHED_FLOOR: Duration = Duration::from_secs(1);

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
    let mut floor = Instant::now();
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
            // The policies a registry pushed to are listed now, with those due.
            let pushed = shared.registry.pushed_images();
            floor = Instant::now() + PUSHED_FLOOR;
            let report = scanner
                .scan(&config, &apps, Listed::Due(&pushed), false)
                .await;
            tell(&shared, &report, &host);
        }
        let sleep = tokio::time::sleep(wait.unwrap_or(Duration::from_secs(3600)));
        let pushed = async {
            shared.registry.image_pushed.notified().await;
            tokio::time::sleep_until(floor).await;
        };
        tokio::select! {
            () = stopped(&mut shutdown) => return,
            Ok(()) = published.changed() => {}
            () = sleep => {}
            () = pushed => {}
        }
    }
}

/// Says what a scan did (the receivers told of each tag skipped and each commit pushed),
/// and wakes the apps of each branch that received a commit.
fn tell(shared: &Shared, report: &Report, host: &str) {
    let notifications = &shared.syncer().notifications;
    for (policy, failed) in &report.failed {
        let (tag, app) = (&failed.tag, &failed.app);
        tracing::warn!(
            policy,
            tag,
            app,
            "image tag skipped from now on in the app: its rollout failed and was rolled back"
        );
        notifications.observe_image_skipped(app, host, policy, tag);
    }
    for branch in &report.branches {
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
