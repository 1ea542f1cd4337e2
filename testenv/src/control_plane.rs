//! `up` and `down` of a local control plane: etcd, kube-apiserver (TLS on 127.0.0.1, free
//! ports, a bearer token, RBAC) and kube-controller-manager, all state in one folder, every
//! process recorded by pid so that `down` stops exactly what `up` started.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::process::{
    alive, check_running, command_line, free_port, openssl, random_hex, reap, spawn, write, PIDS,
};
use super::{io, TestenvError};

/// How to start a control plane.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The state folder (created; must not hold a running control plane).
    pub dir: PathBuf,
    /// The folder with etcd, kube-apiserver and kube-controller-manager.
    pub bin: PathBuf,
    /// Run the Deployment controller (off: berth's own rollout engine does its work).
    pub deployment_controller: bool,
    /// The `berth-testenv` binary to run as the kubelet stand-in, if any.
    pub kubelet: Option<PathBuf>,
    /// kube-controller-manager's requests a second to the API server (its
    /// `--kube-api-qps`, the burst the same); `None` keeps its default of 20 (burst 30).
    pub controller_qps: Option<u32>,
}

/// A running control plane.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// Its state folder.
    pub dir: PathBuf,
    /// A kubeconfig for the admin user.
    pub kubeconfig: PathBuf,
}

const READY_TIMEOUT: Duration = Duration::from_secs(60);

impl ControlPlane {
    /// Starts the control plane and waits until the apiserver is ready and the controller
    /// manager is working.
    ///
    /// # Errors
    /// A process could not start, exited, or did not become ready in time; whatever
    /// started is stopped again.
    pub async fn up(opts: &UpOptions) -> Result<ControlPlane, TestenvError> {
        let dir = &opts.dir;
        if dir.join(PIDS).exists() {
            ControlPlane::down(dir)?;
        }
        fs::create_dir_all(dir.join("certs")).map_err(io(format!("creating {}", dir.display())))?;
        let dir = dir
            .canonicalize()
            .map_err(io("resolving the state folder"))?;
        let started = start(opts, &dir).await;
        if started.is_err() {
            let _ = ControlPlane::down(&dir);
        }
        started
    }

    /// A client for the admin user.
    ///
    /// # Errors
    /// The kubeconfig cannot be read or used.
    pub async fn client(&self) -> Result<kube::Client, TestenvError> {
        client_for(&self.kubeconfig).await
    }

    /// The audit log's events received at or after `since` (request metadata: verb,
    /// objectRef, userAgent, auditID), for counting what a client sent.
    /// The log is never rotated and grows to gigabytes in a long benchmark: it is read a
    /// line at a time, and only the lines received since `since` are parsed.
    pub fn audit_events(&self, since: jiff::Timestamp) -> Vec<serde_json::Value> {
        let Ok(log) = fs::File::open(self.dir.join("audit.log")) else {
            return Vec::new();
        };
        BufReader::new(log)
            .lines()
            .map_while(Result::ok)
            .filter(|l| received(l).is_some_and(|t| t >= since))
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect()
    }

    /// Kills one component (`etcd`, `kube-apiserver`, …) with SIGKILL, as a crash would.
    ///
    /// # Errors
    /// It is not running.
    pub fn kill(&self, component: &str) -> Result<(), TestenvError> {
        let pid = self.pid_of(component).ok_or_else(|| TestenvError::Exited {
            component: "a component",
            status: format!("{component} is not running"),
            log: self
                .dir
                .join(format!("{component}.log"))
                .display()
                .to_string(),
        })?;
        // SAFETY: kill(2) of a pid this control plane started (checked in pid_of).
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        reap(pid);
        Ok(())
    }

    /// Starts a killed component again with the command line it first had (same ports,
    /// same data), and for the apiserver waits until it is ready again.
    ///
    /// # Errors
    /// It could not start or did not become ready.
    pub async fn start_again(&self, component: &'static str) -> Result<(), TestenvError> {
        let line = fs::read_to_string(self.dir.join(format!("{component}.cmd")))
            .map_err(io(format!("reading how {component} was started")))?;
        let argv: Vec<String> = serde_json::from_str(&line)
            .map_err(|e| io("reading a command line")(std::io::Error::other(e)))?;
        let mut child = spawn(
            &self.dir,
            component,
            Command::new(&argv[0]).args(&argv[1..]),
        )?;
        if component == "kube-apiserver" {
            let deadline = Instant::now() + READY_TIMEOUT;
            while !apiserver_ready(&self.kubeconfig).await {
                check_running(&mut child, component, &self.dir)?;
                if Instant::now() > deadline {
                    return Err(not_ready(component, &self.dir));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The pid of the running `component`, if this control plane started it.
    fn pid_of(&self, component: &str) -> Option<i32> {
        let pids = fs::read_to_string(self.dir.join(PIDS)).ok()?;
        let marker = self.dir.to_string_lossy().into_owned();
        pids.lines()
            .rev()
            .filter(|l| l.split_whitespace().next() == Some(component))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .find(|&pid| alive(pid) && command_line(pid).is_some_and(|c| c.contains(&marker)))
    }

    /// Stops every process recorded in `dir` (only those whose command line names `dir`)
    /// and removes the folder.
    ///
    /// # Errors
    /// The folder could not be removed.
    pub fn down(dir: &Path) -> Result<(), TestenvError> {
        let pids = fs::read_to_string(dir.join(PIDS)).unwrap_or_default();
        let marker = dir.to_string_lossy().into_owned();
        let ours: Vec<i32> = pids
            .lines()
            .rev()
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .filter(|&pid| command_line(pid).is_some_and(|c| c.contains(&marker)))
            .collect();
        for &pid in &ours {
            // SAFETY: kill(2) with a pid read from our own pid file, checked above.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while ours.iter().any(|&p| alive(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        for &pid in ours.iter().filter(|&&p| alive(p)) {
            // SAFETY: as above; it ignored SIGTERM for 10 s.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for &pid in &ours {
            reap(pid);
        }
        match fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io(format!("removing {}", dir.display()))(e))
            }
            _ => Ok(()),
        }
    }
}

/// A client from a kubeconfig file (its current context).
///
/// # Errors
/// The file cannot be read or used.
pub async fn client_for(kubeconfig: &Path) -> Result<kube::Client, TestenvError> {
    let client =
        |e: &dyn std::fmt::Display| TestenvError::Client(format!("{}: {e}", kubeconfig.display()));
    let kc = Kubeconfig::read_from(kubeconfig).map_err(|e| client(&e))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| client(&e))?;
    kube::Client::try_from(config).map_err(|e| client(&e))
}

/// Starts etcd, kube-apiserver (then writes the kubeconfig), kube-controller-manager and
/// the kubelet stand-in in `dir`, each waited ready.
async fn start(opts: &UpOptions, dir: &Path) -> Result<ControlPlane, TestenvError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
    let token = random_hex()?;
    write(
        dir,
        "tokens.csv",
        &format!("{token},admin,admin,system:masters\n"),
    )?;
    openssl(
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
        ],
        &dir.join("sa.key"),
    )?;
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let mut etcd = spawn_etcd(opts, dir, &etcd_url, peer_port)?;
    let mut apiserver = spawn_apiserver(opts, dir, &etcd_url, api_port)?;
    let kubeconfig = dir.join("kubeconfig");
    let cert = dir.join("certs/apiserver.crt");
    loop {
        check_running(&mut etcd, "etcd", dir)?;
        check_running(&mut apiserver, "kube-apiserver", dir)?;
        if !kubeconfig.exists() && cert.exists() {
            write(dir, "kubeconfig", &kubeconfig_yaml(api_port, &cert, &token))?;
        }
        if kubeconfig.exists() && apiserver_ready(&kubeconfig).await {
            break;
        }
        if Instant::now() > deadline {
            return Err(not_ready("kube-apiserver", dir));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut kcm = spawn_controllers(opts, dir, &kubeconfig)?;
    if let Some(exe) = &opts.kubelet {
        spawn(
            dir,
            "kubelet",
            Command::new(exe)
                .arg("kubelet")
                .arg("--kubeconfig")
                .arg(&kubeconfig),
        )?;
    }
    wait_for_controllers(dir, &kubeconfig, &mut kcm, deadline).await?;
    Ok(ControlPlane {
        dir: dir.to_path_buf(),
        kubeconfig,
    })
}

fn spawn_etcd(
    opts: &UpOptions,
    dir: &Path,
    etcd_url: &str,
    peer_port: u16,
) -> Result<Child, TestenvError> {
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    spawn(
        dir,
        "etcd",
        Command::new(opts.bin.join("etcd")).args([
            "--data-dir",
            &format!("{}/etcd", dir.display()),
            "--listen-client-urls",
            etcd_url,
            "--advertise-client-urls",
            etcd_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &format!("default={peer_url}"),
        ]),
    )
}

fn spawn_apiserver(
    opts: &UpOptions,
    dir: &Path,
    etcd_url: &str,
    api_port: u16,
) -> Result<Child, TestenvError> {
    let d = dir.display();
    spawn(
        dir,
        "kube-apiserver",
        Command::new(opts.bin.join("kube-apiserver")).args([
            "--etcd-servers",
            etcd_url,
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            &api_port.to_string(),
            "--insecure-port",
            "0",
            "--cert-dir",
            &format!("{d}/certs"),
            "--token-auth-file",
            &format!("{d}/tokens.csv"),
            "--authorization-mode",
            "RBAC",
            "--service-account-key-file",
            &format!("{d}/sa.key"),
            "--service-account-signing-key-file",
            &format!("{d}/sa.key"),
            "--service-account-issuer",
            "https://kubernetes.default.svc",
            "--service-cluster-ip-range",
            "10.0.0.0/16",
            "--allow-privileged",
            "--disable-admission-plugins",
            "ServiceAccount",
            "--audit-log-path",
            &format!("{d}/audit.log"),
            // Never rotated (its writer rotates at 100 MB unless told): the benchmarks
            // count a 10,000-app commit's requests in it.
            "--audit-log-maxsize",
            "1000000",
            "--audit-policy-file",
            &write(dir, "audit-policy.yaml", AUDIT_POLICY)?,
        ]),
    )
}

fn spawn_controllers(
    opts: &UpOptions,
    dir: &Path,
    kubeconfig: &Path,
) -> Result<Child, TestenvError> {
    let controllers = if opts.deployment_controller {
        "*,-serviceaccount-token"
    } else {
        "*,-serviceaccount-token,-deployment"
    };
    let mut command = Command::new(opts.bin.join("kube-controller-manager"));
    if let Some(qps) = opts.controller_qps {
        command.arg(format!("--kube-api-qps={qps}"));
        command.arg(format!("--kube-api-burst={qps}"));
    }
    spawn(
        dir,
        "kube-controller-manager",
        command.args([
            "--kubeconfig",
            &kubeconfig.to_string_lossy(),
            "--leader-elect=false",
            "--controllers",
            controllers,
            "--service-account-private-key-file",
            &format!("{}/sa.key", dir.display()),
            "--bind-address",
            "127.0.0.1",
            "--port",
            "0",
            "--secure-port",
            "0",
        ]),
    )
}

/// Waits until the service account controller creates `default`: the proof that the
/// controllers run.
async fn wait_for_controllers(
    dir: &Path,
    kubeconfig: &Path,
    kcm: &mut Child,
    deadline: Instant,
) -> Result<(), TestenvError> {
    let client = client_for(kubeconfig)
        .await
        .map_err(|_| not_ready("kube-apiserver", dir))?;
    let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
        kube::Api::namespaced(client, "default");
    while accounts.get_opt("default").await.ok().flatten().is_none() {
        check_running(kcm, "kube-controller-manager", dir)?;
        if Instant::now() > deadline {
            return Err(not_ready("kube-controller-manager", dir));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Writes request metadata (verb, object, user agent, time) for every request, so tests
/// and benchmarks can count what a client sent.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"#;

async fn apiserver_ready(kubeconfig: &Path) -> bool {
    let Ok(client) = client_for(kubeconfig).await else {
        return false;
    };
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok")
}

fn kubeconfig_yaml(port: u16, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: berth-testenv\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: berth-testenv\n  context:\n    cluster: berth-testenv\n    user: admin\n    namespace: default\ncurrent-context: berth-testenv\n",
        ca.display()
    )
}

fn not_ready(component: &'static str, dir: &Path) -> TestenvError {
    TestenvError::NotReady {
        component,
        seconds: READY_TIMEOUT.as_secs(),
        log: dir.join(format!("{component}.log")).display().to_string(),
    }
}

/// An audit log line's `requestReceivedTimestamp`, found without parsing the line.
fn received(line: &str) -> Option<jiff::Timestamp> {
    const KEY: &str = "\"requestReceivedTimestamp\":\"";
    let rest = &line[line.find(KEY)? + KEY.len()..];
    rest[..rest.find('"')?].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::received;

    #[test]
    fn an_audit_line_is_dated_by_when_its_request_was_received() {
        let line = r#"{"kind":"Event","level":"Metadata","auditID":"a","stage":"ResponseComplete","verb":"patch","requestReceivedTimestamp":"2026-11-27T13:01:06.123456Z","stageTimestamp":"2026-11-27T13:01:07.000000Z"}"#;
        assert_eq!(
            received(line),
            Some("2026-11-27T13:01:06.123456Z".parse().unwrap())
        );
        assert_eq!(received(r#"{"kind":"Event"}"#), None);
        assert_eq!(
            received(r#"{"requestReceivedTimestamp":"not a time"}"#),
            None
        );
    }
}
