//! The HTTP endpoint (`[agent] listen`) under hostile load, on loopback only and bounded
//! in count and time: slow clients at the file-descriptor limit, a webhook body that never
//! ends, a flood of `/readyz`. Each test prints what it measured (`--nocapture`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth::history::Outcome;
use tokio::io::AsyncWriteExt;

use crate::common::{self, eventually, http, Daemon, Repo, Setup};

const SECRET: &str = "s3cret";

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// One app with a webhook, its endpoint on a free loopback port.
struct Agent {
    setup: Setup,
    repo: Repo,
    port: u16,
    log: PathBuf,
    _secrets: tempfile::TempDir,
}

impl Agent {
    async fn new(test: &str) -> Option<Agent> {
        let cp = common::control_plane()?;
        let client = common::client(cp).await;
        let ns = common::namespace(&client, test).await;
        let repo = Repo::new();
        repo.write("cm.yaml", &config_map("one", "1"));
        repo.commit("first");
        let secrets = tempfile::tempdir().unwrap();
        let secret = secrets.path().join("hook");
        std::fs::write(&secret, SECRET).unwrap();
        let setup = Setup::new(
            cp,
            test,
            &repo,
            &ns,
            &format!("webhook_secret_file = \"{}\"", secret.display()),
        );
        let port = common::free_port();
        let text = std::fs::read_to_string(&setup.config).unwrap().replace(
            "[cluster]",
            &format!("listen = \"127.0.0.1:{port}\"\n[cluster]"),
        );
        std::fs::write(&setup.config, text).unwrap();
        let log = setup.state.path().join("berth.log");
        Some(Agent {
            setup,
            repo,
            port,
            log,
            _secrets: secrets,
        })
    }

    /// `berth run`, logging to `self.log`, with at most `open_files` descriptors.
    fn start(&self, open_files: Option<u64>) -> Daemon {
        let log = std::fs::File::create(&self.log).unwrap();
        let daemon = Daemon::start_with(&self.setup.config, &[], |cmd| {
            cmd.stderr(log);
            if let Some(n) = open_files {
                use std::os::unix::process::CommandExt;
                // SAFETY: setrlimit(2) only, between fork and exec.
                unsafe {
                    cmd.pre_exec(move || {
                        let limit = libc::rlimit {
                            rlim_cur: n,
                            rlim_max: n,
                        };
                        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    })
                };
            }
        });
        eventually("the first sync", Duration::from_secs(30), || {
            self.synced(None)
        });
        eventually("/healthz", Duration::from_secs(10), || {
            http(self.port, "GET", "/healthz", &[], b"").0 == 200
        });
        daemon
    }

    /// A sync of `commit` (any commit: `None`) succeeded.
    fn synced(&self, commit: Option<&str>) -> bool {
        self.setup.history().iter().any(|r| {
            matches!(r.outcome, Outcome::Succeeded | Outcome::NoChange)
                && commit.is_none_or(|c| r.commit.as_ref().is_some_and(|rc| rc.sha == c))
        })
    }
}

/// The resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `n` slow clients, each stopping by itself after `lasting` or when the server closes
/// it: half send a request head one byte every half second, half send a webhook's head
/// at once and then its (1 MiB) body one byte every half second.
fn slow_clients(
    port: u16,
    app: &str,
    n: usize,
    lasting: Duration,
) -> Vec<tokio::task::JoinHandle<()>> {
    let deadline = tokio::time::Instant::now() + lasting;
    (0..n)
        .map(|i| {
            let head = if i % 2 == 0 {
                format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow-{i}: ")
            } else {
                format!("POST /hooks/{app} HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\nX-Hub-Signature-256: sha256=00\r\n\r\n")
            };
            tokio::spawn(async move {
                let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
                let Ok(Ok(mut s)) = tokio::time::timeout_at(deadline, connect).await else {
                    return;
                };
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                while tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if s.write_all(b"a").await.is_err() {
                        return;
                    }
                }
            })
        })
        .collect()
}

/// Lines of the agent's log that mention `word`.
fn log_lines(log: &Path, word: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(word))
        .count()
}

/// 400 slow clients against an agent limited to 256 open files: without limits they take
/// every descriptor, accept fails in a loop (a log line each time), and syncs fail with
/// "Too many open files".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_at_the_descriptor_limit_leave_health_syncs_and_the_log_alone() {
    let Some(agent) = Agent::new("hostile-slow").await else {
        return;
    };
    let daemon = agent.start(Some(256));
    let pid = daemon.child.id();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kib(pid);

    let clients = slow_clients(agent.port, &agent.setup.app, 400, Duration::from_secs(8));
    let mut rss_peak = rss_before;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        rss_peak = rss_peak.max(rss_kib(pid));
    }
    let asked = Instant::now();
    let (code, _) = http(agent.port, "GET", "/healthz", &[], b"");
    let health_ms = asked.elapsed().as_millis();
    assert_eq!(code, 200, "/healthz during the flood");
    assert!(health_ms < 1000, "/healthz took {health_ms} ms");

    agent.repo.write("cm.yaml", &config_map("one", "2"));
    let second = agent.repo.commit("second");
    let started = Instant::now();
    while !agent.synced(Some(&second)) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the sync of the second commit during the flood: {:#?}",
            agent.setup.history().last()
        );
        rss_peak = rss_peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sync_ms = started.elapsed().as_millis();
    while clients.iter().any(|c| !c.is_finished()) {
        rss_peak = rss_peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(http(agent.port, "GET", "/healthz", &[], b"").0, 200);

    let accept_lines = log_lines(&agent.log, "accept");
    let all_lines = log_lines(&agent.log, "");
    eprintln!(
        "measured: 400 slow clients at 256 open files: RSS {} KiB before, {} KiB at the peak \
         (+{} KiB); /healthz in {health_ms} ms; the sync during the flood in {sync_ms} ms; \
         {accept_lines} log lines about accept, {all_lines} in all",
        rss_before,
        rss_peak,
        rss_peak.saturating_sub(rss_before)
    );
    assert!(accept_lines <= 4, "{accept_lines} log lines about accept");
    assert!(
        rss_peak.saturating_sub(rss_before) < 32 << 10,
        "RSS grew from {rss_before} KiB to {rss_peak} KiB"
    );
}

#[tokio::test]
async fn a_webhook_body_that_never_ends_is_cut_off() {
    let Some(agent) = Agent::new("hostile-body").await else {
        return;
    };
    let _daemon = agent.start(None);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", agent.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "POST /hooks/{} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nX-Hub-Signature-256: {}\r\n\r\n",
        agent.setup.app,
        berth::body_hmac::sign(SECRET.as_bytes(), &[b'x'; 100])
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&[b'x'; 10]).unwrap();
    let sent = Instant::now();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let waited = sent.elapsed();
    eprintln!("measured: a body 90 bytes short was answered after {waited:?}: {answer:?}");
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "{answer:?} after {waited:?}"
    );
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[tokio::test]
async fn readyz_asks_the_cluster_at_most_once_a_second() {
    let Some(agent) = Agent::new("hostile-readyz").await else {
        return;
    };
    let cp = common::control_plane().unwrap();
    let _daemon = agent.start(None);
    let since = jiff::Timestamp::now();
    let started = Instant::now();
    let port = agent.port;
    let callers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                (0..250)
                    .filter(|_| http(port, "GET", "/readyz", &[], b"").0 == 200)
                    .count()
            })
        })
        .collect();
    let ready: usize = callers.into_iter().map(|c| c.join().unwrap()).sum();
    let took = started.elapsed();
    // The audit log is written as requests end: give the last one a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = cp.audit_events(since);
    let count = |uri: &str| events.iter().filter(|e| e["requestURI"] == uri).count();
    let asked = count("/version");
    // Every berth that other tests start meanwhile asks /version once with its discovery
    // (`/apis`): those are not this agent's readiness.
    let others = count("/apis");
    eprintln!("measured: 1000 /readyz calls in {took:?} ({ready} ready) made {asked} API requests ({others} discoveries meanwhile)");
    assert_eq!(ready, 1000);
    // Once a second at most.
    assert!(
        (asked as u64) <= took.as_secs() + 3 + others as u64,
        "{asked} requests to /version in {took:?}, {others} discoveries"
    );
}

/// A flood of idle connections (they connect and send nothing), about 450 a second for
/// 3 s: before, every place of both lanes was held by one and `/healthz` answered 2 probes
/// in 30; now the oldest idle one is closed to make room, and every probe is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_answers_through_a_flood_of_idle_connections() {
    let Some(agent) = Agent::new("hostile-idle").await else {
        return;
    };
    let _daemon = agent.start(None);
    let port = agent.port;
    berth::service::listener::raise_open_files(); // this test holds 1,400 connections
    let flood = std::thread::spawn(move || {
        let mut held = Vec::new();
        let end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < end {
            for _ in 0..45 {
                if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    held.push(s);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        held.len()
    });
    // Once the places are taken (512 + 32), probe while the flood goes on.
    std::thread::sleep(Duration::from_millis(1500));
    let probes = 30;
    let mut answered = 0;
    let started = Instant::now();
    for _ in 0..probes {
        if http(port, "GET", "/healthz", &[], b"").0 == 200 {
            answered += 1;
        }
    }
    let took = started.elapsed();
    let opened = flood.join().unwrap();
    eprintln!("measured: {opened} idle connections in 3 s; /healthz answered {answered} of {probes} probes in {took:?}");
    assert!(opened > 1000, "the flood opened only {opened} connections");
    assert_eq!(answered, probes, "{answered} of {probes} probes answered");
}

/// The status page on loopback, for a host where other users log in: with
/// `status_page_credentials_on_loopback`, berth refuses to serve it without credentials,
/// and with them a request from 127.0.0.1 without them gets 401.
#[tokio::test]
async fn the_status_page_can_require_credentials_on_loopback() {
    let Some(agent) = Agent::new("hostile-page-loopback").await else {
        return;
    };
    let text = std::fs::read_to_string(&agent.setup.config).unwrap();
    let with = |agent_keys: &str| text.replace("[agent]\n", &format!("[agent]\n{agent_keys}"));
    std::fs::write(
        &agent.setup.config,
        with("status_page = true\nstatus_page_credentials_on_loopback = true\n"),
    )
    .unwrap();
    let (code, out, err) = agent.setup.berth(&["validate"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("agent.status_page_credentials_on_loopback: is on, and agent.status_page_credentials is not set"),
        "{out}{err}"
    );
    let secrets = tempfile::tempdir().unwrap();
    let file = secrets.path().join("page");
    std::fs::write(&file, "ops:correct-horse\n").unwrap();
    std::fs::write(
        &agent.setup.config,
        with(&format!(
            "status_page = true\nstatus_page_credentials_on_loopback = true\nstatus_page_credentials = \"{}\"\n",
            file.display()
        )),
    )
    .unwrap();
    let _daemon = agent.start(None);
    let (code, _) = http(agent.port, "GET", "/api/apps", &[], b"");
    assert_eq!(code, 401, "a local user without credentials");
    use base64::Engine;
    let basic = base64::engine::general_purpose::STANDARD.encode("ops:correct-horse");
    let (code, _) = http(
        agent.port,
        "GET",
        "/api/apps",
        &[("Authorization", format!("Basic {basic}"))],
        b"",
    );
    assert_eq!(code, 200);
}

/// Finding 4: 5,000 apps (one set's, every app suspended), 150 event streams and 100 page
/// requests that never read. Before, each unread `/` held the whole list (26 MB at 45,000
/// apps) and each stream every app's state, until the connection's lifetime ended; now an
/// answer is a page of apps, and a client that reads nothing is dropped after the write
/// stall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_pages_and_event_streams_at_5000_apps_hold_little_and_healthz_answers() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    const APPS: usize = 5000;
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "many-unread").await;
    let repo = Repo::new();
    repo.commit_folders("apps", APPS);
    let state = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"127.0.0.1:{port}\"\nstatus_page = true\n[cluster]\nkubeconfig = \"{}\"\n[[app_set]]\nname = \"many\"\nrepo = \"{}\"\nfolders = \"apps/*\"\nnamespace = \"{ns}\"\nsuspend = true\n",
            state.path().display(),
            cp.kubeconfig.display(),
            repo.dir.path().display()
        ),
    )
    .unwrap();
    let daemon = Daemon::start(&config, &[]);
    let pid = daemon.child.id();
    let host = [("Host", format!("127.0.0.1:{port}"))];
    eventually("the endpoint", Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    eventually("5000 apps on the page", Duration::from_secs(120), || {
        http(port, "GET", "/", &host, b"")
            .1
            .contains("5000 of 5000 apps")
    });
    let before = rss_kib(pid);
    berth::service::listener::raise_open_files();
    let mut unread = Vec::new();
    for (path, n) in [("/api/events", 150), ("/", 100)] {
        for _ in 0..n {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
            s.write_all(head.as_bytes()).unwrap();
            unread.push(s);
        }
    }
    std::thread::sleep(Duration::from_secs(3));
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let asked = Instant::now();
        assert_eq!(http(port, "GET", "/healthz", &[], b"").0, 200);
        slowest = slowest.max(asked.elapsed());
    }
    let held = rss_kib(pid);
    let grown = held.saturating_sub(before) / 1024;
    eprintln!(
        "measured: {APPS} apps, 150 unread event streams and 100 unread pages: RSS {} → {} MiB (+{grown} MiB); /healthz at most {slowest:?} over 20 probes",
        before / 1024,
        held / 1024
    );
    drop(unread);
    assert!(grown < 64, "{grown} MiB more");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    // A page of /api/apps, the rest named.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "GET /api/apps?page=2 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.contains("x-total-count: 5000"),
        "{}",
        &answer[..answer.len().min(600)]
    );
    assert!(answer.contains("</api/apps?page=3>; rel=\"next\""));
    assert_eq!(answer.matches("\"name\":\"many-f").count(), 250);
}
