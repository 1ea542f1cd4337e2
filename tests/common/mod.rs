//! The shared harness of the integration tests: one real control plane per test binary
//! (etcd, kube-apiserver, kube-controller-manager and the kubelet stand-in), started on
//! first use and stopped when the binary exits; each test works in its own namespace.
//!
//! Without the binaries a test run by hand is skipped with a printed reason; under CI
//! (`CI=true`) it fails loudly instead.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use berth_testenv::{assets, ControlPlane, UpOptions};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

pub mod browser;
pub mod gpg;
pub mod prometheus;
pub mod proxy;
pub mod receiver;
pub mod registry;

static CONTROL_PLANE: OnceLock<Option<ControlPlane>> = OnceLock::new();
static WITHOUT_DEPLOYMENT_CONTROLLER: OnceLock<Option<ControlPlane>> = OnceLock::new();
static FOR_FAULTS: OnceLock<Option<ControlPlane>> = OnceLock::new();
static FLEET: OnceLock<Option<Vec<ControlPlane>>> = OnceLock::new();
static STATE_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The shared control plane, or `None` (test skipped) when run by hand without binaries.
pub fn control_plane() -> Option<&'static ControlPlane> {
    CONTROL_PLANE.get_or_init(|| start(true, "shared")).as_ref()
}

/// A control plane of its own, for tests that kill and restart its parts.
pub fn control_plane_for_faults() -> Option<&'static ControlPlane> {
    FOR_FAULTS.get_or_init(|| start(true, "faults")).as_ref()
}

/// Three control planes of their own: a fleet's clusters, whose parts its tests may kill.
pub fn fleet() -> Option<&'static [ControlPlane]> {
    FLEET
        .get_or_init(|| (0..3).map(|i| start(true, &format!("fleet-{i}"))).collect())
        .as_deref()
}

/// A second control plane with no Deployment controller (berth's own engine's ground).
pub fn control_plane_without_deployment_controller() -> Option<&'static ControlPlane> {
    WITHOUT_DEPLOYMENT_CONTROLLER
        .get_or_init(|| start(false, "no-deployment-controller"))
        .as_ref()
}

/// The folder of the control plane's binaries, or `None` (the test skipped, the reason
/// printed) when run by hand without them; under CI their absence fails the test.
pub fn assets_or_skip() -> Option<PathBuf> {
    let found = assets::find();
    if found.is_none() {
        let why = "control plane binaries not found: set KUBEBUILDER_ASSETS or run `cargo run --bin berth-testenv -- assets`";
        assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "{why}");
        eprintln!("SKIPPED: {why}");
    }
    found
}

fn start(deployment_controller: bool, role: &str) -> Option<ControlPlane> {
    let bin = assets_or_skip()?;
    let dir = std::env::temp_dir().join(format!("berth-test-{}-{role}", std::process::id()));
    let mut dirs = STATE_DIRS.lock().expect("state dirs");
    if dirs.is_empty() {
        // SAFETY: registering a plain extern "C" function, once.
        unsafe { libc::atexit(stop) };
    }
    dirs.push(dir.clone());
    drop(dirs);
    let opts = UpOptions {
        dir,
        bin,
        deployment_controller,
        kubelet: Some(PathBuf::from(env!("CARGO_BIN_EXE_berth-testenv"))),
        controller_qps: None,
    };
    // Its own thread and runtime: the tests' runtimes come and go.
    let started = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        rt.block_on(ControlPlane::up(&opts))
    })
    .join()
    .expect("control plane thread");
    match started {
        Ok(cp) => Some(cp),
        Err(e) => panic!("the control plane did not start: {e}"),
    }
}

/// A test binary that aborted (a stack overflow, SIGKILL) never ran its exit hook: stop
/// the control planes of test processes that no longer exist.
fn clean_up_after_dead_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("berth-test-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ControlPlane::down(&e.path());
        }
    }
}

extern "C" fn stop() {
    if let Ok(dirs) = STATE_DIRS.lock() {
        for dir in dirs.iter() {
            let _ = ControlPlane::down(dir);
        }
    }
}

/// A client for this test's runtime.
pub async fn client(cp: &ControlPlane) -> kube::Client {
    cp.client()
        .await
        .expect("client for the test control plane")
}

/// Creates a fresh namespace named after the test.
pub async fn namespace(client: &kube::Client, test: &str) -> String {
    let name = format!(
        "{}-{}",
        test.replace('_', "-"),
        std::process::id() % 100_000
    );
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create the test namespace");
    name
}

/// Waits for `condition` on a namespaced object, up to `timeout`.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    condition: impl kube::runtime::wait::Condition<K>,
) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let wait = kube::runtime::wait::await_condition(api.clone(), name, condition);
    match tokio::time::timeout(timeout, wait).await {
        Ok(Ok(Some(obj))) => obj,
        Ok(Ok(None)) => panic!("{name} was deleted while waiting"),
        Ok(Err(e)) => panic!("watching {name} failed: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out after {timeout:?} waiting for {name}; it is now: {now:#?}")
        }
    }
}

/// Waits until ConfigMap `name` holds `want` under the key `value`.
pub async fn wait_for_value(
    maps: &Api<k8s_openapi::api::core::v1::ConfigMap>,
    name: &str,
    want: &str,
    timeout: Duration,
) {
    wait_for(
        maps,
        name,
        timeout,
        |c: Option<&k8s_openapi::api::core::v1::ConfigMap>| {
            c.and_then(|c| c.data.as_ref()?.get("value").cloned())
                .as_deref()
                == Some(want)
        },
    )
    .await;
}

/// A local git repository the tests commit to.
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    /// An empty repository on branch `main`.
    pub fn new() -> Repo {
        let repo = Repo {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    /// Runs git in the repository.
    pub fn git(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Writes a file.
    pub fn write(&self, path: &str, text: &str) {
        let p = self.dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Commits everything; returns the new SHA.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// A tree object of `entries` (`git mktree` lines: `MODE TYPE ID\tNAME`), made with
    /// git's plumbing: a tree of many entries, or one folder under many names, costs a
    /// few bytes, where an index or a work tree of them would cost what it stands for.
    pub fn mktree(&self, entries: &str) -> String {
        use std::io::Write;
        let mut mktree = std::process::Command::new("git")
            .arg("mktree")
            .current_dir(self.dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run git mktree");
        let mut stdin = mktree.stdin.take().expect("its stdin");
        stdin
            .write_all(entries.as_bytes())
            .expect("write the entries");
        drop(stdin);
        let out = mktree.wait_with_output().expect("git mktree");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Commits the tree `root` after HEAD, as `main`.
    pub fn commit_tree(&self, root: &str, message: &str) {
        let commit = self.git(&["commit-tree", root, "-p", "HEAD", "-m", message]);
        self.git(&["update-ref", "refs/heads/main", &commit]);
    }

    /// Commits `n` folders `under/f00000`…, each holding the same empty file `keep`, from
    /// a few hundred kilobytes of objects.
    pub fn commit_folders(&self, under: &str, n: usize) {
        self.write("keep", "");
        self.commit("keep");
        let keep = self.git(&["rev-parse", "HEAD:keep"]);
        let folder = self.mktree(&format!("100644 blob {keep}\tkeep\n"));
        let entries: String = (0..n)
            .map(|i| format!("040000 tree {folder}\tf{i:05}\n"))
            .collect();
        let folders = self.mktree(&entries);
        let root = self.mktree(&format!(
            "100644 blob {keep}\tkeep\n040000 tree {folders}\t{under}\n"
        ));
        self.commit_tree(&root, &format!("{n} folders"));
    }
}

/// Runs `berth ARGS --config CONFIG`; returns exit code, stdout and stderr.
pub fn berth_on(config: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("run berth");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A berth configuration for one app reading `repo`, in its own state folder.
pub struct Setup {
    pub state: tempfile::TempDir,
    pub config: PathBuf,
    pub app: String,
}

impl Setup {
    /// Writes the configuration; `extra` goes into the `[[app]]` table.
    pub fn new(cp: &ControlPlane, app: &str, repo: &Repo, namespace: &str, extra: &str) -> Setup {
        let source = format!("repo = \"{}\"", repo.dir.path().display());
        Setup::with_source(cp, app, &source, namespace, extra)
    }

    /// Writes the configuration of an app whose source is `source` (`repo = …`, `chart =
    /// …`, `oci = …`); `extra` goes into the `[[app]]` table.
    pub fn with_source(
        cp: &ControlPlane,
        app: &str,
        source: &str,
        namespace: &str,
        extra: &str,
    ) -> Setup {
        let state = tempfile::tempdir().expect("tempdir");
        let config = state.path().join("berth.toml");
        let setup = Setup {
            state,
            config,
            app: app.to_string(),
        };
        setup.rewrite(cp, source, namespace, extra);
        setup
    }

    /// Writes the configuration again, its app's source and keys changed.
    pub fn rewrite(&self, cp: &ControlPlane, source: &str, namespace: &str, extra: &str) {
        std::fs::write(
            &self.config,
            format!(
                "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\n[cluster]\nkubeconfig = \"{}\"\n[[app]]\nname = \"{}\"\n{source}\nnamespace = \"{namespace}\"\n{extra}\n",
                self.state.path().display(),
                cp.kubeconfig.display(),
                self.app,
            ),
        )
        .unwrap();
    }

    /// Adds `line` to the configuration's `[agent]` table.
    pub fn agent_setting(&self, line: &str) {
        let config = std::fs::read_to_string(&self.config).unwrap();
        let config = config.replacen("[agent]\n", &format!("[agent]\n{line}\n"), 1);
        std::fs::write(&self.config, config).unwrap();
    }

    /// Runs `berth ARGS --config …`; returns exit code, stdout and stderr.
    pub fn berth(&self, args: &[&str]) -> (i32, String, String) {
        berth_on(&self.config, args)
    }

    /// The app's history records, oldest first.
    pub fn history(&self) -> Vec<berth::history::SyncRecord> {
        berth::history::HistoryLog::new(self.state.path())
            .read(&self.app)
            .expect("history")
    }
}

/// A `berth run` child process.
pub struct Daemon {
    pub child: std::process::Child,
}

impl Daemon {
    pub fn start(config: &Path, env: &[(&str, String)]) -> Daemon {
        Daemon::start_with(config, env, |_| {})
    }

    /// As [`Daemon::start`], with `configure` having the last word on the command (its
    /// stderr, its limits).
    pub fn start_with(
        config: &Path,
        env: &[(&str, String)],
        configure: impl FnOnce(&mut std::process::Command),
    ) -> Daemon {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_berth"));
        cmd.args(["run", "--log-format", "text", "--config"])
            .arg(config);
        if std::env::var_os("BERTH_TEST_LOG").is_none() {
            cmd.stderr(std::process::Stdio::null());
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        configure(&mut cmd);
        Daemon {
            child: cmd.spawn().expect("berth run"),
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    pub fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let end = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < end,
                "berth did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (polling, with a deadline) until `check` holds.
pub fn eventually(what: &str, timeout: Duration, check: impl Fn() -> bool) {
    let end = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < end, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// POSTs `body` to app `app`'s webhook on the loopback `port`, with `headers` and signed
/// with `secret` as a git host signs it (`X-Hub-Signature-256`); the status code and body.
pub fn signed_hook(
    port: u16,
    app: &str,
    secret: &[u8],
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    let signature = ("X-Hub-Signature-256", berth::body_hmac::sign(secret, body));
    let headers: Vec<(&str, String)> = headers.iter().cloned().chain([signature]).collect();
    http(port, "POST", &format!("/hooks/{app}"), &headers, body)
}

/// One HTTP/1.1 request on a fresh connection to the loopback `port`; the status code
/// (0 when the connection closed without an answer) and body.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    // A server that closes at once answers nothing: code 0, not a panic.
    let _ = s.write_all(req.as_bytes());
    let _ = s.write_all(body);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// A namespaced CustomResourceDefinition of `kind` (plural: `kind` in lower case and an
/// `s`) in `group`, version v1, any fields allowed.
pub fn crd(group: &str, kind: &str) -> String {
    let singular = kind.to_lowercase();
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {singular}s.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: {singular}s, singular: {singular}, kind: {kind}}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"
    )
}

/// Pods that never become ready (the kubelet stand-in's annotation).
pub const NEVER_READY: &str = "testenv.berth.dev/ready: \"false\"";

/// A Job check's manifest (`[[analysis]] job`) whose pod exits with `code` (the kubelet
/// stand-in's annotation): `{version}` in its argument.
pub fn check_job(code: u8) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: smoke\nspec:\n  backoffLimit: 0\n  template:\n    metadata:\n      annotations:\n        testenv.berth.dev/exit: \"{code}\"\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: smoke\n          image: curl\n          args: [\"http://web/health?version={{version}}\"]\n"
    )
}

/// A Deployment `web` of 3 replicas (`image`), rolled one pod at a time (maxSurge 1,
/// maxUnavailable 0), its pods annotated with `annotations` (e.g. [`NEVER_READY`]),
/// `extra_spec` lines added to its spec.
pub fn web_deployment(image: &str, annotations: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
{extra_spec}  strategy:
    type: RollingUpdate
    rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
      annotations: {{{annotations}}}
    spec:
      containers:
        - name: web
          image: {image}
          ports: [{{containerPort: 8080}}]
"
    )
}

/// A Service `web` that berth's checks pass and the API server refuses (port 0): the dry
/// run's refusal. `metadata` adds lines to its metadata (`"  namespace: x\n"`).
pub fn refused_service(metadata: &str) -> String {
    format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n{metadata}spec:\n  ports:\n    - port: 0\n")
}

/// A loopback port nobody listens on (now).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `git daemon` serving a repository (pushes too): a remote over git's own protocol, as a
/// hosted repository is — no file watcher sees it, and libgit2's local transport cannot
/// fetch shallow. Stopped when dropped.
pub struct GitDaemon {
    child: std::process::Child,
    /// `git://127.0.0.1:PORT/NAME`.
    pub url: String,
}

impl GitDaemon {
    pub fn serve(dir: &Path) -> GitDaemon {
        let port = free_port();
        // git-daemon itself, not `git daemon`, which would leave it behind when killed.
        let exec_path = std::process::Command::new("git")
            .arg("--exec-path")
            .output()
            .expect("git --exec-path");
        let exec_path = String::from_utf8_lossy(&exec_path.stdout);
        let child = std::process::Command::new(Path::new(exec_path.trim()).join("git-daemon"))
            .args(["--export-all", "--reuseaddr", "--enable=receive-pack"])
            .args(["--listen=127.0.0.1", &format!("--port={port}")])
            .arg(format!("--base-path={}", dir.parent().unwrap().display()))
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("git daemon");
        eventually("git daemon listens", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        let name = dir.file_name().unwrap().to_string_lossy();
        GitDaemon {
            child,
            url: format!("git://127.0.0.1:{port}/{name}"),
        }
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
