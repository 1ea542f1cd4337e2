//! The hostile-input suite: what an attacker with push access to one app's repository, or
//! with network access to the agent's port, would try. Each input is rendered or synced by
//! a real `berth` in a child process under a memory limit (`ulimit -v`, i.e. setrlimit
//! RLIMIT_AS) and a time limit, and each case asserts the clear error, the bound, and that
//! nothing was written outside the app's scope (against the real control plane).
//!
//! One module per surface: `render` (bounded inputs, kustomize), `scope` (apps confined,
//! berth's own state), `git` (replayed and tagged commits), `http` (the endpoint), `tools`
//! (the confined runner: kustomize and helm).

#[path = "../common/mod.rs"]
mod common;

mod git;
mod http;
mod render;
mod scope;
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
}

/// Runs `berth ARGS` in `dir` with at most `memory_mib` of address space and `limit` of
/// time (killed past it).
pub fn bounded(dir: &Path, args: &[&str], memory_mib: u64, limit: Duration) -> Bounded {
    let start = Instant::now();
    let mut child = std::process::Command::new("sh")
        .arg("-c")
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
        .spawn()
        .expect("run berth");
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = start.elapsed();
    let output = child.wait_with_output().expect("output");
    Bounded {
        code,
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
        took,
    }
}
