//! The idle fleet and drift: what `berth run` asks of the API server while it has nothing
//! to do (`interval = "1h"`: only the drift watches renewing themselves, one per kind
//! every 290 s), counted over a window and given per hour; and the time from a hand edit of one app's
//! object to berth's repair of it, beside `kubectl apply --server-side` of that app's
//! file (what repairing it by hand takes).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::{requests, run, timed, Bench};

/// What the idle fleet measured.
pub(crate) struct Idle {
    /// Requests berth sent over the window, per hour.
    pub per_hour: f64,
    /// Seconds from a hand edit to its repair.
    pub repaired: f64,
    /// Seconds `kubectl apply --server-side` of the app's file takes.
    pub kubectl: f64,
}

impl Bench {
    /// Counts berth's requests over `window` of idleness, then scales app `app-0`'s
    /// Deployment in `ns` by hand (a merge patch, as `kubectl edit` sends) and waits for
    /// berth to put its replicas back; `repo` holds the app's file.
    pub(crate) fn idle_and_drift(&self, ns: &str, repo: &Path, window: Duration) -> Result<Idle> {
        let since = jiff::Timestamp::now();
        let start = Instant::now();
        std::thread::sleep(window);
        let sent = requests(&self.cp, since, "berth/", None) + self.watches_renewed(since);
        let per_hour = sent as f64 * 3600.0 / start.elapsed().as_secs_f64();
        let scale = r#"{"spec":{"replicas":3}}"#;
        let patch = [
            "-n",
            ns,
            "patch",
            "deployment",
            "app-0",
            "--type",
            "merge",
            "-p",
            scale,
        ];
        run(self.kubectl().args(patch))?;
        let edited = Instant::now();
        self.wait_replicas(ns, "app-0", "0", Duration::from_secs(60))?;
        let repaired = edited.elapsed().as_secs_f64();
        let file = repo.join("apps/app-0/objects.yaml");
        let kubectl = timed(
            self.kubectl()
                .args(["apply", "--server-side", "-f"])
                .arg(file),
        )?;
        Ok(Idle {
            per_hour,
            repaired,
            kubectl,
        })
    }

    /// berth's watches that began before `since` and ended after it: the API server logs a
    /// watch only when it ends, so [`requests`] (by when a request came) misses a watch
    /// renewed in the window — the drift watches, one per kind, every 290 s.
    fn watches_renewed(&self, since: jiff::Timestamp) -> usize {
        let ended = |e: &serde_json::Value| {
            let at = |key: &str| {
                e[key]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            };
            at("requestReceivedTimestamp").is_some_and(|t| t < since)
                && at("stageTimestamp").is_some_and(|t| t >= since)
        };
        let events = self.cp.audit_events(jiff::Timestamp::UNIX_EPOCH);
        let renewed = events.iter().filter(|e| {
            e["verb"] == "watch"
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("berth/"))
                && ended(e)
        });
        let ids: std::collections::BTreeSet<&str> =
            renewed.filter_map(|e| e["auditID"].as_str()).collect();
        ids.len()
    }

    /// Waits, following it with `kubectl get -w`, until Deployment `name` in `ns` asks
    /// for `replicas`.
    fn wait_replicas(&self, ns: &str, name: &str, replicas: &str, timeout: Duration) -> Result<()> {
        let mut watch = self
            .kubectl()
            .args(["-n", ns, "get", "deployment", name, "-w", "-o"])
            .arg("jsonpath={.spec.replicas}{\"\\n\"}")
            .stdout(Stdio::piped())
            .spawn()
            .context("kubectl get -w")?;
        let out = watch.stdout.take().context("kubectl's output")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let end = Instant::now() + timeout;
        let mut seen = Vec::new();
        let found = loop {
            let left = end.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.trim() == replicas => break true,
                Ok(line) => seen.push(line),
                Err(_) => break false,
            }
        };
        let _ = watch.kill();
        let _ = watch.wait();
        if !found {
            bail!(
                "{name} in {ns} did not ask for {replicas} replicas within {timeout:?}: {seen:?}"
            );
        }
        Ok(())
    }
}
