//! `berth-bench`: berth beside its peers on one local control plane, each case repeated,
//! printed as a markdown table (median, min, max, ratio to the peer) and written to
//! `docs/benchmarks.md`. Run it with `scripts/bench` (`cargo bench --bench berth-bench`:
//! a release build). It is a bench target, not a binary, so `cargo install` does not ship
//! it; `cargo test --all-targets` only checks that it builds.
//!
//! Cases: cold apply of 1000 objects (vs `kubectl apply --server-side` and plain `kubectl
//! apply`, plus the apiserver's ceiling); no-change resync (wall time, write requests);
//! commit-to-applied latency with notify; memory and idle CPU of `berth run`; the first
//! fetch of a 10,000-commit repository (vs `git clone --depth=1` and a whole clone) and a
//! fetch of one new commit (git2 vs the git CLI); requests while
//! following a 10-replica rollout (vs `kubectl rollout status`); Flux's 100 / 500 / 1000
//! apps of four objects from one repository, and one app of 1k / 5k / 10k objects
//! (`scale/fleet.rs`), with the idle fleet's requests per hour and a hand edit's repair
//! (`scale/drift.rs`); 50 apps in a 5-level `depends_on` chain (`scale/chain.rs`);
//! `berth render` of a chart of 50 templates (vs `helm template`, `render/chart.rs`);
//! `berth render` of 1000 Secrets encrypted with sops (vs the same in clear,
//! `render/secrets.rs`); `berth plan --revision --all-affected` of a branch touching 1 of
//! 100 apps (vs planning them all, `scale/plan.rs`); `berth run`'s memory on 100 apps
//! with the status page open and live (vs closed, `scale/page.rs`).
//!
//! `BERTH_BENCH_FLEET` and `BERTH_BENCH_GROWTH` (comma-separated sizes) replace the scale
//! cases' sizes; `BERTH_BENCH_ONLY=scale` runs only them (a trial; the file is written
//! all the same). `BERTH_BENCH_ONLY=<case>` runs one case alone and only prints it:
//! `fleet`, `growth`, `fetch` (the git cases), `chain` (ordering), `chart`, `secrets`
//! (sops), `plan` (the pull-request case), `page` (the status page's), `clusters` (four
//! control planes; `BERTH_BENCH_CLUSTERS` the apps on each, 250 by default).
//!
//! A case that fails is reported with the others' figures and fails the run; the daemons'
//! logs are kept in `target/bench-logs/` (`daemon.rs`, which also traces them with
//! heaptrack under `BERTH_BENCH_HEAPTRACK=1`). `BERTH_BENCH_SMOKE=1` runs every case once
//! at a small size (`scripts/test` does, after the tests). The run's figures replace what
//! lies between the markers of `docs/benchmarks.md`; the rest of it is written by hand.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use berth_testenv::{assets, ControlPlane, UpOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use daemon::Daemon;

#[path = "scale/chain.rs"]
mod chain;
#[path = "render/chart.rs"]
mod chart;
#[path = "scale/clusters.rs"]
mod clusters;
mod daemon;
#[path = "scale/drift.rs"]
mod drift;
#[path = "scale/fleet.rs"]
mod fleet;
#[path = "scale/images.rs"]
mod images;
#[path = "scale/page.rs"]
mod page;
#[path = "scale/plan.rs"]
mod plan;
#[path = "scale/previews.rs"]
mod previews;
#[path = "render/registry.rs"]
mod registry;
#[path = "../tests/common/registry.rs"]
mod registry_support;
#[path = "render/secrets.rs"]
mod secrets;

const NAMESPACES: usize = 10;

/// `BERTH_BENCH_SMOKE=1`: every case once at a small size, so that no case breaks unseen
/// (`scripts/test` runs it after the tests); its figures mean nothing.
fn smoke() -> bool {
    std::env::var_os("BERTH_BENCH_SMOKE").is_some()
}

/// `full` in a measured run, `small` in a smoke run.
fn sized(full: usize, small: usize) -> usize {
    if smoke() {
        small
    } else {
        full
    }
}

/// How many times each case runs.
fn reps() -> usize {
    sized(3, 1)
}

struct Bench {
    cp: ControlPlane,
    work: PathBuf,
    berth: PathBuf,
    rows: Vec<String>,
    notes: Vec<String>,
}

#[derive(Clone)]
struct Samples(Vec<f64>);

impl Samples {
    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    }
    fn median(&self) -> f64 {
        let v = self.sorted();
        v[v.len() / 2]
    }
    fn min(&self) -> f64 {
        self.sorted()[0]
    }
    fn max(&self) -> f64 {
        *self.sorted().last().unwrap_or(&0.0)
    }
    fn percentile(&self, p: f64) -> f64 {
        let v = self.sorted();
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    }
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn timed(cmd: &mut Command) -> Result<f64> {
    let start = Instant::now();
    run(cmd)?;
    Ok(start.elapsed().as_secs_f64())
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    run(Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@berth.invalid",
        ])
        .args(args)
        .current_dir(dir))
}

/// 10 namespaces × (30 Deployments with 0 replicas, 30 Services, 40 ConfigMaps).
fn generate(dir: &Path, prefix: &str) -> Result<()> {
    for i in 0..NAMESPACES {
        let ns = format!("{prefix}-{i}");
        let d = dir.join(&ns);
        std::fs::create_dir_all(&d)?;
        std::fs::write(
            d.join("00-namespace.yaml"),
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )?;
        let mut deployments = String::new();
        let mut services = String::new();
        let mut maps = String::new();
        for j in 0..30 {
            let _ = write!(deployments, "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app-{j}\n  namespace: {ns}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: app-{j}}}\n  template:\n    metadata:\n      labels: {{app: app-{j}}}\n    spec:\n      containers:\n        - name: app\n          image: registry.example/app:{j}\n          ports: [{{containerPort: 8080, protocol: TCP}}]\n");
            let _ = write!(services, "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: app-{j}\n  namespace: {ns}\nspec:\n  selector: {{app: app-{j}}}\n  ports: [{{port: 80, targetPort: 8080, protocol: TCP}}]\n");
        }
        for j in 0..40 {
            let _ = write!(maps, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{j}\n  namespace: {ns}\ndata:\n  value: \"{j}\"\n");
        }
        std::fs::write(d.join("deployments.yaml"), deployments)?;
        std::fs::write(d.join("services.yaml"), services)?;
        std::fs::write(d.join("configmaps.yaml"), maps)?;
    }
    Ok(())
}

/// Unique requests in the audit log since `since` whose user agent starts with `agent`,
/// optionally only some verbs. A `*` in `agent` stands for any text: kube-controller-
/// manager gives each controller a client of its own (with its own 20-a-second limit),
/// named at the end of its user agent, so `kube-controller-manager/*/deployment-controller`
/// counts the Deployment controller's.
fn requests(
    cp: &ControlPlane,
    since: jiff::Timestamp,
    agent: &str,
    verbs: Option<&[&str]>,
) -> usize {
    requests_for(cp, since, agent, verbs, None)
}

/// Like [`requests`], only for the given resources (`deployments`, `replicasets`).
fn requests_for(
    cp: &ControlPlane,
    since: jiff::Timestamp,
    agent: &str,
    verbs: Option<&[&str]>,
    resources: Option<&[&str]>,
) -> usize {
    let ids: BTreeSet<String> = cp
        .audit_events(since)
        .into_iter()
        .filter(|e| {
            let verb = e["verb"].as_str().unwrap_or("");
            let sender = e["userAgent"].as_str().unwrap_or("");
            let sent_by = match agent.split_once('*') {
                Some((head, tail)) => sender.starts_with(head) && sender.ends_with(tail),
                None => sender.starts_with(agent),
            };
            sent_by
                && verbs.is_none_or(|v| v.contains(&verb))
                && resources
                    .is_none_or(|r| r.contains(&e["objectRef"]["resource"].as_str().unwrap_or("")))
        })
        .filter_map(|e| e["auditID"].as_str().map(str::to_string))
        .collect();
    ids.len()
}

const WRITES: &[&str] = &["create", "update", "patch", "delete"];
/// Following a rollout: reads and watches of Deployments and ReplicaSets.
const READS: &[&str] = &["get", "list", "watch"];
const TRACKED: &[&str] = &["deployments", "replicasets"];

impl Bench {
    /// A control plane beside `self.cp`, in `work/<name>`: the Deployment controller on,
    /// sending `controller_qps` requests a second (else its default 20), no kubelet.
    async fn extra_plane(&self, name: &str, controller_qps: Option<u32>) -> Result<ControlPlane> {
        self.plane_beside(name, controller_qps, None).await
    }

    /// As [`Self::extra_plane`], with the kubelet stand-in `kubelet` (pods made ready).
    async fn plane_beside(
        &self,
        name: &str,
        controller_qps: Option<u32>,
        kubelet: Option<PathBuf>,
    ) -> Result<ControlPlane> {
        Ok(ControlPlane::up(&UpOptions {
            dir: self.work.join(name),
            bin: assets::ensure()?,
            deployment_controller: true,
            kubelet,
            controller_qps,
        })
        .await?)
    }

    /// Runs `case` with [`Self::extra_plane`] `name` as `self.cp`, then stops that plane:
    /// for a case that must not queue behind the Deployment controller's work left by the
    /// cases before it.
    async fn on_extra_plane<T>(
        &mut self,
        name: &str,
        controller_qps: Option<u32>,
        case: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<T> {
        let plane = self.extra_plane(name, controller_qps).await?;
        let main = std::mem::replace(&mut self.cp, plane);
        let result = case(self);
        let plane = std::mem::replace(&mut self.cp, main);
        let _ = ControlPlane::down(&plane.dir);
        result
    }

    /// `kubectl apply --server-side` of a file, then `kubectl rollout status` of it.
    fn kubectl_apply_and_wait(&self, file: &Path, deployment: &str) -> Result<()> {
        run(self
            .kubectl()
            .args(["apply", "--server-side", "-f"])
            .arg(file))?;
        run(self
            .kubectl()
            .args(["rollout", "status", deployment, "--timeout", "120s"]))?;
        Ok(())
    }

    fn kubectl(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", &self.cp.kubeconfig);
        c
    }

    /// A kube client of the bench's control plane, for watching what berth does.
    async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.cp.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// A berth configuration for one app; returns its path.
    fn config(&self, name: &str, repo: &Path, concurrency: usize) -> Result<PathBuf> {
        let dir = self.work.join(format!("state-{name}"));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("berth.toml");
        std::fs::write(
            &path,
            format!(
                "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\nconcurrency = {concurrency}\n[cluster]\nkubeconfig = \"{}\"\n[[app]]\nname = \"{name}\"\nrepo = \"{}\"\n[app.scope]\nnamespaces = [\"*\"]\n",
                dir.display(),
                self.cp.kubeconfig.display(),
                repo.display()
            ),
        )?;
        Ok(path)
    }

    /// Apply (dry run of every object first) and prune, without following rollouts: what
    /// `kubectl apply` does.
    fn berth_apply(&self, config: &Path) -> Result<f64> {
        timed(
            Command::new(&self.berth)
                .args(["sync", "--no-wait", "--config"])
                .arg(config),
        )
    }

    fn berth_sync(&self, config: &Path) -> Result<f64> {
        timed(
            Command::new(&self.berth)
                .args(["sync", "--config"])
                .arg(config),
        )
    }

    /// A fresh repository of the 1000 objects.
    fn repo(&self, prefix: &str) -> Result<PathBuf> {
        let dir = self.work.join(format!("repo-{prefix}"));
        generate(&dir, prefix)?;
        git(&dir, &["init", "-q", "-b", "main"])?;
        git(&dir, &["add", "-A"])?;
        git(&dir, &["commit", "-qm", "1000 objects"])?;
        Ok(dir)
    }

    fn table(&mut self, case: &str, rows: &[(&str, &Samples)], unit: &str, peer: Option<&Samples>) {
        for (tool, s) in rows {
            let ratio = peer.map_or("—".to_string(), |p| {
                format!("{:.2}", s.median() / p.median())
            });
            self.rows.push(format!(
                "| {case} | {tool} | {:.3} {unit} | {:.3} | {:.3} | {ratio} |",
                s.median(),
                s.min(),
                s.max()
            ));
        }
    }

    /// The same cold sync, following the 300 new Deployments' rollouts to completion —
    /// first of all, while the cluster's Deployment controller has no backlog.
    fn cold_apply_and_follow(&mut self) -> Result<()> {
        let dir = self.repo("w0")?;
        let full = self.berth_sync(&self.config("follow-0", &dir, 16)?)?;
        eprintln!("cold apply with rollout following: {full:.1}s");
        self.rows.push(format!(
            "| 1b. cold apply + follow 300 rollouts | berth sync | {full:.1} s | — | — | — |"
        ));
        self.notes.push(format!("Following the 300 new Deployments until complete takes {full:.1} s in all: the cluster's Deployment controller writes at kube-controller-manager's default 20 QPS (≈ 3 writes per new Deployment), berth itself is idle meanwhile."));
        Ok(())
    }

    /// Returns the configuration of berth's last cold apply (its repository's prefix is
    /// `b{reps() - 1}`).
    fn cold_apply(&mut self) -> Result<PathBuf> {
        let (mut berth, mut ceiling, mut ssa, mut csa) = (vec![], vec![], vec![], vec![]);
        let mut last = PathBuf::new();
        for rep in 0..reps() {
            let dir = self.repo(&format!("b{rep}"))?;
            let config = self.config(&format!("cold-{rep}"), &dir, 16)?;
            berth.push(self.berth_apply(&config)?);
            last = config;
            let dir = self.repo(&format!("c{rep}"))?;
            ceiling.push(self.berth_apply(&self.config(&format!("ceiling-{rep}"), &dir, 64)?)?);
            let dir = self.repo(&format!("s{rep}"))?;
            ssa.push(timed(
                self.kubectl()
                    .args(["apply", "--server-side", "-R", "-f"])
                    .arg(&dir),
            )?);
            let dir = self.repo(&format!("k{rep}"))?;
            csa.push(timed(self.kubectl().args(["apply", "-R", "-f"]).arg(&dir))?);
            eprintln!("cold apply rep {}: berth {:.2}s, berth@64 {:.2}s, kubectl ssa {:.2}s, kubectl {:.2}s", rep + 1, berth[rep], ceiling[rep], ssa[rep], csa[rep]);
        }
        let (berth, ceiling, ssa, csa) =
            (Samples(berth), Samples(ceiling), Samples(ssa), Samples(csa));
        self.table(
            "1. cold apply, 1010 objects",
            &[
                ("berth sync (16 in flight)", &berth),
                ("berth sync (64 in flight)", &ceiling),
                ("kubectl apply --server-side", &ssa),
            ],
            "s",
            Some(&ssa),
        );
        self.table(
            "1. cold apply, 1010 objects",
            &[("kubectl apply (client-side)", &csa)],
            "s",
            Some(&ssa),
        );
        self.notes.push(format!(
            "Cold apply: berth ÷ kubectl server-side = {:.2}; berth's default ÷ the best client seen (berth at 64 in flight) = {:.2} (target ≤ 1.5). berth sends two requests per object (the dry run of the whole commit, then the apply), kubectl one.",
            berth.median() / ssa.median(),
            berth.median() / ceiling.median().min(berth.median())
        ));
        if let Err(e) = self.kubectl_like_berth(&berth) {
            self.notes
                .push(format!("kubectl doing berth's two passes: failed: {e:#}"));
        }
        Ok(last)
    }

    fn no_change(&mut self, config: &Path) -> Result<()> {
        let (mut berth, mut kubectl, mut writes) = (vec![], vec![], vec![]);
        let dir = self.work.join("repo-s0");
        for _ in 0..reps() {
            let since = jiff::Timestamp::now();
            berth.push(self.berth_sync(config)?);
            std::thread::sleep(Duration::from_millis(300)); // the audit log is written after the response
            writes.push(requests(&self.cp, since, "berth/", Some(WRITES)));
            kubectl.push(timed(
                self.kubectl()
                    .args(["apply", "--server-side", "-R", "-f"])
                    .arg(&dir),
            )?);
        }
        let (berth, kubectl) = (Samples(berth), Samples(kubectl));
        self.table(
            "2. no-change resync",
            &[
                ("berth sync", &berth),
                ("kubectl apply --server-side (re-apply)", &kubectl),
            ],
            "s",
            Some(&kubectl),
        );
        self.notes.push(format!("No-change resync: {:.3} s median (target < 1 s); write requests per berth sync: {writes:?} (target 0).", berth.median()));
        Ok(())
    }

    /// Commit-to-applied latency with `berth run` watching the repository; leaves it
    /// running for the memory and CPU case.
    async fn latency(
        &mut self,
        config: &Path,
        prefix: &str,
        client: &kube::Client,
    ) -> Result<Daemon> {
        let repo = self.work.join(format!("repo-{prefix}"));
        let daemon = Daemon::start(&self.berth, config, "latency")?;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("{prefix}-0"));
        let rv = || async {
            maps.get("config-0")
                .await
                .ok()
                .and_then(|c| c.metadata.resource_version)
        };
        // Wait for the first sync (no change) to be done: a no-op commit round-trips.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let samples = daemon.explain(
            async {
                let mut samples = Vec::new();
                for i in 0..sized(20, 3) {
                    let before = rv().await;
                    let file = repo.join(format!("{prefix}-0/configmaps.yaml"));
                    let text = std::fs::read_to_string(&file)?;
                    let old = if i == 0 {
                        "value: \"0\"".to_string()
                    } else {
                        format!("value: \"v{}\"", i - 1)
                    };
                    std::fs::write(&file, text.replacen(&old, &format!("value: \"v{i}\""), 1))?;
                    git(&repo, &["commit", "-qam", &format!("change {i}")])?;
                    let start = Instant::now();
                    loop {
                        if rv().await != before {
                            break;
                        }
                        if start.elapsed() > Duration::from_secs(30) {
                            bail!("commit {i} was not applied within 30 s");
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    samples.push(start.elapsed().as_secs_f64() * 1000.0);
                }
                anyhow::Ok(samples)
            }
            .await,
        )?;
        let s = Samples(samples);
        self.rows.push(format!("| 3. commit → applied (notify), 20 commits | berth run | p50 {:.0} ms | p95 {:.0} ms | max {:.0} ms | — |", s.median(), s.percentile(0.95), s.max()));
        self.notes.push(format!("Commit-to-applied: p50 {:.0} ms, p95 {:.0} ms (target p50 < 500 ms), each commit re-planning all 1010 objects.", s.median(), s.percentile(0.95)));
        Ok(daemon)
    }

    fn memory_cpu(&mut self, daemon: Daemon) -> Result<()> {
        let pid = daemon.pid();
        let (before, start) = (fleet::cpu_seconds(pid)?, Instant::now());
        std::thread::sleep(Duration::from_secs(sized(60, 5) as u64));
        let used = (fleet::cpu_seconds(pid)? - before) / start.elapsed().as_secs_f64() * 100.0;
        let (peak, now) = daemon::rss(pid);
        drop(daemon);
        self.rows.push(format!("| 4. berth run, 1010 objects | peak RSS | {peak:.1} MiB | now {now:.1} MiB | — | {:.2} of Flux's idle 108 MiB |", peak / 108.0));
        self.rows.push(format!("| 4. berth run, 1010 objects | idle CPU over 60 s | {used:.3} % of a core | — | — | — |"));
        self.notes.push(format!("berth run: peak RSS {peak:.1} MiB (target < 50 MB; Flux's kustomize-controller is documented at 108–171 MiB idle), idle CPU {used:.3} % of a core (target < 1 %)."));
        Ok(())
    }

    fn git_fetch(&mut self) -> Result<()> {
        let origin = self.work.join("big-origin");
        std::fs::create_dir_all(&origin)?;
        git(&origin, &["init", "-q", "-b", "main"])?;
        // 5,000 files in the first commit, then 9,999 commits changing one file each.
        let mut stream = String::from("commit refs/heads/main\ncommitter bench <b@berth.invalid> 1700000000 +0000\ndata 5\nfirst\n");
        for f in 0..5000 {
            let body = format!("value: {f}");
            let _ = write!(
                stream,
                "M 644 inline files/{:02}/file-{f}.yaml\ndata {}\n{body}\n",
                f % 100,
                body.len()
            );
        }
        for c in 1..10_000 {
            let body = format!("value: {c}");
            let _ = write!(stream, "commit refs/heads/main\ncommitter bench <b@berth.invalid> {} +0000\ndata 6\nchange\nM 644 inline files/{:02}/file-{}.yaml\ndata {}\n{body}\n", 1_700_000_000 + c, (c % 5000) % 100, c % 5000, body.len());
        }
        let mut child = Command::new("git")
            .args(["fast-import", "--quiet"])
            .current_dir(&origin)
            .stdin(std::process::Stdio::piped())
            .spawn()?;
        std::io::Write::write_all(child.stdin.as_mut().context("stdin")?, stream.as_bytes())?;
        drop(child.stdin.take());
        if !child.wait()?.success() {
            bail!("git fast-import failed");
        }
        git(&origin, &["checkout", "-q", "main"])?;
        let url = format!("file://{}", origin.display());
        let cli = self.work.join("big-cli");
        run(Command::new("git").args(["clone", "-q", &url]).arg(&cli))?;
        let app = berth::config::parse(&format!(
            "[[app]]\nname = \"big\"\nrepo = \"{url}\"\nbranch = \"main\"\n"
        ))?
        .apps
        .remove(0);
        // The first fetch: berth takes the newest commit alone, as git clone --depth 1.
        // Each run writes to a new folder, and what they wrote is removed at the end: on
        // ext4, creating files just after removing thousands is slower (the allocator
        // passes over inodes freed in the last half minute), which would fall on whoever
        // runs right after a removal.
        let (mut first, mut shallow, mut whole) = (vec![], vec![], vec![]);
        let mut written = vec![];
        for rep in 0..reps() {
            let state = self.work.join(format!("big-state-{rep}"));
            let start = Instant::now();
            berth::source::git::fetch(&app, &state, Default::default())?;
            first.push(start.elapsed().as_secs_f64());
            written.push(state);
            for (depth, times) in [(Some("--depth=1"), &mut shallow), (None, &mut whole)] {
                let kind = if depth.is_some() { "shallow" } else { "whole" };
                let dir = self.work.join(format!("big-clone-{kind}-{rep}"));
                let start = Instant::now();
                run(Command::new("git")
                    .args(["clone", "-q", "--no-checkout"])
                    .args(depth)
                    .arg(&url)
                    .arg(&dir))?;
                git(&dir, &["checkout", "-q", "main"])?;
                times.push(start.elapsed().as_secs_f64());
                written.push(dir);
            }
        }
        // The first run's cache serves the incremental fetches.
        let state = written.swap_remove(0);
        for dir in written {
            std::fs::remove_dir_all(dir)?;
        }
        let (first, shallow, whole) = (Samples(first), Samples(shallow), Samples(whole));
        self.table(
            "5a. first fetch + checkout (10,000 commits, 5,000 files)",
            &[
                (
                    "berth (git2; a local repository: its object files copied)",
                    &first,
                ),
                ("git clone --depth=1 (CLI)", &shallow),
                ("git clone (CLI, whole history)", &whole),
            ],
            "s",
            Some(&shallow),
        );
        self.notes.push(format!(
            "First fetch: berth ÷ git clone --depth=1 = {:.2}; ÷ a whole git clone = {:.2}.",
            first.median() / shallow.median(),
            first.median() / whole.median()
        ));
        let (mut berth, mut cli_times) = (vec![], vec![]);
        for rep in 0..reps() {
            std::fs::write(
                origin.join("files/00/file-0.yaml"),
                format!("value: new-{rep}\n"),
            )?;
            git(&origin, &["commit", "-qam", "one more"])?;
            let start = Instant::now();
            berth::source::git::fetch(&app, &state, Default::default())?;
            berth.push(start.elapsed().as_secs_f64());
            let start = Instant::now();
            git(&cli, &["fetch", "-q", "origin", "main"])?;
            git(&cli, &["checkout", "-q", "--detach", "origin/main"])?;
            cli_times.push(start.elapsed().as_secs_f64());
        }
        let (berth, cli) = (Samples(berth), Samples(cli_times));
        self.table(
            "5. fetch + checkout of 1 new commit (10,000 commits, 5,000 files)",
            &[
                ("berth (git2)", &berth),
                ("git fetch + checkout (CLI)", &cli),
            ],
            "s",
            Some(&cli),
        );
        self.notes.push(format!(
            "Git fetch of 1 new commit: berth ÷ git fetch + checkout = {:.2} (target ≤ 1.0).",
            berth.median() / cli.median()
        ));
        Ok(())
    }

    fn rollout_requests(&mut self) -> Result<()> {
        let dir = self.work.join("rollout");
        std::fs::create_dir_all(&dir)?;
        let deployment = |image: &str, name: &str| {
            format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  replicas: 10\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n        - name: app\n          image: {image}\n          ports: [{{containerPort: 8080, protocol: TCP}}]\n")
        };
        std::fs::write(dir.join("web.yaml"), deployment("web:1", "web"))?;
        git(&dir, &["init", "-q", "-b", "main"])?;
        git(&dir, &["add", "-A"])?;
        git(&dir, &["commit", "-qm", "v1"])?;
        let config = self.config("rollout", &dir, 16)?;
        self.berth_sync(&config)?;
        std::fs::write(dir.join("web.yaml"), deployment("web:2", "web"))?;
        git(&dir, &["commit", "-qam", "v2"])?;
        let since = jiff::Timestamp::now();
        let berth_time = self.berth_sync(&config)?;
        std::thread::sleep(Duration::from_millis(300));
        let berth_all = requests(&self.cp, since, "berth/", None);
        let berth_requests = requests_for(&self.cp, since, "berth/", Some(READS), Some(TRACKED));
        // The peer: kubectl applies the same change to a twin and waits with rollout status.
        let twin = self.work.join("twin.yaml");
        std::fs::write(&twin, deployment("web:1", "twin"))?;
        self.kubectl_apply_and_wait(&twin, "deployment/twin")?;
        std::fs::write(&twin, deployment("web:2", "twin"))?;
        let since = jiff::Timestamp::now();
        let start = Instant::now();
        self.kubectl_apply_and_wait(&twin, "deployment/twin")?;
        let kubectl_time = start.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(300));
        let kubectl_all = requests(&self.cp, since, "kubectl/", None);
        let kubectl_requests =
            requests_for(&self.cp, since, "kubectl/", Some(READS), Some(TRACKED));
        self.rows.push(format!("| 6. following a 10-replica rollout: Deployment/ReplicaSet reads and watches | berth sync | {berth_requests} requests | whole sync {berth_all} requests, {berth_time:.1} s | — | {:.2} |", berth_requests as f64 / kubectl_requests.max(1) as f64));
        self.rows.push(format!("| 6. following a 10-replica rollout: Deployment/ReplicaSet reads and watches | kubectl apply + rollout status | {kubectl_requests} requests | whole run {kubectl_all} requests, {kubectl_time:.1} s | — | 1.00 |"));
        self.notes.push(format!("Rollout tracking: berth sent {berth_requests} reads and watches of Deployments and ReplicaSets while following (watches, no polling), kubectl rollout status {kubectl_requests}. Whole runs: berth {berth_all} requests (discovery of every API group is most of them, then the inventory, live-object lists, dry run and apply), kubectl {kubectl_all}."));
        Ok(())
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / 1048576.0
            })
        })
        .unwrap_or(0.0);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let kubectl = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    format!("{cores} cores ({cpu}), {mem:.0} GiB memory, Linux {}; control plane: etcd 3.4 + kube-apiserver / kube-controller-manager v1.20.2 on loopback with the kubelet stand-in; {kubectl}; berth release build.", kernel.trim())
}

#[tokio::main]
async fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs bench targets
    // without it, and must not start a ten-minute benchmark.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        eprintln!("berth-bench runs under `cargo bench --bench berth-bench` (scripts/bench)");
        return Ok(());
    }
    let out = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("docs/benchmarks.md"));
    let work = std::env::temp_dir().join(format!("berth-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let started = Instant::now();
    let cp = ControlPlane::up(&UpOptions {
        dir: work.join("cp"),
        bin: assets::ensure()?,
        deployment_controller: true,
        kubelet: Some(PathBuf::from(env!("CARGO_BIN_EXE_berth-testenv"))),
        controller_qps: None,
    })
    .await?;
    let client = cp.client().await?;
    let mut b = Bench {
        cp,
        work: work.clone(),
        berth: PathBuf::from(env!("CARGO_BIN_EXE_berth")),
        rows: Vec::new(),
        notes: Vec::new(),
    };
    // The scale cases' sizes: from the environment, else the measured run's or the smoke's.
    let sizes = |var: &str, full: &[usize], small: &[usize]| -> Vec<usize> {
        std::env::var(var)
            .ok()
            .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_else(|| if smoke() { small } else { full }.to_vec())
    };
    let clusters = sizes("BERTH_BENCH_CLUSTERS", &[250], &[5])[0];
    let fleets = sizes("BERTH_BENCH_FLEET", &[100, 500, 1000, 10000], &[10]);
    let growths = sizes("BERTH_BENCH_GROWTH", &[1000, 5000, 10000], &[100]);
    let only = std::env::var("BERTH_BENCH_ONLY").unwrap_or_default();
    let only_scale = only == "scale";
    if [
        "fetch", "chain", "chart", "registry", "secrets", "plan", "page", "clusters", "fleet",
        "growth", "images", "previews",
    ]
    .contains(&only.as_str())
    {
        // One case alone (the git and render cases need no cluster), printed only.
        let result = match only.as_str() {
            "clusters" => b.clusters(clusters).await,
            "fleet" => {
                async {
                    for &apps in &fleets {
                        b.fleet(apps).await?;
                    }
                    Ok::<_, anyhow::Error>(())
                }
                .await
            }
            "growth" => growths.iter().try_for_each(|&objects| b.growth(objects)),
            "fetch" => b.git_fetch(),
            "chart" => b.chart(),
            "registry" => b.registry(),
            "images" => b.images().await,
            "previews" => b.previews().await,
            "secrets" => b.secrets(),
            "plan" => b.plan_affected(),
            "page" => b.page_memory().await,
            _ => b.chain(),
        };
        let _ = ControlPlane::down(&b.cp.dir);
        let _ = std::fs::remove_dir_all(&work);
        result?;
        println!("{}", b.rows.join("\n"));
        for n in &b.notes {
            println!("- {n}");
        }
        return Ok(());
    }
    // A case that fails is reported (a daemon's log kept, its path in the message), the
    // others still run, and the run fails at the end.
    let mut failed = Vec::new();
    let mut check = |case: String, result: Result<()>| {
        if let Err(e) = result {
            eprintln!("{case}: failed: {e:#}");
            failed.push(format!("{case}: failed: {e:#}"));
        }
    };
    // Cases that wait for the Deployment controller go first: every cold apply below
    // leaves it 300 Deployments to process at 20 QPS. The fleets' Deployments are all
    // waited for by their first syncs.
    if !only_scale {
        check("cold apply and follow".into(), b.cold_apply_and_follow());
        check("rollout requests".into(), b.rollout_requests());
        check("ordering".into(), b.chain());
    }
    for apps in fleets {
        check(format!("{apps} apps"), b.fleet(apps).await);
    }
    for objects in growths {
        check(format!("One app of {objects} objects"), b.growth(objects));
    }
    check(
        format!("{clusters} apps on each of four clusters"),
        b.clusters(clusters).await,
    );
    if !only_scale {
        let resync = async {
            let config = b.cold_apply()?;
            b.no_change(&config)?;
            let daemon = b
                .latency(&config, &format!("b{}", reps() - 1), &client)
                .await?;
            b.memory_cpu(daemon)
        };
        check("cold apply, resync, latency, memory".into(), resync.await);
        check("git fetch".into(), b.git_fetch());
        check("charts".into(), b.chart());
        check("registries".into(), b.registry());
        check("image updates".into(), b.images().await);
        check("previews".into(), b.previews().await);
        check("secrets".into(), b.secrets());
        check("pull requests".into(), b.plan_affected());
        check("status page".into(), b.page_memory().await);
    }
    let _ = ControlPlane::down(&b.cp.dir);
    let _ = std::fs::remove_dir_all(&work);
    let mut md = format!("Machine: {}\n\nEach case ran {} times (the latency case {} commits) in one run of `scripts/bench`, {:.0} s in all. Ratios are berth's median ÷ the peer's median.\n\n| case | tool | median | min | max | ratio |\n| --- | --- | --- | --- | --- | --- |\n", machine(), reps(), sized(20, 3), started.elapsed().as_secs_f64());
    if smoke() {
        md.insert_str(0, "A smoke run (`BERTH_BENCH_SMOKE=1`): each case once at a small size; the figures mean nothing.\n\n");
    }
    for r in &b.rows {
        md.push_str(r);
        md.push('\n');
    }
    md.push_str("\n## Against the targets\n\n");
    for n in b.notes.iter().chain(&failed) {
        let _ = writeln!(md, "- {n}");
    }
    println!("{md}");
    write_generated(&out, &md)?;
    eprintln!("written to {}", out.display());
    if !failed.is_empty() {
        bail!(
            "{} of the cases failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    Ok(())
}

/// Where in `docs/benchmarks.md` a run's figures go: what lies between the two markers is
/// replaced, what is written around them by hand is kept.
const BEGIN: &str = "<!-- scripts/bench writes from here -->\n";
const END: &str = "<!-- scripts/bench writes up to here -->\n";

/// Writes `generated` between the markers of `out`, or a new file of them.
fn write_generated(out: &Path, generated: &str) -> Result<()> {
    let old = std::fs::read_to_string(out).unwrap_or_default();
    let text = match (old.find(BEGIN), old.find(END)) {
        (Some(begin), Some(end)) if begin < end => {
            format!("{}{BEGIN}{generated}{}", &old[..begin], &old[end..])
        }
        _ => format!("# Benchmarks\n\n{BEGIN}{generated}{END}"),
    };
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    Ok(std::fs::write(out, text)?)
}
