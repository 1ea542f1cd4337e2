//! Running a render tool (kustomize, helm, and what they run): the one confined runner.
//! A clean environment (only what the caller gives), no stdin; a process group of its
//! own, killed whole at the timeout, when its output passes the bound, and after it
//! exits (nothing it started outlives it); its memory capped (`RLIMIT_DATA`, which holds
//! for `berth sync` run by hand as under systemd) and its CPU time (the hard
//! `RLIMIT_CPU`: Go ignores SIGXCPU, not SIGKILL); stdout read to at most a bound and
//! stderr to 64 KiB; and, where the kernel has Landlock, walls ([`landlock`]): it reads
//! the system's programs and what [`Reach`] names, writes only its own folder, and
//! connects nowhere over TCP unless the app allows remote bases or charts.

pub mod landlock;

pub use landlock::Reach;

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::{setrlimit, Resource, Rlimit};

use super::error::ManifestError;

/// `program` as found on this process's PATH (a name), or as given (a path).
pub fn find(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        return Some(program.into());
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// How a tool's run went wrong; each message follows the tool's name.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// It could not be started.
    #[error("could not be started: {0}")]
    Spawn(std::io::Error),
    /// The kernel refused the walls it would run in.
    #[error("could not be confined: {0}")]
    Walls(::landlock::RulesetError),
    /// It did not finish in time (and was killed).
    #[error("did not finish within {}s (agent.render_timeout)", .0.as_secs())]
    Timeout(Duration),
    /// It exited unsuccessfully: its status and what it said on stderr.
    #[error("failed ({}): {}", .0, .1.trim())]
    Failed(std::process::ExitStatus, String),
    /// Its output passed the bound (and it was killed).
    #[error("wrote more than it may")]
    TooLarge,
    /// It ran out of the memory it may have (and died of it).
    #[error("exceeded its memory limit ({}) and was stopped (agent.render_memory)", crate::config::show_size(*.0))]
    Memory(u64),
    /// It used up the CPU time it may have (and the kernel killed it).
    #[error("used up its CPU time ({}s) and was stopped (agent.render_timeout)", .0.as_secs())]
    Cpu(Duration),
}

/// One run of a tool.
pub struct Tool<'a> {
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// The folder it runs in (the repository root).
    pub dir: &'a Path,
    /// Its whole environment.
    pub env: Vec<(&'static str, OsString)>,
    /// How long it may take.
    pub timeout: Duration,
    /// The most output read; more is [`ToolError::TooLarge`].
    pub max_bytes: u64,
    /// The most memory it may have (`RLIMIT_DATA`).
    pub memory: u64,
    /// What it may read, write and connect to.
    pub reach: Reach,
}

impl Tool<'_> {
    /// Runs it to render `shown` (the kustomization or chart file, as errors name it):
    /// its stdout, or `fail(what went wrong)` — `name` could not run, timed out, or
    /// failed with its stderr (the repository root's paths made relative) — or
    /// [`ManifestError::AppTooLarge`] past the bound.
    ///
    /// # Errors
    /// As said.
    pub fn render(
        &self,
        name: &str,
        shown: &str,
        fail: impl Fn(String) -> ManifestError,
    ) -> Result<Vec<u8>, ManifestError> {
        self.run().map_err(|e| match e {
            ToolError::TooLarge => ManifestError::AppTooLarge {
                path: shown.to_string(),
                limit: self.max_bytes,
            },
            // Paths in the checkout as the repository names them.
            e => fail(format!("{name} {e}").replace(&format!("{}/", self.dir.display()), "")),
        })
    }

    /// Runs it; its stdout.
    ///
    /// # Errors
    /// See [`ToolError`].
    pub fn run(&self) -> Result<Vec<u8>, ToolError> {
        let cpu = self.timeout.as_secs().max(1);
        let mut child = self.spawn(cpu)?;
        let group = libc::pid_t::try_from(child.id()).unwrap_or(0);
        let stdout = child
            .stdout
            .take()
            .map(|out| read_stdout(out, self.max_bytes, group));
        let stderr = child.stderr.take().map(|err| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = err.take(64 << 10).read_to_string(&mut text);
                text
            })
        });
        // Waited for by a thread of its own, so that its exit is seen the moment it comes
        // (a render costs no more than the tool's own time) and the timeout still holds.
        let (exited, exit) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = exited.send(child.wait());
        });
        let status = match exit.recv_timeout(self.timeout) {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => return Err(ToolError::Spawn(e)),
            Err(_) => {
                // Not reaped when the time ran out, so the group is still the tool's.
                kill_group(group);
                let _ = exit.recv();
                return Err(ToolError::Timeout(self.timeout));
            }
        };
        // What it started and left behind (helm under kustomize) ends with it.
        kill_group(group);
        let output = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
        let errors = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        if output.len() as u64 > self.max_bytes {
            return Err(ToolError::TooLarge);
        }
        if status.success() {
            return Ok(output);
        }
        Err(self.failed(status, errors, cpu))
    }

    /// Starts it in a process group of its own, with a clean environment, its memory and
    /// `cpu` seconds bounded and its walls made before the fork.
    fn spawn(&self, cpu: u64) -> Result<std::process::Child, ToolError> {
        let Some((program, args)) = self.command.split_first() else {
            return Err(ToolError::Spawn(std::io::Error::other("no command")));
        };
        let mut reach = self.reach.clone();
        if let Some(found) = find(&program.to_string_lossy()) {
            reach.run(&found);
        }
        let walls = landlock::Walls::new(&reach).map_err(ToolError::Walls)?;
        let memory = self.memory;
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(self.dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: between fork and exec the closure only makes system calls (setrlimit,
        // prctl, landlock_restrict_self) on values made before the fork; it allocates
        // nothing.
        unsafe {
            command.pre_exec(move || {
                limit(Resource::Data, memory)?;
                limit(Resource::Cpu, cpu)?;
                walls.enter()
            });
        }
        command.spawn().map_err(ToolError::Spawn)
    }

    /// Why a run that exited unsuccessfully failed: out of memory (Go says "out of memory"
    /// when an allocation past `RLIMIT_DATA` fails), out of CPU time (killed), or as it
    /// said.
    fn failed(&self, status: std::process::ExitStatus, errors: String, cpu: u64) -> ToolError {
        let said = errors.to_lowercase();
        if said.contains("out of memory") || said.contains("cannot allocate memory") {
            return ToolError::Memory(self.memory);
        }
        if status.signal() == Some(libc::SIGKILL) {
            return ToolError::Cpu(Duration::from_secs(cpu));
        }
        ToolError::Failed(status, errors)
    }
}

/// Reads a tool's stdout on a thread of its own, at most `max_bytes` and one more: past
/// that the group is killed at once, not when the tool blocks on a full pipe until the
/// timeout.
fn read_stdout(
    out: std::process::ChildStdout,
    max_bytes: u64,
    group: libc::pid_t,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = out.take(max_bytes + 1).read_to_end(&mut bytes);
        if bytes.len() as u64 > max_bytes {
            kill_group(group);
        }
        bytes
    })
}

/// Sets a resource limit, soft and hard, on the calling process (between fork and exec).
fn limit(resource: Resource, value: u64) -> std::io::Result<()> {
    let limit = Rlimit {
        current: Some(value),
        maximum: Some(value),
    };
    Ok(setrlimit(resource, limit)?)
}

/// SIGKILL to every process of the group `group` (a tool and what it started); nothing
/// when it is gone.
fn kill_group(group: libc::pid_t) {
    if group > 0 {
        // SAFETY: kill(2) of the process group the tool leads.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(dir: &'a Path, script: &str, reach: Reach) -> Tool<'a> {
        Tool {
            command: vec!["/bin/sh".into(), "-c".into(), script.into()],
            dir,
            env: vec![("PATH", "/usr/bin:/bin".into())],
            timeout: Duration::from_secs(10),
            max_bytes: 1 << 20,
            memory: 256 << 20,
            reach,
        }
    }

    #[test]
    fn output_past_the_bound_is_too_large_at_once_not_a_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let start = std::time::Instant::now();
        let e = tool(dir.path(), "yes", Reach::default()).run().unwrap_err();
        assert!(matches!(e, ToolError::TooLarge), "{e:?}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn what_a_tool_starts_ends_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 60 & echo $! > {}", pid_file.display());
        let reach = Reach {
            write: vec![dir.path().to_path_buf()],
            ..Reach::default()
        };
        tool(dir.path(), &script, reach).run().unwrap();
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed with its group; reaped by init, so it may linger a moment as a zombie.
        let gone = (0..100).any(|_| {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let dead = state.is_empty() || state.contains(") Z ");
            if !dead {
                std::thread::sleep(Duration::from_millis(20));
            }
            dead
        });
        assert!(gone, "sleep {pid} outlived the tool");
    }

    #[test]
    fn a_tool_reads_and_connects_only_where_its_reach_says() {
        if landlock::support() != landlock::Support::Full {
            eprintln!("skipped: this kernel does not enforce Landlock in full");
            return;
        }
        let secret = tempfile::tempdir().unwrap();
        std::fs::write(secret.path().join("kubeconfig"), "token").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let read = format!("cat {}/kubeconfig", secret.path().display());
        let e = tool(dir.path(), &read, Reach::default()).run().unwrap_err();
        let ToolError::Failed(_, said) = e else {
            panic!("{e:?}")
        };
        assert!(said.contains("Permission denied"), "{said}");
        let reach = Reach {
            read: vec![secret.path().to_path_buf()],
            ..Reach::default()
        };
        assert_eq!(tool(dir.path(), &read, reach).run().unwrap(), b"token");
        // Writing outside its own folder is refused too.
        let write = format!("echo x > {}/planted", secret.path().display());
        assert!(tool(dir.path(), &write, Reach::default()).run().is_err());
        assert!(!secret.path().join("planted").exists());
        // TCP: refused by the kernel (not by the listener, which is there).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
        let bash = |reach: Reach| {
            let mut t = tool(dir.path(), "", reach);
            t.command = vec!["/bin/bash".into(), "-c".into(), connect.clone().into()];
            t.run()
        };
        let e = bash(Reach::default()).unwrap_err();
        let ToolError::Failed(_, said) = e else {
            panic!("{e:?}")
        };
        assert!(said.contains("Permission denied"), "{said}");
        let open = Reach {
            network: true,
            ..Reach::default()
        };
        assert_eq!(bash(open).unwrap(), b"connected\n");
    }

    #[test]
    fn a_tool_past_its_memory_is_stopped_naming_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        // An allocation past RLIMIT_DATA: perl says "Out of memory!" and exits.
        let mut t = tool(dir.path(), "", Reach::default());
        t.command = vec![
            "/usr/bin/perl".into(),
            "-e".into(),
            "$x = 'a' x 400_000_000".into(),
        ];
        let e = t
            .render("perl", "x.yaml", |m| ManifestError::Chart {
                path: "x.yaml".into(),
                message: m,
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("perl exceeded its memory limit (256MiB)"), "{e}");
    }
}
