//! Running berth for weeks, for a team (issue 44): the state folder shared with a one-off
//! run, repositories owned by someone else, outages, namespaces, held apps, signals and
//! reloads — against the real control plane where the cluster is involved.

mod common;

use std::time::Duration;

use berth::history::Outcome;
use common::{Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// A relative `state_dir` is the configuration file's folder's, wherever berth starts.
#[tokio::test]
async fn a_relative_state_dir_is_read_from_the_configuration_files_folder() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "relative").await;
    let repo = Repo::new();
    repo.write("a.yaml", &config_map("a", "1"));
    // kubectl (YAML 1.1) reads `yes` as a boolean and refuses it: berth warns.
    repo.write(
        "b.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  DEBUG: yes\n",
    );
    repo.commit("first");
    let setup = Setup::new(cp, "relative", &repo, &ns, "");
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let text = text.replace(
        &format!("state_dir = \"{}\"", setup.state.path().display()),
        "state_dir = \"state\"",
    );
    std::fs::write(&setup.config, text).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["sync", "--config"])
        .arg(&setup.config)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("warning: b.yaml")
            && text.contains("data.DEBUG: yes unquoted is the string \"yes\""),
        "{text}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
    assert!(maps.get_opt("a").await.unwrap().is_some());
    let history = berth::history::HistoryLog::new(&setup.state.path().join("state"));
    assert_eq!(history.read("relative").unwrap().len(), 1);
    assert!(std::fs::read_dir(elsewhere.path())
        .unwrap()
        .next()
        .is_none());
}

fn deployment(name: &str, image: &str, never_ready: bool) -> String {
    let annotations = if never_ready {
        "testenv.berth.dev/ready: \"false\""
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  progressDeadlineSeconds: 4\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n      annotations: {{{annotations}}}\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

/// A commit held after its rollout failed is recorded once, not at every sync that finds
/// it still held (which pushed the failure out of `history_keep`); `berth history
/// --outcome held` lists it, `--outcome rolled-back` the automatic rollback before it, and
/// `berth status` says why in one line.
#[tokio::test]
async fn a_held_app_is_recorded_once_and_says_why() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "held-once").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web", "web:1", false));
    repo.commit("web 1");
    let setup = Setup::new(cp, "held-once", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    repo.write("web.yaml", &deployment("web", "web:broken", true));
    let broken = repo.commit("web broken");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");

    for _ in 0..3 {
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("held: "), "{out}");
    }
    let outcomes: Vec<Outcome> = setup.history().iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Succeeded, Outcome::RolledBack, Outcome::Held],
        "one held record for the commit"
    );
    // The automatic rollback is listed as one, as a manual one is.
    let (code, out, err) = setup.berth(&["history", "--outcome", "rolled-back"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines().filter(|l| l.contains("rolled-back")).count() == 1
            && out.contains(&broken[..7]),
        "{out}"
    );

    let (code, out, err) = setup.berth(&["history", "--outcome", "held"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.contains("held")).count(),
        1,
        "{out}"
    );

    let (code, out, err) = setup.berth(&["status", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let reason = status["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("held: ") && reason.contains(&broken[..7]),
        "{out}"
    );
    let (_, table, _) = setup.berth(&["status"]);
    assert!(
        table.contains("REASON") && table.contains(reason),
        "{table}"
    );
}

/// How the test's proxy in front of the API server treats connections.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Link {
    /// Forwarded to the API server.
    Up,
    /// Refused: nothing listens.
    Refused,
    /// Taken and never answered (a firewall dropping packets, a hung host).
    Silent,
}

/// A TCP proxy on loopback in front of the API server: an outage made in the network, as
/// berth meets it, with the real control plane behind. Every change of link drops the
/// connections open.
struct Proxy {
    port: u16,
    link: tokio::sync::watch::Sender<Link>,
}

impl Proxy {
    async fn start(target: u16) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (link, rx) = tokio::sync::watch::channel(Link::Up);
        tokio::spawn(serve(listener, port, target, rx));
        Proxy { port, link }
    }

    fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

async fn serve(
    mut listener: tokio::net::TcpListener,
    port: u16,
    target: u16,
    mut link: tokio::sync::watch::Receiver<Link>,
) {
    loop {
        tokio::select! {
            Ok((mut conn, _)) = listener.accept() => {
                let mut changed = link.clone();
                changed.mark_unchanged();
                let now = *link.borrow();
                tokio::spawn(async move {
                    if now == Link::Up {
                        let Ok(mut api) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut conn, &mut api) => {}
                            _ = changed.changed() => {}
                        }
                    } else {
                        let _ = changed.changed().await;
                    }
                });
            }
            Ok(()) = link.changed() => {
                if *link.borrow_and_update() == Link::Refused {
                    drop(listener);
                    let _ = link.wait_for(|l| *l != Link::Refused).await;
                    listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
                }
            }
        }
    }
}

/// An API server outage under `berth run`: one line when it starts and one when it ends,
/// no retry warnings; a sync fails within `request_timeout` naming the server and the
/// cause; the commit that arrived meanwhile is synced as soon as the server answers
/// (not at the next interval, an hour away); a silent outage is counted from the first
/// request it left unanswered; SIGTERM with a sync in flight ends berth within 5 s, the
/// sync recorded interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_said_once_fails_syncs_quickly_and_ends_with_a_sync() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "outage").await;
    let kubeconfig = std::fs::read_to_string(&cp.kubeconfig).unwrap();
    let target: u16 = kubeconfig
        .split("server: https://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .expect("the test kubeconfig's port");
    let proxy = Proxy::start(target).await;
    let state = tempfile::tempdir().unwrap();
    let proxied = state.path().join("kubeconfig");
    std::fs::write(
        &proxied,
        kubeconfig.replace(
            &format!("127.0.0.1:{target}"),
            &format!("127.0.0.1:{}", proxy.port),
        ),
    )
    .unwrap();
    let repo = Repo::new();
    repo.write("a.yaml", &config_map("a", "1"));
    repo.commit("one");
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\n[cluster]\nkubeconfig = \"{}\"\nrequest_timeout = \"8s\"\n[[app]]\nname = \"outage\"\nrepo = \"{}\"\nnamespace = \"{ns}\"\n",
            state.path().display(),
            proxied.display(),
            repo.dir.path().display()
        ),
    )
    .unwrap();
    let log = state.path().join("berth.log");
    let stderr = std::fs::File::create(&log).unwrap();
    let mut daemon = common::Daemon::start_with(&config, &[], |cmd| {
        cmd.stderr(stderr);
    });
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for_value(&maps, "a", "1", std::time::Duration::from_secs(60)).await;
    let history = berth::history::HistoryLog::new(state.path());
    let records = || history.read("outage").unwrap_or_default();

    // Refused: the sync of the new commit fails within request_timeout, naming the server.
    proxy.set(Link::Refused);
    repo.write("a.yaml", &config_map("a", "2"));
    repo.commit("two");
    common::eventually(
        "the failed sync",
        std::time::Duration::from_secs(30),
        || records().len() == 2,
    );
    let failed = records().pop().unwrap();
    assert_eq!(failed.outcome, Outcome::Failed, "{failed:?}");
    let error = &failed.errors[0].message;
    assert!(
        error.contains(&format!(
            "cannot reach the API server at https://127.0.0.1:{}/",
            proxy.port
        )) && error.to_lowercase().contains("connection refused"),
        "{error}"
    );
    assert!(
        failed.duration_ms <= 8_000 + 1_000,
        "{}",
        failed.duration_ms
    );

    // Back: the waiting commit is synced at once, not at the interval.
    proxy.set(Link::Up);
    common::eventually(
        "the sync once back",
        std::time::Duration::from_secs(20),
        || {
            records()
                .last()
                .is_some_and(|r| r.outcome == Outcome::Succeeded)
        },
    );
    let synced = records().pop().unwrap();
    assert_eq!(synced.trigger, berth::history::Trigger::Reconnected);
    common::wait_for_value(&maps, "a", "2", std::time::Duration::from_secs(5)).await;

    // Silent: the outage is counted from the first request it did not answer (8 s before
    // berth can tell), not from when berth said it.
    proxy.set(Link::Silent);
    repo.write("a.yaml", &config_map("a", "2b"));
    repo.commit("two b");
    common::eventually(
        "the sync that times out",
        std::time::Duration::from_secs(30),
        || records().len() == 4,
    );
    proxy.set(Link::Up);
    common::eventually(
        "the sync once back again",
        std::time::Duration::from_secs(20),
        || records().len() == 5,
    );
    common::wait_for_value(&maps, "a", "2b", std::time::Duration::from_secs(5)).await;

    // Silent, with a sync in flight: SIGTERM ends berth within 5 s.
    proxy.set(Link::Silent);
    repo.write("a.yaml", &config_map("a", "3"));
    repo.commit("three");
    common::eventually(
        "a sync in flight",
        std::time::Duration::from_secs(20),
        || berth::sync::in_flight(state.path(), "outage").is_some(),
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let clock = std::time::Instant::now();
    daemon.signal(libc::SIGTERM);
    daemon.wait(std::time::Duration::from_secs(30));
    let stopped_in = clock.elapsed();
    assert!(
        stopped_in < std::time::Duration::from_secs(5),
        "{stopped_in:?}"
    );
    assert_eq!(records().pop().unwrap().outcome, Outcome::Interrupted);

    let text = std::fs::read_to_string(&log).unwrap();
    let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
    let server = format!(
        "cluster default: the API server at https://127.0.0.1:{}/",
        proxy.port
    );
    assert_eq!(count(&format!("{server} is unreachable")), 2, "{text}");
    assert_eq!(
        count(&format!("{server} answers again (unreachable for")),
        2,
        "{text}"
    );
    assert_eq!(count("retrying"), 0, "{text}");
    let silent: u64 = (text.lines())
        .filter_map(|l| l.split("answers again (unreachable for ").nth(1))
        .filter_map(|rest| rest.split('s').next()?.parse().ok())
        .nth(1)
        .expect("the silent outage's end");
    assert!(
        silent >= 8,
        "counted from its first unanswered request: {silent}s"
    );
}

/// A commit that creates the Namespace its `pre` hook (named by `generateName`) and an
/// early wave use: the Namespace is created before either, and plan and sync agree.
#[tokio::test]
async fn the_namespaces_of_a_commit_come_before_its_hooks_and_waves() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "ns-first").await;
    let data = format!("{ns}-data");
    let repo = Repo::new();
    repo.write(
        "namespace.yaml",
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {data}\n"),
    );
    repo.write(
        "migrate.yaml",
        &format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: migrate-\n  namespace: {data}\n  annotations: {{argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded}}\nspec:\n  backoffLimit: 0\n  template:\n    metadata:\n      annotations: {{testenv.berth.dev/exit: \"0\"}}\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: run\n          image: tools:1\n"
        ),
    );
    repo.write(
        "early.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: early\n  namespace: {data}\n  annotations: {{argocd.argoproj.io/sync-wave: \"-1\"}}\ndata:\n  value: \"1\"\n"),
    );
    repo.commit("a namespace, its hook and an early wave");
    let setup = Setup::new(
        cp,
        "ns-first",
        &repo,
        &ns,
        &format!("[app.scope]\nnamespaces = [\"{ns}\", \"{data}\"]\n"),
    );
    let (code, out, err) = setup.berth(&["plan"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let line = |what: &str| {
        out.lines()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in {out}"))
    };
    assert!(
        line(&format!("namespace/{data} created")) < line("(pre hook)"),
        "{out}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client, &data);
    assert!(maps.get_opt("early").await.unwrap().is_some());
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{record:?}");
    assert_eq!(record.hooks.len(), 1, "{record:?}");
    assert!(
        record.hooks[0].key.name.starts_with("migrate-"),
        "{record:?}"
    );
}

/// `create_namespace = true`: without it a missing namespace fails the dry run naming the
/// setting; with it a commit the dry run refuses leaves no namespace behind; plan says the
/// namespace is created and sync creates it, labelled as berth's; two apps share it, and
/// it goes only with the last of them removed with `prune = true`.
#[tokio::test]
async fn create_namespace_creates_shares_and_deletes_with_the_last_app() {
    use k8s_openapi::api::core::v1::Namespace;
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let base = common::namespace(&client, "create-ns").await;
    let shared = format!("{base}-made");
    let repo = Repo::new();
    repo.write("one/a.yaml", &config_map("a", "1"));
    repo.write("two/b.yaml", &config_map("b", "1"));
    repo.commit("two apps");
    let app = |name: &str, path: &str, create: bool| {
        format!(
            "[[app]]\nname = \"{name}\"\nrepo = \"{}\"\nnamespace = \"{shared}\"\npath = \"{path}\"\nprune = true\ncreate_namespace = {create}\n",
            repo.dir.path().display()
        )
    };
    let setup = Setup::new(
        cp,
        "ns-one",
        &repo,
        &shared,
        "path = \"one\"\nprune = true\n",
    );
    let head = std::fs::read_to_string(&setup.config).unwrap();
    let port = common::free_port();
    let head = head.split("[[app]]").next().unwrap().replace(
        "[agent]\n",
        &format!("[agent]\nlisten = \"127.0.0.1:{port}\"\nstatus_page = true\n"),
    );
    let write = |apps: &str| std::fs::write(&setup.config, format!("{head}{apps}")).unwrap();

    // Without the setting: the error says what to do, nothing is written.
    write(&app("ns-one", "one", false));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("namespaces \"{shared}\" not found"))
            && out.contains("create_namespace = true"),
        "{out}"
    );

    // With it, a commit the dry run refuses in that namespace: the namespace, created to
    // dry-run the objects in it, is deleted again; nothing of the commit stays.
    write(&app("ns-one", "one", true));
    repo.write("one/svc.yaml", &common::refused_service(""));
    repo.commit("a Service the server refuses");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!(
        "dry run failed: nothing was written (namespace {shared}, created to dry-run the objects in it, deleted again)"
    );
    assert!(out.contains(&said), "{out}");
    assert!(!out.contains("dry run passed"), "{out}");
    let refused = setup.history().pop().unwrap();
    assert!(refused.objects.is_empty(), "{:?}", refused.objects);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let gone = async {
        while let Some(ns) = namespaces.get_opt(&shared).await.unwrap() {
            assert!(ns.metadata.deletion_timestamp.is_some(), "{ns:?}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), gone)
        .await
        .expect("the namespace is deleted");
    repo.git(&["rm", "-q", "one/svc.yaml"]);
    repo.commit("the Service out");

    write(&format!(
        "{}{}",
        app("ns-one", "one", true),
        app("ns-two", "two", true)
    ));
    let (code, out, err) = setup.berth(&["plan", "ns-one"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("namespace/{shared} create (create_namespace)")),
        "{out}"
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let labels = |ns: &Namespace| ns.metadata.labels.clone().unwrap_or_default();
    let made = namespaces.get(&shared).await.unwrap();
    assert_eq!(labels(&made)["app.kubernetes.io/managed-by"], "berth");
    assert_eq!(labels(&made)["namespace.berth.dev/ns-one"], "true");
    assert_eq!(labels(&made)["namespace.berth.dev/ns-two"], "true");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &shared);
    assert!(maps.get_opt("a").await.unwrap().is_some());
    assert!(maps.get_opt("b").await.unwrap().is_some());

    // The agent prunes the apps removed from the configuration: the namespace goes with
    // the last of them.
    let mut daemon = common::Daemon::start(&setup.config, &[]);
    common::eventually("the agent runs", std::time::Duration::from_secs(30), || {
        setup.state.path().join("apps.toml").exists()
    });
    write(&app("ns-two", "two", true));
    daemon.signal(libc::SIGHUP);
    let removed = |name: &str| {
        berth::history::HistoryLog::new(setup.state.path())
            .read(name)
            .unwrap_or_default()
            .iter()
            .any(|r| r.trigger == berth::history::Trigger::Removed)
    };
    common::eventually("ns-one removed", std::time::Duration::from_secs(60), || {
        removed("ns-one")
    });
    let kept = namespaces.get(&shared).await.unwrap();
    assert!(
        !labels(&kept).contains_key("namespace.berth.dev/ns-one"),
        "{kept:?}"
    );
    assert!(kept.metadata.deletion_timestamp.is_none());
    assert!(maps.get_opt("a").await.unwrap().is_none());
    // The removed app's history is read by its name, on the command line and the page.
    let (code, out, err) = setup.berth(&["history", "ns-one"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("app ns-one is no longer in the configuration: its history as kept")
            && out.lines().filter(|l| l.contains(" ns-one ")).count() >= 2,
        "{out}{err}"
    );
    let (code, page) = common::http(port, "GET", "/apps/ns-one", &[], b"");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("Removed from the configuration"), "{page}");
    let (code, api) = common::http(port, "GET", "/api/apps/ns-one/syncs", &[], b"");
    assert_eq!(code, 200, "{api}");
    assert!(api.contains("\"removed\""), "the removal's record: {api}");
    assert_eq!(
        common::http(port, "GET", "/apps/never-was", &[], b"").0,
        404
    );

    write("");
    daemon.signal(libc::SIGHUP);
    common::eventually("ns-two removed", std::time::Duration::from_secs(60), || {
        removed("ns-two")
    });
    let gone = namespaces.get_opt(&shared).await.unwrap();
    assert!(
        gone.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the namespace goes with the last app"
    );
    daemon.signal(libc::SIGTERM);
    daemon.wait(std::time::Duration::from_secs(30));
}

/// A one-off run as another user (`sudo berth sync` on the service's folder) is refused
/// before it writes anything there, naming the owner and how to run as it; reading
/// (`status`, `history`) still works. Runs where the test may hand a folder to another
/// user (as root, as CI does).
#[test]
fn a_run_as_another_user_is_refused_before_it_writes_the_state_folder() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let config = dir.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\n[cluster]\nkubeconfig = \"/nonexistent/kubeconfig\"\n[[app]]\nname = \"web\"\nrepo = \"/nonexistent/repo\"\n",
            state.display()
        ),
    )
    .unwrap();
    let berth = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let owner = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find(|l| l.split(':').nth(2) == Some("65534"))
        .and_then(|l| l.split(':').next().map(String::from))
        .unwrap_or_else(|| "uid 65534".into());
    for command in ["sync", "plan", "run", "rollback"] {
        let mut args = vec![command];
        if command == "rollback" {
            args.extend(["web", "web"]);
        }
        let (code, err) = berth(&args);
        assert_eq!(code, Some(1), "{command}: {err}");
        assert!(
            err.contains(&format!("belongs to {owner}"))
                && err.contains(&format!("sudo -u {owner} berth {command}")),
            "{command}: {err}"
        );
    }
    assert!(
        std::fs::read_dir(&state).unwrap().next().is_none(),
        "nothing written"
    );
    let (code, err) = berth(&["history"]);
    assert_eq!(code, Some(0), "{err}");
}

/// `berth reload` waits for the agent's answer: a configuration the agent refuses exits
/// 1 with the reason; a setting only a restart takes (the status page) is said, not
/// silently dropped, and put back to what runs is not said again.
#[tokio::test]
async fn reload_says_what_the_agent_did_with_the_configuration() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "reload").await;
    let repo = Repo::new();
    repo.write("a.yaml", &config_map("a", "1"));
    repo.commit("one");
    let setup = Setup::new(cp, "reload", &repo, &ns, "");
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let mut daemon = common::Daemon::start(&setup.config, &[]);
    common::eventually("the agent runs", std::time::Duration::from_secs(30), || {
        setup.state.path().join("berth.pid").exists()
    });

    std::fs::write(
        &setup.config,
        text.replace(
            "[agent]\n",
            "[agent]\nstatus_page = true\nlisten = \"127.0.0.1:0\"\n",
        ),
    )
    .unwrap();
    let (code, out, err) = setup.berth(&["reload"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("status_page") && out.contains("only a restart takes them"),
        "{out}"
    );
    // Put back to what runs: nothing to restart for, and no app restarted.
    std::fs::write(&setup.config, &text).unwrap();
    let (code, out, err) = setup.berth(&["reload"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !out.contains("only a restart takes them") && !out.contains("every app restarted"),
        "{out}"
    );

    std::fs::write(
        &setup.config,
        text.replace(
            &cp.kubeconfig.display().to_string(),
            "/nonexistent/kubeconfig",
        ),
    )
    .unwrap();
    let (code, out, err) = setup.berth(&["reload"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("reload refused") && err.contains("/nonexistent/kubeconfig"),
        "{err}"
    );
    daemon.signal(libc::SIGTERM);
    daemon.wait(std::time::Duration::from_secs(30));
}

/// A local repository another user owns (a shared `/srv/git`, a deploy user's checkout)
/// works for the service's user: berth only reads its refs and objects. Runs where the
/// test may hand the repository to another user (as root, as CI does).
#[tokio::test]
async fn a_local_repository_owned_by_another_user_syncs() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "not-mine").await;
    let repo = Repo::new();
    repo.write("a.yaml", &config_map("a", "1"));
    repo.commit("one");
    let status = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(repo.dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let setup = Setup::new(cp, "not-mine", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
    assert!(maps.get_opt("a").await.unwrap().is_some());
}

/// Objects of a kind no CRD defines yet (Gateway API's, whose group ends in `.k8s.io`):
/// one error for the kind, blaming the missing CRD, not the cluster's version.
#[tokio::test]
async fn a_missing_crd_is_one_error_that_names_it() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "no-crd").await;
    let repo = Repo::new();
    for name in ["web", "api"] {
        repo.write(
            &format!("{name}.yaml"),
            &format!("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\nspec:\n  gatewayClassName: x\n  listeners: []\n"),
        );
    }
    repo.commit("gateways");
    let setup = Setup::new(cp, "no-crd", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said: Vec<&str> = out.lines().filter(|l| l.contains("unknown kind")).collect();
    assert_eq!(said.len(), 1, "{out}");
    assert!(
        said[0].contains("is its CRD installed?")
            && said[0].contains("(and 1 more object of this kind)")
            && !out.contains("in any version"),
        "{out}"
    );
}

/// Issue 61, item 1: an app that names no branch of a local repository follows the branch
/// checked out at its first sync, whatever the work tree checks out later. Before, `git
/// checkout -b feature` and a commit there deployed the feature branch, and `main`'s next
/// commit was refused as a force-push.
#[tokio::test(flavor = "multi_thread")]
async fn a_local_repository_is_followed_on_its_branch_not_its_work_trees_head() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "work-tree").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("state", "1"));
    repo.commit("one");
    let setup = Setup::new(cp, "work-tree", &repo, &ns, "");
    let _daemon = common::Daemon::start(&setup.config, &[]);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for_value(&maps, "state", "1", std::time::Duration::from_secs(60)).await;
    repo.git(&["checkout", "-q", "-b", "feature/image"]);
    repo.write("cm.yaml", &config_map("state", "feature"));
    let feature = repo.commit("on a feature branch");
    // The commit wakes the agent (it watches the repository): its sync ends before the
    // work tree goes back to main.
    let synced = setup.history().len();
    let after_feature = || setup.history().len() > synced;
    common::eventually(
        "a sync after the feature commit",
        std::time::Duration::from_secs(30),
        after_feature,
    );
    let value = maps.get("state").await.unwrap().data.unwrap_or_default();
    assert_eq!(
        value.get("value").map(String::as_str),
        Some("1"),
        "the feature commit applied"
    );
    repo.git(&["checkout", "-q", "main"]);
    repo.write("cm.yaml", &config_map("state", "2"));
    let main = repo.commit("two, on main");
    common::wait_for_value(&maps, "state", "2", std::time::Duration::from_secs(60)).await;
    let recorded =
        || (setup.history().iter()).any(|r| r.commit.as_ref().is_some_and(|c| c.sha == main));
    common::eventually(
        "main's commit recorded",
        std::time::Duration::from_secs(30),
        recorded,
    );
    let history = setup.history();
    let of = |sha: &str| {
        (history.iter())
            .filter(|r| r.commit.as_ref().is_some_and(|c| c.sha == sha))
            .collect::<Vec<_>>()
    };
    assert!(
        of(&feature).is_empty(),
        "the feature branch was synced: {history:?}"
    );
    let applied = of(&main);
    assert!(
        applied
            .iter()
            .any(|r| r.outcome == Outcome::Succeeded && r.history_rewritten.is_none()),
        "{applied:?}"
    );
    assert!(
        history.iter().all(|r| r.outcome != Outcome::Failed),
        "{history:?}"
    );
}

/// `berth sync` stopped by SIGTERM mid-rollout (as systemd or a CI runner stops it) ends
/// at its next step and records what it wrote: interrupted, with the Deployment it
/// created, not a sync the next one finds killed with no objects.
#[tokio::test]
async fn a_sync_stopped_by_sigterm_records_what_it_wrote() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "sigterm").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web", "web:1", true));
    repo.write("cm.yaml", &config_map("settings", "1"));
    repo.commit("a rollout that never ends");
    let setup = Setup::new(cp, "sigterm", &repo, &ns, "");
    // `berth sync` in the background, once it follows its rollout.
    let rolling_out = || {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["sync", "--config"])
            .arg(&setup.config)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        common::eventually(
            "the sync follows its rollout",
            std::time::Duration::from_secs(30),
            || {
                berth::sync::in_flight(setup.state.path(), "sigterm")
                    .is_some_and(|m| m.step == berth::sync::Step::RollOut && m.pid == child.id())
            },
        );
        child
    };
    let child = rolling_out();
    // SAFETY: kill(2) on the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("interrupted: finishing the current step"),
        "{said}"
    );
    let record = setup.history().pop().expect("the sync's own record");
    assert_eq!(record.outcome, Outcome::Interrupted, "{record:?}");
    let created: Vec<String> = (record.objects.iter())
        .filter(|o| o.action == berth::history::Action::Created)
        .map(|o| o.key.name.clone())
        .collect();
    assert_eq!(created, ["settings", "web"], "{record:?}");
    let (_, shown, _) = setup.berth(&["history", "show", &record.id]);
    assert!(shown.contains("Objects:   2 created"), "{shown}");

    // Killed (SIGKILL): the next sync records it, and does not claim it wrote nothing.
    let mut child = rolling_out();
    child.kill().unwrap();
    child.wait().unwrap();
    setup.berth(&["sync", "--no-wait"]);
    let killed = (setup.history().into_iter())
        .find(|r| {
            r.note
                .as_deref()
                .is_some_and(|n| n.contains("killed or crashed"))
        })
        .expect("the killed sync's record");
    let (_, shown, _) = setup.berth(&["history", "show", &killed.id]);
    assert!(
        shown.contains("Objects:   none recorded (stopped before it wrote, or killed"),
        "{shown}"
    );
}

/// A failed sync is tried again backing off, not at the interval (an hour here): while
/// the app's namespace is missing its retries come further apart, and once someone
/// creates it the commit is applied within 30 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_sync_is_retried_backing_off() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let base = common::namespace(&client, "retry").await;
    let later = format!("{base}-later");
    let repo = Repo::new();
    repo.write("a.yaml", &config_map("a", "1"));
    repo.commit("one");
    let setup = Setup::new(cp, "retry", &repo, &later, "");
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let quiet = text.replace("[agent]\n", "[agent]\nlisten = \"off\"\n");
    std::fs::write(&setup.config, quiet).unwrap();
    let mut daemon = common::Daemon::start(&setup.config, &[]);
    common::eventually(
        "three failed syncs",
        std::time::Duration::from_secs(60),
        || setup.history().len() >= 3,
    );
    let failed = setup.history();
    assert!(
        failed.iter().all(|r| r.outcome == Outcome::Failed),
        "{failed:?}"
    );
    let retries: Vec<_> = failed[1..].iter().map(|r| r.trigger).collect();
    assert!(
        retries.iter().all(|t| *t == berth::history::Trigger::Retry),
        "{retries:?}"
    );
    let gap = |i: usize| {
        failed[i + 1]
            .started_at
            .duration_since(failed[i].finished_at)
    };
    assert!(
        gap(1) + jiff::SignedDuration::from_millis(200) >= gap(0),
        "further apart: {:?} then {:?}",
        gap(0),
        gap(1)
    );

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": later}})).unwrap();
    namespaces.create(&Default::default(), &ns).await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &later);
    common::wait_for_value(&maps, "a", "1", std::time::Duration::from_secs(30)).await;
    daemon.signal(libc::SIGTERM);
    daemon.wait(std::time::Duration::from_secs(30));
}

/// Drift repaired in seconds, not at the interval: with `interval = "1h"`, a ConfigMap's
/// value and a Deployment's replicas changed by hand are put back as git has them, each
/// by a sync recorded with the trigger `drift`.
#[tokio::test]
async fn drift_is_repaired_within_seconds_without_waiting_for_the_interval() {
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Patch, PatchParams};
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "drift").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("settings", "from-git"));
    let web = deployment("web", "nginx:1.25", false).replace("replicas: 1", "replicas: 2");
    repo.write("web.yaml", &web);
    repo.commit("one");
    let setup = Setup::new(cp, "drift", &repo, &ns, "");
    let text = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(
        &setup.config,
        text.replace("[agent]\n", "[agent]\nlisten = \"off\"\n"),
    )
    .unwrap();
    let mut daemon = common::Daemon::start(&setup.config, &[]);
    common::eventually("the first sync", Duration::from_secs(60), || {
        setup
            .history()
            .first()
            .is_some_and(|r| r.outcome == Outcome::Succeeded)
    });
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let by_hand = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let edited = std::time::Instant::now();
    let value = serde_json::json!({"data": {"value": "by-hand"}});
    maps.patch("settings", &by_hand, &Patch::Merge(&value))
        .await
        .unwrap();
    let replicas = serde_json::json!({"spec": {"replicas": 5}});
    deployments
        .patch("web", &by_hand, &Patch::Merge(&replicas))
        .await
        .unwrap();
    common::wait_for_value(&maps, "settings", "from-git", Duration::from_secs(10)).await;
    common::wait_for(
        &deployments,
        "web",
        Duration::from_secs(10),
        |d: Option<&Deployment>| d.and_then(|d| d.spec.as_ref()?.replicas) == Some(2),
    )
    .await;
    eprintln!("drift repaired {:?} after the hand edits", edited.elapsed());
    assert!(
        edited.elapsed() < Duration::from_secs(10),
        "repaired after {:?}",
        edited.elapsed()
    );
    let drift = |r: &&berth::history::SyncRecord| r.trigger == berth::history::Trigger::Drift;
    common::eventually(
        "a sync triggered by the drift",
        Duration::from_secs(30),
        || setup.history().iter().any(|r| drift(&r)),
    );
    let history = setup.history();
    let repair = history.iter().find(drift).unwrap();
    assert_eq!(repair.outcome, Outcome::Succeeded, "{repair:#?}");
    daemon.signal(libc::SIGTERM);
    daemon.wait(Duration::from_secs(30));
}

/// A broken commit of an app whose namespace `create_namespace` would make: the render
/// error is said, the objects that rendered are not refused for the namespace's absence
/// (it is not made for a commit that writes nothing), and nothing is written.
#[tokio::test]
async fn a_broken_commit_is_not_refused_for_the_namespace_create_namespace_would_make() {
    use k8s_openapi::api::core::v1::Namespace;
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let base = common::namespace(&client, "broken").await;
    let ns = format!("{base}-new");
    let repo = Repo::new();
    repo.write("good.yaml", &config_map("good", "1"));
    repo.write(
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: [not, a, map]\n",
    );
    repo.commit("one bad file");
    let setup = Setup::new(cp, "broken", &repo, &ns, "create_namespace = true");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("bad.yaml"), "{out}{err}");
    assert!(!out.contains("not found"), "{out}{err}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get_opt(&ns).await.unwrap().is_none());
}
