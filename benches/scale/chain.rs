//! Ordering's case: 50 apps in a 5-level dependency chain (each app of a level
//! `depends_on` every app of the level before), one commit changing every app's
//! Deployment; `berth run` takes it from the commit to the last app healthy. Beside it:
//! the sum of its parts (per level, its slowest app's sync), so that what the ordering
//! itself adds shows; and kubectl doing the same by hand, level by level (`apply
//! --server-side`, then `rollout status` of each Deployment).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::daemon::Daemon;
use super::{git, run, Bench, Samples};

const LEVELS: usize = 5;
const PER_LEVEL: usize = 10;

/// App `i` of level `l`: a Deployment of one replica and a ConfigMap, at `version`.
fn app_objects(ns: &str, l: usize, i: usize, version: usize) -> String {
    let name = format!("l{l}-app{i}");
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n        - name: app\n          image: registry.example/app:{version}\n\
---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n  version: \"{version}\"\n"
    )
}

/// Writes `level-<l>/app-<i>/objects.yaml` at `version` under `dir`.
fn write_chain(dir: &Path, ns: &str, version: usize) -> Result<()> {
    for l in 0..LEVELS {
        for i in 0..PER_LEVEL {
            let d = dir.join(format!("level-{l}/app-{i}"));
            std::fs::create_dir_all(&d)?;
            std::fs::write(d.join("objects.yaml"), app_objects(ns, l, i, version))?;
        }
    }
    Ok(())
}

/// The apps' records of commit `sha`, by level, once every app has a successful one.
fn records_of(
    state: &Path,
    sha: &str,
    timeout: Duration,
) -> Result<Vec<Vec<berth::history::SyncRecord>>> {
    let log = berth::history::HistoryLog::new(state);
    let start = Instant::now();
    loop {
        let found: Vec<Vec<berth::history::SyncRecord>> = (0..LEVELS)
            .map(|l| {
                (0..PER_LEVEL)
                    .filter_map(|i| {
                        log.read(&format!("l{l}-app{i}"))
                            .ok()?
                            .into_iter()
                            .find(|r| {
                                r.commit.as_ref().is_some_and(|c| c.sha == sha)
                                    && r.outcome == berth::history::Outcome::Succeeded
                            })
                    })
                    .collect()
            })
            .collect();
        let done: usize = found.iter().map(Vec::len).sum();
        if done == LEVELS * PER_LEVEL {
            return Ok(found);
        }
        if start.elapsed() > timeout {
            bail!(
                "{done} of {} apps synced {} within {timeout:?}",
                LEVELS * PER_LEVEL,
                &sha[..7]
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Bench {
    /// See the module's documentation.
    pub fn chain(&mut self) -> Result<()> {
        let ns = "chain";
        run(self.kubectl().args(["create", "namespace", ns]))?;
        let repo = self.work.join("chain");
        write_chain(&repo, ns, 1)?;
        git(&repo, &["init", "-q", "-b", "main"])?;
        git(&repo, &["add", "-A"])?;
        git(&repo, &["commit", "-qm", "version 1"])?;
        let state = self.work.join("state-chain");
        std::fs::create_dir_all(&state)?;
        let mut config = format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\nmax_concurrent_syncs = {PER_LEVEL}\ninventory_namespace = \"berth-chain\"\n[cluster]\nkubeconfig = \"{}\"\n",
            state.display(),
            self.cp.kubeconfig.display()
        );
        for l in 0..LEVELS {
            let deps: Vec<String> = (0..PER_LEVEL)
                .filter(|_| l > 0)
                .map(|i| format!("\"l{}-app{i}\"", l - 1))
                .collect();
            for i in 0..PER_LEVEL {
                let _ = write!(
                    config,
                    "[[app]]\nname = \"l{l}-app{i}\"\nrepo = \"{}\"\npath = \"level-{l}/app-{i}\"\nnamespace = \"{ns}\"\ndepends_on = [{}]\n",
                    repo.display(),
                    deps.join(", ")
                );
            }
        }
        let path = state.join("berth.toml");
        std::fs::write(&path, config)?;
        let daemon = Daemon::start(&self.berth, &path, "chain")?;
        let (total, parts) = daemon.explain(self.chain_commits(&repo, ns, &state))?;
        drop(daemon);
        let kubectl = self.chain_kubectl()?;
        let overhead = Samples(total.0.iter().zip(&parts.0).map(|(t, p)| t - p).collect());
        eprintln!(
            "chain: berth {:.2}s (parts {:.2}s, ordering {:.2}s); kubectl {:.2}s",
            total.median(),
            parts.median(),
            overhead.median(),
            kubectl.median()
        );
        self.table(
            "8. 50 apps in a 5-level depends_on chain, one commit changing all: commit → last app healthy",
            &[("berth run", &total)],
            "s",
            Some(&kubectl),
        );
        self.table(
            "8. … the sum of its parts (per level, its slowest app's sync)",
            &[("berth run", &parts)],
            "s",
            None,
        );
        self.table(
            "8. … kubectl by hand, level by level (apply --server-side, rollout status of each)",
            &[("kubectl", &kubectl)],
            "s",
            None,
        );
        self.notes.push(format!(
            "Ordering: 50 apps in a 5-level chain took {:.2} s from the commit to the last app healthy; the sum of its parts (each level's slowest sync) is {:.2} s, so the ordering itself (noticing the commit, the waits' checks of each dependency's inventory, waking the next level) adds {:.2} s (goal < 1 s). kubectl doing the same by hand: {:.2} s.",
            total.median(),
            parts.median(),
            overhead.median(),
            kubectl.median()
        ));
        Ok(())
    }

    /// The first commit synced, then `REPS` commits each changing every app: per commit,
    /// the time from the commit to the last app's record, and the sum of the levels'
    /// slowest syncs.
    fn chain_commits(&mut self, repo: &Path, ns: &str, state: &Path) -> Result<(Samples, Samples)> {
        let first = git(repo, &["rev-parse", "HEAD"])?.trim().to_string();
        records_of(state, &first, Duration::from_secs(600))?;
        let (mut totals, mut parts) = (Vec::new(), Vec::new());
        for version in 2..2 + super::reps() {
            write_chain(repo, ns, version)?;
            let committed = jiff::Timestamp::now();
            git(repo, &["commit", "-qam", &format!("version {version}")])?;
            let sha = git(repo, &["rev-parse", "HEAD"])?.trim().to_string();
            let levels = records_of(state, &sha, Duration::from_secs(600))?;
            let last = levels
                .iter()
                .flatten()
                .map(|r| r.finished_at)
                .max()
                .unwrap_or(committed);
            let total = last.duration_since(committed).as_secs_f64();
            let sum: f64 = levels
                .iter()
                .map(|level| level.iter().map(|r| r.duration_ms).max().unwrap_or(0) as f64 / 1000.0)
                .sum();
            eprintln!("chain version {version}: {total:.2}s, parts {sum:.2}s");
            totals.push(total);
            parts.push(sum);
        }
        Ok((Samples(totals), Samples(parts)))
    }

    /// kubectl doing the chain by hand: per level, `apply --server-side` of its folder,
    /// then `rollout status` of each of its Deployments, before the next level.
    fn chain_kubectl(&mut self) -> Result<Samples> {
        let ns = "chain-kubectl";
        run(self.kubectl().args(["create", "namespace", ns]))?;
        let dir = self.work.join("chain-kubectl");
        let by_level = |b: &Bench| -> Result<f64> {
            let start = Instant::now();
            for l in 0..LEVELS {
                run(b
                    .kubectl()
                    .args(["apply", "--server-side", "-R", "-f"])
                    .arg(dir.join(format!("level-{l}"))))?;
                for i in 0..PER_LEVEL {
                    run(b.kubectl().args([
                        "rollout",
                        "status",
                        &format!("deployment/l{l}-app{i}"),
                        "-n",
                        ns,
                        "--timeout",
                        "300s",
                    ]))?;
                }
            }
            Ok(start.elapsed().as_secs_f64())
        };
        write_chain(&dir, ns, 1)?;
        by_level(self)?;
        let mut times = Vec::new();
        for version in 2..2 + super::reps() {
            write_chain(&dir, ns, version)?;
            times.push(by_level(self)?);
        }
        Ok(Samples(times))
    }
}
