//! The scale cases: Flux's "mean time to production" workload (many apps of four objects
//! from one repository, one commit changing them all) and one app growing to 10,000
//! objects.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::daemon::{rss, Daemon};
use super::{git, requests, run, timed, Bench, Samples, WRITES};

/// Fleets larger than this get their first sync from `berth sync --no-wait` before
/// `berth run` starts, on a control plane of their own whose kube-controller-manager may
/// send [`OWN_PLANE_QPS`] requests a second: at its default 20, the Deployment controller's
/// four writes per new Deployment take 33 minutes for 10,000 (and as long again for
/// kubectl's copy).
const FOLLOWED: usize = 1000;

/// The `--kube-api-qps` of the larger fleets' kube-controller-manager.
const OWN_PLANE_QPS: u32 = 500;

/// What one fleet run measured.
struct Fleet {
    /// Seconds to every app's first record.
    first: f64,
    /// The Deployment controller's writes meanwhile (its own client, and so its own
    /// 20-a-second limit, in kube-controller-manager).
    controller_writes: usize,
    /// Seconds from the commit to every app's record of it.
    seconds: f64,
    /// Peak RSS over the whole run, MiB.
    peak: f64,
    /// Requests berth sent for the commit.
    sent: usize,
    /// Percent of a core in the minute after.
    idle: f64,
    /// Requests per hour while idle, and a hand edit's repair.
    quiet: super::drift::Idle,
}

/// Flux's published figures for the same workload (16-core runner): apps, seconds, MiB.
const FLUX: [(usize, f64, f64); 3] = [(100, 28.0, 32.0), (500, 122.0, 122.0), (1000, 256.0, 175.0)];

/// App `i`'s four objects, as Flux's benchmark has them, at `version`.
fn app_objects(ns: &str, i: usize, version: usize) -> String {
    let name = format!("app-{i}");
    let labels = format!("{{app: {name}, version: v{version}}}");
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {labels}\nspec:\n  replicas: 0\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n        - name: app\n          image: registry.example/app:1\n          ports: [{{containerPort: 8080, protocol: TCP}}]\n\
---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {labels}\n\
---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {labels}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{port: 80, targetPort: 8080, protocol: TCP}}]\n\
---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {labels}\nspec:\n  rules:\n    - host: {name}.example\n      http:\n        paths:\n          - path: /\n            pathType: Prefix\n            backend:\n              service: {{name: {name}, port: {{number: 80}}}}\n"
    )
}

/// Writes `apps` folders `apps/app-<i>/objects.yaml` at `version` under `dir`.
pub(crate) fn write_fleet(dir: &Path, ns: &str, apps: usize, version: usize) -> Result<()> {
    for i in 0..apps {
        let d = dir.join(format!("apps/app-{i}"));
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("objects.yaml"), app_objects(ns, i, version))?;
    }
    Ok(())
}

/// CPU seconds a process has used (user and system).
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
    Ok(ticks as f64 / 100.0) // USER_HZ
}

/// A commit, and the time after which a sync of it counts.
pub(crate) type Wanted<'a> = (&'a str, jiff::Timestamp);

/// Whether `app` has a succeeded (or no-change) record of the commit `wanted`, started
/// after its time (not a record of the same commit by an earlier process).
fn applied(log: &berth::history::HistoryLog, app: &str, (sha, since): Wanted) -> bool {
    log.read(app).is_ok_and(|records| {
        records.iter().any(|r| {
            r.started_at >= since
                && r.commit.as_ref().is_some_and(|c| c.sha == sha)
                && matches!(
                    r.outcome,
                    berth::history::Outcome::Succeeded | berth::history::Outcome::NoChange
                )
        })
    })
}

/// Waits until every app `app-<i>` of `apps` has applied `wanted`; how long that took.
pub(crate) fn wait_applied(
    state: &Path,
    apps: usize,
    wanted: Wanted,
    timeout: Duration,
) -> Result<f64> {
    let names: Vec<String> = (0..apps).map(|i| format!("app-{i}")).collect();
    wait_named(state, &names, wanted, timeout)
}

/// Waits until every app of `apps` has applied `wanted`; how long that took. Only the apps
/// still waited for are looked at again, less often while they are many, and a history is
/// read only when its file has grown (10,000 histories read ten times a second would take
/// a core from what is measured).
pub(crate) fn wait_named(
    state: &Path,
    apps: &[String],
    wanted: Wanted,
    timeout: Duration,
) -> Result<f64> {
    let start = Instant::now();
    let log = berth::history::HistoryLog::new(state);
    let mut pending: Vec<(&String, u64)> = apps.iter().map(|app| (app, 0)).collect();
    loop {
        pending.retain_mut(|(app, read)| {
            let size = std::fs::metadata(log.file(app)).map_or(0, |m| m.len());
            let grown = std::mem::replace(read, size) != size;
            !(grown && applied(&log, app, wanted))
        });
        if pending.is_empty() {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > timeout {
            bail!(
                "{} of {} apps applied {} within {timeout:?} (not {}, …)",
                apps.len() - pending.len(),
                apps.len(),
                &wanted.0[..7],
                pending[0].0
            );
        }
        std::thread::sleep(Duration::from_millis(100 + pending.len() as u64 / 10));
    }
}

/// Runs a command; its wall time and peak RSS in MiB (`VmHWM`, sampled every 5 ms until
/// it exits: the peak of a sync comes well before its end). Not wait4's `ru_maxrss`: that
/// counts the parent's pages copied by the fork, before the exec.
fn run_measured(cmd: &mut Command) -> Result<(f64, f64)> {
    let start = Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut peak: f64 = 0.0;
    let status = loop {
        peak = peak.max(rss(child.id()).0);
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok((start.elapsed().as_secs_f64(), peak))
}

impl Bench {
    /// `apps` apps of four objects in `ns`, at version 1, committed to a repository
    /// `work/<label>`, and berth's configuration of them — one app set over the folders,
    /// each app named after its folder (`app-<i>`): the repository and the
    /// configuration's path.
    pub(crate) fn fleet_setup(
        &self,
        label: &str,
        ns: &str,
        apps: usize,
    ) -> Result<(PathBuf, PathBuf)> {
        let repo = self.fleet_repo(label, ns, apps)?;
        let config = self.set_config(
            label,
            &repo,
            std::slice::from_ref(&self.cp.kubeconfig),
            "app_name = \"{folder}\"\n",
        )?;
        Ok((repo, config))
    }

    /// `apps` apps of four objects in `ns`, at version 1, committed to a repository
    /// `work/<label>`.
    pub(crate) fn fleet_repo(&self, label: &str, ns: &str, apps: usize) -> Result<PathBuf> {
        let repo = self.work.join(label);
        write_fleet(&repo, ns, apps, 1)?;
        git(&repo, &["init", "-q", "-b", "main"])?;
        git(&repo, &["add", "-A"])?;
        git(&repo, &["commit", "-qm", "version 1"])?;
        Ok(repo)
    }

    /// berth's configuration of one app set over the folders `apps/*` of `repo` on every
    /// cluster of `kubeconfigs` (named `c0`, `c1`, …), with `keys` added to the set; its
    /// state in `work/state-<label>`, where the configuration is written: its path. Each
    /// is a deployment of its own: its inventories in a namespace of their own, so another
    /// case's apps (same names, another repository) are not taken for a rewound history.
    pub(crate) fn set_config(
        &self,
        label: &str,
        repo: &Path,
        kubeconfigs: &[PathBuf],
        keys: &str,
    ) -> Result<PathBuf> {
        let state = self.work.join(format!("state-{label}"));
        std::fs::create_dir_all(&state)?;
        let mut config = format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\ninventory_namespace = \"berth-{label}\"\n",
            state.display()
        );
        for (i, kubeconfig) in kubeconfigs.iter().enumerate() {
            let _ = write!(
                config,
                "[[cluster]]\nname = \"c{i}\"\nkubeconfig = \"{}\"\n",
                kubeconfig.display()
            );
        }
        let _ = write!(
            config,
            "[[app_set]]\nname = \"fleet\"\nrepo = \"{}\"\nfolders = \"apps/*\"\nclusters = \"*\"\n{keys}[app_set.scope]\nnamespaces = [\"*\"]\n",
            repo.display()
        );
        let path = state.join("berth.toml");
        std::fs::write(&path, config)?;
        Ok(path)
    }

    /// Flux's workload at `apps` apps: `berth run` watching the repository, one commit
    /// changing every app's four objects (their labels; not the pod templates, so the
    /// cluster's Deployment controller, at its default 20 QPS, is not what is measured);
    /// time to every app's record of the commit, peak RSS over the whole run, requests,
    /// and the CPU of the steady state after it; beside `kubectl apply --server-side` of
    /// the same change, and Flux's published figures. Before, `berth run`'s first sync of
    /// every app (following the Deployments' rollouts), and the part of it the Deployment
    /// controller's writes take at 20 a second. Both changes are timed once the Deployment
    /// controller is done with the Deployments they change.
    pub async fn fleet(&mut self, apps: usize) -> Result<()> {
        if apps <= FOLLOWED {
            return self.fleet_here(apps);
        }
        self.on_extra_plane(&format!("cp-fleet-{apps}"), Some(OWN_PLANE_QPS), |b| {
            b.fleet_here(apps)
        })
        .await
    }

    /// [`Self::fleet`] on `self.cp`.
    fn fleet_here(&mut self, apps: usize) -> Result<()> {
        let (ns, kns) = (format!("fleet-{apps}"), format!("fleet-{apps}-kubectl"));
        for ns in [&ns, &kns] {
            run(self.kubectl().args(["create", "namespace", ns]))?;
        }
        let (repo, path) = self.fleet_setup(&format!("fleet-{apps}"), &ns, apps)?;
        let state = path.parent().unwrap_or(&self.work).to_path_buf();
        // kubectl: the same change to the same objects, applied by kubectl before.
        let mirror = self.work.join(format!("fleet-{apps}-kubectl"));
        if apps > FOLLOWED {
            run(Command::new(&self.berth)
                .args(["sync", "--no-wait", "--config"])
                .arg(&path))?;
            self.kubectl_fleet(&mirror, &kns, apps, 1)?;
            // Both copies' Deployments leave the Deployment controller minutes of writes:
            // the commit is measured after them, as the smaller fleets' is after a first
            // sync that follows every rollout.
            self.wait_deployments_complete(&[&ns, &kns], apps)?;
        }
        let since = jiff::Timestamp::now();
        let daemon = Daemon::start(&self.berth, &path, &format!("fleet-{apps}"))?;
        let m = daemon.explain(self.fleet_change(apps, &ns, &repo, &state, since, daemon.pid()))?;
        drop(daemon);
        if apps <= FOLLOWED {
            self.kubectl_fleet(&mirror, &kns, apps, 1)?;
            self.wait_deployments_complete(&[&kns], apps)?;
        }
        let kubectl = self.kubectl_fleet(&mirror, &kns, apps, 2)?;
        let flux = FLUX
            .iter()
            .find(|f| f.0 == apps)
            .map_or(String::new(), |(_, s, mib)| {
                format!("; Flux: {s:.0} s, {mib:.0} MiB")
            });
        let first = if apps > FOLLOWED {
            format!(
                "first sync {:.0} s (the apps applied before by berth sync --no-wait; a control plane of its own, whose kube-controller-manager may send {OWN_PLANE_QPS} requests a second)",
                m.first
            )
        } else {
            let share = m.controller_writes as f64 / 20.0;
            format!(
                "first sync {:.0} s, berth's own part {:.0} % (the Deployment controller's {} writes take {share:.0} s at 20 a second)",
                m.first,
                (m.first - share).max(0.0) / m.first * 100.0,
                m.controller_writes
            )
        };
        eprintln!("fleet of {apps}: berth {:.1}s, {:.1} MiB, {} requests, idle {:.2} %; {first}; kubectl {kubectl:.1}s", m.seconds, m.peak, m.sent, m.idle);
        self.rows.push(format!(
            "| 6. {apps} apps × 4 objects from one app set, one commit changing all (notify) | berth run | every app applied in {:.1} s; peak {:.1} MiB | {first} | {} requests; idle {:.2} % of a core | {:.2} of kubectl ({kubectl:.1} s){flux} |",
            m.seconds, m.peak, m.sent, m.idle, m.seconds / kubectl
        ));
        let q = &m.quiet;
        self.rows.push(format!(
            "| 6. {apps} idle apps (interval = \"1h\"): requests per hour; a hand edit (replicas of one Deployment) → repaired | berth run | {:.0} requests/hour; repaired in {:.2} s | — | — | {:.2} of kubectl apply --server-side of its file ({:.2} s) |",
            q.per_hour, q.repaired, q.repaired / q.kubectl, q.kubectl
        ));
        self.notes.push(format!(
            "{apps} apps × 4 objects from one app set, one commit changing all: every app applied {:.1} s after the commit ({:.2} of kubectl apply --server-side's {kubectl:.1} s); berth run's peak RSS over the whole run {:.1} MiB; {} requests ({:.1} per app); {first}; afterwards, with no commit and interval = \"1h\", {:.2} % of a core.",
            m.seconds, m.seconds / kubectl, m.peak, m.sent, m.sent as f64 / apps as f64, m.idle
        ));
        Ok(())
    }

    /// Writes the fleet's `apps` apps at `version` in `ns` to `mirror` and applies them
    /// with `kubectl apply --server-side`; how long the apply took.
    fn kubectl_fleet(&self, mirror: &Path, ns: &str, apps: usize, version: usize) -> Result<f64> {
        write_fleet(mirror, ns, apps, version)?;
        timed(
            self.kubectl()
                .args(["apply", "--server-side", "-R", "-f"])
                .arg(mirror),
        )
    }

    /// Waits until the Deployment controller is done with each of the `apps` Deployments
    /// in each of `namespaces` (their rollout complete: `Progressing` for
    /// `NewReplicaSetAvailable`), saying how far it is every minute.
    fn wait_deployments_complete(&self, namespaces: &[&str], apps: usize) -> Result<()> {
        let start = Instant::now();
        let wanted = apps * namespaces.len();
        loop {
            let mut done = 0;
            for ns in namespaces {
                let reasons = self
                    .kubectl()
                    .args(["get", "deployments", "-n", ns, "-o"])
                    .arg("jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Progressing\")].reason}{\"\\n\"}{end}")
                    .output()?;
                done += String::from_utf8_lossy(&reasons.stdout)
                    .lines()
                    .filter(|l| *l == "NewReplicaSetAvailable")
                    .count();
            }
            if done >= wanted {
                eprintln!(
                    "fleet of {apps}: the Deployment controller was done with {wanted} Deployments in {:.0}s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(3600) {
                bail!("the Deployment controller was done with {done} of {wanted} Deployments within 3600 s");
            }
            if start.elapsed().as_secs() % 60 < 15 {
                eprintln!("fleet of {apps}: the Deployment controller is done with {done} of {wanted} Deployments");
            }
            std::thread::sleep(Duration::from_secs(15));
        }
    }

    /// The measured part of [`Self::fleet`]: `berth run` (process `pid`, started at
    /// `since`) syncs every app, then a commit changes them all.
    fn fleet_change(
        &mut self,
        apps: usize,
        ns: &str,
        repo: &Path,
        state: &Path,
        since: jiff::Timestamp,
        pid: u32,
    ) -> Result<Fleet> {
        let sha = git(repo, &["rev-parse", "HEAD"])?.trim().to_string();
        let first = wait_applied(state, apps, (&sha, since), Duration::from_secs(1800))?;
        std::thread::sleep(Duration::from_millis(500)); // the audit log lags the answers
        let controller_writes = requests(
            &self.cp,
            since,
            "kube-controller-manager/*/deployment-controller",
            Some(WRITES),
        );
        eprintln!("fleet of {apps}: first sync of every app in {first:.0}s");
        write_fleet(repo, ns, apps, 2)?;
        let since = jiff::Timestamp::now();
        git(repo, &["commit", "-qam", "version 2"])?;
        let sha = git(repo, &["rev-parse", "HEAD"])?.trim().to_string();
        // At least 900 s, and 5 apps a second.
        let timeout = Duration::from_secs((apps as u64 / 5).max(900));
        let seconds = wait_applied(state, apps, (&sha, since), timeout)?;
        std::thread::sleep(Duration::from_millis(500));
        let sent = requests(&self.cp, since, "berth/", None);
        // The steady state: no commit, every app's next interval an hour away (over five
        // minutes at 1000 apps: each drift watch renews itself about every five); then a
        // hand edit repaired.
        let (cpu, start) = (cpu_seconds(pid)?, Instant::now());
        let window = super::sized(if apps == 1000 { 300 } else { 60 }, 5);
        let quiet = self.idle_and_drift(ns, repo, Duration::from_secs(window as u64))?;
        let idle = (cpu_seconds(pid)? - cpu) / start.elapsed().as_secs_f64() * 100.0;
        Ok(Fleet {
            first,
            controller_writes,
            seconds,
            peak: rss(pid).0,
            sent,
            idle,
            quiet,
        })
    }

    /// One app of `objects` ConfigMaps: cold apply, no-change resync and peak RSS of
    /// `berth sync --no-wait`, beside kubectl's cold `apply --server-side`.
    pub fn growth(&mut self, objects: usize) -> Result<()> {
        let ns = format!("grow-{objects}");
        let repo = self.work.join(format!("grow-{objects}"));
        let write = |dir: &Path, ns: &str| -> Result<()> {
            std::fs::create_dir_all(dir)?;
            let mut text = format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n");
            for j in 0..objects {
                let _ = write!(text, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{j}\n  namespace: {ns}\ndata:\n  value: \"{j}\"\n");
            }
            Ok(std::fs::write(dir.join("objects.yaml"), text)?)
        };
        write(&repo, &ns)?;
        git(&repo, &["init", "-q", "-b", "main"])?;
        git(&repo, &["add", "-A"])?;
        git(&repo, &["commit", "-qm", "objects"])?;
        let config: PathBuf = self.config(&format!("grow-{objects}"), &repo, 16)?;
        let sync = |b: &Bench| {
            run_measured(
                Command::new(&b.berth)
                    .args(["sync", "--no-wait", "--config"])
                    .arg(&config),
            )
        };
        let (cold, cold_rss) = sync(self)?;
        let (resync, resync_rss) = sync(self)?;
        let mirror = self.work.join(format!("grow-{objects}-kubectl"));
        write(&mirror, &format!("{ns}-kubectl"))?;
        let kubectl = timed(
            self.kubectl()
                .args(["apply", "--server-side", "-f"])
                .arg(mirror.join("objects.yaml")),
        )?;
        eprintln!("growth {objects}: cold {cold:.1}s {cold_rss:.0} MiB, resync {resync:.2}s {resync_rss:.0} MiB, kubectl {kubectl:.1}s");
        self.rows.push(format!(
            "| 7. one app of {objects} ConfigMaps | berth sync --no-wait | cold {cold:.2} s, {cold_rss:.1} MiB | no change {resync:.2} s, {resync_rss:.1} MiB | — | {:.2} of kubectl apply --server-side ({kubectl:.2} s) |",
            cold / kubectl
        ));
        Ok(())
    }

    /// The cold apply as kubectl would do berth's work: a server-side dry run of every
    /// object, then the apply — namespaces first (a dry run cannot see a namespace that
    /// is not there yet; berth, too, dry-runs and applies them first).
    pub fn kubectl_like_berth(&mut self, berth: &Samples) -> Result<()> {
        let mut times = Vec::new();
        for rep in 0..super::reps() {
            let dir = self.repo(&format!("d{rep}"))?;
            let (mut namespaces, mut rest) = (Vec::new(), Vec::new());
            for folder in std::fs::read_dir(&dir)? {
                let folder = folder?.path();
                if !folder.is_dir() || folder.ends_with(".git") {
                    continue;
                }
                for file in std::fs::read_dir(&folder)? {
                    let file = file?.path();
                    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    let list = if name == "00-namespace.yaml" {
                        &mut namespaces
                    } else {
                        &mut rest
                    };
                    list.extend(["-f".into(), file.display().to_string()]);
                }
            }
            let start = Instant::now();
            for files in [&namespaces, &rest] {
                run(self
                    .kubectl()
                    .args(["apply", "--server-side", "--dry-run=server"])
                    .args(files))?;
                run(self.kubectl().args(["apply", "--server-side"]).args(files))?;
            }
            times.push(start.elapsed().as_secs_f64());
        }
        let peer = Samples(times);
        self.table(
            "1. cold apply, 1010 objects",
            &[(
                "kubectl apply --server-side --dry-run=server, then apply",
                &peer,
            )],
            "s",
            None,
        );
        self.notes.push(format!(
            "Cold apply, like with like: berth (dry run of the whole commit, then the apply) ÷ kubectl doing the same two passes = {:.2} (target ≤ 0.33).",
            berth.median() / peer.median()
        ));
        Ok(())
    }
}
