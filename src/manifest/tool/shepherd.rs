//! The shepherd: what a tool starts ends with it, whatever it does to escape. Between fork
//! and exec, the child berth spawns becomes a subreaper (`PR_SET_CHILD_SUBREAPER`) and
//! forks again: the grandchild goes on to become the tool; the child stays, holding no
//! descriptor of berth's, and waits. Every process the tool starts and leaves behind — a
//! `setsid` daemon included, which a process-group kill misses — is reparented to the
//! shepherd, not to init; once the tool exits, or berth asks (SIGTERM: the timeout, the
//! output bound) or dies (the parent-death signal), the shepherd kills the tool and then
//! each process left, round after round, until it has no child, and exits as the tool
//! did. So the tool's pipes close when its last process is gone, and no pid berth knows
//! is ever signalled after it was reaped.
//!
//! Everything here runs in a forked child of a threaded process: only async-signal-safe
//! calls (fork, prctl, sigaction, waitpid, kill, open, read, close, nanosleep, _exit), no
//! allocation.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGTERM in the shepherd: end the tool now.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The rounds of killing the processes left, 5 ms apart, before the shepherd gives up on
/// them (10 s: a process can only be left if it forks faster than it is killed).
const MAX_ROUNDS: u32 = 2000;

/// Splits the spawned child in two: returns `Ok` in the grandchild, which goes on to be the
/// tool; the child becomes the shepherd and never returns. `berth` is berth's pid (the
/// shepherd's parent).
///
/// # Errors
/// The subreaper cannot be set, or the fork fails: the tool does not start.
///
/// # Safety
/// Only between fork and exec, in the child of `Command::spawn`.
pub(super) unsafe fn split(berth: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl and fork between fork and exec, on no shared state.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        match libc::fork() {
            -1 => Err(std::io::Error::last_os_error()),
            0 => Ok(()),
            tool => shepherd(tool, berth),
        }
    }
}

/// The shepherd's life: see the module.
unsafe fn shepherd(tool: libc::pid_t, berth: libc::pid_t) -> ! {
    // SAFETY: async-signal-safe calls only, on values of this process.
    unsafe {
        // Nothing of berth's stays open here: the tool's pipes close with the tool's
        // processes, and `spawn`'s error pipe with the tool's exec.
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
            for fd in 0..4096 {
                libc::close(fd);
            }
        }
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_stop as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
        if libc::getppid() != berth {
            STOP.store(true, Ordering::SeqCst);
        }
        let status = wait_for(tool);
        end_the_rest();
        exit_as(status)
    }
}

/// Waits for the tool to exit, reaping whatever else is reparented meanwhile; kills it
/// when asked. Its wait status.
unsafe fn wait_for(tool: libc::pid_t) -> libc::c_int {
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 10_000_000,
    };
    let mut status = 0;
    // SAFETY: waitpid, kill and nanosleep of this process's children.
    unsafe {
        loop {
            if STOP.load(Ordering::SeqCst) {
                libc::kill(tool, libc::SIGKILL);
            }
            match libc::waitpid(-1, &mut status, libc::WNOHANG) {
                pid if pid == tool => return status,
                pid if pid > 0 => continue,
                0 => {}
                _ if *libc::__errno_location() == libc::EINTR => continue,
                // No child at all: the tool is gone.
                _ => return status,
            }
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
    }
}

/// Kills every process left (each reparented here), round after round, reaping them,
/// until none is.
unsafe fn end_the_rest() {
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 5_000_000,
    };
    let mut status = 0;
    // SAFETY: as in `wait_for`.
    unsafe {
        for _ in 0..MAX_ROUNDS {
            let killed = kill_children();
            while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
            if killed < 0 {
                return; // no list of children: the tool's group was all there was
            }
            if killed == 0 && libc::waitpid(-1, &mut status, libc::WNOHANG) < 0 {
                return; // no child left
            }
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
    }
}

/// SIGKILL to each child of this process (its list in `/proc/thread-self/children`: the
/// shepherd is one thread); how many, or -1 when the list cannot be read.
unsafe fn kill_children() -> i32 {
    // SAFETY: open, read and close of a file of this process; kill of its children.
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return -1;
        }
        let (mut killed, mut pid, mut digits) = (0, 0 as libc::pid_t, false);
        let mut buf = [0u8; 512];
        loop {
            let got = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if got <= 0 {
                break;
            }
            for &b in &buf[..got as usize] {
                if b.is_ascii_digit() {
                    pid = pid
                        .saturating_mul(10)
                        .saturating_add(libc::pid_t::from(b - b'0'));
                    digits = true;
                } else if digits {
                    killed += kill_one(pid);
                    (pid, digits) = (0, false);
                }
            }
        }
        if digits {
            killed += kill_one(pid);
        }
        libc::close(fd);
        killed
    }
}

/// SIGKILL to `pid`, never to init or a group; 1 when sent.
unsafe fn kill_one(pid: libc::pid_t) -> i32 {
    // SAFETY: kill(2) of one child of this process.
    i32::from(pid > 1 && unsafe { libc::kill(pid, libc::SIGKILL) } == 0)
}

/// Exits as the tool did: its code, or its signal.
unsafe fn exit_as(status: libc::c_int) -> ! {
    // SAFETY: signal, kill and _exit of this process.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}
