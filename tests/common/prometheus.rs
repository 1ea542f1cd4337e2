//! A real Prometheus (Debian's package) scraping a real Pushgateway every second, both on
//! free loopback ports: a test pushes a series for each version and berth's checks query
//! it as they would a production server.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Prometheus and its Pushgateway, stopped when dropped.
pub struct Prometheus {
    _dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT` of Prometheus.
    pub address: String,
    /// `http://127.0.0.1:PORT` of the Pushgateway.
    pub gateway: String,
    children: Vec<Child>,
}

impl Prometheus {
    /// Both started and ready; `None` (the test skipped, said why) without Debian's
    /// `prometheus` and `prometheus-pushgateway` by hand — under CI their absence fails
    /// (scripts/test installs both).
    pub fn start() -> Option<Prometheus> {
        let programs = ["/usr/bin/prometheus", "/usr/bin/prometheus-pushgateway"];
        if let Some(absent) = programs.iter().find(|p| !Path::new(p).exists()) {
            let why = format!("no {absent} (scripts/test installs Debian's prometheus and prometheus-pushgateway)");
            assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "{why}");
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (prom, push) = (super::free_port(), super::free_port());
        let log = |name: &str| std::fs::File::create(d.join(name)).unwrap();
        let gateway = Command::new(programs[1])
            .arg(format!("--web.listen-address=127.0.0.1:{push}"))
            .arg(format!(
                "--persistence.file={}",
                d.join("gateway.data").display()
            ))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log("gateway.log"))
            .spawn()
            .expect("start prometheus-pushgateway");
        std::fs::write(
            d.join("prometheus.yml"),
            format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: pushgateway\n    honor_labels: true\n    static_configs:\n      - targets: [\"127.0.0.1:{push}\"]\n"),
        )
        .unwrap();
        let server = Command::new(programs[0])
            .arg(format!(
                "--config.file={}",
                d.join("prometheus.yml").display()
            ))
            .arg(format!("--storage.tsdb.path={}", d.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom}"))
            .args(["--storage.tsdb.retention.time=1h", "--log.level=warn"])
            .stdout(Stdio::null())
            .stderr(log("prometheus.log"))
            .spawn()
            .expect("start prometheus");
        let running = Prometheus {
            _dir: dir,
            address: format!("http://127.0.0.1:{prom}"),
            gateway: format!("http://127.0.0.1:{push}"),
            children: vec![gateway, server],
        };
        super::eventually("prometheus is ready", Duration::from_secs(60), || {
            let listens = |port| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
            listens(push)
                && listens(prom)
                && super::http(prom, "GET", "/-/ready", &[], b"").0 == 200
        });
        Some(running)
    }

    /// Pushes `metrics` (Prometheus' text format) as group `job`, replacing what the group
    /// held.
    pub fn push(&self, job: &str, metrics: &str) {
        let port: u16 = self.gateway.rsplit(':').next().unwrap().parse().unwrap();
        let (code, body) = super::http(
            port,
            "PUT",
            &format!("/metrics/job/{job}"),
            &[],
            metrics.as_bytes(),
        );
        assert!((200..300).contains(&code), "push {job}: {code} {body}");
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
