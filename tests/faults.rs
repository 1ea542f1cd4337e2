//! The fault suite: each fault injected at a random point of a sync of a realistic app
//! (213 objects: 200 ConfigMaps, 3 Deployments rolling out, 10 objects pruned by every
//! commit), against the real control plane, `BERTH_FAULTS_N` times (default 1), checking
//! after each that the next sync converges: it exits 0; the cluster holds exactly the
//! commit's objects; the inventory holds exactly them at that commit; the history parses
//! and records the faulted attempt; no ConfigMap of the app has a second field manager.
//!
//! It prints "n/N survived" per fault; with `BERTH_FAULTS_REPORT=FILE` it writes the
//! table (`scripts/faults` writes docs/reliability.md). The state folder is a small tmpfs
//! (so that it can be filled and made read-only), which needs root; without root those
//! two faults are reported as not run.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use berth::history::{HistoryLog, Outcome};
use berth::sync::Step;
use berth_testenv::ControlPlane;
use common::proxy::Proxy;
use common::Repo;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

const APP: &str = "faults";
const BASE: usize = 200;
const PER_GENERATION: usize = 10;
const DEPLOYMENTS: usize = 3;
const SYNC_TIMEOUT: Duration = Duration::from_secs(240);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill(Step),
    ApiServerRestart,
    Api429,
    Api5xx,
    WatchDrop,
    EtcdRestart,
    StateFull,
    StateReadOnly,
    InventoryDeleted,
    InventoryEdited,
    InventoryEditedMidSync,
    OtherFieldManager,
    GitRemoteGone,
    GitForcePush,
    GitCacheTruncated,
    ConcurrentSync,
    ReloadRemovesApp,
}

const FAULTS: &[Fault] = &[
    Fault::Kill(Step::Fetch),
    Fault::Kill(Step::Render),
    Fault::Kill(Step::DryRun),
    Fault::Kill(Step::Apply),
    Fault::Kill(Step::RollOut),
    Fault::Kill(Step::Prune),
    Fault::Kill(Step::History),
    Fault::ApiServerRestart,
    Fault::Api429,
    Fault::Api5xx,
    Fault::WatchDrop,
    Fault::EtcdRestart,
    Fault::StateFull,
    Fault::StateReadOnly,
    Fault::InventoryDeleted,
    Fault::InventoryEdited,
    Fault::InventoryEditedMidSync,
    Fault::OtherFieldManager,
    Fault::GitRemoteGone,
    Fault::GitForcePush,
    Fault::GitCacheTruncated,
    Fault::ConcurrentSync,
    Fault::ReloadRemovesApp,
];

impl Fault {
    fn name(self) -> String {
        match self {
            Fault::Kill(step) => format!("SIGKILL of berth during {step}"),
            Fault::ApiServerRestart => "kube-apiserver killed and restarted".into(),
            Fault::Api429 => "API server answers 429 for 2-4 s".into(),
            Fault::Api5xx => "API server answers 503 for 2-4 s".into(),
            Fault::WatchDrop => "watch connections cut mid-rollout".into(),
            Fault::EtcdRestart => "etcd killed and restarted".into(),
            Fault::StateFull => "state_dir full (berth sync, then berth run)".into(),
            Fault::StateReadOnly => "state_dir read-only".into(),
            Fault::InventoryDeleted => "inventory ConfigMap deleted by hand".into(),
            Fault::InventoryEdited => "inventory ConfigMap edited by hand".into(),
            Fault::InventoryEditedMidSync => {
                "inventory ConfigMap changed by another writer mid-sync".into()
            }
            Fault::OtherFieldManager => "an owned object changed by another field manager".into(),
            Fault::GitRemoteGone => "git remote disappears".into(),
            Fault::GitForcePush => {
                "branch force-pushed to an unrelated history (refused, then accepted)".into()
            }
            Fault::GitCacheTruncated => "repository cache truncated".into(),
            Fault::ConcurrentSync => "`berth sync` while `berth run` syncs the app".into(),
            Fault::ReloadRemovesApp => "SIGHUP mid-sync removing the app".into(),
        }
    }
}

/// A number in `0..n` (n > 0), from the standard library's random hasher keys.
fn random(n: u64) -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        % n.max(1)
}

struct Lab {
    cp: &'static ControlPlane,
    client: kube::Client,
    repo: Repo,
    ns: String,
    _dir: tempfile::TempDir,
    state: PathBuf,
    config: PathBuf,
    proxy: Proxy,
    tmpfs: bool,
    /// The port of `berth run`'s endpoint.
    port: u16,
    generation: usize,
}

/// What one run of a fault showed.
struct Tried {
    /// Where the fault landed (for SIGKILL: the step the marker named).
    landed: String,
    /// From the fault's end to the next sync's success.
    recovery: Duration,
}

impl Lab {
    async fn new(cp: &'static ControlPlane) -> Lab {
        let client = common::client(cp).await;
        let ns = common::namespace(&client, "faults").await;
        let proxy = Proxy::start(common::client(cp).await).await;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        let tmpfs = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=48m", "tmpfs"])
            .arg(&state)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: {}\nusers:\n- name: anyone\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: anyone\ncurrent-context: proxy\n",
                proxy.url
            ),
        )
        .unwrap();
        let repo = Repo::new();
        let config = dir.path().join("berth.toml");
        let lab = Lab {
            cp,
            client,
            repo,
            ns,
            _dir: dir,
            state,
            config,
            proxy,
            tmpfs,
            port: std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .unwrap()
                .port(),
            generation: 0,
        };
        lab.write_config(true);
        lab
    }

    fn write_config(&self, with_app: bool) {
        let app = format!(
            "[[app]]\nname = \"{APP}\"\nrepo = \"{}\"\nnamespace = \"{}\"\nprune = true\nforce_conflicts = true\n[app.rollout]\ntimeout = \"3m\"\n",
            self.repo.dir.path().display(),
            self.ns
        );
        std::fs::write(
            &self.config,
            format!(
                "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"127.0.0.1:{}\"\nhistory_keep = 100000\n[cluster]\nkubeconfig = \"{}\"\n{}",
                self.state.display(),
                self.port,
                dir_of(&self.config).join("kubeconfig").display(),
                if with_app { app } else { String::new() }
            ),
        )
        .unwrap();
    }

    /// Commits generation `g` of the app.
    fn commit(&mut self, g: usize) -> String {
        self.generation = g;
        self.write_generation(g);
        self.repo.commit(&format!("generation {g}"))
    }

    fn write_generation(&self, g: usize) {
        let mut base = String::new();
        for i in 0..BASE {
            let value = if i % 5 == 0 {
                g.to_string()
            } else {
                "0".into()
            };
            base.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: base-{i:03}\ndata:\n  gen: \"{value}\"\n"
            ));
        }
        self.repo.write("base.yaml", &base);
        let mut gen = String::new();
        for k in 0..PER_GENERATION {
            gen.push_str(&format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gen-{g}-{k}\ndata:\n  k: \"{k}\"\n"
            ));
        }
        self.repo.write("generation.yaml", &gen);
        let mut deploy = String::new();
        for d in 0..DEPLOYMENTS {
            deploy.push_str(&format!(
                "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-{d}\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: web-{d}}}\n  template:\n    metadata:\n      labels: {{app: web-{d}}}\n      annotations: {{gen: \"{g}\"}}\n    spec:\n      containers:\n      - name: web\n        image: registry.example/web:{g}\n"
            ));
        }
        self.repo.write("deployments.yaml", &deploy);
    }

    fn berth(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.args(args).arg("--config").arg(&self.config);
        cmd
    }

    fn spawn_sync(&self) -> Child {
        self.berth(&["sync"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("berth sync")
    }

    /// `berth sync` to the end: exit code and output.
    fn sync(&self) -> (i32, String) {
        finish(self.spawn_sync())
    }

    /// `berth sync --accept-rewind` to the end: after a history rewritten on purpose.
    fn sync_accepting_rewind(&self) -> (i32, String) {
        finish(
            self.berth(&["sync", "--accept-rewind"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("berth sync"),
        )
    }

    fn history(&self) -> Vec<berth::history::SyncRecord> {
        HistoryLog::new(&self.state)
            .read(APP)
            .expect("the history parses")
    }

    /// The step of the sync in flight, from its lock file.
    fn step(&self) -> Option<Step> {
        berth::sync::in_flight(&self.state, APP).map(|m| m.step)
    }

    /// Waits until the sync in flight is in `step` (false: `child` ended first).
    fn wait_for_step(&self, child: &mut Child, step: Step) -> bool {
        let end = Instant::now() + SYNC_TIMEOUT;
        while Instant::now() < end {
            if self.step() == Some(step) {
                return true;
            }
            if child.try_wait().unwrap().is_some() {
                return false;
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        false
    }

    /// Waits until a sync of the app (any process's) is in `step`.
    fn wait_for_any_step(&self, step: Step) -> bool {
        let end = Instant::now() + SYNC_TIMEOUT;
        while self.step() != Some(step) {
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        true
    }

    /// Checks that the cluster, the inventory, the history and the field managers hold
    /// exactly generation `g` at commit `sha`.
    async fn converged(&self, g: usize, sha: &str) -> Result<(), String> {
        self.holds(g, sha).await?;
        let last = self.history().pop().ok_or("no history")?;
        if last.outcome != Outcome::Succeeded {
            return Err(format!("last record is {:?}", last.outcome));
        }
        Ok(())
    }

    /// Checks that the cluster and the inventory hold exactly generation `g` at `sha`
    /// (after a refused sync: nothing changed).
    async fn holds(&self, g: usize, sha: &str) -> Result<(), String> {
        let label = ListParams::default().labels(&format!("berth.dev/app={APP}"));
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
        let live = maps.list(&label).await.map_err(|e| e.to_string())?;
        let names: BTreeSet<String> = live
            .items
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        let want: BTreeSet<String> = (0..BASE)
            .map(|i| format!("base-{i:03}"))
            .chain((0..PER_GENERATION).map(|k| format!("gen-{g}-{k}")))
            .collect();
        if names != want {
            let lost: Vec<_> = want.difference(&names).take(5).collect();
            let extra: Vec<_> = names.difference(&want).take(5).collect();
            return Err(format!("ConfigMaps: lost {lost:?}, left {extra:?}"));
        }
        for c in &live.items {
            let name = c.metadata.name.as_deref().unwrap_or_default();
            let managers: BTreeSet<&str> = c
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .filter_map(|m| m.manager.as_deref())
                .collect();
            if managers != BTreeSet::from(["berth"]) {
                return Err(format!("ConfigMap {name} is managed by {managers:?}"));
            }
        }
        let gen0 = live
            .items
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some("base-000"))
            .and_then(|c| c.data.as_ref()?.get("gen").cloned());
        if gen0.as_deref() != Some(&g.to_string()) {
            return Err(format!("base-000 holds gen {gen0:?}, not {g}"));
        }
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.ns);
        for d in deployments.list(&label).await.map_err(|e| e.to_string())? {
            let image = d
                .spec
                .and_then(|s| s.template.spec)
                .map(|s| s.containers[0].image.clone().unwrap_or_default());
            if image != Some(format!("registry.example/web:{g}")) {
                return Err(format!("Deployment image {image:?}, not generation {g}"));
            }
        }
        let inv = self.inventory().await?;
        if inv["commit"] != sha {
            return Err(format!("inventory at {}, not {sha}", inv["commit"]));
        }
        let held = configmap_names(&inv);
        if held != want {
            return Err(format!(
                "inventory holds {} ConfigMaps, not the commit's {}",
                held.len(),
                want.len()
            ));
        }
        Ok(())
    }

    /// Runs `fault` once: commit the next generation, sync with the fault, then commit
    /// once more and check that a plain sync converges.
    async fn try_once(&mut self, fault: Fault) -> Result<Tried, String> {
        let g = self.generation + 1;
        let sha = self.commit(g);
        let before = self.history().len();
        let mut landed = String::from("-");
        let mut recorded: Option<String> = None;
        match fault {
            Fault::Kill(step) => {
                let mut child = self.spawn_sync();
                if !self.wait_for_step(&mut child, step) {
                    let (code, out) = finish(child);
                    return Err(format!("the sync ended (exit {code}) before {step}: {out}"));
                }
                let max_ms = match step {
                    Step::DryRun => 100,
                    Step::Apply => 40,
                    Step::RollOut => 2000,
                    Step::Prune => 30,
                    Step::Render => 10,
                    _ => 0,
                };
                std::thread::sleep(Duration::from_millis(random(max_ms + 1)));
                let marker = berth::sync::in_flight(&self.state, APP);
                let _ = child.kill();
                let _ = child.wait();
                landed = marker
                    .as_ref()
                    .map_or("ended".into(), |m| m.step.to_string());
                recorded = marker.map(|m| m.id);
            }
            Fault::ApiServerRestart | Fault::EtcdRestart => {
                let component = if fault == Fault::EtcdRestart {
                    "etcd"
                } else {
                    "kube-apiserver"
                };
                let child = self.spawn_sync();
                std::thread::sleep(Duration::from_millis(200 + random(2500)));
                landed = self.step().map_or("ended".into(), |s| s.to_string());
                let restarted = self.restart(component).await;
                let (code, _) = finish(child);
                restarted?;
                if code == 0 {
                    landed.push_str(", ridden out");
                }
            }
            Fault::Api429 | Fault::Api5xx => {
                let mut child = self.spawn_sync();
                let at = [Step::DryRun, Step::Apply, Step::RollOut][random(3) as usize];
                self.wait_for_step(&mut child, at);
                landed = at.to_string();
                let answered = self.proxy.answered();
                self.proxy
                    .answer(if fault == Fault::Api429 { 429 } else { 503 });
                std::thread::sleep(Duration::from_millis(2000 + random(2000)));
                self.proxy.answer(0);
                let (code, out) = finish(child);
                if self.proxy.answered() == answered {
                    landed = "after the sync".into();
                } else if code != 0 {
                    return Err(format!("the sync did not ride out the errors: {out}"));
                }
            }
            Fault::WatchDrop => {
                let mut child = self.spawn_sync();
                if self.wait_for_step(&mut child, Step::RollOut) {
                    std::thread::sleep(Duration::from_millis(random(500)));
                    landed = self.step().map_or("ended".into(), |s| s.to_string());
                    self.proxy.cut();
                }
                let (code, out) = finish(child);
                if code != 0 {
                    return Err(format!("a cut watch failed the sync: {out}"));
                }
            }
            Fault::StateFull | Fault::StateReadOnly => {
                if fault == Fault::StateFull {
                    fill(&self.state);
                } else {
                    remount(&self.state, "ro");
                }
                let (code, out) = self.sync();
                let unchanged = self.holds(g - 1, &self.previous_commit()).await;
                let agent = if fault == Fault::StateFull {
                    let mut daemon = self.daemon();
                    let served = self.agent_rides_out_a_full_disk(g).await;
                    terminate(&mut daemon);
                    served
                } else {
                    remount(&self.state, "rw");
                    Ok(())
                };
                let _ = std::fs::remove_file(self.state.join("filler"));
                if code == 0 || !out.contains("state_dir") {
                    return Err(format!("exit {code} without naming state_dir: {out}"));
                }
                unchanged.map_err(|e| format!("the refused sync changed the cluster: {e}"))?;
                agent?;
                landed = "lock".into();
            }
            Fault::InventoryDeleted | Fault::InventoryEdited => {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "berth-system");
                let name = format!("berth-inventory-{APP}");
                if fault == Fault::InventoryDeleted {
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .map_err(|e| e.to_string())?;
                } else {
                    let mut inv = self.inventory().await?;
                    let objects = inv["objects"].as_array_mut().unwrap();
                    objects.retain(|e| !e["name"].as_str().unwrap().starts_with("gen-"));
                    self.set_inventory(&inv).await?;
                }
                self.expect_sync("after the inventory was changed by hand")?;
                self.converged(g, &sha).await?;
            }
            Fault::InventoryEditedMidSync => {
                // Another writer adds an entry while the sync rolls out: the sync's own
                // write finds the ConfigMap changed, reads it again and keeps the entry.
                let mut child = self.spawn_sync();
                let mut edited = Ok(());
                if self.wait_for_step(&mut child, Step::RollOut) {
                    std::thread::sleep(Duration::from_millis(random(300)));
                    landed = Step::RollOut.to_string();
                    edited = self.add_inventory_entry("stray").await;
                }
                let (code, out) = finish(child);
                edited?;
                if code != 0 {
                    return Err(format!("exit {code}: {out}"));
                }
                if landed != "-" && !out.contains("changed by another writer") {
                    return Err(format!("the other writer's change went unnoticed: {out}"));
                }
                let kept = configmap_names(&self.inventory().await?).contains("stray");
                if landed != "-" && !kept {
                    return Err("the other writer's entry was overwritten".into());
                }
            }
            Fault::OtherFieldManager => {
                let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
                let patch = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"gen": "intruder"}});
                maps.patch(
                    "base-000",
                    &PatchParams::apply("intruder").force(),
                    &Patch::Apply(&patch),
                )
                .await
                .map_err(|e| e.to_string())?;
                self.expect_sync("after another field manager changed base-000")?;
                self.converged(g, &sha).await?;
            }
            Fault::GitRemoteGone => {
                let path = self.repo.dir.path().to_path_buf();
                let away = path.with_extension("away");
                std::fs::rename(&path, &away).unwrap();
                let (code, out) = self.sync();
                std::fs::rename(&away, &path).unwrap();
                if code == 0 || !out.contains("does not exist") {
                    return Err(format!("exit {code}: {out}"));
                }
                self.holds(g - 1, &self.previous_commit())
                    .await
                    .map_err(|e| format!("the failed fetch changed the cluster: {e}"))?;
            }
            Fault::GitForcePush => {
                // What the cluster holds (HEAD is generation g, not yet synced).
                let before = self.previous_commit();
                self.repo.git(&["checkout", "-q", "--orphan", "rewritten"]);
                let sha = self.commit(g);
                self.repo.git(&["branch", "-q", "-M", "main"]);
                // Refused (a replay could be an attack), and nothing written...
                let (code, out) = self.sync();
                if code == 0
                    || !out.contains(
                        "refusing to apply it (a force-push could replay any older commit)",
                    )
                {
                    return Err(format!("a force-push was not refused: exit {code}: {out}"));
                }
                self.holds(g - 1, &before)
                    .await
                    .map_err(|e| format!("the refused force-push changed the cluster: {e}"))?;
                // ...until the operator accepts it.
                let (code, out) = self.sync_accepting_rewind();
                if code != 0 {
                    return Err(format!("the accepted force-push exited {code}: {out}"));
                }
                self.converged(g, &sha).await?;
            }
            Fault::GitCacheTruncated => {
                // The repository's git objects and refs (its trees are written whole, by
                // rename, so a killed fetch cannot truncate them).
                for source in
                    std::fs::read_dir(self.state.join("sources")).map_err(|e| e.to_string())?
                {
                    truncate_files(&source.map_err(|e| e.to_string())?.path().join("git"));
                }
                self.expect_sync("after the cache was truncated")?;
                self.converged(g, &sha).await?;
            }
            Fault::ConcurrentSync => {
                let mut daemon = self.daemon();
                let step = [Step::Apply, Step::RollOut][random(2) as usize];
                let in_flight = self.wait_for_any_step(step);
                let mut child = self.spawn_sync();
                let (code, out) = finish_mut(&mut child);
                let _ = wait_until(SYNC_TIMEOUT, || self.history().len() >= before + 2);
                terminate(&mut daemon);
                if !in_flight {
                    return Err(format!("berth run's sync never reached {step}"));
                }
                if code != 0 {
                    return Err(format!("berth sync beside berth run: exit {code}: {out}"));
                }
                if !out.contains("waiting:") {
                    return Err(format!("berth sync did not wait for berth run: {out}"));
                }
                let records = self.history();
                for pair in records[before..].windows(2) {
                    if pair[1].started_at < pair[0].finished_at {
                        return Err(format!(
                            "two syncs overlapped: {} and {}",
                            pair[0].id, pair[1].id
                        ));
                    }
                }
                landed = step.to_string();
            }
            Fault::ReloadRemovesApp => {
                let mut daemon = self.daemon();
                let step = [Step::Render, Step::Apply, Step::RollOut][random(3) as usize];
                self.wait_for_any_step(step);
                landed = self.step().map_or("ended".into(), |s| s.to_string());
                self.write_config(false);
                // SAFETY: a signal to the child this test started.
                unsafe { libc::kill(daemon.id() as i32, libc::SIGHUP) };
                let settled = wait_until(SYNC_TIMEOUT, || {
                    self.step().is_none() && self.history().len() > before
                });
                let alive = daemon.try_wait().unwrap().is_none();
                terminate(&mut daemon);
                self.write_config(true);
                if !settled || !alive {
                    return Err(format!(
                        "after the reload: settled {settled}, alive {alive}"
                    ));
                }
            }
        }
        let during = self.history().split_off(before);
        if matches!(fault, Fault::StateFull | Fault::StateReadOnly) {
            let claimed = during.iter().any(|r| {
                r.outcome == Outcome::Succeeded && r.commit.as_ref().is_some_and(|c| c.sha == sha)
            });
            if claimed {
                return Err("a sync that could not record itself was recorded as succeeded".into());
            }
        } else if during.is_empty() && recorded.is_none() {
            return Err("the faulted attempt left no history record".into());
        }
        let g2 = self.generation + 1;
        let sha2 = self.commit(g2);
        let clock = Instant::now();
        self.expect_sync("after the fault")?;
        let recovery = clock.elapsed();
        self.converged(g2, &sha2).await?;
        if let Some(id) = recorded {
            match self.history().into_iter().find(|r| r.id == id) {
                Some(r) if r.outcome == Outcome::Interrupted => {}
                // Killed between its record and letting go of the lock.
                Some(_) if landed.starts_with("history") => {}
                other => return Err(format!("the killed sync {id} is recorded as {other:?}")),
            }
        }
        Ok(Tried { landed, recovery })
    }

    /// The inventory's JSON, as berth stored it.
    async fn inventory(&self) -> Result<serde_json::Value, String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "berth-system");
        let cm = api
            .get(&format!("berth-inventory-{APP}"))
            .await
            .map_err(|e| format!("inventory: {e}"))?;
        serde_json::from_str(&cm.data.unwrap_or_default()["inventory.json"])
            .map_err(|e| format!("inventory: {e}"))
    }

    /// Replaces the inventory's JSON, as a person or another writer would.
    async fn set_inventory(&self, inv: &serde_json::Value) -> Result<(), String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "berth-system");
        let patch = serde_json::json!({"data": {"inventory.json": inv.to_string()}});
        api.patch(
            &format!("berth-inventory-{APP}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string())
    }

    /// Adds an entry for ConfigMap `name` to the inventory, as another writer would.
    async fn add_inventory_entry(&self, name: &str) -> Result<(), String> {
        let mut inv = self.inventory().await?;
        inv["objects"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({
                "group": "", "kind": "ConfigMap", "namespace": self.ns, "name": name,
                "api_version": "v1", "digest": "x", "observed": "1"
            }));
        self.set_inventory(&inv).await
    }

    fn previous_commit(&self) -> String {
        self.repo.git(&["rev-parse", "HEAD~1"])
    }

    fn expect_sync(&self, when: &str) -> Result<(), String> {
        let (code, out) = self.sync();
        if code == 0 {
            Ok(())
        } else {
            Err(format!("the sync {when} exited {code}: {out}"))
        }
    }

    fn daemon(&self) -> Child {
        self.berth(&["run", "--log-format", "text"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("berth run")
    }

    /// With `state_dir` full, `berth run`: its sync fails, its endpoint still answers,
    /// and once space returns the next trigger (a commit, by notify) syncs.
    async fn agent_rides_out_a_full_disk(&mut self, g: usize) -> Result<(), String> {
        let port = self.port;
        let synced = |outcome: &str| {
            let line = format!(
                "berth_syncs_total{{app=\"{APP}\",cluster=\"default\",outcome=\"{outcome}\"}} "
            );
            get(port, "/metrics").is_some_and(|(_, text)| {
                text.lines()
                    .any(|l| l.strip_prefix(&line).is_some_and(|n| n.trim() != "0"))
            })
        };
        if !wait_until(Duration::from_secs(60), || synced("failed")) {
            return Err("berth run: no failed sync counted with state_dir full".into());
        }
        match get(self.port, "/healthz") {
            Some((200, _)) => {}
            other => return Err(format!("berth run stopped serving: {other:?}")),
        }
        let _ = std::fs::remove_file(self.state.join("filler"));
        let sha = self.commit(g + 1);
        if !wait_until(SYNC_TIMEOUT, || synced("succeeded")) {
            return Err("berth run did not recover when space returned".into());
        }
        self.holds(g + 1, &sha).await
    }

    /// Kills `component`, waits up to 2 s, starts it again and waits for the API.
    async fn restart(&self, component: &'static str) -> Result<(), String> {
        self.cp.kill(component).map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(500 + random(1500)));
        self.cp
            .start_again(component)
            .await
            .map_err(|e| e.to_string())?;
        self.wait_api_ready().await
    }

    async fn wait_api_ready(&self) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(60);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
        while api.list(&ListParams::default().limit(1)).await.is_err() {
            if Instant::now() > end {
                return Err("the API server did not come back".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.tmpfs {
            let _ = Command::new("umount").arg("-l").arg(&self.state).status();
        }
    }
}

/// The names of the ConfigMaps an inventory's JSON holds.
fn configmap_names(inv: &serde_json::Value) -> BTreeSet<String> {
    inv["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "ConfigMap")
        .filter_map(|e| Some(e["name"].as_str()?.to_string()))
        .collect()
}

/// `GET path` from berth's endpoint: status and the whole answer.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, text))
}

fn dir_of(p: &Path) -> PathBuf {
    p.parent().unwrap().to_path_buf()
}

fn finish(mut child: Child) -> (i32, String) {
    finish_mut(&mut child)
}

fn finish_mut(child: &mut Child) -> (i32, String) {
    let end = Instant::now() + SYNC_TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = String::new();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn std::io::Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut pipe = pipe;
        let _ = pipe.read_to_string(&mut out);
    }
    (child.wait().unwrap().code().unwrap_or(-1), out)
}

fn terminate(child: &mut Child) {
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    if !wait_until(Duration::from_secs(30), || {
        child.try_wait().ok().flatten().is_some()
    }) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Fills the filesystem of `dir` to the last byte.
fn fill(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0u8; 1 << 16];
    while f.write_all(&block).is_ok() {}
    let small = [0u8; 512];
    while f.write_all(&small).is_ok() {}
    let _ = f.sync_all();
}

fn remount(dir: &Path, mode: &str) {
    let ok = Command::new("mount")
        .args(["-o", &format!("remount,{mode}")])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "remount {mode} {}", dir.display());
}

/// Cuts every file under `dir` to half its length (a fetch killed mid-write).
fn truncate_files(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            truncate_files(&path);
        } else if let Ok(meta) = path.metadata() {
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(meta.len() / 2).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_fault_converges_on_the_next_sync() {
    let Some(cp) = common::control_plane_for_faults() else {
        return;
    };
    let n: usize = std::env::var("BERTH_FAULTS_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut lab = Lab::new(cp).await;
    let sha = lab.commit(0);
    let (code, out) = lab.sync();
    assert_eq!(code, 0, "the first sync: {out}");
    lab.converged(0, &sha)
        .await
        .expect("the first sync converges");
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    // BERTH_FAULTS_ONLY: comma-separated parts of fault names, to run a few.
    let only = std::env::var("BERTH_FAULTS_ONLY").unwrap_or_default();
    let chosen = |f: Fault| only.is_empty() || only.split(',').any(|p| f.name().contains(p));
    for &fault in FAULTS.iter().filter(|&&f| chosen(f)) {
        if matches!(fault, Fault::StateFull | Fault::StateReadOnly) && !lab.tmpfs {
            println!("{}: not run (mounting a tmpfs needs root)", fault.name());
            rows.push((fault.name(), 0, 0, Duration::ZERO, BTreeMap::new()));
            continue;
        }
        let (mut survived, mut slowest) = (0, Duration::ZERO);
        let mut landed: BTreeMap<String, usize> = BTreeMap::new();
        for i in 1..=n {
            match lab.try_once(fault).await {
                Ok(t) => {
                    survived += 1;
                    slowest = slowest.max(t.recovery);
                    *landed.entry(t.landed).or_default() += 1;
                }
                Err(e) => {
                    failures.push(format!("{} (run {i}): {e}", fault.name()));
                    // Start the next run from a converged cluster (whatever the failed run
                    // left of the branch's history).
                    let sha = lab.commit(lab.generation + 1);
                    let (code, out) = lab.sync_accepting_rewind();
                    assert_eq!(
                        code,
                        0,
                        "resetting after {}: {out}",
                        failures.last().unwrap()
                    );
                    if let Err(e) = lab.converged(lab.generation, &sha).await {
                        panic!("reset after {}: {e}", failures.last().unwrap());
                    }
                }
            }
        }
        println!(
            "{}: {survived}/{n} survived, slowest recovery {:.1} s",
            fault.name(),
            slowest.as_secs_f64()
        );
        rows.push((fault.name(), n, survived, slowest, landed));
    }
    if let Ok(path) = std::env::var("BERTH_FAULTS_REPORT") {
        let before = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, report(&rows, &before)).expect("write the report");
    }
    assert!(
        failures.is_empty(),
        "faults that did not converge:\n{}",
        failures.join("\n")
    );
}

type Row = (String, usize, usize, Duration, BTreeMap<String, usize>);

/// The report: the table of `rows`, keeping the rows of `before` (an earlier report) for
/// faults not run this time (`BERTH_FAULTS_ONLY`).
fn report(rows: &[Row], before: &str) -> String {
    let mut lines: BTreeMap<usize, String> = BTreeMap::new();
    let order = |name: &str| FAULTS.iter().position(|f| f.name() == name);
    for line in before.lines().filter(|l| l.starts_with("| ")) {
        let name = line[2..].split(" | ").next().unwrap_or_default();
        if let Some(i) = order(name) {
            lines.insert(i, line.to_string());
        }
    }
    for (name, n, ok, slowest, landed) in rows {
        let landed: Vec<String> = landed.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
        let line = format!(
            "| {name} | {n} | {ok} | {:.1} s | {} |",
            slowest.as_secs_f64(),
            if *n == 0 {
                "not run: needs root to mount a tmpfs".to_string()
            } else {
                landed.join(", ")
            }
        );
        lines.insert(order(name).unwrap_or(usize::MAX), line);
    }
    let mut out = String::from(
        "# Reliability: the fault suite\n\nWritten by `scripts/faults` (`tests/faults.rs`). Each fault is injected at a random\npoint of a sync of a 213-object app (200 ConfigMaps, 3 Deployments rolling out, 10\nobjects pruned by each commit) on the real control plane (etcd, kube-apiserver and\nkube-controller-manager v1.20.2, the kubelet stand-in); after each, the next commit's\nsync must exit 0 with the cluster, the inventory and the history holding exactly that\ncommit, the faulted attempt in the history, and no ConfigMap of the app with a second\nfield manager. \"Recovery\" is that next sync, from its start to its exit; \"where it\nlanded\" is the step the sync was in when the fault struck (from its lock file; \"-\": between\nsyncs; \"ridden out\": the faulted sync itself still succeeded).\n\n| Fault | Tried | Survived | Slowest recovery | Where it landed |\n|---|---:|---:|---:|---|\n",
    );
    for line in lines.values() {
        out.push_str(line);
        out.push('\n');
    }
    out
}
