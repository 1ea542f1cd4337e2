//! Running a render tool (kustomize, helm, and what they run): the one confined runner.
//! A clean environment (only what the caller gives), no stdin; a [`shepherd`] between
//! berth and the tool, which ends every process the tool started — `setsid` ones too —
//! when it exits, at the timeout and when its output passes the bound (nothing it
//! started outlives it); its memory capped (`RLIMIT_DATA`, which holds for `berth sync`
//! run by hand as under systemd) and its CPU time (the hard `RLIMIT_CPU`: Go ignores
//! SIGXCPU, not SIGKILL); stdout read to at most a bound and stderr to 64 KiB, neither
//! past the timeout, whoever holds the pipe; and, where the kernel has Landlock, walls
//! ([`landlock`]): it reads the system's programs and what [`Reach`] names, writes only
//! its own folder, and connects nowhere over TCP unless the app allows remote bases or
//! charts. A kill is named by its cause: the timeout, the output bound, the CPU time
//! (the tool's, as the kernel counted it), or another's SIGKILL.

pub mod error;
pub mod landlock;
mod shepherd;
mod wait;

pub use landlock::Reach;

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wait::{exited_within, follow, read_until, reap, signal, wait_unreaped, Event, SHEPHERD_GRACE};

use rustix::process::{setrlimit, Resource, Rlimit};

use super::error::ManifestError;
pub use error::ToolError;

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
    /// Runs it as `name` to render `shown` (the kustomization or chart file, as errors
    /// name it): its stdout, or [`ManifestError::Tool`] — it could not run, timed out, or
    /// failed with its stderr (the repository root's paths made relative) — or
    /// [`ManifestError::AppTooLarge`] past the bound.
    ///
    /// # Errors
    /// As said.
    pub fn render(&self, name: &str, shown: &str) -> Result<Vec<u8>, ManifestError> {
        self.run().map_err(|e| match e {
            ToolError::TooLarge => ManifestError::AppTooLarge {
                path: shown.to_string(),
                limit: self.max_bytes,
            },
            e => ManifestError::Tool {
                path: shown.to_string(),
                tool: name.to_string(),
                // Paths in the checkout as the repository names them.
                cause: e.map_stderr(|t| t.replace(&format!("{}/", self.dir.display()), "")),
                hint: None,
            },
        })
    }

    /// Runs it; its stdout.
    ///
    /// # Errors
    /// See [`ToolError`].
    pub fn run(&self) -> Result<Vec<u8>, ToolError> {
        let cpu = self.timeout.as_secs().max(1);
        let deadline = Instant::now() + self.timeout;
        let mut child = self.spawn(cpu)?;
        // The shepherd: it leads the tool's process group, and is never reaped before
        // the last signal to it or its group (see `reap`).
        let shepherd = libc::pid_t::try_from(child.id()).unwrap_or(0);
        let (events, event) = std::sync::mpsc::channel();
        if let Some(out) = child.stdout.take() {
            let (events, max) = (events.clone(), self.max_bytes);
            std::thread::spawn(move || {
                let _ = events.send(Event::Output(read_until(out, max, deadline)));
            });
        }
        let stderr = child.stderr.take().map(|err| {
            std::thread::spawn(move || {
                let (text, _) = read_until(err, 64 << 10, deadline);
                String::from_utf8_lossy(&text).into_owned()
            })
        });
        std::thread::spawn(move || {
            let exited = wait_unreaped(shepherd);
            let _ = events.send(Event::Exited(exited));
        });
        let ended = follow(&event, self.timeout, deadline);
        if ended.is_err() {
            // The tool and everything it started, ended by the shepherd; then the shepherd.
            signal(shepherd, libc::SIGTERM);
            if !exited_within(&event, SHEPHERD_GRACE) {
                signal(-shepherd, libc::SIGKILL);
                exited_within(&event, SHEPHERD_GRACE);
            }
        }
        // Anything left in its group (nothing, as a rule), while the shepherd is unreaped.
        signal(-shepherd, libc::SIGKILL);
        let (status, cpu_used) = reap(shepherd).map_err(ToolError::Spawn)?;
        let errors = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        let output = ended?;
        if status.success() {
            return Ok(output);
        }
        Err(self.failed(status, errors, cpu_used, cpu))
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
        let berth = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
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
        // SAFETY: between fork and exec the closure only makes system calls (the
        // shepherd's, see `shepherd`; setrlimit, prctl, landlock_restrict_self) on values
        // made before the fork; it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                shepherd::split(berth)?;
                limit(Resource::Data, memory)?;
                limit(Resource::Cpu, cpu)?;
                walls.enter()
            });
        }
        command.spawn().map_err(ToolError::Spawn)
    }

    /// Why a run that exited unsuccessfully failed: out of memory (Go says "out of memory"
    /// when an allocation past `RLIMIT_DATA` fails), out of CPU time (killed once it had
    /// used `cpu` seconds: `cpu_used`, as the kernel counted the tool's), killed by another,
    /// or as it said.
    fn failed(
        &self,
        status: std::process::ExitStatus,
        errors: String,
        cpu_used: Duration,
        cpu: u64,
    ) -> ToolError {
        let said = errors.to_lowercase();
        if said.contains("out of memory") || said.contains("cannot allocate memory") {
            return ToolError::Memory(self.memory);
        }
        if status.signal() == Some(libc::SIGKILL) {
            // RLIMIT_CPU's SIGKILL comes once the hard limit is reached: within a tick.
            if cpu_used + Duration::from_millis(500) >= Duration::from_secs(cpu) {
                return ToolError::Cpu(Duration::from_secs(cpu));
            }
            return ToolError::Killed(cpu_used);
        }
        ToolError::Failed(status, errors)
    }
}

/// Sets a resource limit, soft and hard, on the calling process (between fork and exec).
fn limit(resource: Resource, value: u64) -> std::io::Result<()> {
    let limit = Rlimit {
        current: Some(value),
        maximum: Some(value),
    };
    Ok(setrlimit(resource, limit)?)
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

    /// The pid a script wrote to `file`, once it is there.
    fn pid_in(file: &Path) -> i32 {
        std::fs::read_to_string(file)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Whether `pid` is gone (or a zombie about to be).
    fn gone(pid: i32) -> bool {
        (0..100).any(|_| {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let dead = state.is_empty() || state.contains(") Z ");
            if !dead {
                std::thread::sleep(Duration::from_millis(20));
            }
            dead
        })
    }

    #[test]
    fn a_setsid_child_holding_stdout_ends_with_the_tool() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "setsid sleep 60 & echo $! > {}; echo done",
            pid_file.display()
        );
        let reach = Reach {
            write: vec![dir.path().to_path_buf()],
            ..Reach::default()
        };
        let start = std::time::Instant::now();
        let out = tool(dir.path(), &script, reach).run().unwrap();
        assert_eq!(out, b"done\n");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        let pid = pid_in(&pid_file);
        assert!(gone(pid), "the setsid child {pid} outlived the tool");
    }

    #[test]
    fn at_the_timeout_the_tool_and_its_setsid_child_end_and_the_output_is_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "setsid sleep 60 & echo $! > {}; echo partial; exec sleep 60",
            pid_file.display()
        );
        let reach = Reach {
            write: vec![dir.path().to_path_buf()],
            ..Reach::default()
        };
        let mut t = tool(dir.path(), &script, reach);
        t.timeout = Duration::from_secs(2);
        let start = std::time::Instant::now();
        let e = t.run().unwrap_err();
        assert!(matches!(e, ToolError::Timeout(_)), "{e:?}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert!(
            gone(pid_in(&pid_file)),
            "the setsid child outlived the timeout"
        );
    }

    #[test]
    fn a_sigkill_from_elsewhere_is_not_called_cpu_time() {
        let dir = tempfile::tempdir().unwrap();
        let e = tool(dir.path(), "kill -9 $$", Reach::default())
            .run()
            .unwrap_err();
        assert!(matches!(e, ToolError::Killed(_)), "{e:?}");
        assert!(e.to_string().starts_with("was killed (SIGKILL)"), "{e}");
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
        let e = t.render("perl", "x.yaml").unwrap_err().to_string();
        assert!(e.contains("perl exceeded its memory limit (256MiB)"), "{e}");
    }
}
