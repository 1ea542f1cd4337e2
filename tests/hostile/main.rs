//! The hostile-input suite: what an attacker with push access to one app's repository, or
//! with network access to the agent's port, would try. Each input is rendered or synced by
//! a real `berth` in a child process under a memory limit (`ulimit -v`, i.e. setrlimit
//! RLIMIT_AS) and a time limit, its peak resident set measured by a small python3 process
//! it is started from, and each case asserts the clear error, the bound, and that
//! nothing was written outside the app's scope (against the real control plane).
//!
//! One module per surface: `render` (bounded inputs, kustomize), `scope` (apps confined,
//! berth's own state), `git` (replayed and tagged commits, and what a commit may cost to
//! write out), `http` (the endpoint), `tools`
//! (the confined runner: kustomize and helm), `fleet` (a team's folder in a shared app set).

#[path = "../common/mod.rs"]
mod common;

mod fleet;
mod git;
mod http;
mod render;
mod scope;
mod state;
mod tools;

use std::path::Path;
use std::time::{Duration, Instant};

/// What a bounded run of `berth` did.
pub struct Bounded {
    /// The exit code (`None`: killed at the time limit, or by a signal).
    pub code: Option<i32>,
    /// Standard output and error.
    pub out: String,
    /// How long it took.
    pub took: Duration,
    /// The largest resident set of berth and of every process it ran, in MiB.
    pub peak_mib: u64,
}

/// Runs a command and then writes the largest resident set of what it ran (in KiB) to
/// stderr: measured by this small process, which is what berth is forked from, so that
/// the figure is berth's own and its tools' (a process's peak counts the image it was
/// forked from, and this test binary's is large).
const PEAK_OF_CHILDREN: &str = "import resource, subprocess, sys
code = subprocess.call(sys.argv[1:])
sys.stderr.write('\\npeak-rss-kib %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code if code >= 0 else 128 - code)
";

/// Runs `berth ARGS` in `dir` with at most `memory_mib` of address space and `limit` of
/// time (killed past it, with what it started).
pub fn bounded(dir: &Path, args: &[&str], memory_mib: u64, limit: Duration) -> Bounded {
    use std::os::unix::process::CommandExt;
    let start = Instant::now();
    let mut child = std::process::Command::new("python3")
        .args(["-c", PEAK_OF_CHILDREN, "sh", "-c"])
        .arg(format!(
            "ulimit -v {} && exec \"$0\" \"$@\"",
            memory_mib * 1024
        ))
        .arg(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run berth (through python3)");
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if start.elapsed() > limit {
            // SAFETY: kill(2) of the process group this call started.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    let output = child.wait_with_output().expect("output");
    let mut err = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut peak_mib = 0;
    const MARK: &str = "\npeak-rss-kib ";
    if let Some(at) = err.rfind(MARK) {
        peak_mib = err[at + MARK.len()..].trim().parse::<u64>().unwrap_or(0) / 1024;
        err.truncate(at);
    }
    Bounded {
        code,
        out: format!("{}{err}", String::from_utf8_lossy(&output.stdout)),
        took,
        peak_mib,
    }
}
