//! Shutdown, as mini-redis does it: one signal, made where the process learns of it
//! (`berth run`'s SIGTERM/SIGINT, `berth sync`'s Ctrl-C) and handed down to every task,
//! which asks it between steps. No task imports the one that started it to learn this.

use tokio::sync::watch;

/// What a task holds: `true` once shutdown is asked for.
pub type Signal = watch::Receiver<bool>;

/// What the owner keeps: `send(true)` asks every holder of a [`Signal`] to stop.
pub type Trigger = watch::Sender<bool>;

/// A new signal, not yet given.
pub fn channel() -> (Trigger, Signal) {
    watch::channel(false)
}

/// A signal that is never given, for one-shot commands that run until done (`berth plan`,
/// `berth rollback`). Its trigger lives as long as the process.
pub fn never() -> &'static Signal {
    static NEVER: std::sync::OnceLock<(Trigger, Signal)> = std::sync::OnceLock::new();
    &NEVER.get_or_init(channel).1
}

/// Resolves once shutdown is asked for (or its trigger is gone).
pub async fn stopped(signal: &mut Signal) {
    let _ = signal.wait_for(|stop| *stop).await.map(|_| ());
}

/// Resolves once shutdown is asked for; never when its trigger is gone without asking (as
/// [`is_stopped`] reads it): for a wait that ends on shutdown and on nothing else of it.
pub async fn asked(mut signal: Signal) {
    if signal.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// True once shutdown is asked for: for checks between steps.
pub fn is_stopped(signal: &Signal) -> bool {
    *signal.borrow()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopped_resolves_on_the_trigger_or_when_it_is_dropped() {
        let (trigger, mut signal) = channel();
        assert!(!is_stopped(&signal));
        trigger.send(true).unwrap();
        stopped(&mut signal).await;
        assert!(is_stopped(&signal));

        let (trigger, mut signal) = channel();
        drop(trigger);
        stopped(&mut signal).await;
    }
}
