//! CPU work that grows with a commit, kept off the async workers (two on a 2-core host,
//! which serve `/healthz`, the webhooks, the watchdog and the Lease's renewal).

/// Runs `work` on the blocking pool: a burst of CPU work (encoding a large object,
/// hashing a commit's objects, checking a signature). A panic in it is resumed here, as
/// it would have been on this task.
pub async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// How much lower than berth's the priority of [`in_background`]'s work is (a nice value).
const BACKGROUND_NICE: i32 = 10;

/// Runs `work` — a whole render: reading, decoding and decrypting files, kustomize's and
/// helm's runs — on a thread of its own at a lower priority (nice +10, inherited by the
/// threads and tools it starts): eight renders at once on two cores then leave the CPU to
/// `/healthz` and the Lease's renewal whenever they wake. A panic in it is resumed here.
///
/// # Panics
/// When the OS cannot start a thread, as [`tokio::task::spawn_blocking`] does.
pub async fn in_background<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done, result) = tokio::sync::oneshot::channel();
    let job = move || {
        // SAFETY: setpriority on this thread's own id (Linux gives each thread its own
        // nice value); a failure leaves the priority as it was.
        unsafe {
            let tid = libc::gettid() as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE);
        }
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let _ = done.send(ran);
    };
    let started = std::thread::Builder::new().name(name.into()).spawn(job);
    if let Err(e) = started {
        panic!("cannot start a thread for {name}: {e}");
    }
    match result.await {
        Ok(Ok(done)) => done,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => unreachable!("the thread sends before it ends"),
    }
}
