//! The pull-request case: a branch that touches 1 of 100 apps of one repository, planned
//! with `berth plan --revision BRANCH --all-affected` beside the plan of every app, and
//! beside the plan of that one app alone: the requests each sends (the API server's audit
//! log, berth's user agent) and its time.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::fleet::write_fleet;
use super::{git, requests, run, Bench};

/// Apps in the repository.
fn apps() -> usize {
    super::sized(100, 10)
}
/// The app the branch changes.
const TOUCHED: usize = 7;

impl Bench {
    /// `berth plan --revision pr --all-affected` beside `berth plan --revision pr`.
    pub(crate) fn plan_affected(&mut self) -> Result<()> {
        let apps = apps();
        let ns = format!("plan-{apps}");
        run(self.kubectl().args(["create", "namespace", &ns]))?;
        let (repo, path) = self.fleet_setup(&format!("plan-{apps}"), &ns, apps)?;
        let berth = |args: &[&str]| {
            let mut c = Command::new(&self.berth);
            c.args(args).arg("--config").arg(&path);
            c
        };
        run(&mut berth(&["sync", "--no-wait"]))?;
        // The branch: app TOUCHED's objects at version 2, the others as they are.
        git(&repo, &["checkout", "-q", "-b", "pr"])?;
        let all = self.work.join("plan-v2");
        write_fleet(&all, &ns, apps, 2)?;
        let file = format!("apps/app-{TOUCHED}/objects.yaml");
        std::fs::copy(all.join(&file), repo.join(&file))?;
        git(&repo, &["commit", "-qam", "one app changed"])?;
        git(&repo, &["checkout", "-q", "main"])?;

        // A plan that finds the change exits 2: its requests, its time, its output.
        let plan = |args: &[&str]| -> Result<(f64, String)> {
            let started = Instant::now();
            let out = berth(args).output()?;
            let seconds = started.elapsed().as_secs_f64();
            if out.status.code() != Some(2) {
                bail!(
                    "berth {args:?} did not find the change: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Ok((seconds, String::from_utf8_lossy(&out.stdout).into_owned()))
        };
        // Once for the requests (alone in the audit log), then timed: the median of 3.
        let measure = |args: &[&str]| -> Result<(usize, f64, String)> {
            let since = jiff::Timestamp::now();
            let (_, out) = plan(args)?;
            std::thread::sleep(Duration::from_millis(500)); // the audit log lags the answers
            let sent = requests(&self.cp, since, "berth/", None);
            let mut times = (0..3)
                .map(|_| plan(args).map(|(s, _)| s))
                .collect::<Result<Vec<f64>>>()?;
            times.sort_by(f64::total_cmp);
            Ok((sent, times[1], out))
        };
        let touched = format!("app-{TOUCHED}");
        let (affected_requests, affected_s, plan) =
            measure(&["plan", "--revision", "pr", "--all-affected", "--exit-code"])?;
        // A planned app's heading is `APP: commit SHA "subject"`; the others say `APP: not
        // affected: …`.
        let planned: Vec<&str> = plan
            .lines()
            .filter_map(|l| l.split_once(": "))
            .filter(|(_, rest)| rest.starts_with("commit "))
            .map(|(app, _)| app)
            .collect();
        if planned != [touched.as_str()] {
            bail!("--all-affected planned {planned:?}, not [{touched}]:\n{plan}");
        }
        let (one_requests, one_s, _) =
            measure(&["plan", &touched, "--revision", "pr", "--exit-code"])?;
        let (all_requests, all_s, _) = measure(&["plan", "--revision", "pr", "--exit-code"])?;
        eprintln!(
            "plan: --all-affected {affected_s:.2}s {affected_requests} requests; one app {one_s:.2}s {one_requests}; all {all_s:.2}s {all_requests}"
        );
        let case = format!("11. plan a branch touching 1 of {apps} apps");
        self.rows.push(format!(
            "| {case} | berth plan --revision --all-affected | {affected_s:.2} s | {affected_requests} requests | — | {:.2} of planning all {apps} |",
            affected_s / all_s
        ));
        self.rows.push(format!(
            "| {case} | berth plan {touched} --revision (the one app alone) | {one_s:.2} s | {one_requests} requests | — | — |"
        ));
        self.rows.push(format!(
            "| {case} | berth plan --revision (all {apps} apps) | {all_s:.2} s | {all_requests} requests | — | 1.00 |"
        ));
        self.notes.push(format!(
            "Pull requests: a branch touching 1 of {apps} apps planned with --all-affected in {affected_s:.2} s and {affected_requests} requests to the API server; the one app planned alone {one_s:.2} s and {one_requests} requests; every app planned {all_s:.2} s and {all_requests} requests."
        ));
        Ok(())
    }
}
