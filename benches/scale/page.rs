//! The status page's cost: `berth run` of 100 apps (the fleet's four objects each) with
//! `status_page = true`, for one minute in which a commit changes every app and each app
//! syncs again on a 15 s interval — once with nobody looking, once with the page open
//! (`/` loaded, its event stream read and reconnected as a browser does, `/api/apps`
//! every 5 s, so the health summaries are read from the cluster too). Its resident
//! memory: the peak and the mean of a sample every 100 ms.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::daemon::rss;
use super::daemon::Daemon;
use super::fleet::{wait_applied, write_fleet};
use super::{git, run, Bench};

fn apps() -> usize {
    super::sized(100, 10)
}
/// How long each run is measured.
fn window() -> Duration {
    Duration::from_secs(super::sized(60, 10) as u64)
}

/// What the page's reader saw.
#[derive(Default)]
struct Looked {
    events: AtomicUsize,
    bytes: AtomicUsize,
}

impl Bench {
    /// `berth run` of 100 apps with the status page: memory with the page open, beside
    /// without. On a control plane of its own: its first sync follows 100 new Deployments'
    /// rollouts, which on the shared one queue behind the cold applies' thousands.
    pub(crate) async fn page_memory(&mut self) -> Result<()> {
        self.on_extra_plane("cp-page", None, Self::page_here).await
    }

    /// [`Self::page_memory`] on `self.cp`.
    fn page_here(&mut self) -> Result<()> {
        let apps = apps();
        let ns = format!("page-{apps}");
        run(self.kubectl().args(["create", "namespace", &ns]))?;
        let (repo, path) = self.fleet_setup(&format!("page-{apps}"), &ns, apps)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = std::fs::read_to_string(&path)?
            .replace(
                "listen = \"off\"",
                &format!("listen = \"127.0.0.1:{port}\"\nstatus_page = true"),
            )
            .replace("interval = \"1h\"", "interval = \"15s\"")
            .replace("jitter = \"0s\"", "jitter = \"5s\"");
        std::fs::write(&path, config)?;
        let state = path.parent().unwrap_or(&self.work).to_path_buf();
        // Every app applied once, by a run not measured.
        let first = git(&repo, &["rev-parse", "HEAD"])?.trim().to_string();
        let since = jiff::Timestamp::now();
        let warm = Daemon::start(&self.berth, &path, "page-warm")?;
        warm.explain(wait_applied(
            &state,
            apps,
            (&first, since),
            Duration::from_secs(600),
        ))?;
        drop(warm);
        let mut runs = Vec::new();
        for (version, open) in [(2, false), (3, true)] {
            runs.push(self.page_run(&repo, &ns, &path, port, version, open)?);
        }
        let [(closed_peak, closed_mean, _), (open_peak, open_mean, looked)] =
            [runs.remove(0), runs.remove(0)];
        let events = looked.events.load(Ordering::Relaxed);
        let kib = looked.bytes.load(Ordering::Relaxed) as f64 / 1024.0;
        eprintln!("page: closed {closed_peak:.1}/{closed_mean:.1} MiB, open {open_peak:.1}/{open_mean:.1} MiB, {events} events");
        self.rows.push(format!(
            "| 12. berth run, {apps} apps, 1 min with a commit to all and 15 s resyncs | status page open (events read, /api/apps every 5 s) | {open_peak:.1} MiB peak | {open_mean:.1} MiB mean | {events} events, {kib:.0} KiB | {:+.1} % peak, {:+.1} % mean over the page closed ({closed_peak:.1} / {closed_mean:.1} MiB) |",
            (open_peak / closed_peak - 1.0) * 100.0,
            (open_mean / closed_mean - 1.0) * 100.0,
        ));
        self.notes.push(format!(
            "The status page on {apps} apps: berth run's peak RSS {open_peak:.1} MiB with the page open and live, {closed_peak:.1} MiB without ({:+.1} %; goal under +10 %); mean {open_mean:.1} against {closed_mean:.1} MiB ({:+.1} %). {events} live events ({kib:.0} KiB) reached the page in the minute.",
            (open_peak / closed_peak - 1.0) * 100.0,
            (open_mean / closed_mean - 1.0) * 100.0,
        ));
        Ok(())
    }

    /// One measured minute: a fresh `berth run`, a commit of `version` to every app, the
    /// page read when `open`; peak and mean RSS in MiB.
    fn page_run(
        &self,
        repo: &Path,
        ns: &str,
        config: &Path,
        port: u16,
        version: usize,
        open: bool,
    ) -> Result<(f64, f64, Arc<Looked>)> {
        let daemon = Daemon::start(
            &self.berth,
            config,
            if open { "page-open" } else { "page-closed" },
        )?;
        let pid = daemon.pid();
        daemon.explain((|| {
            let up = Instant::now();
            while get(port, "/healthz").is_err() {
                if up.elapsed() > Duration::from_secs(30) {
                    bail!("berth run did not answer on port {port}");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let stop = Arc::new(AtomicBool::new(false));
            let looked = Arc::new(Looked::default());
            let reader = open.then(|| {
                let (stop, looked) = (stop.clone(), looked.clone());
                std::thread::spawn(move || look(port, &stop, &looked))
            });
            write_fleet(repo, ns, apps(), version)?;
            git(repo, &["commit", "-qam", &format!("version {version}")])?;
            let start = Instant::now();
            let mut samples = Vec::new();
            while start.elapsed() < window() {
                samples.push(rss(pid).1);
                std::thread::sleep(Duration::from_millis(100));
            }
            stop.store(true, Ordering::Relaxed);
            if let Some(reader) = reader {
                let _ = reader.join();
            }
            let peak = rss(pid).0;
            let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
            Ok((peak, mean, looked))
        })())
    }
}

/// A GET on a fresh connection; the body.
fn get(port: u16, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// What a browser with the page open asks: `/` once, then the event stream (again when
/// it ends), and `/api/apps` every 5 s; until `stop`.
fn look(port: u16, stop: &AtomicBool, looked: &Looked) {
    let _ = get(port, "/");
    let mut last_poll = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            std::thread::sleep(Duration::from_millis(500));
            continue;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let _ = write!(s, "GET /api/events HTTP/1.1\r\nHost: localhost\r\n\r\n");
        let mut buf = [0u8; 64 << 10];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            if last_poll.elapsed() >= Duration::from_secs(5) {
                let _ = get(port, "/api/apps");
                last_poll = Instant::now();
            }
            match s.read(&mut buf) {
                Ok(0) => break, // the stream ended: reconnect, as EventSource does
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    looked.events.fetch_add(
                        text.matches("\nevent: ").count()
                            + usize::from(text.starts_with("event: ")),
                        Ordering::Relaxed,
                    );
                    looked.bytes.fetch_add(n, Ordering::Relaxed);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
    }
}
