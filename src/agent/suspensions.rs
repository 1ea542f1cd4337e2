//! Suspensions seen at once: `berth suspend` writes a marker in `state_dir`, and a watch on
//! the markers' folders wakes each running app a marker suspends, whose loop then sits
//! out — said in the log, `STATUS=` and on the status page within a second — instead of
//! at its next trigger (an interval away, or more).

use std::path::Path;
use std::sync::Arc;

use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::Shared;
use crate::config::Published;
use crate::history::Trigger;
use crate::shutdown::{stopped, Signal};
use crate::suspend;

/// Watches the suspension markers of `config`'s `state_dir` until shutdown, and wakes
/// each running app one suspends.
pub(super) async fn watch(shared: Arc<Shared>, config: Published, mut shutdown: Signal) {
    let state_dir = config.borrow().agent.state_dir.clone();
    let (tx, mut changed) = mpsc::channel(1);
    let _watcher = match watcher(&state_dir, tx) {
        Ok(watcher) => watcher,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the suspension markers: a suspended app is said at its next trigger");
            return;
        }
    };
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => return,
            Some(()) = changed.recv() => wake_suspended(&shared, &config, &state_dir),
        }
    }
}

/// A watch on the folders of the apps' and the sets' markers (made when missing), sending
/// `()` when a marker is written.
fn watcher(state_dir: &Path, tx: mpsc::Sender<()>) -> notify::Result<RecommendedWatcher> {
    let folders = suspend::folders(state_dir);
    for folder in &folders {
        crate::state::private_dir(folder).map_err(notify::Error::io)?;
    }
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        let written =
            event.is_ok_and(|e| matches!(e.kind, EventKind::Create(_) | EventKind::Modify(_)));
        if written {
            // A full channel already holds a wake-up: it looks at every app.
            let _ = tx.try_send(());
        }
    })?;
    for folder in &folders {
        watcher.watch(folder, RecursiveMode::NonRecursive)?;
    }
    Ok(watcher)
}

/// Wakes each running app that is suspended now: its loop sits out at once (one that
/// already does takes the wake-up as any trigger while it waits, and goes on waiting).
fn wake_suspended(shared: &Shared, config: &Published, state_dir: &Path) {
    let config = config.borrow().clone();
    for app in &config.apps {
        if suspend::suspended(state_dir, app).is_some() {
            shared.registry.wake(&app.name, Trigger::Cli);
        }
    }
}
