//! berth as a systemd service: the unit file's checks, the notify protocol (READY,
//! STATUS, WATCHDOG, RELOADING, STOPPING) on a datagram socket the test binds, watchdog
//! pings stopping when an app loop is stuck, SIGHUP reload, `/metrics`, the webhook, and
//! two berth processes with leader election.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth::history::{Outcome, Trigger};
use common::{eventually, http, Daemon, Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// The systemd side of the notify protocol.
struct NotifySocket {
    _dir: tempfile::TempDir,
    path: PathBuf,
    socket: UnixDatagram,
}

impl NotifySocket {
    fn bind() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        NotifySocket {
            _dir: dir,
            path,
            socket,
        }
    }

    /// Messages until `pred` matches one (returned), or panics after `timeout`.
    fn until(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let end = Instant::now() + timeout;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let left = end.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no matching notify message within {timeout:?}; got {seen:?}"
            );
            self.socket.set_read_timeout(Some(left)).unwrap();
            if let Ok(n) = self.socket.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                let hit = pred(&m);
                seen.push(m);
                if hit {
                    return seen;
                }
            }
        }
    }

    /// How many `WATCHDOG=1` pings arrive within `window`.
    fn pings(&self, window: Duration) -> usize {
        self.collect(window)
            .iter()
            .filter(|m| *m == "WATCHDOG=1")
            .count()
    }

    /// Every message within `window`.
    fn collect(&self, window: Duration) -> Vec<String> {
        let end = Instant::now() + window;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            self.socket
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            if let Ok(n) = self.socket.recv(&mut buf) {
                seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        seen
    }
}

#[test]
fn the_unit_file_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/berth.service"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("berth.service");
    // verify checks that ExecStart= exists: point it at the binary this build made.
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/berth", env!("CARGO_BIN_EXE_berth")),
    )
    .unwrap();
    let verify = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze (apt-get install systemd)");
    let complaints = String::from_utf8_lossy(&verify.stderr).to_string()
        + &String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success() && complaints.trim().is_empty(),
        "systemd-analyze verify: {complaints}"
    );
    let security = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=true"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/systemd/berth.service"
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for berth.service:").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {text}"));
    assert!(exposure <= 1.5, "exposure {exposure} > 1.5");
}

#[tokio::test]
async fn notify_status_reload_metrics_and_webhook() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "service").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("one", "1"));
    let first = repo.commit("first");
    let port = common::free_port();
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("hook");
    std::fs::write(&secret_file, "s3cret\n").unwrap();
    let setup = Setup::new(
        cp,
        "service",
        &repo,
        &ns,
        &format!("webhook_secret_file = \"{}\"", secret_file.display()),
    );
    let config = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[cluster]",
        &format!("listen = \"127.0.0.1:{port}\"\n[cluster]"),
    );
    std::fs::write(&setup.config, &config).unwrap();
    let notify = NotifySocket::bind();
    let mut daemon = Daemon::start(
        &setup.config,
        &[("NOTIFY_SOCKET", notify.path.display().to_string())],
    );

    // READY=1 comes once running, and a STATUS= line after the first sync.
    let seen = notify.until(Duration::from_secs(30), |m| {
        m.starts_with("STATUS=service: synced")
    });
    assert!(seen.iter().any(|m| m == "READY=1"), "{seen:?}");
    assert!(
        seen.last()
            .unwrap()
            .contains(&format!("synced {} (1 changed)", &first[..7])),
        "{seen:?}"
    );

    // Health, readiness, metrics; HEAD as GET without a body.
    assert_eq!(http(port, "GET", "/healthz", &[], b"").0, 200);
    assert_eq!(http(port, "GET", "/readyz", &[], b"").0, 200);
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            http(port, "HEAD", path, &[], b""),
            (200, String::new()),
            "{path}"
        );
    }
    let (code, metrics) = http(port, "GET", "/metrics", &[], b"");
    assert_eq!(code, 200);
    assert!(
        metrics.contains(
            "berth_syncs_total{app=\"service\",cluster=\"default\",outcome=\"succeeded\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("berth_managed_objects{app=\"service\",cluster=\"default\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "berth_git_fetch_duration_seconds_count{app=\"service\",cluster=\"default\"} 1"
        ),
        "{metrics}"
    );

    // The webhook: wrong signature, unknown app, oversize, then a good one that syncs.
    let body = br#"{"ref":"refs/heads/main"}"#;
    let bad = [(
        "X-Hub-Signature-256",
        berth::body_hmac::sign(b"wrong", body),
    )];
    assert_eq!(http(port, "POST", "/hooks/service", &bad, body).0, 401);
    let good = [(
        "X-Hub-Signature-256",
        berth::body_hmac::sign(b"s3cret", body),
    )];
    assert_eq!(http(port, "POST", "/hooks/nope", &good, body).0, 404);
    let huge = vec![b'x'; (1 << 20) + 1];
    let huge_sig = [(
        "X-Hub-Signature-256",
        berth::body_hmac::sign(b"s3cret", &huge),
    )];
    assert_eq!(
        http(port, "POST", "/hooks/service", &huge_sig, &huge).0,
        413
    );
    // A commit that only a webhook announces: push it into a bare clone nobody watches? The
    // repository here is watched, so count on the trigger field instead.
    let (code, text) = http(port, "POST", "/hooks/service", &good, body);
    assert_eq!(code, 202, "{text}");
    eventually("a webhook-triggered sync", Duration::from_secs(20), || {
        setup
            .history()
            .iter()
            .any(|r| r.trigger == Trigger::Webhook)
    });

    // SIGHUP with an invalid file: refused, the running configuration stays.
    std::fs::write(
        &setup.config,
        format!("{config}\n[[app]]\nname = \"Bad Name\"\n"),
    )
    .unwrap();
    daemon.signal(libc::SIGHUP);
    notify.until(Duration::from_secs(10), |m| m == "RELOADING=1");
    notify.until(Duration::from_secs(10), |m| m == "READY=1");
    repo.write("cm.yaml", &config_map("one", "2"));
    repo.commit("second");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for_value(&maps, "one", "2", Duration::from_secs(20)).await;

    // SIGHUP with a valid file that adds an app: it syncs without a restart.
    let other = Repo::new();
    other.write("cm.yaml", &config_map("two", "1"));
    other.commit("other");
    std::fs::write(
        &setup.config,
        format!(
            "{config}\n[[app]]\nname = \"added\"\nrepo = \"{}\"\nnamespace = \"{ns}\"\n",
            other.dir.path().display()
        ),
    )
    .unwrap();
    daemon.signal(libc::SIGHUP);
    common::wait_for(
        &maps,
        "two",
        Duration::from_secs(20),
        |c: Option<&ConfigMap>| c.is_some(),
    )
    .await;

    // SIGTERM: STOPPING=1 and a clean exit.
    daemon.signal(libc::SIGTERM);
    notify.until(Duration::from_secs(20), |m| m == "STOPPING=1");
    assert!(daemon.wait(Duration::from_secs(30)).success());
}

#[tokio::test]
async fn watchdog_pings_stop_when_an_app_loop_is_stuck() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    // A "git server" that accepts connections and never answers: the fetch hangs.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let _keep = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming().flatten() {
            held.push(s);
        }
    });
    let healthy = Repo::new();
    healthy.write("cm.yaml", &config_map("w", "1"));
    healthy.commit("w");
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "watchdog").await;
    let setup = Setup::new(cp, "watchdog", &healthy, &ns, "");
    let base = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[cluster]",
        "listen = \"off\"\nsync_timeout = \"3s\"\n[cluster]",
    );
    std::fs::write(&setup.config, &base).unwrap();
    let notify = NotifySocket::bind();
    let env = [
        ("NOTIFY_SOCKET", notify.path.display().to_string()),
        ("WATCHDOG_USEC", "1000000".to_string()),
    ];

    // Healthy: pings keep coming.
    let daemon = Daemon::start(&setup.config, &env);
    notify.until(Duration::from_secs(30), |m| m == "READY=1");
    let pings = notify.pings(Duration::from_secs(3));
    assert!(pings >= 4, "{pings} pings in 3s at a 1s watchdog");
    drop(daemon);

    // Stuck: an app whose fetch never returns stops the pings after sync_timeout.
    std::fs::write(
        &setup.config,
        format!("{base}\n[[app]]\nname = \"stuck\"\nrepo = \"http://127.0.0.1:{port}/repo.git\"\n"),
    )
    .unwrap();
    let notify = NotifySocket::bind();
    let env = [
        ("NOTIFY_SOCKET", notify.path.display().to_string()),
        ("WATCHDOG_USEC", "1000000".to_string()),
    ];
    let _daemon = Daemon::start(&setup.config, &env);
    notify.until(Duration::from_secs(30), |m| m == "READY=1");
    let early = notify.pings(Duration::from_secs(2));
    assert!(
        early >= 1,
        "pings while the sync is younger than sync_timeout"
    );
    let _ = notify.collect(Duration::from_secs(2));
    let late = notify.pings(Duration::from_secs(3));
    assert_eq!(late, 0, "no pings once the stuck sync passed sync_timeout");
}

/// With leader election and only app sets, the standby runs no app: its set's listing
/// does not start the apps it makes (it guessed leadership from "no app ran yet" and
/// wrote beside the leader); once the leader dies, it applies a new commit within
/// `lease_duration` + 15 s.
#[tokio::test]
async fn a_standby_of_app_sets_runs_no_app_until_it_holds_the_lease() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "standby-sets").await;
    let repo = Repo::new();
    repo.write("apps/one/cm.yaml", &config_map("one", "1"));
    repo.write("apps/two/cm.yaml", &config_map("two", "1"));
    repo.commit("first");
    let lease = format!("berth-{ns}");
    let states: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let configs: Vec<PathBuf> = (states.iter())
        .map(|state| {
            let config = state.path().join("berth.toml");
            let text = format!(
                "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\nleader_election = true\nlease_name = \"{lease}\"\nlease_duration = \"3s\"\n[cluster]\nkubeconfig = \"{}\"\n[[app_set]]\nname = \"pair\"\nrepo = \"{}\"\nfolders = \"apps/*\"\nnamespace = \"{ns}\"\n",
                state.path().display(),
                cp.kubeconfig.display(),
                repo.dir.path().display()
            );
            std::fs::write(&config, text).unwrap();
            config
        })
        .collect();
    let records = |i: usize| {
        let log = berth::history::HistoryLog::new(states[i].path());
        log.read_all().unwrap_or_default()
    };
    let mut leader = Daemon::start(&configs[0], &[]);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for_value(&maps, "two", "1", Duration::from_secs(30)).await;
    let log = states[1].path().join("standby.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let _standby = Daemon::start_with(&configs[1], &[], |cmd| {
        cmd.stderr(stderr);
    });
    eventually("the standby lists its set", Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("app set pair listed"))
    });
    repo.write("apps/one/cm.yaml", &config_map("one", "2"));
    repo.commit("second");
    common::wait_for_value(&maps, "one", "2", Duration::from_secs(30)).await;
    assert!(
        records(1).is_empty(),
        "the standby synced: {:?}",
        records(1)
    );

    // The leader dies without letting go: the standby takes over once the Lease expires.
    leader.signal(libc::SIGKILL);
    leader.wait(Duration::from_secs(10));
    repo.write("apps/one/cm.yaml", &config_map("one", "3"));
    repo.commit("third");
    common::wait_for_value(&maps, "one", "3", Duration::from_secs(3 + 15)).await;
}

#[tokio::test]
async fn with_leader_election_one_host_applies_and_the_other_takes_over() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "leader").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("led", "1"));
    repo.commit("first");
    let lease = format!("berth-{ns}");
    let hosts: Vec<Setup> = (0..2)
        .map(|_| Setup::new(cp, "leader", &repo, &ns, ""))
        .collect();
    for h in &hosts {
        let text = std::fs::read_to_string(&h.config).unwrap().replace(
            "[cluster]",
            &format!("listen = \"off\"\nleader_election = true\nlease_name = \"{lease}\"\nlease_duration = \"3s\"\n[cluster]"),
        );
        std::fs::write(&h.config, text).unwrap();
    }
    let mut a = Daemon::start(&hosts[0].config, &[]);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for(
        &maps,
        "led",
        Duration::from_secs(30),
        |c: Option<&ConfigMap>| c.is_some(),
    )
    .await;
    let _b = Daemon::start(&hosts[1].config, &[]);
    // Both run; only the holder applies.
    repo.write("cm.yaml", &config_map("led", "2"));
    repo.commit("second");
    common::wait_for_value(&maps, "led", "2", Duration::from_secs(20)).await;
    assert!(hosts[1].history().is_empty(), "the standby applied nothing");
    assert!(hosts[0]
        .history()
        .iter()
        .all(|r| r.outcome != Outcome::Failed));

    // The holder dies without releasing: the standby takes over once the lease expires.
    a.signal(libc::SIGKILL);
    a.wait(Duration::from_secs(10));
    let killed = Instant::now();
    repo.write("cm.yaml", &config_map("led", "3"));
    repo.commit("third");
    common::wait_for_value(&maps, "led", "3", Duration::from_secs(30)).await;
    eprintln!(
        "failover: applied by the standby {:?} after the holder died",
        killed.elapsed()
    );
    eventually(
        "the standby's history record",
        Duration::from_secs(20),
        || !hosts[1].history().is_empty(),
    );
}

#[tokio::test]
async fn the_guestbook_syncs_with_the_least_privilege_identity() {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let Some(cp) = common::control_plane() else {
        return;
    };
    let admin = common::client(cp).await;
    // The RBAC example, applied by the admin (the namespace its RoleBinding needs first).
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "guestbook"}})).unwrap();
    let _ = Api::all(admin.clone())
        .create(&Default::default(), &ns)
        .await;
    let rbac = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/rbac/berth.yaml");
    let out = std::process::Command::new("kubectl")
        .args(["apply", "--server-side", "-f", rbac])
        .env("KUBECONFIG", &cp.kubeconfig)
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "berth-system");
    let request: TokenRequest =
        serde_json::from_value(serde_json::json!({"spec": {"audiences": []}})).unwrap();
    let token = accounts
        .create_token_request("berth", &Default::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token")
        .token;
    // A kubeconfig with that token instead of the admin's.
    let admin_config = std::fs::read_to_string(&cp.kubeconfig).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let user_start = admin_config.find("    token: ").unwrap();
    let user_end = admin_config[user_start..].find('\n').unwrap() + user_start;
    std::fs::write(
        &kubeconfig,
        format!(
            "{}    token: {token}{}",
            &admin_config[..user_start],
            &admin_config[user_end..]
        ),
    )
    .unwrap();

    let repo = Repo::new();
    for f in ["namespace.yaml", "config.yaml", "frontend.yaml"] {
        repo.write(
            f,
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("examples/guestbook")
                    .join(f),
            )
            .unwrap(),
        );
    }
    repo.commit("guestbook");
    let setup = Setup::new(
        cp,
        "guestbook",
        &repo,
        "guestbook",
        "prune = true\nservice_account = \"guestbook/deployer\"",
    );
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        &cp.kubeconfig.display().to_string(),
        &kubeconfig.display().to_string(),
    );
    std::fs::write(&setup.config, text).unwrap();
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("successfully rolled out"), "{out}");
    // Pruning works within the same grant.
    repo.git(&["rm", "-q", "config.yaml"]);
    repo.commit("no config");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("configmap/frontend-config -n guestbook pruned"),
        "{out}"
    );
    // The app's writes were the deployer's, not berth's: berth itself may not write there.
    let limited = berth_testenv::control_plane::client_for(&kubeconfig)
        .await
        .unwrap();
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(limited, "guestbook");
    let planted: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "planted"}})).unwrap();
    assert!(maps.create(&Default::default(), &planted).await.is_err());
    // And the identity really is limited: it may not read Secrets.
    let limited = berth_testenv::control_plane::client_for(&kubeconfig)
        .await
        .unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(limited, "guestbook");
    assert!(secrets.list(&Default::default()).await.is_err());
}

/// A commit that touches none of an app's paths costs that app nothing: under `berth run`
/// no API request at all and its metrics keep their values; under one-shot `berth sync`
/// no write (not even the inventory's commit), recorded as no change.
#[tokio::test]
async fn a_commit_that_touches_none_of_an_apps_paths_costs_it_nothing() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "untouched").await;
    let repo = Repo::new();
    for i in 0..3 {
        repo.write(
            &format!("app/cm{i}.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm{i}\ndata: {{v: \"1\"}}\n"
            ),
        );
    }
    repo.write("other/readme.txt", "not the app's\n");
    repo.commit("first");
    let port = common::free_port();
    let setup = Setup::new(cp, "untouched", &repo, &ns, "path = \"app\"");
    let config = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[cluster]",
        &format!("listen = \"127.0.0.1:{port}\"\n[cluster]"),
    );
    std::fs::write(&setup.config, &config).unwrap();
    let managed = || {
        let (_, metrics) = http(port, "GET", "/metrics", &[], b"");
        metrics
            .lines()
            .find(|l| l.starts_with("berth_managed_objects{app=\"untouched\",cluster=\"default\"}"))
            .map(str::to_string)
    };
    let mut daemon = Daemon::start(&setup.config, &[]);
    common::eventually("the endpoint", Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    common::eventually("the first sync", Duration::from_secs(30), || {
        managed().as_deref()
            == Some("berth_managed_objects{app=\"untouched\",cluster=\"default\"} 3")
    });
    let start = jiff::Timestamp::now();
    repo.write("other/readme.txt", "still not the app's\n");
    repo.commit("elsewhere");
    common::eventually(
        "the untouched commit's record",
        Duration::from_secs(30),
        || {
            setup
                .history()
                .last()
                .and_then(|r| r.note.clone())
                .is_some_and(|n| n.contains("changes nothing under app"))
        },
    );
    assert_eq!(
        managed().as_deref(),
        Some("berth_managed_objects{app=\"untouched\",cluster=\"default\"} 3"),
        "metrics keep their values"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // berth's requests about the app since `since` (its writes alone, when asked).
    let berths = |since, writes_only: bool| {
        cp.audit_events(since)
            .iter()
            .filter(|e| {
                e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("berth/"))
            })
            .filter(|e| {
                !writes_only
                    || matches!(
                        e["verb"].as_str(),
                        Some("create" | "update" | "patch" | "delete")
                    )
            })
            .filter(|e| {
                e["objectRef"]["namespace"] == ns.as_str()
                    || e["objectRef"]["name"] == "berth-inventory-untouched"
            })
            .count()
    };
    assert_eq!(berths(start, false), 0, "no request for the untouched app");
    daemon.signal(libc::SIGTERM);
    daemon.wait(Duration::from_secs(30));

    // One-shot `berth sync` of a new commit that changes none of the app's paths: what
    // `berth run` last synced is in state_dir, and the app costs no request at all.
    repo.write("other/readme.txt", "once more\n");
    repo.commit("elsewhere again");
    let start = jiff::Timestamp::now();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("changes nothing under app"), "{out}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(berths(start, false), 0, "{out}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::NoChange, "{out}");
    assert_eq!(record.managed(), 3);

    // `berth sync` of the commit already synced compares with the cluster: drift is
    // repaired, and an app with none is read, not written.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    maps.delete("cm0", &Default::default()).await.unwrap();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(maps.get_opt("cm0").await.unwrap().is_some(), "{out}");
    let start = jiff::Timestamp::now();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(berths(start, false) > 0, "the cluster is read: {out}");
    assert_eq!(berths(start, true), 0, "{out}");
    assert_eq!(setup.history().pop().unwrap().outcome, Outcome::NoChange);
}

/// `berth run` against a cluster that is down keeps serving: `/healthz` alive, `/readyz`
/// and `berth_cluster_reachable` say the cluster is unreachable, and when it answers again
/// the agent finds it back by itself (a commit then syncs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_run_serves_while_the_cluster_is_down_and_recovers() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "down-then-up").await;
    // Every request is answered 503 by a proxy in front of the API server until the test
    // lets them through.
    let proxy = common::proxy::Proxy::start(common::client(cp).await).await;
    proxy.answer(503);
    let repo = Repo::new();
    repo.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: back\ndata: {v: \"1\"}\n",
    );
    repo.commit("first");
    let port = common::free_port();
    let setup = Setup::new(cp, "downup", &repo, &ns, "");
    let kubeconfig = setup.state.path().join("proxy.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: {}\nusers:\n- name: anyone\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: anyone\ncurrent-context: proxy\n", proxy.url),
    )
    .unwrap();
    let config = std::fs::read_to_string(&setup.config)
        .unwrap()
        .replace(
            &cp.kubeconfig.display().to_string(),
            &kubeconfig.display().to_string(),
        )
        .replace(
            "[cluster]",
            &format!("listen = \"127.0.0.1:{port}\"\n[cluster]"),
        );
    std::fs::write(&setup.config, &config).unwrap();
    let mut daemon = Daemon::start(&setup.config, &[]);
    eventually(
        "/healthz while the cluster is down",
        Duration::from_secs(15),
        || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && http(port, "GET", "/healthz", &[], b"").0 == 200
        },
    );
    assert_eq!(http(port, "GET", "/readyz", &[], b"").0, 503);
    let (_, metrics) = http(port, "GET", "/metrics", &[], b"");
    assert!(metrics.contains("berth_cluster_reachable 0"), "{metrics}");

    proxy.answer(0);
    eventually(
        "/readyz once the cluster answers",
        Duration::from_secs(15),
        || http(port, "GET", "/readyz", &[], b"").0 == 200,
    );
    let (_, metrics) = http(port, "GET", "/metrics", &[], b"");
    assert!(metrics.contains("berth_cluster_reachable 1"), "{metrics}");
    repo.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: back\ndata: {v: \"2\"}\n",
    );
    repo.commit("second");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // The proxy's task runs on this runtime's other worker while the test waits here.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let value = maps
            .get_opt("back")
            .await
            .ok()
            .flatten()
            .and_then(|c| c.data)
            .and_then(|d| d.get("v").cloned());
        if value.as_deref() == Some("2") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the commit did not sync: {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    daemon.signal(libc::SIGTERM);
    daemon.wait(Duration::from_secs(30));
}

/// The README's install (`scripts/install`, under a DESTDIR), the shipped configuration
/// edited only where the README says to, then started the way the unit tells systemd to
/// start it: `DynamicUser=yes` (an unprivileged uid with no account, when the test runs
/// as root), `StateDirectory=`, `UMask=`, each `LoadCredential=NAME:PATH` copied into a
/// credentials folder only that uid can read and named by `$CREDENTIALS_DIRECTORY`, the
/// unit's own `ExecStart=` and `Type=notify`. systemd is not PID 1 on the machines these
/// tests run on (containers), so the unit cannot be started for real here: this test
/// performs what the unit asks of systemd, read from the installed unit file, and
/// `the_unit_file_verifies_and_is_hardened` has systemd check the unit itself.
#[tokio::test]
async fn the_installed_layout_runs_as_an_unprivileged_user_with_its_secrets_as_credentials() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "installed").await;
    let root = tempfile::tempdir().unwrap();
    let dest = root.path();
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mode = |p: &str| {
        std::fs::metadata(dest.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    // A kubeconfig as an operator has it: self-contained.
    let flat = std::process::Command::new("kubectl")
        .args(["config", "view", "--flatten", "--raw", "--kubeconfig"])
        .arg(&cp.kubeconfig)
        .output()
        .unwrap();
    assert!(flat.status.success());
    let kubeconfig = root.path().join("operator.kubeconfig");
    std::fs::write(&kubeconfig, &flat.stdout).unwrap();

    let install =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install"))
            .env("DESTDIR", dest)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--binary", env!("CARGO_BIN_EXE_berth")])
            .output()
            .unwrap();
    assert!(
        install.status.success(),
        "scripts/install: {}",
        String::from_utf8_lossy(&install.stderr)
    );
    assert_eq!(mode("etc/berth/berth.toml"), 0o644);
    assert_eq!(mode("etc/berth/credentials"), 0o700);
    assert_eq!(mode("etc/berth/credentials/kubeconfig"), 0o600);

    // "then edit it": the app, and a state_dir under this test's root.
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("installed", "v1"));
    repo.commit("first");
    let port = common::free_port();
    let shipped = std::fs::read_to_string(dest.join("etc/berth/berth.toml")).unwrap();
    assert!(shipped.contains("\nkubeconfig = \"credential:kubeconfig\"\n"));
    let edited = [
        (
            "state_dir = \"/var/lib/berth\"",
            format!("state_dir = \"{}/var/lib/berth\"", dest.display()),
        ),
        ("jitter = \"10s\"", "jitter = \"0s\"".to_string()),
        (
            "listen = \"127.0.0.1:9464\"",
            format!("listen = \"127.0.0.1:{port}\""),
        ),
        ("name = \"guestbook\"", "name = \"installed\"".to_string()),
        (
            "repo = \"https://git.example.com/platform/guestbook.git\"",
            format!("repo = \"{}\"", repo.dir.path().display()),
        ),
        ("namespace = \"default\"", format!("namespace = \"{ns}\"")),
    ]
    .iter()
    .fold(shipped.clone(), |text, (from, to)| {
        assert!(
            text.contains(from),
            "the shipped configuration has no {from}"
        );
        text.replacen(from, to, 1)
    });
    std::fs::write(dest.join("etc/berth/berth.toml"), edited).unwrap();

    // What the unit asks of systemd, read from the installed unit.
    let unit = std::fs::read_to_string(dest.join("etc/systemd/system/berth.service")).unwrap();
    let settings = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
            .collect()
    };
    let under_root = |p: &str| dest.join(p.trim_start_matches('/'));
    assert_eq!(settings("DynamicUser"), ["yes"]);
    let root_user = unsafe { libc::geteuid() } == 0;
    // DynamicUser= takes a uid from 61184–65519 that no account holds.
    let uid = if root_user {
        61184 + std::process::id() % 4000
    } else {
        unsafe { libc::geteuid() }
    };
    let chown = |p: &Path| {
        if root_user {
            std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
        }
    };
    for dir in settings("StateDirectory") {
        let state = under_root(&format!("/var/lib/{dir}"));
        std::fs::create_dir_all(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        chown(&state);
    }
    let credentials = dest.join("run/credentials/berth.service");
    std::fs::create_dir_all(&credentials).unwrap();
    let loaded = settings("LoadCredential");
    assert!(!loaded.is_empty(), "the unit loads no credential");
    for spec in &loaded {
        let (name, path) = spec.split_once(':').unwrap();
        let copy = credentials.join(name);
        std::fs::copy(under_root(path), &copy).unwrap_or_else(|e| {
            panic!("LoadCredential={spec}: {e} (systemd would refuse to start)")
        });
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o400)).unwrap();
        chown(&copy);
    }
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o500)).unwrap();
    chown(&credentials);
    // The repository is the app's remote; the service user reads it (libgit2 wants its own).
    std::fs::set_permissions(repo.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if root_user {
        let owned = std::process::Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{uid}"))
            .arg(repo.dir.path())
            .status()
            .unwrap();
        assert!(owned.success());
    }
    let notify = NotifySocket::bind();
    std::fs::set_permissions(
        notify.path.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&notify.path, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(settings("Type"), ["notify"]);
    let umask = u32::from_str_radix(&settings("UMask")[0], 8).unwrap();
    let exec = settings("ExecStart");
    let argv: Vec<PathBuf> = exec[0]
        .split_whitespace()
        .map(|a| {
            if a.starts_with('/') {
                under_root(a)
            } else {
                PathBuf::from(a)
            }
        })
        .collect();
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", "/")
        .env("CREDENTIALS_DIRECTORY", &credentials)
        .env("NOTIFY_SOCKET", &notify.path)
        .stdout(std::process::Stdio::null());
    if std::env::var_os("BERTH_TEST_LOG").is_none() {
        cmd.stderr(std::process::Stdio::null());
    }
    if root_user {
        cmd.uid(uid).gid(uid);
    }
    // SAFETY: umask is async-signal-safe and touches nothing but the child.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        })
    };
    let mut daemon = Daemon {
        child: cmd.spawn().unwrap(),
    };
    notify.until(Duration::from_secs(60), |m| m.contains("READY=1"));
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.child.id())).unwrap();
    let runs_as = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .unwrap()
        .to_string();
    assert_eq!(runs_as, uid.to_string());
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for_value(&maps, "installed", "v1", Duration::from_secs(60)).await;
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait(Duration::from_secs(30)).success());
    let history = berth::history::HistoryLog::new(&dest.join("var/lib/berth"))
        .read("installed")
        .unwrap();
    assert_eq!(history.last().unwrap().outcome, Outcome::Succeeded);
}

/// The Debian package as the README installs it: `scripts/package` (of this build's
/// binary), `apt-get install ./berth_*.deb`; the files where operators look for them, the
/// unit verified and neither enabled nor started, the man page and completions; then
/// removed (the configuration, a conffile, kept) and purged (nothing of berth left). It
/// installs on this machine, so it runs as root only (in CI), and never over a berth
/// package someone installed.
#[test]
fn the_debian_package_installs_verifies_and_purges_cleanly() {
    use std::os::unix::fs::PermissionsExt;
    let run = |program: &str, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    if !root || !Path::new("/usr/bin/dpkg").exists() || run("dpkg", &["-s", "berth"]).0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "the package test needs root, dpkg and no berth package installed"
        );
        eprintln!(
            "skipped: installing the package needs root and dpkg, and no berth package installed"
        );
        return;
    }
    let package = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/package");
    let (built, said) = run(package, &["--binary", env!("CARGO_BIN_EXE_berth")]);
    assert!(built, "scripts/package: {said}");
    let deb = said.lines().last().unwrap().trim().to_string();
    let name = Path::new(&deb).file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(concat!("berth_", env!("CARGO_PKG_VERSION"), "_"))
            && name.ends_with(".deb"),
        "{deb}"
    );
    /// Purges the package whatever the test's outcome.
    struct Purge;
    impl Drop for Purge {
        fn drop(&mut self) {
            let _ = std::process::Command::new("dpkg")
                .args(["--purge", "berth"])
                .output();
        }
    }
    let _purge = Purge;
    let (installed, said) = run("apt-get", &["install", "-y", "-q", &deb]);
    assert!(installed, "apt-get install {deb}: {said}");

    let mode = |p: &str| {
        std::fs::metadata(p)
            .map(|m| m.permissions().mode() & 0o777)
            .ok()
    };
    assert_eq!(mode("/usr/bin/berth"), Some(0o755));
    assert_eq!(mode("/etc/berth/berth.toml"), Some(0o644));
    assert_eq!(mode("/etc/berth/credentials"), Some(0o700));
    let unit = std::fs::read_to_string("/usr/lib/systemd/system/berth.service").unwrap();
    assert!(
        unit.contains("\nExecStart=/usr/bin/berth --config /etc/berth/berth.toml run\n"),
        "{unit}"
    );
    let (_, conffiles) = run("dpkg-query", &["-W", "-f=${Conffiles}", "berth"]);
    assert!(conffiles.contains("/etc/berth/berth.toml"), "{conffiles}");
    for completion in [
        "/usr/share/bash-completion/completions/berth",
        "/usr/share/zsh/vendor-completions/_berth",
        "/usr/share/fish/vendor_completions.d/berth.fish",
    ] {
        let text = std::fs::read_to_string(completion).unwrap();
        assert!(text.contains("validate"), "{completion}: {text}");
    }
    let (_, man) = run("sh", &["-c", "gzip -dc /usr/share/man/man1/berth.1.gz"]);
    assert!(
        man.contains(".TH berth 1") && man.contains("berth\\-init(1)"),
        "{man}"
    );
    let (_, init) = run(
        "sh",
        &["-c", "gzip -dc /usr/share/man/man1/berth-init.1.gz"],
    );
    assert!(init.contains("\\-\\-namespace"), "{init}");
    let (_, version) = run("berth", &["--version"]);
    assert_eq!(version.trim(), concat!("berth ", env!("CARGO_PKG_VERSION")));
    let wants = Path::new("/etc/systemd/system/multi-user.target.wants/berth.service");
    assert!(!wants.exists(), "the package enabled the service");
    let (verified, complaints) = run(
        "systemd-analyze",
        &["verify", "/usr/lib/systemd/system/berth.service"],
    );
    assert!(
        verified && complaints.trim().is_empty(),
        "systemd-analyze verify: {complaints}"
    );

    let (removed, said) = run("apt-get", &["remove", "-y", "-q", "berth"]);
    assert!(removed, "apt-get remove: {said}");
    assert!(!Path::new("/usr/bin/berth").exists());
    assert!(
        Path::new("/etc/berth/berth.toml").exists(),
        "a conffile stays until purged"
    );
    let (purged, said) = run("apt-get", &["purge", "-y", "-q", "berth"]);
    assert!(purged, "apt-get purge: {said}");
    assert!(
        !Path::new("/etc/berth").exists(),
        "purged, /etc/berth is left"
    );
    assert!(!run("dpkg", &["-s", "berth"]).0);
}
