//! Following one run: its output read against the deadline whoever holds the pipe, the
//! shepherd waited for unreaped (its pid and group stay its own), asked to end the tool,
//! and reaped with the CPU time the kernel counted.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use super::ToolError;

/// How long the shepherd has to end the tool and what it started once asked (it kills and
/// reaps: milliseconds, unless something forks as fast as it is killed).
pub(super) const SHEPHERD_GRACE: Duration = Duration::from_secs(10);

/// What the threads of one run say.
pub(super) enum Event {
    /// The shepherd exited (not reaped yet); `Err` when it cannot be waited for.
    Exited(std::io::Result<()>),
    /// Stdout, read to its end, or why it was not.
    Output((Vec<u8>, Option<Cut>)),
}

/// Why a stream was not read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// More than its bound.
    TooLarge,
    /// Not ended by the deadline.
    Deadline,
}

/// Waits for the run's stdout and the shepherd's exit, until `deadline` (`timeout` from
/// the start): the output, or why the run ends without it.
pub(super) fn follow(
    event: &std::sync::mpsc::Receiver<Event>,
    timeout: Duration,
    deadline: Instant,
) -> Result<Vec<u8>, ToolError> {
    let (mut output, mut exited) = (None, false);
    loop {
        if let (Some(_), true) = (&output, exited) {
            return Ok(output.unwrap_or_default());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match event.recv_timeout(left) {
            Ok(Event::Exited(Ok(()))) => exited = true,
            Ok(Event::Exited(Err(e))) => return Err(ToolError::Spawn(e)),
            Ok(Event::Output((bytes, None))) => output = Some(bytes),
            Ok(Event::Output((_, Some(Cut::TooLarge)))) => return Err(ToolError::TooLarge),
            Ok(Event::Output((_, Some(Cut::Deadline)))) | Err(_) => {
                return Err(ToolError::Timeout(timeout));
            }
        }
    }
}

/// Whether the shepherd's exit is told within `grace` (other events passed over).
pub(super) fn exited_within(event: &std::sync::mpsc::Receiver<Event>, grace: Duration) -> bool {
    let until = Instant::now() + grace;
    loop {
        match event.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Event::Exited(_)) => return true,
            Ok(Event::Output(_)) => {}
            Err(_) => return false,
        }
    }
}

/// Reads `from` to its end, at most `max` bytes and one more, and not past `deadline`
/// (whoever holds the pipe's other end): what was read, and why not all of it.
pub(super) fn read_until(
    mut from: impl Read + AsRawFd,
    max: u64,
    deadline: Instant,
) -> (Vec<u8>, Option<Cut>) {
    let (mut bytes, mut chunk) = (Vec::new(), vec![0u8; 64 << 10]);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fd = libc::pollfd {
            fd: from.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: poll(2) of one descriptor this thread owns.
        match unsafe { libc::poll(&mut fd, 1, ms) } {
            0 => return (bytes, Some(Cut::Deadline)),
            n if n < 0 => {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return (bytes, None);
            }
            _ => {}
        }
        match from.read(&mut chunk) {
            Ok(0) => return (bytes, None),
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return (bytes, None),
        }
        if bytes.len() as u64 > max {
            return (bytes, Some(Cut::TooLarge));
        }
    }
}

/// Waits until `pid` (a child) exits, leaving it unreaped: its pid and group stay its own
/// until [`reap`], so a signal sent meanwhile reaches no other process.
pub(super) fn wait_unreaped(pid: libc::pid_t) -> std::io::Result<()> {
    let id = libc::id_t::try_from(pid).map_err(std::io::Error::other)?;
    // SAFETY: a plain C struct, zeroed, for waitid(2) to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOWAIT;
    // SAFETY: waitid(2) of this process's child, into a value of ours.
    retried(|| unsafe { libc::waitid(libc::P_PID, id, &mut info, flags) } == 0)
}

/// Reaps `pid` (exited): its status, and the CPU time it and what it reaped used.
pub(super) fn reap(pid: libc::pid_t) -> std::io::Result<(std::process::ExitStatus, Duration)> {
    let mut status = 0;
    // SAFETY: a plain C struct, zeroed, for wait4(2) to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4(2) of this process's child, into values of ours.
    retried(|| unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } == pid)?;
    let time = |t: libc::timeval| {
        let (secs, micros) = (u64::try_from(t.tv_sec), u64::try_from(t.tv_usec));
        Duration::from_secs(secs.unwrap_or(0)) + Duration::from_micros(micros.unwrap_or(0))
    };
    let cpu = time(usage.ru_utime) + time(usage.ru_stime);
    Ok((std::process::ExitStatus::from_raw(status), cpu))
}

/// Makes the system call `call` until it succeeds (true), or fails other than by a signal
/// (its error).
fn retried(mut call: impl FnMut() -> bool) -> std::io::Result<()> {
    loop {
        if call() {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `sig` to `pid` (a negative one: its group), a child not reaped yet.
pub(super) fn signal(pid: libc::pid_t, sig: libc::c_int) {
    if pid != 0 && pid != -1 {
        // SAFETY: kill(2) of the shepherd, or of the group it leads, before it is reaped.
        unsafe { libc::kill(pid, sig) };
    }
}
