//! Running a render tool (kustomize, helm): a clean environment (only what the caller
//! gives), no stdin, a timeout, stdout read to at most a bound and stderr to 64 KiB.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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

/// How a tool's run went wrong.
#[derive(Debug)]
pub enum ToolError {
    /// It could not be started.
    Spawn(std::io::Error),
    /// It did not finish in time (and was killed).
    Timeout(Duration),
    /// It exited unsuccessfully: its status and what it said on stderr.
    Failed(std::process::ExitStatus, String),
    /// Its output passed the bound.
    TooLarge,
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
            ToolError::Spawn(e) => fail(format!("cannot run {name}: {e}")),
            ToolError::Timeout(t) => fail(format!(
                "{name} did not finish within {}s (agent.render_timeout)",
                t.as_secs()
            )),
            ToolError::Failed(status, errors) => {
                let root = format!("{}/", self.dir.display());
                let said = errors.trim().replace(&root, "");
                fail(format!("{name} failed ({status}): {said}"))
            }
            ToolError::TooLarge => ManifestError::AppTooLarge {
                path: shown.to_string(),
                limit: self.max_bytes,
            },
        })
    }

    /// Runs it; its stdout.
    ///
    /// # Errors
    /// See [`ToolError`].
    pub fn run(&self) -> Result<Vec<u8>, ToolError> {
        let Some((program, args)) = self.command.split_first() else {
            return Err(ToolError::Spawn(std::io::Error::other("no command")));
        };
        let mut child = Command::new(program)
            .args(args)
            .current_dir(self.dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(ToolError::Spawn)?;
        let max_bytes = self.max_bytes;
        let stdout = child.stdout.take().map(|out| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = out.take(max_bytes + 1).read_to_end(&mut bytes);
                bytes
            })
        });
        let stderr = child.stderr.take().map(|err| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = err.take(64 << 10).read_to_string(&mut text);
                text
            })
        });
        // Waited for by a thread of its own, so that its exit is seen the moment it comes
        // (a render costs no more than the tool's own time) and the timeout still holds.
        let pid = child.id();
        let (exited, exit) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = exited.send(child.wait());
        });
        let status = match exit.recv_timeout(self.timeout) {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => return Err(ToolError::Spawn(e)),
            Err(_) => {
                // Not reaped when the time ran out, so the pid is still the tool's (but
                // for the moment before kill, which a deadline this late can afford).
                if let Ok(pid) = libc::pid_t::try_from(pid) {
                    // SAFETY: kill(2) on the tool's own pid, which no wait has reaped.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                let _ = exit.recv();
                return Err(ToolError::Timeout(self.timeout));
            }
        };
        let output = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
        let errors = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
        if !status.success() {
            return Err(ToolError::Failed(status, errors));
        }
        if output.len() as u64 > self.max_bytes {
            return Err(ToolError::TooLarge);
        }
        Ok(output)
    }
}
