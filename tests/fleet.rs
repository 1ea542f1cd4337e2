//! Fleets (issue 46): one agent, several clusters — against three real control planes of
//! this test binary's own, whose API servers the tests stop and start.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use berth_testenv::ControlPlane;
use common::receiver::{Answer, Receiver};
use common::{berth_on as berth, Daemon, Repo};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

const NAMES: [&str; 3] = ["east", "west", "north"];

/// One test stops north's API server: the tests that sync to north hold this for reading,
/// that one for writing, so that they do not run while it is down.
static NORTH: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

/// A configuration of the three clusters (short request bounds: a stopped API server
/// fails a sync in seconds) and `apps`, each `(name, cluster, path)`.
/// The `[agent]` table of a test's configuration and a `[[cluster]]` table for each of
/// `cps`, named after [`NAMES`], with `keys(i)` added to the `i`-th.
fn agent_and_clusters(
    state: &std::path::Path,
    cps: &[ControlPlane],
    keys: impl Fn(usize) -> String,
) -> String {
    let mut text = format!(
        "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\n",
        state.display()
    );
    for (i, (name, cp)) in NAMES.iter().zip(cps).enumerate() {
        text += &format!(
            "[[cluster]]\nname = \"{name}\"\nkubeconfig = \"{}\"\n{}",
            cp.kubeconfig.display(),
            keys(i)
        );
    }
    text
}

fn fleet_config(
    state: &std::path::Path,
    cps: &[ControlPlane],
    repo: &Repo,
    ns: &str,
    apps: &[(&str, &str, &str)],
) -> std::path::PathBuf {
    let mut text = agent_and_clusters(state, cps, |_| {
        "request_timeout = \"3s\"\nretry_for = \"2s\"\n".to_string()
    });
    for (app, cluster, path) in apps {
        text += &format!(
            "[[app]]\nname = \"{app}\"\ncluster = \"{cluster}\"\nrepo = \"{}\"\npath = \"{path}\"\nnamespace = \"{ns}\"\ncreate_namespace = true\n",
            repo.dir.path().display()
        );
    }
    let config = state.join("berth.toml");
    std::fs::write(&config, text).unwrap();
    config
}

/// The ConfigMap `name` in `ns` of each cluster, by value (`None`: absent).
async fn values(clients: &[kube::Client], ns: &str, name: &str) -> Vec<Option<String>> {
    read_each(clients, ns, name, |m| m.data?.get("value").cloned()).await
}

/// What `read` says of the ConfigMap `name` in `ns` of each cluster (`None`: absent).
async fn read_each(
    clients: &[kube::Client],
    ns: &str,
    name: &str,
    read: impl Fn(ConfigMap) -> Option<String>,
) -> Vec<Option<String>> {
    let mut found = Vec::new();
    for client in clients {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let map = maps.get_opt(name).await.ok().flatten();
        found.push(map.and_then(&read));
    }
    found
}

/// Apps go to their own cluster and nowhere else; with one cluster's API server stopped,
/// `berth sync` syncs the others and says which it could not reach, `berth status` shows
/// its apps `unreachable`, and `berth run` keeps syncing the other clusters' apps, then
/// the stopped one's once it is back.
#[tokio::test(flavor = "multi_thread")]
async fn apps_reach_only_their_cluster_and_one_cluster_down_delays_no_other() {
    let Some(cps) = common::fleet() else {
        return;
    };
    let mut clients = Vec::new();
    for cp in cps {
        clients.push(common::client(cp).await);
    }
    let _north = NORTH.write().await;
    let ns = format!("fleet-{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("web/web.yaml", &config_map("web", "1"));
    repo.write("api/api.yaml", &config_map("api", "1"));
    repo.commit("first");
    let state = tempfile::tempdir().unwrap();
    let apps = [
        ("web-east", "east", "web"),
        ("web-west", "west", "web"),
        ("api-north", "north", "api"),
    ];
    let config = fleet_config(state.path(), cps, &repo, &ns, &apps);

    let (code, out, err) = berth(&config, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let one = || Some("1".to_string());
    assert_eq!(values(&clients, &ns, "web").await, [one(), one(), None]);
    assert_eq!(values(&clients, &ns, "api").await, [None, None, one()]);

    // North's API server stops: the others sync, north's app is named, exit 1.
    cps[2].kill("kube-apiserver").unwrap();
    repo.write("web/web.yaml", &config_map("web", "2"));
    repo.write("api/api.yaml", &config_map("api", "2"));
    repo.commit("second");
    let start = std::time::Instant::now();
    let (code, out, err) = berth(&config, &["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("api-north: cluster north: cannot connect to the cluster: cannot reach the API server at https://127.0.0.1:")
            && out.contains("; not synced"),
        "{out}{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "{:?}",
        start.elapsed()
    );
    let two = || Some("2".to_string());
    assert_eq!(values(&clients[..2], &ns, "web").await, [two(), two()]);

    let (code, out, err) = berth(&config, &["status"]);
    assert_eq!(code, 1, "{out}{err}");
    let row = |app: &str| out.lines().find(|l| l.starts_with(app)).unwrap_or_default();
    assert!(row("api-north").contains("north"), "{out}");
    assert!(
        row("api-north").contains("unreachable (cannot reach the API server at https://127.0.0.1:"),
        "{out}"
    );
    assert!(!row("web-east").contains("unreachable"), "{out}");
    assert!(err.contains("error: cluster north is unavailable"), "{err}");

    // The agent: east and west follow a new commit while north is down; north's app
    // syncs once its API server is back.
    repo.write("web/web.yaml", &config_map("web", "3"));
    repo.write("api/api.yaml", &config_map("api", "3"));
    repo.commit("third");
    let _daemon = Daemon::start(&config, &[]);
    for client in &clients[..2] {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        common::wait_for_value(&maps, "web", "3", Duration::from_secs(60)).await;
    }
    cps[2].start_again("kube-apiserver").await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(clients[2].clone(), &ns);
    common::wait_for_value(&maps, "api", "3", Duration::from_secs(90)).await;
}

/// `berth suspend` keeps an app from syncing — `berth sync` says so and exits 0, `berth
/// status` shows it, a running agent leaves it and its status page shows it within a
/// second — until `berth resume` (here of every app of its cluster), which a running
/// agent picks up without a reload.
#[tokio::test(flavor = "multi_thread")]
async fn a_suspended_app_is_left_alone_until_resumed() {
    let Some(cps) = common::fleet() else {
        return;
    };
    let mut clients = Vec::new();
    for cp in &cps[..2] {
        clients.push(common::client(cp).await);
    }
    let ns = format!("suspend-{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("web/web.yaml", &config_map("web", "1"));
    repo.commit("first");
    let state = tempfile::tempdir().unwrap();
    let apps = [("site-east", "east", "web"), ("site-west", "west", "web")];
    let config = fleet_config(state.path(), cps, &repo, &ns, &apps);
    let port = common::free_port();
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "listen = \"off\"\n",
        &format!("listen = \"127.0.0.1:{port}\"\nstatus_page = true\n"),
    );
    std::fs::write(&config, text).unwrap();

    let (code, out, err) = berth(&config, &["suspend", "site-west"]);
    assert_eq!((code, out.trim()), (0, "app site-west suspended"), "{err}");
    let (code, out, err) = berth(&config, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("site-west: suspended (by ")
            && out.contains("not synced (berth resume site-west)"),
        "{out}"
    );
    assert_eq!(values(&clients, &ns, "web").await, [Some("1".into()), None]);
    let (code, out, err) = berth(&config, &["status", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let west: serde_json::Value = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .find(|s: &serde_json::Value| s["app"] == "site-west")
        .unwrap();
    assert!(
        west["suspended"].as_str().unwrap().starts_with("by "),
        "{west}"
    );
    assert_eq!(west["cluster"], "west", "{west}");

    // A running agent leaves it while it syncs the other app, then syncs it once resumed.
    let _daemon = Daemon::start(&config, &[]);
    repo.write("web/web.yaml", &config_map("web", "2"));
    repo.commit("second");
    let east: Api<ConfigMap> = Api::namespaced(clients[0].clone(), &ns);
    common::wait_for_value(&east, "web", "2", Duration::from_secs(60)).await;
    let history = berth::history::HistoryLog::new(state.path());
    assert_eq!(history.read("site-west").unwrap_or_default().len(), 0);
    // Suspended while the agent idles (its next sync an hour away): the status page
    // shows it at once, not at the app's next trigger.
    let shown = |app: &str| {
        let (_, body) = common::http(port, "GET", &format!("/api/apps/{app}"), &[], b"");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["app"]["state"].clone()
    };
    common::eventually("east idles", Duration::from_secs(30), || {
        shown("site-east") == "idle"
    });
    let asked = std::time::Instant::now();
    assert_eq!(berth(&config, &["suspend", "site-east"]).0, 0);
    common::eventually(
        "the page shows the suspension",
        Duration::from_secs(2),
        || shown("site-east") == "suspended",
    );
    eprintln!("suspension shown on the page after {:?}", asked.elapsed());
    assert_eq!(berth(&config, &["resume", "site-east"]).0, 0);
    let (code, out, err) = berth(&config, &["resume", "--cluster", "west"]);
    assert_eq!((code, out.trim()), (0, "app site-west resumed"), "{err}");
    let west: Api<ConfigMap> = Api::namespaced(clients[1].clone(), &ns);
    common::wait_for_value(&west, "web", "2", Duration::from_secs(30)).await;
}

/// `berth validate` lists the apps each set generates from the folders of its
/// repository's commit — set, app, cluster, path, namespace — and renders each, without a
/// cluster; a folder added on a branch shows as a new app.
#[test]
fn validate_lists_the_apps_each_set_generates() {
    let repo = Repo::new();
    repo.write("addons/dns/cm.yaml", &config_map("dns", "1"));
    repo.write("addons/ingress/cm.yaml", &config_map("ingress", "1"));
    repo.write("addons/README.md", "not a folder\n");
    repo.write("apps/web/cm.yaml", &config_map("web", "1"));
    repo.commit("first");
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("berth.toml");
    let write = |branch: &str| {
        let text = format!(
            "[agent]\nstate_dir = \"{}\"\n[[cluster]]\nname = \"east\"\nlabels = {{ env = \"prod\" }}\n[[cluster]]\nname = \"west\"\nlabels = {{ env = \"prod\" }}\n[[cluster]]\nname = \"lab\"\nlabels = {{ env = \"test\" }}\n[[app_set]]\nname = \"addons\"\nrepo = \"{}\"\nbranch = \"{branch}\"\nfolders = [\"addons/*\"]\nclusters = {{ env = \"prod\" }}\nnamespace = \"{{folder}}\"\n",
            state.path().display(),
            repo.dir.path().display()
        );
        std::fs::write(&config, text).unwrap();
    };
    write("main");
    let (code, out, err) = berth(&config, &["validate"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("app set addons: 4 apps from branch main at "),
        "{out}"
    );
    // Every app counted, written or generated (issue 61, item 7).
    assert!(
        out.contains(": ok (4 apps: 0 written, 4 from app sets)"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("addons "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["addons", "addons-dns-east", "east", "addons/dns", "dns"],
            ["addons", "addons-dns-west", "west", "addons/dns", "dns"],
            [
                "addons",
                "addons-ingress-east",
                "east",
                "addons/ingress",
                "ingress"
            ],
            [
                "addons",
                "addons-ingress-west",
                "west",
                "addons/ingress",
                "ingress"
            ],
        ]
    );
    assert!(
        out.contains("app addons-dns-west: 1 object from branch main at "),
        "{out}"
    );

    repo.git(&["checkout", "-q", "-b", "more"]);
    repo.write("addons/metrics/cm.yaml", &config_map("metrics", "1"));
    repo.commit("metrics");
    write("more");
    let (code, out, err) = berth(&config, &["validate"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("app set addons: 6 apps from branch more at "),
        "{out}"
    );
    assert!(out.contains("addons-metrics-east"), "{out}");
}

/// A configuration of the three clusters (east and west labelled `env = "prod"`, north
/// `env = "test"`), a set `set` over `folders` × the prod clusters, writing into `ns`,
/// with `extra` keys, and a plain app `<set>-solo` on north.
fn set_config(
    state: &std::path::Path,
    cps: &[ControlPlane],
    repo: &Repo,
    ns: &str,
    set: &str,
    folders: &str,
    extra: &str,
) -> std::path::PathBuf {
    let env = ["prod", "prod", "test"];
    let mut text = agent_and_clusters(state, cps, |i| {
        format!("labels = {{ env = \"{}\" }}\n", env[i])
    });
    let repo = repo.dir.path().display();
    text += &format!(
        "[[app]]\nname = \"{set}-solo\"\ncluster = \"north\"\nrepo = \"{repo}\"\npath = \"solo\"\nnamespace = \"{ns}\"\ncreate_namespace = true\n"
    );
    text += &format!(
        "[[app_set]]\nname = \"{set}\"\nrepo = \"{repo}\"\nfolders = \"{folders}\"\nclusters = {{ env = \"prod\" }}\nnamespace = \"{ns}\"\ncreate_namespace = true\nprune = true\n{extra}\n"
    );
    let config = state.join("berth.toml");
    std::fs::write(&config, text).unwrap();
    config
}

/// The uid of the ConfigMap `name` in `ns` of each cluster.
async fn uids(clients: &[kube::Client], ns: &str, name: &str) -> Vec<Option<String>> {
    read_each(clients, ns, name, |m| m.metadata.uid).await
}

/// The berth app that owns the ConfigMap `name` in `ns` (its `berth.dev/app` label).
async fn owner_of(client: &kube::Client, ns: &str, name: &str) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let map = maps.get_opt(name).await.ok().flatten()?;
    map.metadata.labels?.get("berth.dev/app").cloned()
}

/// Polls until the ConfigMap `name` in `ns` of each cluster is `want` (by value).
async fn wait_values(clients: &[kube::Client], ns: &str, name: &str, want: &[Option<&str>]) {
    let want: Vec<Option<String>> = want.iter().map(|v| v.map(str::to_string)).collect();
    let end = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let now = values(clients, ns, name).await;
        if now == want {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "{name}: {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `berth sync` of a set over three folders × the two prod clusters, beside a plain app
/// on the third: objects only where they belong; a folder removed in git takes its apps
/// away (pruned), one added adds them; a set that suddenly generates nothing (a typo'd
/// glob) removes nothing and says so, exit 1, until `allow_empty = true`.
#[tokio::test(flavor = "multi_thread")]
async fn a_set_syncs_its_folders_to_the_clusters_it_selects() {
    let Some(cps) = common::fleet() else {
        return;
    };
    let mut clients = Vec::new();
    for cp in cps {
        clients.push(common::client(cp).await);
    }
    let _north = NORTH.read().await;
    let ns = format!("addons-{}", std::process::id() % 100_000);
    let repo = Repo::new();
    for folder in ["dns", "ingress", "metrics"] {
        repo.write(
            &format!("addons/{folder}/cm.yaml"),
            &config_map(folder, "1"),
        );
    }
    repo.write("solo/cm.yaml", &config_map("solo", "1"));
    repo.commit("first");
    let state = tempfile::tempdir().unwrap();
    let config = set_config(state.path(), cps, &repo, &ns, "addons", "addons/*", "");

    let (code, out, err) = berth(&config, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    for folder in ["dns", "ingress", "metrics"] {
        let one = Some("1".to_string());
        assert_eq!(
            values(&clients, &ns, folder).await,
            [one.clone(), one, None],
            "{out}"
        );
    }
    assert_eq!(
        values(&clients, &ns, "solo").await,
        [None, None, Some("1".into())]
    );
    let (code, out, err) = berth(&config, &["status"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("addons-metrics-west ") && l.contains(" west ")),
        "{out}"
    );

    // A branch that adds a folder: `berth plan --revision` shows its new apps, and
    // writes nothing.
    repo.git(&["checkout", "-q", "-b", "more"]);
    repo.write("addons/extra/cm.yaml", &config_map("extra", "1"));
    repo.commit("extra");
    repo.git(&["checkout", "-q", "main"]);
    let (code, out, err) = berth(&config, &["plan", "--revision", "more"]);
    assert_eq!(code, 0, "{out}{err}");
    for cluster in ["east", "west"] {
        let new = format!("addons-extra-{cluster}: commit ");
        assert!(out.contains(&new), "{out}");
    }
    assert_eq!(values(&clients, &ns, "extra").await, [None, None, None]);

    // metrics removed, logs added: metrics' apps are removed (pruned), logs' synced.
    repo.git(&["rm", "-q", "-r", "addons/metrics"]);
    repo.write("addons/logs/cm.yaml", &config_map("logs", "1"));
    repo.commit("metrics out, logs in");
    let (code, out, err) = berth(&config, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("addons-metrics-east: no longer generated by app set addons: 1 object pruned, its inventory deleted"),
        "{out}"
    );
    assert_eq!(values(&clients, &ns, "metrics").await, [None, None, None]);
    let one = Some("1".to_string());
    assert_eq!(
        values(&clients, &ns, "logs").await,
        [one.clone(), one, None]
    );

    // logs renamed to logging, its files unchanged: its objects are handed over, not
    // deleted and created again.
    let before = uids(&clients[..2], &ns, "logs").await;
    repo.git(&["mv", "addons/logs", "addons/logging"]);
    repo.commit("logs renamed");
    let (code, out, err) = berth(&config, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "addons-logs-west: its folder renamed: 1 object handed over to app addons-logging-west"
        ),
        "{out}"
    );
    assert!(!out.contains("pruned"), "{out}");
    assert_eq!(uids(&clients[..2], &ns, "logs").await, before);
    let owner = owner_of(&clients[1], &ns, "logs").await;
    assert_eq!(owner.as_deref(), Some("addons-logging-west"));

    // A typo'd glob: the set generates nothing; nothing is removed, said, exit 1 — by
    // `berth sync`, by `berth status` after it, and in one notification for the set, not
    // one for each of its six apps.
    let receiver = Receiver::start(Answer::Script(Vec::new()));
    let notify = format!("[[notify]]\nurl = \"{}\"\n", receiver.url);
    let with_notify = |config: PathBuf| {
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, format!("{notify}{text}")).unwrap();
        config
    };
    let typoed = |extra: &str| {
        with_notify(set_config(
            state.path(),
            cps,
            &repo,
            &ns,
            "addons",
            "addon/*",
            extra,
        ))
    };
    let typo = typoed("");
    for _ in 0..2 {
        let (code, out, err) = berth(&typo, &["sync"]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            out.contains("app set addons: it generates no app at commit ")
                && out.contains("where it generated 6 apps before: none is removed"),
            "{out}"
        );
        assert!(out.contains("addons-solo: no change"), "{out}");
        assert_eq!(
            values(&clients, &ns, "dns").await[..2],
            [Some("1".into()), Some("1".into())]
        );
        let (code, out, err) = berth(&typo, &["status"]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            err.contains("error: app set addons: it generates no app at commit "),
            "{err}"
        );
    }
    let events = |r: &Receiver| -> Vec<(String, String)> {
        (r.accepted().iter())
            .map(|m| {
                (
                    m["event"].as_str().unwrap().into(),
                    m["app"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    assert_eq!(events(&receiver), [("set_held".into(), "addons".into())]);
    let held = &receiver.accepted()[0];
    assert_eq!(held["set"], true);
    assert!(
        held["errors"][0]
            .as_str()
            .unwrap()
            .contains("where it generated 6 apps before"),
        "{held}"
    );
    // Meant to be empty: allow_empty lets it remove them; the set's problem is closed.
    let emptied = typoed("allow_empty = true");
    let (code, out, err) = berth(&emptied, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(values(&clients, &ns, "dns").await, [None, None, None]);
    assert_eq!(events(&receiver)[1], ("recovered".into(), "addons".into()));
    let (code, _, err) = berth(&emptied, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("app set addons"), "{err}");
}

/// Under `berth run`, a folder added in git becomes an app at the next fetch and one
/// removed takes its apps away, without a reload; a set emptied keeps its apps.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_follows_a_sets_folders_without_a_reload() {
    let Some(cps) = common::fleet() else {
        return;
    };
    let mut clients = Vec::new();
    for cp in cps {
        clients.push(common::client(cp).await);
    }
    let _north = NORTH.read().await;
    let ns = format!("extras-{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("extras/cache/cm.yaml", &config_map("cache", "1"));
    repo.write("solo/cm.yaml", &config_map("solo", "1"));
    repo.commit("first");
    let state = tempfile::tempdir().unwrap();
    let config = set_config(state.path(), cps, &repo, &ns, "extras", "extras/*", "");
    let _daemon = Daemon::start(&config, &[]);
    wait_values(&clients, &ns, "cache", &[Some("1"), Some("1"), None]).await;
    wait_values(&clients, &ns, "solo", &[None, None, Some("1")]).await;

    repo.write("extras/queue/cm.yaml", &config_map("queue", "1"));
    repo.commit("queue in");
    wait_values(&clients, &ns, "queue", &[Some("1"), Some("1"), None]).await;

    repo.git(&["rm", "-q", "-r", "extras/cache"]);
    repo.commit("cache out");
    wait_values(&clients, &ns, "cache", &[None, None, None]).await;
    let history = berth::history::HistoryLog::new(state.path());
    let removed = history.read("extras-cache-west").unwrap();
    assert!(
        removed.iter().any(|r| r
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("no longer generated by app set extras"))),
        "{removed:?}"
    );

    // queue renamed to jobs: the new apps take its objects over.
    let before = uids(&clients[..2], &ns, "queue").await;
    repo.git(&["mv", "extras/queue", "extras/jobs"]);
    repo.commit("queue renamed");
    let end = std::time::Instant::now() + Duration::from_secs(90);
    while owner_of(&clients[1], &ns, "queue").await.as_deref() != Some("extras-jobs-west") {
        assert!(std::time::Instant::now() < end, "queue not taken over");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(uids(&clients[..2], &ns, "queue").await, before);

    // Emptied: nothing removed; its apps still sync.
    repo.git(&["rm", "-q", "-r", "extras"]);
    repo.commit("all out");
    repo.write("solo/cm.yaml", &config_map("solo", "2"));
    repo.commit("solo 2");
    wait_values(&clients, &ns, "solo", &[None, None, Some("2")]).await;
    assert_eq!(
        values(&clients, &ns, "queue").await,
        [Some("1".into()), Some("1".into()), None]
    );
}

/// The fleet example (`examples/fleet/`): its configuration validates against its
/// repository's layout and lists the apps its set generates.
#[test]
fn the_fleet_example_validates() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fleet");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("validate")
        .arg("--config")
        .arg(root.join("berth.toml"))
        .arg("--dir")
        .arg(root.join("repo"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("app set addons: 4 apps from "), "{text}");
    for app in ["addons-cert-manager-east", "addons-metrics-west"] {
        assert!(
            text.contains(&format!("app {app}: 1 object from ")),
            "{text}"
        );
    }
    assert!(text.contains("app shop: 1 object from "), "{text}");
}
