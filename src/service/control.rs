//! The control lane: a thread of its own with a small runtime, for what must answer while
//! syncs work — the HTTP endpoint (`/healthz`, `/readyz`, `/metrics`, the webhooks, the
//! status page) and the watchdog. On the async workers, eight syncs' hundreds of ready
//! tasks (requests, their bodies, TLS) queue in front of any other task: `/healthz` took
//! 114–144 ms at p99 there while eight apps applied 384 objects each, where a bare server
//! beside it answered in 7 ms. The lane's tasks are few and short, and queue behind none.

use std::future::Future;

use tokio::runtime::{EnterGuard, Handle};
use tokio::task::JoinHandle;

use crate::shutdown::{stopped, Signal};

/// The control lane's runtime, running until shutdown.
pub struct Control {
    handle: Handle,
}

impl Control {
    /// Starts the lane's thread; at `shutdown` its runtime ends, and the tasks left on it.
    ///
    /// # Errors
    /// The runtime or the thread cannot be made.
    pub fn start(shutdown: &Signal) -> std::io::Result<Control> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let mut shutdown = shutdown.clone();
        std::thread::Builder::new()
            .name("berth-control".into())
            .spawn(move || runtime.block_on(stopped(&mut shutdown)))?;
        Ok(Control { handle })
    }

    /// Runs `task` on the lane.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(task)
    }

    /// Enters the lane: sockets and timers made while the guard lives are its own.
    pub fn enter(&self) -> EnterGuard<'_> {
        self.handle.enter()
    }
}
