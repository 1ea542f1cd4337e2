//! The processes of the local control plane: each started in its own session with its
//! log, command line and pid recorded in the state folder (the pid file `down` reads),
//! whether one still runs, and the small things `up` needs (free ports, a token, a key).
use std::fs;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use super::{io, TestenvError};

/// The file in the state folder where every started process is recorded: `<name> <pid>`.
pub(super) const PIDS: &str = "pids";

/// Starts a process in its own session (so a terminal's Ctrl-C does not reach it), its
/// output in `<dir>/<name>.log`, its pid appended to `<dir>/pids`, its command line in
/// `<dir>/<name>.cmd` (for [`ControlPlane::start_again`](super::ControlPlane::start_again)).
pub(super) fn spawn(
    dir: &Path,
    name: &'static str,
    cmd: &mut Command,
) -> Result<Child, TestenvError> {
    let argv: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let argv = serde_json::to_string(&argv).unwrap_or_default();
    write(dir, &format!("{name}.cmd"), &argv)?;
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{name}.log")))
        .map_err(io("creating a log file"))?;
    let log2 = log.try_clone().map_err(io("creating a log file"))?;
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    let child = unsafe {
        cmd.stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .pre_exec(|| {
                libc::setsid();
                Ok(())
            })
            .spawn()
    }
    .map_err(io(format!("starting {name}")))?;
    let mut pids = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(PIDS))
        .map_err(io("recording a pid"))?;
    std::io::Write::write_all(&mut pids, format!("{name} {}\n", child.id()).as_bytes())
        .map_err(io("recording a pid"))?;
    Ok(child)
}

pub(super) fn check_running(
    child: &mut Child,
    component: &'static str,
    dir: &Path,
) -> Result<(), TestenvError> {
    match child.try_wait() {
        Ok(Some(status)) => Err(TestenvError::Exited {
            component,
            status: status.to_string(),
            log: dir.join(format!("{component}.log")).display().to_string(),
        }),
        _ => Ok(()),
    }
}
pub(super) fn write(dir: &Path, name: &str, text: &str) -> Result<String, TestenvError> {
    let path = dir.join(name);
    fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
    Ok(path.display().to_string())
}

pub(super) fn openssl(args: &[&str], out: &Path) -> Result<(), TestenvError> {
    let status = Command::new("openssl")
        .args(args)
        .arg(out)
        .status()
        .map_err(io("running openssl (install the openssl package)"))?;
    if status.success() {
        Ok(())
    } else {
        Err(io("generating the service account key")(
            std::io::Error::other(status.to_string()),
        ))
    }
}

pub(super) fn free_port() -> Result<u16, TestenvError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(listener
        .local_addr()
        .map_err(io("finding a free port"))?
        .port())
}

pub(super) fn random_hex() -> Result<String, TestenvError> {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io("reading /dev/urandom"))?;
    Ok(hex::encode(bytes))
}

pub(super) fn command_line(pid: i32) -> Option<String> {
    let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

pub(super) fn alive(pid: i32) -> bool {
    // A zombie still has /proc/<pid>, but its cmdline is empty.
    command_line(pid).is_some_and(|c| !c.is_empty())
}

/// Collects the exit status of a process this one started and has sent SIGKILL or a
/// SIGTERM it obeyed: without it the process stays a zombie until this one exits (the
/// fault suite kills components dozens of times; a benchmark starts and stops a dozen
/// control planes). It waits for the exit, which [`alive`] may report a moment early (a
/// dying process's command line is gone before it can be collected); nothing for a
/// process that is not this one's child.
pub(super) fn reap(pid: i32) {
    // SAFETY: waitpid(2) of one pid, with no status to write; it fails at once (ECHILD)
    // for a pid that is not this process's child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}
