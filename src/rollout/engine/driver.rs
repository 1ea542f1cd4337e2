//! Running passes: [`Engine::drive`] for one rollout until it is followed to its end,
//! [`follow_driving`] for the rollouts of a sync, and [`supervise`] for every Deployment of
//! an app while the daemon runs.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};

use super::{Engine, EngineError};
use crate::history::FollowedRollout;
use crate::rollout::revisions::selector;
use crate::rollout::track::{self, Follow};
use crate::shutdown::{stopped, Signal};

/// Follows the rollouts of `follows` to their end; with an engine, it drives them
/// meanwhile. The one follow loop of a sync, of a rollback and of the engine's tests.
///
/// # Errors
/// [`EngineError::Foreign`]: another controller is at work.
pub async fn follow_driving(
    client: &kube::Client,
    follows: &[Follow],
    timeout: Duration,
    shutdown: &Signal,
    engine: Option<&Engine>,
    report: &(dyn Fn(&Follow, &str) + Send + Sync),
) -> Result<Vec<FollowedRollout>, EngineError> {
    let following = track::follow_many(client, follows, timeout, shutdown, report);
    let Some(engine) = engine else {
        return Ok(following.await);
    };
    let (done, following_done) = crate::shutdown::channel();
    let following = async move {
        let followed = following.await;
        let _ = done.send(true);
        followed
    };
    let drives = follows.iter().map(|f| {
        let mut done = following_done.clone();
        async move {
            engine
                .drive(&f.namespace, &f.name, stopped(&mut done))
                .await
        }
    });
    let (followed, driven) = tokio::join!(following, futures::future::join_all(drives));
    driven.into_iter().collect::<Result<Vec<()>, _>>()?;
    Ok(followed)
}

impl Engine {
    /// Runs passes on every change to the Deployment or its ReplicaSets, and when the
    /// progress deadline comes, until `stop` completes (then one last pass, for cleanup).
    ///
    /// # Errors
    /// [`EngineError::Foreign`]: another controller is at work.
    pub async fn drive(
        &self,
        ns: &str,
        name: &str,
        stop: impl Future<Output = ()>,
    ) -> Result<(), EngineError> {
        let Some(d) = self.get(ns, name).await? else {
            return Ok(());
        };
        let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let ds = watcher(self.deployments(ns), by_name)
            .default_backoff()
            .map(|_| ());
        let rss = watcher(
            self.replica_sets(ns),
            watcher::Config::default().labels(&selector(&d)),
        )
        .default_backoff()
        .map(|_| ());
        let events = futures::stream::select(ds, rss);
        futures::pin_mut!(events);
        futures::pin_mut!(stop);
        loop {
            let next = match self.pass(ns, name).await {
                Ok(n) => n,
                Err(e @ EngineError::Foreign { .. }) => return Err(e),
                Err(e) => {
                    tracing::warn!(deployment = %format!("{ns}/{name}"), error = %e, "engine pass failed; retrying");
                    Some(Timestamp::now() + jiff::SignedDuration::from_secs(1))
                }
            };
            let wait = next
                .map(|t| Duration::try_from(t.duration_since(Timestamp::now())).unwrap_or_default())
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                () = &mut stop => break,
                event = events.next() => if event.is_none() { break },
                () = tokio::time::sleep(wait) => {}
            }
            while let Some(Some(())) = events.next().now_or_never() {}
        }
        self.pass(ns, name).await.map(|_| ())
    }
}

/// The daemon's engine for one app: drives every Deployment labelled
/// `berth.dev/app=<app>`, for as long as berth runs. A restarted berth picks up a rollout
/// where the last one stopped, from the state in the cluster.
pub async fn supervise(engine: Engine, app: String, shutdown: Signal) {
    let deployments: Api<Deployment> = Api::all(engine.client.clone());
    let labelled =
        watcher::Config::default().labels(&format!("{}={app}", crate::manifest::LABEL_APP));
    let events = watcher(deployments, labelled).default_backoff();
    futures::pin_mut!(events);
    let mut running: BTreeMap<(String, String), tokio::task::JoinHandle<()>> = BTreeMap::new();
    let mut stop = shutdown.clone();
    loop {
        let event = tokio::select! {
            () = stopped(&mut stop) => break,
            event = events.next() => match event { Some(e) => e, None => break },
        };
        let (d, gone) = match event {
            Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => (d, false),
            Ok(watcher::Event::Delete(d)) => (d, true),
            _ => continue,
        };
        let key = (
            d.metadata.namespace.clone().unwrap_or_default(),
            d.metadata.name.clone().unwrap_or_default(),
        );
        running.retain(|_, task| !task.is_finished());
        if gone {
            if let Some(task) = running.remove(&key) {
                task.abort();
            }
            continue;
        }
        if running.contains_key(&key) {
            continue;
        }
        let (engine, mut stop) = (engine.clone(), shutdown.clone());
        let (ns, name) = key.clone();
        running.insert(
            key,
            tokio::spawn(async move {
                if let Err(e) = engine.drive(&ns, &name, stopped(&mut stop)).await {
                    tracing::error!(deployment = %format!("{ns}/{name}"), error = %e, "berth's rollout engine stopped");
                }
            }),
        );
    }
    for task in running.into_values() {
        let _ = task.await;
    }
}
