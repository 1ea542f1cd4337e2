//! A `berth run` that a case starts: its log kept in `target/bench-logs/<label>.log` and
//! named in the case's error when the case fails; stopped (SIGTERM) when dropped.
//!
//! `BERTH_BENCH_HEAPTRACK=1`: every daemon runs under heaptrack's allocation tracer, its
//! trace written to `target/bench-logs/<label>.heaptrack.gz` when it stops (read it with
//! `heaptrack_print`). The memory figures of such a run include the tracer's own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// heaptrack's preloaded tracer and its interpreter (Debian's heaptrack).
const HEAPTRACK: &str = "/usr/lib/heaptrack/libheaptrack_preload.so";
const INTERPRET: &str = "/usr/lib/heaptrack/libexec/heaptrack_interpret";

pub struct Daemon {
    child: Child,
    log: PathBuf,
    /// The raw trace, when heaptrack traces the daemon.
    trace: Option<PathBuf>,
}

impl Daemon {
    /// `berth run --config CONFIG`, its log (text) written to `target/bench-logs/LABEL.log`.
    pub fn start(berth: &Path, config: &Path, label: &str) -> Result<Daemon> {
        let logs = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-logs");
        std::fs::create_dir_all(&logs)?;
        let log = logs.join(format!("{label}.log"));
        let mut command = Command::new(berth);
        command
            .args(["run", "--log-format", "text", "--config"])
            .arg(config)
            .stderr(std::fs::File::create(&log).with_context(|| log.display().to_string())?);
        let trace = std::env::var_os("BERTH_BENCH_HEAPTRACK").map(|_| {
            let raw = logs.join(format!("{label}.heaptrack.raw"));
            command
                .env("LD_PRELOAD", HEAPTRACK)
                .env("DUMP_HEAPTRACK_OUTPUT", &raw);
            raw
        });
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", berth.display()))?;
        Ok(Daemon { child, log, trace })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `result`, its error naming the daemon's log.
    pub fn explain<T>(&self, result: Result<T>) -> Result<T> {
        result.with_context(|| {
            let (peak, now) = rss(self.pid());
            format!(
                "berth run's log: {}; its RSS: peak {peak:.1} MiB, now {now:.1} MiB",
                self.log.display()
            )
        })
    }
}

impl Drop for Daemon {
    /// SIGTERM, as systemd stops it; SIGKILL if it has not stopped within 30 s.
    fn drop(&mut self) {
        // SAFETY: a signal to the daemon's own pid, which is not reaped until wait below.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(raw) = &self.trace {
            let out = raw.with_extension("gz");
            let interpreted = Command::new("sh")
                .arg("-c")
                .arg(format!(
                    "{INTERPRET} < \"$1\" | gzip -c > \"$2\" && rm \"$1\""
                ))
                .args(["sh".as_ref(), raw.as_os_str(), out.as_os_str()])
                .status();
            eprintln!("heaptrack's trace: {} ({interpreted:?})", out.display());
        }
    }
}

/// Peak and current RSS of a process, in MiB.
pub fn rss(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kb("VmHWM:") / 1024.0, kb("VmRSS:") / 1024.0)
}
