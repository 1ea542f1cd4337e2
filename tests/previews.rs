//! Preview environments (issue 65): an app set of `refs = ["refs/pull/*/head"]` makes one
//! app per pull request from git refs alone — a bare repository whose `refs/pull/N/head`
//! the test writes as a server would — against a real control plane with `berth run`.

mod common;

use std::path::Path;
use std::time::Duration;

use berth::history::{HistoryLog, Outcome, SyncRecord, Trigger};
use common::receiver::{Answer, Receiver};
use common::{eventually, Daemon, Repo};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::Api;

fn config_map(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  value: \"{value}\"\n"
    )
}

const BINDING: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: preview-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n  - kind: User\n    name: fork-author\n    apiGroup: rbac.authorization.k8s.io\n";

/// The work repository the test commits in, and the bare one berth reads (the "server").
struct Server {
    work: Repo,
    bare: tempfile::TempDir,
}

impl Server {
    fn new() -> Server {
        let work = Repo::new();
        work.write("deploy/cm.yaml", &config_map("main"));
        work.commit("main");
        let bare = tempfile::tempdir().unwrap();
        let path = bare.path().to_str().unwrap();
        work.git(&["clone", "-q", "--bare", ".", path]);
        Server { work, bare }
    }

    /// Commits `files` on a branch of `base` and makes `refs/pull/N/head` name it (pushed,
    /// forced: a pull request's head is rewritten at will); the commit.
    fn pull_request(&self, n: u32, base: &str, files: &[(&str, &str)]) -> String {
        self.pull_request_by(n, base, files, &[])
    }

    /// [`Server::pull_request`] with git `settings` (`user.signingkey`: signed with `-S`).
    fn pull_request_by(
        &self,
        n: u32,
        base: &str,
        files: &[(&str, &str)],
        settings: &[(&str, String)],
    ) -> String {
        self.work.git(&["checkout", "-q", "--detach", base]);
        for (path, text) in files {
            self.work.write(path, text);
        }
        self.work.git(&["add", "-A"]);
        let message = format!("pull request {n}");
        let mut args: Vec<String> = (settings.iter())
            .flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")])
            .collect();
        args.extend(["commit", "-q", "-m", &message].map(String::from));
        if !settings.is_empty() {
            args.push("-S".into());
        }
        self.work
            .git(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let commit = self.work.git(&["rev-parse", "HEAD"]);
        let target = format!("+{commit}:refs/pull/{n}/head");
        self.work.git(&["push", "-q", self.path(), &target]);
        commit
    }

    /// The pull request closed: the server deletes its ref.
    fn close(&self, n: u32) {
        let name = format!("refs/pull/{n}/head");
        self.work
            .git(&["--git-dir", self.path(), "update-ref", "-d", &name]);
    }

    fn path(&self) -> &str {
        self.bare.path().to_str().unwrap()
    }
}

fn records(state: &Path, app: &str) -> Vec<SyncRecord> {
    HistoryLog::new(state).read(app).unwrap_or_default()
}

/// The record of `app`'s sync of `commit`, once written (it is written after the apply).
fn recorded(state: &Path, app: &str, commit: &str) -> SyncRecord {
    let of = || {
        let records = records(state, app).into_iter().rev();
        records
            .into_iter()
            .find(|r| r.commit.as_ref().is_some_and(|c| c.sha == commit))
    };
    eventually(
        &format!("{app}'s record of {commit}"),
        Duration::from_secs(30),
        || of().is_some(),
    );
    of().unwrap()
}

async fn value(client: &kube::Client, ns: &str) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let map = maps.get_opt("web").await.ok()??;
    map.data?.get("value").cloned()
}

async fn wait_value(client: &kube::Client, ns: &str, want: Option<&str>) {
    let end = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let now = value(client, ns).await;
        if now.as_deref() == want {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "{ns}: {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two pull requests make two previews in their own namespaces; a push to one syncs it
/// alone; a force-push is taken and said in its record; a closed one is removed with its
/// objects and namespace; a preview that renders a ClusterRoleBinding, or a sops Secret
/// (the set's template has keys), is refused and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn each_pull_request_is_a_preview_from_its_ref_alone() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let id = std::process::id() % 100_000;
    let ns = |n: u32| format!("p{id}-pr-{n}");
    let server = Server::new();
    let main = server.work.git(&["rev-parse", "main"]);
    let one = server.pull_request(1, &main, &[("deploy/cm.yaml", &config_map("one"))]);
    server.pull_request(2, &main, &[("deploy/cm.yaml", &config_map("two"))]);
    server.pull_request(3, &main, &[("deploy/binding.yaml", BINDING)]);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sops");
    let secret = std::fs::read_to_string(fixtures.join("secret.enc.json")).unwrap();
    server.pull_request(4, &main, &[("deploy/secret.enc.json", &secret)]);
    let system = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-system\n  labels:\n    owned-by: fork\n";
    server.pull_request(6, &main, &[("deploy/ns.yaml", system)]);

    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("berth.toml");
    let receiver = Receiver::start(Answer::Script(Vec::new()));
    let port = common::free_port();
    std::fs::write(
        &config,
        format!(
            "[[notify]]\nurl = \"{}\"\nevents = [\"preview_created\", \"preview_removed\"]\n[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"127.0.0.1:{port}\"\nstatus_page = true\n[cluster]\nkubeconfig = \"{}\"\n[[app_set]]\nname = \"previews\"\nrepo = \"{}\"\nrefs = [\"refs/pull/*/head\"]\napp_name = \"pr-{{number}}\"\nnamespace = \"p{id}-pr-{{number}}\"\ncreate_namespace = true\nprune = true\npath = \"deploy\"\nmax_apps = 50\n[app_set.decrypt]\nprovider = \"sops\"\nage_key_files = [\"{}\"]\n",
            receiver.url,
            state.path().display(),
            cp.kubeconfig.display(),
            server.path(),
            fixtures.join("age.key").display(),
        ),
    )
    .unwrap();
    // `berth validate` lists the previews and renders each from its own ref: two of the
    // pull requests are refused, before anything runs.
    let (code, out, err) = common::berth_on(&config, &["validate"]);
    assert_eq!(code, 1, "{out}{err}");
    for said in [
        "app set previews: 5 apps from",
        "app pr-1: 1 object from ref refs/pull/1/head at",
        "ClusterRoleBinding preview-admin is cluster-scoped, outside the app's scope",
        "deploy/secret.enc.json: encrypted with sops, and the app decrypts nothing",
    ] {
        assert!(out.contains(said), "{said}: {out}");
    }
    let _daemon = Daemon::start(&config, &[]);
    wait_value(&client, &ns(1), Some("one")).await;
    wait_value(&client, &ns(2), Some("two")).await;

    // Untrusted code: no cluster kind, no decryption.
    let failed = |app: &str, said: &str| {
        records(state.path(), app).iter().any(|r| {
            r.outcome == Outcome::Failed && r.errors.iter().any(|e| e.message.contains(said))
        })
    };
    eventually("pr-3 refused", Duration::from_secs(60), || {
        failed("pr-3", "ClusterRoleBinding")
    });
    eventually("pr-4 refused", Duration::from_secs(60), || {
        failed("pr-4", "the app decrypts nothing")
    });
    eventually("pr-6 refused", Duration::from_secs(60), || {
        failed("pr-6", "kube-system")
    });
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let system = namespaces.get("kube-system").await.unwrap();
    let labels = system.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key("owned-by"), "{labels:?}");
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    assert!(bindings.get_opt("preview-admin").await.unwrap().is_none());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns(4));
    assert!(secrets
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty());
    assert_eq!(
        value(&client, &ns(3)).await,
        None,
        "a refused commit writes nothing"
    );

    // A push to pull request 1 syncs its preview alone.
    let two = records(state.path(), "pr-2").len();
    let pushed = server.pull_request(1, &one, &[("deploy/cm.yaml", &config_map("one-b"))]);
    wait_value(&client, &ns(1), Some("one-b")).await;
    let last = recorded(state.path(), "pr-1", &pushed);
    assert_eq!(last.trigger, Trigger::Ref, "{last:?}");

    // Rewritten (rebased on main): taken, and said in the record.
    let forced = server.pull_request(1, &main, &[("deploy/cm.yaml", &config_map("one-c"))]);
    wait_value(&client, &ns(1), Some("one-c")).await;
    let last = recorded(state.path(), "pr-1", &forced);
    assert!(last.history_rewritten.is_some(), "{last:?}");

    // Opened while berth runs: a preview made, and said.
    let five = server.pull_request(5, &main, &[("deploy/cm.yaml", &config_map("five"))]);
    wait_value(&client, &ns(5), Some("five")).await;
    let said = |event: &str, app: &str| {
        (receiver.accepted().iter()).any(|m| {
            m["event"] == event
                && m["app"] == app
                && m["commit"]["subject"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("refs/pull/"))
        })
    };
    eventually("preview_created of pr-5", Duration::from_secs(30), || {
        said("preview_created", "pr-5")
    });
    let created = (receiver.accepted().iter())
        .find(|m| m["event"] == "preview_created" && m["app"] == "pr-5")
        .cloned()
        .unwrap();
    assert_eq!(created["commit"]["sha"], five.as_str());
    assert_eq!(created["commit"]["subject"], "refs/pull/5/head");

    // `berth status --set` shows each preview with its ref and the commit it synced.
    let (code, out, err) = common::berth_on(&config, &["status", "--set", "previews"]);
    assert_eq!(code, 0, "{out}{err}");
    let row = |app: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{app} ")))
            .map(String::from)
    };
    let rows: Vec<String> = out
        .lines()
        .skip_while(|l| !l.starts_with("PREVIEW"))
        .map(String::from)
        .collect();
    assert_eq!(rows.len(), 7, "{out}");
    let five_row = rows
        .iter()
        .find(|l| l.starts_with("pr-5 "))
        .cloned()
        .unwrap_or_default();
    assert!(
        five_row.contains("refs/pull/5/head") && five_row.contains(&five[..7]),
        "{out}"
    );
    assert!(row("pr-3").is_some(), "{out}");
    // The status page says which set and ref each preview is.
    let (code, page) = common::http(port, "GET", "/", &[], b"");
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("app set previews · preview of refs/pull/5/head"),
        "{page}"
    );

    // Closed: its preview, its objects and its namespace go.
    server.close(2);
    wait_value(&client, &ns(2), None).await;
    eventually("pr-2's namespace deleted", Duration::from_secs(60), || {
        let namespaces = namespaces.clone();
        let name = ns(2);
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async move {
                let found = namespaces.get_opt(&name).await.unwrap();
                found.is_none_or(|n| n.metadata.deletion_timestamp.is_some())
            })
        })
    });
    let removed = records(state.path(), "pr-2");
    assert_eq!(
        removed.len(),
        two + 1,
        "pr-2 synced only to be removed: {removed:?}"
    );
    assert_eq!(removed.last().unwrap().trigger, Trigger::Removed);
    assert_eq!(value(&client, &ns(1)).await.as_deref(), Some("one-c"));
    eventually("preview_removed of pr-2", Duration::from_secs(30), || {
        said("preview_removed", "pr-2")
    });
    let mut events: Vec<String> = (receiver.accepted().iter())
        .map(|m| {
            format!(
                "{} {}",
                m["event"].as_str().unwrap(),
                m["app"].as_str().unwrap()
            )
        })
        .collect();
    events.sort();
    let created = (1..=6).map(|n| format!("preview_created pr-{n}"));
    let want: Vec<String> = created.chain(["preview_removed pr-2".into()]).collect();
    assert_eq!(events, want, "each once");
}

/// `refs` × `clusters`: each pull request's preview on both clusters the set selects; a
/// `list` set: one app per item, its values in the templates.
#[tokio::test(flavor = "multi_thread")]
async fn refs_times_clusters_and_a_list_make_one_app_per_combination() {
    let (Some(east), Some(west)) = (
        common::control_plane(),
        common::control_plane_without_deployment_controller(),
    ) else {
        return;
    };
    let clients = [common::client(east).await, common::client(west).await];
    let id = std::process::id() % 100_000;
    let server = Server::new();
    let main = server.work.git(&["rev-parse", "main"]);
    server.pull_request(1, &main, &[("deploy/cm.yaml", &config_map("one"))]);
    server.pull_request(2, &main, &[("deploy/cm.yaml", &config_map("two"))]);
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\n[[cluster]]\nname = \"east\"\nkubeconfig = \"{}\"\nlabels = {{ env = \"prod\" }}\n[[cluster]]\nname = \"west\"\nkubeconfig = \"{}\"\nlabels = {{ env = \"prod\" }}\n[[app_set]]\nname = \"pr\"\nrepo = \"{repo}\"\nrefs = \"refs/pull/*/head\"\nclusters = {{ env = \"prod\" }}\nnamespace = \"m{id}-{{number}}\"\ncreate_namespace = true\nprune = true\npath = \"deploy\"\n[[app_set]]\nname = \"regions\"\nrepo = \"{repo}\"\nbranch = \"main\"\nclusters = {{ env = \"prod\" }}\nlist = [{{ region = \"eu\" }}, {{ region = \"us\" }}]\napp_name = \"shop-{{item.region}}-{{cluster}}\"\nnamespace = \"m{id}-{{item.region}}\"\ncreate_namespace = true\npath = \"deploy\"\n",
            state.path().display(),
            east.kubeconfig.display(),
            west.kubeconfig.display(),
            repo = server.path(),
        ),
    )
    .unwrap();
    let _daemon = Daemon::start(&config, &[]);
    for client in &clients {
        wait_value(client, &format!("m{id}-1"), Some("one")).await;
        wait_value(client, &format!("m{id}-2"), Some("two")).await;
        wait_value(client, &format!("m{id}-eu"), Some("main")).await;
        wait_value(client, &format!("m{id}-us"), Some("main")).await;
    }
    let (code, out, err) = common::berth_on(&config, &["status", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut apps: Vec<String> = (out.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|s| {
            format!(
                "{} {} {}",
                s["app"].as_str().unwrap(),
                s["cluster"].as_str().unwrap(),
                s["ref"].as_str().unwrap_or("-")
            )
        })
        .collect();
    apps.sort();
    assert_eq!(
        apps,
        [
            "pr-1-east east refs/pull/1/head",
            "pr-1-west west refs/pull/1/head",
            "pr-2-east east refs/pull/2/head",
            "pr-2-west west refs/pull/2/head",
            "shop-eu-east east -",
            "shop-eu-west west -",
            "shop-us-east east -",
            "shop-us-west west -",
        ]
    );
    // The last pull requests closed: no guard holds their previews back.
    server.close(1);
    server.close(2);
    for client in &clients {
        wait_value(client, &format!("m{id}-1"), None).await;
        wait_value(client, &format!("m{id}-2"), None).await;
    }
    let (_, out, err) = common::berth_on(&config, &["status"]);
    assert!(
        !out.contains("pr-1-east") && !err.contains("error: app set pr"),
        "{out}{err}"
    );
}

/// GitHub's `pull_request` event, delivered to the webhook of an app of the repository,
/// lists the set at once (its interval an hour, its repository served by `git daemon`); with `[app_set.verify]`, a pull request
/// whose commit is signed by a trusted key is previewed and an unsigned one refused, writing
/// nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_pull_request_event_lists_the_set_and_only_signed_pull_requests_run() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let id = std::process::id() % 100_000;
    let ns = |n: u32| format!("h{id}-pr-{n}");
    let gpg = common::gpg::Gpg::new();
    let trusted = gpg.key("Trusted Dev <dev@example.com>", "1y", None);
    let keys = tempfile::tempdir().unwrap();
    gpg.export(&trusted, &keys.path().join("dev.asc"));
    let signed = [
        ("gpg.program", gpg.program(None).display().to_string()),
        ("user.signingkey", trusted.clone()),
    ];
    let server = Server::new();
    let main = server.work.git(&["rev-parse", "main"]);
    server.pull_request_by(1, &main, &[("deploy/cm.yaml", &config_map("one"))], &signed);

    // Served as a hosted repository is: no file watcher sees its refs move.
    let served = common::GitDaemon::serve(server.bare.path());
    let state = tempfile::tempdir().unwrap();
    let secret = state.path().join("hook-secret");
    std::fs::write(&secret, "s3cret").unwrap();
    let port = common::free_port();
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{state}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"127.0.0.1:{port}\"\n[cluster]\nkubeconfig = \"{}\"\n[[app]]\nname = \"site\"\nrepo = \"{repo}\"\nbranch = \"main\"\npath = \"deploy\"\nnamespace = \"h{id}-site\"\ncreate_namespace = true\nwebhook_secret_file = \"{}\"\n[[app_set]]\nname = \"previews\"\nrepo = \"{repo}\"\nrefs = [\"refs/pull/*/head\"]\napp_name = \"pr-{{number}}\"\nnamespace = \"h{id}-pr-{{number}}\"\ncreate_namespace = true\npath = \"deploy\"\n[app_set.verify]\nmode = \"head\"\nopenpgp_keys = [\"{}/*.asc\"]\n",
            cp.kubeconfig.display(),
            secret.display(),
            keys.path().display(),
            state = state.path().display(),
            repo = served.url,
        ),
    )
    .unwrap();
    let _daemon = Daemon::start(&config, &[]);
    wait_value(&client, &ns(1), Some("one")).await;
    wait_value(&client, &format!("h{id}-site"), Some("main")).await;

    // Two pull requests opened: the event lists the set within seconds, not the hour.
    server.pull_request_by(2, &main, &[("deploy/cm.yaml", &config_map("two"))], &signed);
    let unsigned = server.pull_request(3, &main, &[("deploy/cm.yaml", &config_map("three"))]);
    let event = br#"{"action":"opened","number":2,"pull_request":{"head":{"ref":"feature"}}}"#;
    let github = [("X-GitHub-Event", "pull_request".to_string())];
    let (code, said) = common::signed_hook(port, "site", b"s3cret", &github, event);
    assert_eq!(code, 202, "{said}");
    wait_value(&client, &ns(2), Some("two")).await;
    let refused = recorded(state.path(), "pr-3", &unsigned);
    assert_eq!(refused.outcome, Outcome::Failed);
    assert!(refused.objects.is_empty(), "nothing written");
    assert!(
        refused
            .errors
            .iter()
            .any(|e| e.message.contains("is not signed")),
        "{:?}",
        refused.errors
    );
    assert_eq!(value(&client, &ns(3)).await, None);
}

/// A remote with 200 pull requests and a set of `max_apps = 50`: no preview is made, and
/// `berth status` names the set and the bound.
#[tokio::test(flavor = "multi_thread")]
async fn more_refs_than_max_apps_make_no_preview_and_name_the_bound() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let server = Server::new();
    let main = server.work.git(&["rev-parse", "main"]);
    let refs: String = (1..=200)
        .map(|n| format!("create refs/pull/{n}/head {main}\n"))
        .collect();
    let mut update = std::process::Command::new("git")
        .args(["--git-dir", server.path(), "update-ref", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    update
        .stdin
        .take()
        .unwrap()
        .write_all(refs.as_bytes())
        .unwrap();
    assert!(update.wait().unwrap().success());
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\n[cluster]\nkubeconfig = \"{}\"\n[[app_set]]\nname = \"previews\"\nrepo = \"{}\"\nrefs = [\"refs/pull/*/head\"]\napp_name = \"pr-{{number}}\"\nnamespace = \"pr-{{number}}\"\npath = \"deploy\"\nmax_apps = 50\n",
            state.path().display(),
            cp.kubeconfig.display(),
            server.path(),
        ),
    )
    .unwrap();
    let (code, out, err) = common::berth_on(&config, &["sync"]);
    let bound = "app set previews: its 200 refs × 1 cluster make 200 apps, more than its max_apps (50); none is made";
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(bound), "{out}{err}");
    let (code, out, err) = common::berth_on(&config, &["status"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains(bound), "{out}{err}");
    assert!(!out.contains("pr-1 "), "no preview made: {out}");
}
