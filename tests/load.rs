//! The agent stays responsive while its syncs work: `/healthz` is asked every 100 ms
//! while eight syncs each wait 20 s on a tool, and while eight apps each decode 5 MB of
//! YAML and decrypt 1000 sops values (renders run on threads of their own at a lower
//! priority, the endpoint on the control lane); its p99 stays under 100 ms, and the leader
//! Lease is never lost.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use berth::history::{HistoryLog, Outcome};
use common::Repo;

const APPS: usize = 8;

/// A `berth run` configuration of [`APPS`] apps `app0`… (folders of the same names), each
/// in a namespace of its own, eight syncing at once, with leader election; `extra` goes
/// in `[agent]`, `each` in every app.
fn config(
    state: &Path,
    kubeconfig: &Path,
    repo: &Repo,
    port: u16,
    (extra, each): (&str, &str),
) -> String {
    let mut text = format!(
        "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"127.0.0.1:{port}\"\nmax_concurrent_syncs = {APPS}\nleader_election = true\nlease_duration = \"4s\"\nlease_name = \"load-{port}\"\n{extra}\n[cluster]\nkubeconfig = \"{}\"\n",
        state.display(),
        kubeconfig.display()
    );
    for i in 0..APPS {
        text += &format!(
            "[[app]]\nname = \"app{i}\"\nrepo = \"{}\"\npath = \"app{i}\"\nnamespace = \"load-{port}-{i}\"\ncreate_namespace = true\n{each}\n",
            repo.dir.path().display()
        );
    }
    text
}

/// Asks `/healthz` every 100 ms until every app of `state` has a succeeded record (at most
/// `timeout`); each answer's latency.
fn probe_until_synced(port: u16, state: &Path, timeout: Duration) -> Vec<Duration> {
    let log = HistoryLog::new(state);
    let synced = || {
        (0..APPS).all(|i| {
            let records = log.read(&format!("app{i}")).unwrap_or_default();
            records.iter().any(|r| r.outcome == Outcome::Succeeded)
        })
    };
    let end = Instant::now() + timeout;
    let mut latencies = Vec::new();
    while !synced() {
        if Instant::now() >= end {
            let last: Vec<_> = (0..APPS)
                .map(|i| log.read(&format!("app{i}")).unwrap_or_default().pop())
                .map(|r| r.map(|r| (r.app, r.outcome, r.note, r.errors)))
                .collect();
            let log = std::fs::read_to_string(state.join("berth.log")).unwrap_or_default();
            let tail: String = log.lines().rev().take(30).collect::<Vec<_>>().join("\n");
            panic!("the apps did not sync within {timeout:?}: {last:#?}\n{tail}");
        }
        let asked = Instant::now();
        let (code, body) = common::http(port, "GET", "/healthz", &[], b"");
        latencies.push(asked.elapsed());
        assert_eq!((code, body.as_str()), (200, "ok\n"));
        std::thread::sleep(Duration::from_millis(100).saturating_sub(asked.elapsed()));
    }
    latencies
}

/// The 99th percentile of `latencies`.
fn p99(mut latencies: Vec<Duration>) -> Duration {
    latencies.sort();
    latencies[(latencies.len() * 99).div_ceil(100) - 1]
}

/// Starts `berth run` on `config` (its log in `state/berth.log`) and waits until
/// `/healthz` answers.
fn start(config: &Path, state: &Path, port: u16) -> common::Daemon {
    let log = std::fs::File::create(state.join("berth.log")).unwrap();
    let daemon = common::Daemon::start_with(config, &[], |cmd| {
        cmd.stderr(log);
    });
    let end = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        let log = || std::fs::read_to_string(state.join("berth.log")).unwrap_or_default();
        assert!(Instant::now() < end, "/healthz does not answer: {}", log());
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon
}

/// The p99 of the probes, said, and checked with the daemon's log: under 100 ms, no
/// Lease lost.
fn check(what: &str, latencies: Vec<Duration>, state: &Path) {
    let (n, worst) = (latencies.len(), latencies.iter().max().copied());
    let p99 = p99(latencies);
    eprintln!("{what}: /healthz p99 {p99:?} over {n} probes (worst {worst:?})");
    assert!(p99 < Duration::from_millis(100), "{what}: p99 {p99:?}");
    let log = std::fs::read_to_string(state.join("berth.log")).unwrap();
    assert!(!log.contains("lost the lease"), "{log}");
    assert!(log.contains("holding the lease"), "{log}");
}

#[tokio::test]
async fn healthz_answers_while_eight_renders_wait_twenty_seconds_on_a_tool() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let repo = Repo::new();
    for i in 0..APPS {
        repo.write(
            &format!("app{i}/kustomization.yaml"),
            "resources: [cm.yaml]\n",
        );
        repo.write(
            &format!("app{i}/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: slow\ndata:\n  value: \"1\"\n",
        );
    }
    repo.commit("eight kustomizations");
    let state = tempfile::tempdir().unwrap();
    // The stand-in tool: kustomize after 20 s.
    let tool = state.path().join("kustomize.sh");
    std::fs::write(
        &tool,
        "#!/bin/sh\nsleep 20\nexec kubectl kustomize \"$1\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = common::free_port();
    let extra = format!("kustomize = \"{}\"", tool.display());
    let text = config(state.path(), &cp.kubeconfig, &repo, port, (&extra, ""));
    let path = state.path().join("berth.toml");
    std::fs::write(&path, text).unwrap();
    let started = Instant::now();
    let _daemon = start(&path, state.path(), port);
    let latencies = probe_until_synced(port, state.path(), Duration::from_secs(120));
    assert!(
        started.elapsed() >= Duration::from_secs(20),
        "the tool did not wait"
    );
    check("eight renders of 20 s", latencies, state.path());
}

/// One app's folder for the decoding load: 5 MB of ConfigMaps (five files of ten 100 kB
/// ConfigMaps: `max_file_size` is 4 MiB) and the Secrets of `secrets`, 334 files of three
/// values each encrypted with sops for an age recipient (1002 values).
fn heavy_folder(repo: &Repo, app: &str, secrets: &Path) {
    let value = "x".repeat(100_000);
    for file in 0..5 {
        let mut text = String::new();
        for n in 0..10 {
            text += &format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big-{file}-{n}\ndata:\n  value: {value}\n");
        }
        repo.write(&format!("{app}/big-{file}.yaml"), &text);
    }
    for entry in std::fs::read_dir(secrets).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        repo.write(
            &format!("{app}/{name}"),
            &std::fs::read_to_string(&path).unwrap(),
        );
    }
}

/// The Secrets of [`heavy_folder`], written by scripts/sops-fixtures.py (Python's
/// cryptography and Debian's age, not berth), and the age key that opens them.
fn encrypted_secrets(dir: &Path) -> std::path::PathBuf {
    let key = dir.join("age.key");
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(std::process::Command::new("age-keygen").arg("-o").arg(&key));
    let recipient = run(std::process::Command::new("age-keygen").arg("-y").arg(&key));
    let python = std::env::var("BERTH_SOPS_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/sops-fixtures.py");
    run(std::process::Command::new(python)
        .args([script, "secrets"])
        .arg(dir)
        .args(["334", recipient.trim()]));
    key
}

#[tokio::test]
async fn healthz_answers_while_eight_apps_decode_five_megabytes_and_decrypt_a_thousand_values() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let fixtures = state.path().join("fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    let key = encrypted_secrets(&fixtures);
    let repo = Repo::new();
    for i in 0..APPS {
        heavy_folder(&repo, &format!("app{i}"), &fixtures.join("encrypted"));
    }
    repo.commit("eight heavy apps");
    let port = common::free_port();
    let each = format!(
        "[app.decrypt]\nprovider = \"sops\"\nage_key_files = [\"{}\"]\n",
        key.display()
    );
    let text = config(state.path(), &cp.kubeconfig, &repo, port, ("", &each));
    let path = state.path().join("berth.toml");
    std::fs::write(&path, text).unwrap();
    let _daemon = start(&path, state.path(), port);
    let latencies = probe_until_synced(port, state.path(), Duration::from_secs(300));
    let log = HistoryLog::new(state.path());
    let record = log.read("app0").unwrap().pop().unwrap();
    let written = record.objects.len() + record.unchanged;
    assert_eq!(written, 50 + 334 + 1, "{:?}", record.objects.first());
    check(
        "eight apps decoding and decrypting",
        latencies,
        state.path(),
    );
}
