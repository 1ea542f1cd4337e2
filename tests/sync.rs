//! The sync loop against a real control plane: `berth sync` and `berth run` on a local git
//! repository, asserting the cluster's objects, the history record, exit codes and
//! messages.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use berth::history::{Action, Outcome};
use common::{Repo, Setup};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

fn deployment(name: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers:\n        - name: app\n          image: {image}\n          ports:\n            - containerPort: 8080\n"
    )
}

fn config_map(name: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n"
    )
}

async fn image(api: &Api<Deployment>, name: &str) -> String {
    let d = api.get(name).await.expect("deployment exists");
    d.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap()
}

async fn data(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    let cm = api.get_opt(name).await.expect("get configmap")?;
    cm.data.and_then(|d| d.get("value").cloned())
}

#[tokio::test]
async fn commit_change_and_delete_create_configure_and_prune() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "lifecycle").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web", "nginx:1.25"));
    repo.write("config/a.yaml", &config_map("a", "1"));
    repo.write("config/b.yaml", &config_map("b", "1"));
    repo.write("config/c.yaml", &config_map("c", "1"));
    let first = repo.commit("first");
    let setup = Setup::new(cp, "lifecycle", &repo, &ns, "prune = true");

    let (code, out, err) = setup.berth(&["sync", "--once"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("deployment.apps/web -n lifecycle") || out.contains("deployment.apps/web -n"),
        "{out}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert_eq!(image(&deployments, "web").await, "nginx:1.25");
    assert_eq!(data(&maps, "a").await.as_deref(), Some("1"));
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded);
    assert_eq!(record.commit.as_ref().unwrap().sha, first);
    assert_eq!(
        record
            .objects
            .iter()
            .filter(|o| o.action == Action::Created)
            .count(),
        4
    );

    // Change an image: that object is configured, the rest unchanged.
    repo.write("web.yaml", &deployment("web", "nginx:1.26"));
    repo.commit("new image");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(image(&deployments, "web").await, "nginx:1.26");
    let record = setup.history().pop().unwrap();
    let actions: Vec<(String, Action)> = record
        .objects
        .iter()
        .map(|o| (o.key.name.clone(), o.action))
        .collect();
    assert_eq!(actions, [("web".to_string(), Action::Configured)]);
    assert_eq!(record.unchanged, 3);
    assert_eq!(record.previous_commit.as_deref(), Some(first.as_str()));

    // Another owner takes "c" over; then both "b" and "c" leave git: only "b" is pruned.
    let takeover = serde_json::json!({"metadata": {"labels": {"berth.dev/app": "someone-else"}}});
    maps.patch("c", &PatchParams::default(), &Patch::Merge(&takeover))
        .await
        .unwrap();
    repo.git(&["rm", "-q", "config/b.yaml", "config/c.yaml"]);
    repo.commit("drop b and c");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(data(&maps, "b").await, None, "b is pruned");
    assert_eq!(
        data(&maps, "c").await.as_deref(),
        Some("1"),
        "c belongs to someone else now"
    );
    let record = setup.history().pop().unwrap();
    let by_name: BTreeMap<String, (Action, Option<String>)> = record
        .objects
        .iter()
        .map(|o| (o.key.name.clone(), (o.action, o.note.clone())))
        .collect();
    assert_eq!(by_name["b"].0, Action::Pruned);
    assert_eq!(by_name["c"].0, Action::Kept);
    assert!(
        by_name["c"]
            .1
            .as_deref()
            .unwrap()
            .contains("taken over by another owner"),
        "{by_name:?}"
    );

    // berth history shows it, newest first.
    let (code, out, _) = setup.berth(&["history", "lifecycle"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("OUTCOME"),
        "{out}"
    );
    assert_eq!(lines.len(), 4, "{out}");
    assert!(lines[1].contains("succeeded"), "{out}");
}

#[tokio::test]
async fn a_broken_commit_writes_nothing_and_prunes_nothing() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "broken").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web", "nginx:1.25"));
    repo.write("keep.yaml", &config_map("keep", "1"));
    repo.commit("good");
    let setup = Setup::new(cp, "broken", &repo, &ns, "prune = true");
    assert_eq!(setup.berth(&["sync"]).0, 0);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // Invalid YAML: the image change in the same commit is not applied, keep.yaml's removal not pruned.
    repo.write("web.yaml", &deployment("web", "nginx:1.26"));
    repo.git(&["rm", "-q", "keep.yaml"]);
    repo.write(
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n data: x\n",
    );
    repo.commit("broken yaml");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("bad.yaml:5 (document 1): invalid YAML"),
        "{out}"
    );
    assert!(out.contains("FAILED"), "{out}");
    assert_eq!(image(&deployments, "web").await, "nginx:1.25");
    assert_eq!(data(&maps, "keep").await.as_deref(), Some("1"));
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
    assert!(
        record.errors[0].message.contains("bad.yaml"),
        "{:?}",
        record.errors
    );
    assert!(record.objects.is_empty());

    // Valid YAML, but the apiserver rejects one object: still nothing written.
    repo.git(&["rm", "-q", "bad.yaml"]);
    repo.write(
        "invalid.yaml",
        &deployment("invalid", "nginx").replace("replicas: 1", "replicas: -1"),
    );
    repo.commit("invalid field");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("dry run refused Deployment"), "{out}");
    assert!(out.contains("invalid.yaml:1 (document 1)"), "{out}");
    assert_eq!(
        image(&deployments, "web").await,
        "nginx:1.25",
        "nothing written"
    );
    assert_eq!(
        data(&maps, "keep").await.as_deref(),
        Some("1"),
        "nothing pruned"
    );
    assert!(deployments.get_opt("invalid").await.unwrap().is_none());
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
    assert!(
        record
            .errors
            .iter()
            .any(|e| e.message.contains("spec.replicas")),
        "{:?}",
        record.errors
    );
}

#[tokio::test]
async fn force_push_and_deleted_branch() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "rewrite").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("state", "old"));
    let old = repo.commit("old");
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("cm.yaml", &config_map("state", "new"));
    let new = repo.commit("new");
    let setup = Setup::new(
        cp,
        "rewrite",
        &repo,
        &ns,
        "branch = \"feature\"\nprune = true",
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert_eq!(setup.berth(&["sync"]).0, 0);
    assert_eq!(data(&maps, "state").await.as_deref(), Some("new"));

    // Force-push back to the older commit: refused, until accepted.
    repo.git(&["reset", "-q", "--hard", &old]);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(data(&maps, "state").await.as_deref(), Some("new"));
    let (code, out, err) = setup.berth(&["sync", "--accept-rewind"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(data(&maps, "state").await.as_deref(), Some("old"));
    let record = setup.history().pop().unwrap();
    assert_eq!(record.commit.unwrap().sha, old);
    assert_eq!(record.previous_commit.as_deref(), Some(new.as_str()));
    let note = record.history_rewritten.expect("history rewrite noted");
    assert!(note.contains("is not an ancestor"), "{note}");

    // Delete the branch: the sync fails, the cluster keeps its state.
    repo.git(&["checkout", "-q", "main"]);
    repo.git(&["branch", "-q", "-D", "feature"]);
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("branch feature not found"), "{out}");
    assert_eq!(data(&maps, "state").await.as_deref(), Some("old"));
    assert_eq!(setup.history().pop().unwrap().outcome, Outcome::Failed);
}

/// Write requests (create, update, patch, delete) in the audit log that touch `namespace`
/// or the app's inventory.
fn writes_since(
    cp: &berth_testenv::ControlPlane,
    since: jiff::Timestamp,
    namespace: &str,
    inventory: &str,
) -> usize {
    cp.audit_events(since)
        .iter()
        .filter(|e| {
            let verb = e["verb"].as_str().unwrap_or("");
            let obj = &e["objectRef"];
            matches!(verb, "create" | "update" | "patch" | "delete")
                && (obj["namespace"] == namespace || obj["name"] == inventory)
        })
        .count()
}

#[tokio::test]
async fn a_no_change_sync_sends_no_write_request_and_drift_is_repaired() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "nochange").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web", "nginx:1.25"));
    repo.write("cm.yaml", &config_map("cm", "1"));
    repo.commit("first");
    let setup = Setup::new(cp, "nochange", &repo, &ns, "prune = true");
    let inventory = "berth-inventory-nochange";

    let start = jiff::Timestamp::now();
    assert_eq!(setup.berth(&["sync"]).0, 0);
    tokio::time::sleep(Duration::from_millis(500)).await; // audit events are flushed on response
    assert!(
        writes_since(cp, start, &ns, inventory) >= 3,
        "the counter sees the first sync's writes"
    );

    let start = jiff::Timestamp::now();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0);
    assert!(out.contains("no change at"), "{out}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        writes_since(cp, start, &ns, inventory),
        0,
        "a no-change sync must not write"
    );
    assert_eq!(setup.history().pop().unwrap().outcome, Outcome::NoChange);

    // Someone deletes an object: the next sync re-creates exactly that one.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    maps.delete("cm", &Default::default()).await.unwrap();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded);
    let actions: Vec<(String, Action, Option<String>)> = record
        .objects
        .iter()
        .map(|o| (o.key.name.clone(), o.action, o.note.clone()))
        .collect();
    assert_eq!(
        actions,
        [(
            "cm".to_string(),
            Action::Created,
            Some("drift: deleted from the cluster".to_string())
        )]
    );

    // Someone scales the Deployment by hand: another field manager now owns spec.replicas.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let scale = serde_json::json!({"spec": {"replicas": 3}});
    deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    // With force_conflicts = false that is a conflict, and nothing is written.
    let refusing = Setup::new(
        cp,
        "nochange",
        &repo,
        &ns,
        "prune = true\nforce_conflicts = false",
    );
    let (code, out, _) = refusing.berth(&["sync"]);
    assert_eq!(
        code, 1,
        "a conflict is an error with force_conflicts = false: {out}"
    );
    assert!(
        out.contains(".spec.replicas") && out.contains("force_conflicts = true"),
        "{out}"
    );
    assert_eq!(
        deployments.get("web").await.unwrap().spec.unwrap().replicas,
        Some(3),
        "nothing written"
    );

    // By default git wins: the drift is repaired, only that object is written, and the
    // record says which field was taken back from which manager.
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("took back .spec.replicas from \""), "{out}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.objects.len(), 1, "{:?}", record.objects);
    assert_eq!(
        (
            record.objects[0].key.name.as_str(),
            record.objects[0].action
        ),
        ("web", Action::Configured)
    );
    assert!(
        record.objects[0]
            .note
            .as_deref()
            .unwrap_or("")
            .starts_with("drift"),
        "{:?}",
        record.objects
    );
    assert_eq!(
        deployments.get("web").await.unwrap().spec.unwrap().replicas,
        Some(1)
    );
}

/// A field git does not set is never fought over: an HPA-like manager that owns
/// `spec.replicas` of a Deployment whose manifest omits it sees no write from berth.
#[tokio::test]
async fn fields_git_does_not_set_are_left_to_their_manager() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "hpa-like").await;
    let repo = Repo::new();
    let web = deployment("web", "nginx:1.25").replace("  replicas: 1\n", "");
    repo.write("web.yaml", &web);
    repo.commit("no replicas in git");
    let setup = Setup::new(cp, "hpalike", &repo, &ns, "");
    assert_eq!(setup.berth(&["sync", "--no-wait"]).0, 0);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let scale = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 4}
    });
    deployments
        .patch(
            "web",
            &PatchParams::apply("hpa-like").force(),
            &Patch::Apply(&scale),
        )
        .await
        .unwrap();
    // berth sees the Deployment changed (its generation moved), dry-runs it, finds that
    // nothing of git's would change, and writes nothing to it; then it is quiet.
    for _ in 0..2 {
        let start = jiff::Timestamp::now();
        let (code, out, _) = setup.berth(&["sync", "--no-wait"]);
        assert_eq!(code, 0, "{out}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let berth_writes = cp
            .audit_events(start)
            .iter()
            .filter(|e| {
                matches!(
                    e["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete")
                ) && e["objectRef"]["resource"] == "deployments"
                    && e["objectRef"]["namespace"] == ns.as_str()
                    && e["userAgent"]
                        .as_str()
                        .is_some_and(|a| a.starts_with("berth/"))
                    && e["requestURI"]
                        .as_str()
                        .is_some_and(|u| !u.contains("dryRun"))
            })
            .count();
        assert_eq!(berth_writes, 0, "{out}");
        assert_eq!(
            deployments.get("web").await.unwrap().spec.unwrap().replicas,
            Some(4)
        );
    }
    assert_eq!(setup.history().pop().unwrap().outcome, Outcome::NoChange);
}

/// Under `berth run`, a failed sync's lines are logged at ERROR and warnings at WARN
/// (journald's priority follows the level), so `journalctl -p err` sees failures.
#[tokio::test]
async fn failures_are_logged_at_error_and_warnings_at_warn() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "levels").await;
    let repo = Repo::new();
    repo.write(
        "lonely.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: lonely\nspec:\n  selector: {app: nobody}\n  ports:\n    - port: 80\n",
    );
    repo.commit("a Service routing nowhere");
    let setup = Setup::new(cp, "levels", &repo, &ns, "");
    let log = setup.state.path().join("berth.log");
    let mut daemon = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["run", "--log-format", "json", "--config"])
        .arg(&setup.config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    common::eventually("the first sync", Duration::from_secs(30), || {
        !setup.history().is_empty()
    });
    repo.write("broken.yaml", "apiVersion: v1\nkind: [unclosed\n");
    repo.commit("broken");
    common::eventually("the broken commit's sync", Duration::from_secs(30), || {
        setup
            .history()
            .last()
            .is_some_and(|r| r.outcome == Outcome::Failed)
    });
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    daemon.wait().unwrap();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let level_of = |says: &str| {
        lines
            .iter()
            .find(|l| {
                l["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(says))
            })
            .and_then(|l| l["level"].as_str().map(str::to_string))
    };
    assert_eq!(
        level_of("invalid YAML").as_deref(),
        Some("ERROR"),
        "{lines:?}"
    );
    assert_eq!(
        level_of("render failed").as_deref(),
        Some("ERROR"),
        "{lines:?}"
    );
    assert_eq!(
        level_of("sync failed").as_deref(),
        Some("ERROR"),
        "{lines:?}"
    );
    assert_eq!(
        level_of("no ready endpoints").as_deref(),
        Some("WARN"),
        "{lines:?}"
    );
    assert_eq!(
        level_of("sync succeeded").as_deref(),
        Some("INFO"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn berth_run_syncs_a_new_commit_within_a_second() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "daemon").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("live", "1"));
    repo.commit("first");
    let setup = Setup::new(cp, "daemon", &repo, &ns, "");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("run")
        .arg("--config")
        .arg(&setup.config)
        .kill_on_drop(true)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start berth run");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    common::wait_for(
        &maps,
        "live",
        Duration::from_secs(30),
        |c: Option<&ConfigMap>| c.is_some(),
    )
    .await;

    repo.write("cm.yaml", &config_map("live", "2"));
    repo.commit("second");
    let committed = Instant::now();
    common::wait_for_value(&maps, "live", "2", Duration::from_secs(10)).await;
    let latency = committed.elapsed();
    eprintln!("commit-to-applied latency: {latency:?}");
    assert!(latency < Duration::from_secs(5), "took {latency:?}");

    // SIGTERM: a clean exit, and a readable history with the notify-triggered sync in it.
    let pid = child.id().expect("pid") as i32;
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits")
        .unwrap();
    assert!(status.success(), "{status}");
    let history = setup.history();
    assert!(
        history.iter().any(
            |r| r.trigger == berth::history::Trigger::Notify && r.outcome == Outcome::Succeeded
        ),
        "{history:#?}"
    );
}

/// A Namespace, a CRD and an object in that namespace, in one commit: the Namespace and
/// the CRD go first (stage 0, the CRD waited on until Established), and the ConfigMap in
/// the new namespace is dry-run only once its namespace exists.
///
/// No custom resource is created: the shared v1.20 test apiserver (built with Go 1.19
/// over reflect2 1.0.1) faults on the first custom resource it encodes; see
/// scripts/build-testenv.sh for the fix in binaries we build ourselves.
#[tokio::test]
async fn namespace_crd_and_namespaced_object_in_one_commit_apply_in_stages() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = format!("staged-{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("a-configmap.yaml", &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c1\n  namespace: {ns}\ndata: {{k: v}}\n"));
    repo.write("b-crd.yaml", &common::crd("example.com", "Widget"));
    repo.write(
        "c-namespace.yaml",
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
    );
    repo.commit("everything at once");
    let scope = format!("prune = true\n[app.scope]\nnamespaces = [\"default\", \"{ns}\"]\ncluster_kinds = [\"CustomResourceDefinition\"]");
    let setup = Setup::new(cp, "staged", &repo, "default", &scope);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let created: Vec<&str> = out.lines().filter(|l| l.ends_with(" created")).collect();
    assert_eq!(created.len(), 3, "{out}");
    assert!(
        created[2].contains("configmap/c1"),
        "stage 0 before the rest: {out}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert_eq!(data_of(&maps, "c1").await.as_deref(), Some("v"));
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let crd = crds.get("widgets.example.com").await.unwrap();
    let established = crd
        .status
        .unwrap()
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);
}

async fn data_of(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    let cm = api.get_opt(name).await.expect("get configmap")?;
    cm.data.and_then(|d| d.get("k").cloned())
}

#[tokio::test]
async fn an_empty_commit_prunes_nothing_and_annotated_objects_are_kept() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "prunesafety").await;
    let repo = Repo::new();
    repo.write(
        "a.yaml",
        &config_map("a", "1").replace(
            "  name: a\n",
            "  name: a\n  annotations:\n    berth.dev/prune: \"false\"\n",
        ),
    );
    repo.write("b.yaml", &config_map("b", "1"));
    repo.commit("two objects");
    let setup = Setup::new(cp, "prunesafety", &repo, &ns, "prune = true");
    assert_eq!(setup.berth(&["sync"]).0, 0);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    repo.git(&["rm", "-q", "a.yaml", "b.yaml"]);
    repo.commit("oops, everything gone");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("refused, as an app of it would prune every object it has")
            && out.contains("allow_empty = true")
            && out.contains("render failed: nothing was written"),
        "{out}"
    );
    assert_eq!(data(&maps, "b").await.as_deref(), Some("1"));

    repo.write("b.yaml", &config_map("b", "1"));
    repo.commit("b is back, a is gone");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        data(&maps, "a").await.as_deref(),
        Some("1"),
        "annotated berth.dev/prune: false"
    );
    let record = setup.history().pop().unwrap();
    assert_eq!(record.objects[0].action, Action::Kept);
    assert!(
        record.objects[0]
            .note
            .as_deref()
            .unwrap()
            .contains("berth.dev/prune"),
        "{:?}",
        record.objects
    );

    // The history command filters by outcome and prints JSON lines.
    let (code, out, _) = setup.berth(&["history", "--outcome", "failed", "--json"]);
    assert_eq!(code, 0);
    let failed: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["outcome"], "failed");
    let id = failed[0]["id"].as_str().unwrap();
    let (code, out, _) = setup.berth(&["history", "show", id]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Outcome:   failed") && out.contains("would prune every object it has"),
        "{out}"
    );
}

/// What a user reads when things go wrong: a repository path that is gone is named as
/// such; a refused dry run is berth's own line alone, without the client library's log
/// lines or colour codes, and `--log-format json` keeps stderr JSON.
#[tokio::test]
async fn failures_are_reported_once_in_plain_words() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "plain-words").await;
    let repo = Repo::new();
    repo.write(
        "invalid.yaml",
        &deployment("invalid", "nginx").replace("replicas: 1", "replicas: -1"),
    );
    repo.commit("invalid field");
    let setup = Setup::new(cp, "plain-words", &repo, &ns, "");

    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("dry run refused Deployment"), "{out}");
    assert!(!err.contains("kube_client"), "library log lines: {err}");
    assert!(
        !err.contains('\u{1b}') && !out.contains('\u{1b}'),
        "colour codes: {err}"
    );
    assert!(out.contains("with 1 error;"), "{out}");

    let (code, _, err) = setup.berth(&["sync", "--log-format", "json"]);
    assert_eq!(code, 1);
    for line in err.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON on stderr: {line}"
        );
    }

    let gone = repo.dir.path().to_path_buf();
    drop(repo);
    assert!(!gone.exists());
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "cannot fetch {}: the path does not exist",
            gone.display()
        )),
        "{out}"
    );
    assert!(!out.contains("unsupported URL protocol"), "{out}");
}

/// `berth plan` shows field by field what a sync changes: the live object against the
/// server's dry-run answer, so defaulted fields are no change; Secret values never shown.
#[tokio::test]
async fn plan_shows_a_diff_of_each_changed_object() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "plan-diff").await;
    let secret = |password: &str| {
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  user: admin\n  password: {password}\n")
    };
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web", "nginx:1.25"));
    repo.write("db.yaml", &secret("s3cr3t-one"));
    repo.commit("first");
    let setup = Setup::new(cp, "plan-diff", &repo, &ns, "");
    assert_eq!(setup.berth(&["sync"]).0, 0);

    repo.write("web.yaml", &deployment("web", "nginx:1.26"));
    repo.write("db.yaml", &secret("s3cr3t-two"));
    repo.write("new.yaml", &config_map("new", "1"));
    repo.commit("second");
    let (code, out, err) = setup.berth(&["plan"]);
    assert_eq!(code, 0, "{out}{err}");
    let changed: Vec<&str> = out
        .lines()
        .map(str::trim_start)
        .filter(|l| {
            (l.starts_with('-') || l.starts_with('+'))
                && !l.starts_with("---")
                && !l.starts_with("+++")
        })
        .collect();
    assert!(changed.contains(&"-        image: nginx:1.25"), "{out}");
    assert!(changed.contains(&"+        image: nginx:1.26"), "{out}");
    assert!(
        changed.contains(&"+  name: new"),
        "a created object is all added: {out}"
    );
    assert!(out.contains("--- live deployment.apps/web"), "{out}");
    for hidden in [
        "resourceVersion",
        "managedFields",
        "s3cr3t",
        "czNjcjN0",
        "YWRtaW4=",
    ] {
        assert!(!out.contains(hidden), "{hidden} in {out}");
    }
    assert!(changed.contains(&"+  password: '*** (after)'"), "{out}");
    // Server-defaulted fields are in both sides, so they are no change.
    assert!(
        !changed
            .iter()
            .any(|l| l.contains("imagePullPolicy") || l.contains("terminationMessagePath")),
        "{out}"
    );

    let (code, json, _) = setup.berth(&["plan", "-o", "json"]);
    assert_eq!(code, 0);
    let plan: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let web = plan["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "web")
        .unwrap_or_else(|| panic!("{json}"));
    assert!(
        web["diff"]
            .as_str()
            .unwrap()
            .contains("+        image: nginx:1.26"),
        "{json}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        image(&deployments, "web").await,
        "nginx:1.25",
        "plan writes nothing"
    );
}

/// Two apps synced by one `berth sync` start in the same millisecond: their records still
/// have distinct ids, and `berth history show` finds each.
#[tokio::test]
async fn two_apps_of_one_sync_have_distinct_record_ids() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "two-ids").await;
    let repo = Repo::new();
    repo.write("one/a.yaml", &config_map("a", "1"));
    repo.write("two/b.yaml", &config_map("b", "1"));
    repo.commit("two apps");
    let setup = Setup::new(cp, "one", &repo, &ns, "path = \"one\"");
    let mut config = std::fs::read_to_string(&setup.config).unwrap();
    config += &format!(
        "[[app]]\nname = \"two\"\nrepo = \"{}\"\nnamespace = \"{ns}\"\npath = \"two\"\n",
        repo.dir.path().display()
    );
    std::fs::write(&setup.config, config).unwrap();

    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let log = berth::history::HistoryLog::new(setup.state.path());
    let records = log.read_all().unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_ne!(records[0].id, records[1].id);
    for r in &records {
        let (code, out, err) = setup.berth(&["history", "show", &r.id]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&format!("App:       {}", r.app)), "{out}");
    }
}

/// A kustomize overlay whose base is a sibling folder, as most GitOps repositories are
/// laid out: rendered by the real kustomize, applied, pruned by generated name; and the
/// kustomizations berth refuses before kustomize runs.
#[tokio::test]
async fn a_kustomize_overlay_syncs_and_prunes_its_generated_config_map() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "kustomize").await;
    let repo = Repo::new();
    repo.write(
        "base/kustomization.yaml",
        "resources: [deployment.yaml, service.yaml]\nconfigMapGenerator:\n- name: web-config\n  envs: [web.env]\n",
    );
    repo.write("base/web.env", "GREETING=hello\n");
    repo.write(
        "base/deployment.yaml",
        &deployment("web", "nginx:1.25").replace(
            "          ports:\n",
            "          envFrom:\n            - configMapRef: {name: web-config}\n          ports:\n",
        ),
    );
    repo.write(
        "base/service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports: [{port: 80, targetPort: 8080}]\n",
    );
    let overlay = "resources: [../base]\nnamePrefix: prod-\ncommonLabels: {env: prod}\nimages:\n- name: nginx\n  newTag: \"1.27\"\npatches:\n- path: replicas.yaml\n";
    repo.write("overlay/kustomization.yaml", overlay);
    repo.write(
        "overlay/replicas.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n",
    );
    repo.commit("overlay");
    let setup = Setup::new(
        cp,
        "kustomize",
        &repo,
        &ns,
        "path = \"overlay\"\nprune = true",
    );

    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let web = deployments.get("prod-web").await.expect("prod-web exists");
    assert_eq!(image(&deployments, "prod-web").await, "nginx:1.27");
    assert_eq!(web.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(
        web.metadata.labels.unwrap().get("env").map(String::as_str),
        Some("prod")
    );
    let generated = |record: &berth::history::SyncRecord, action: Action| -> Vec<String> {
        record
            .objects
            .iter()
            .filter(|o| o.action == action && o.key.kind == "ConfigMap")
            .map(|o| o.key.name.clone())
            .collect()
    };
    let first = setup.history().pop().unwrap();
    let old_config = generated(&first, Action::Created);
    assert_eq!(old_config.len(), 1, "{first:?}");
    assert!(
        old_config[0].starts_with("prod-web-config-"),
        "{old_config:?}"
    );
    let origin = first
        .objects
        .iter()
        .find(|o| o.key.kind == "Deployment")
        .and_then(|o| o.source.clone())
        .unwrap_or_default();
    assert!(origin.starts_with("overlay/kustomization.yaml"), "{origin}");

    // A change to the base's generated configuration: a new ConfigMap, the Deployment
    // that uses it configured, the Service unchanged, the old ConfigMap pruned.
    repo.write("base/web.env", "GREETING=bonjour\n");
    repo.commit("new greeting");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let second = setup.history().pop().unwrap();
    let new_config = generated(&second, Action::Created);
    assert_eq!(new_config.len(), 1, "{second:?}");
    assert_ne!(new_config, old_config);
    assert_eq!(generated(&second, Action::Pruned), old_config);
    let configured: Vec<&str> = second
        .objects
        .iter()
        .filter(|o| o.action == Action::Configured)
        .map(|o| o.key.kind.as_str())
        .collect();
    assert_eq!(configured, ["Deployment"], "{second:?}");
    assert_eq!(second.unchanged, 1, "the Service");
    assert!(maps.get_opt(&old_config[0]).await.unwrap().is_none());
    let greeting = maps.get(&new_config[0]).await.unwrap().data.unwrap()["GREETING"].clone();
    assert_eq!(greeting, "bonjour");

    // Refused before kustomize runs, and nothing written: a generator file outside the
    // repository, a remote base, a resource that is not there.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.env"), "TOKEN=hunter2\n").unwrap();
    for (extra, says) in [
        (
            format!(
                "configMapGenerator:\n- name: stolen\n  envs: [{}/secret.env]\n",
                outside.path().display()
            ),
            "configMapGenerator.envs",
        ),
        (
            "resources: [../base, \"github.com/example/repo//deploy?ref=v1\"]\n".to_string(),
            "remote resource",
        ),
        (
            "resources: [../base, missing.yaml]\n".to_string(),
            "resources: \"missing.yaml\" does not exist",
        ),
    ] {
        let text = if extra.starts_with("resources:") {
            overlay.replacen("resources: [../base]\n", &extra, 1)
        } else {
            format!("{overlay}{extra}")
        };
        repo.write("overlay/kustomization.yaml", &text);
        repo.write(
            "overlay/replicas.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n",
        );
        repo.commit("refused");
        let (code, out, _) = setup.berth(&["sync"]);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("overlay/kustomization.yaml") && out.contains(says),
            "{says}: {out}"
        );
        assert!(!out.contains("hunter2"), "{out}");
        let web = deployments.get("prod-web").await.unwrap();
        assert_eq!(
            web.spec.unwrap().replicas,
            Some(2),
            "nothing written: {out}"
        );
        assert!(maps.get_opt("prod-stolen").await.unwrap().is_none());
    }
}

/// Every folder and file under `dir` with any group or other permission bit, but `skip`.
fn open_to_others(dir: &std::path::Path, skip: &std::path::Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut open = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if path == skip || meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            open.push(format!("{} {mode:o}", path.display()));
        }
        if meta.is_dir() {
            open.extend(open_to_others(&path, skip));
        }
    }
    open
}

#[tokio::test]
async fn state_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "private-state").await;
    let repo = Repo::new();
    repo.write(
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: hunter2\n",
    );
    repo.write("config/a.yaml", &config_map("a", "1"));
    let sha = repo.commit("a secret");
    let setup = Setup::new(cp, "private-state", &repo, &ns, "");
    // The usual umask, and a state folder an older berth left open to everyone.
    // SAFETY: umask(2) cannot fail; berth inherits it.
    unsafe { libc::umask(0o022) };
    let state = setup.state.path();
    std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o755)).unwrap();

    let (code, out, err) = setup.berth(&["sync", "--once"]);
    assert_eq!(code, 0, "{out}{err}");
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(state), 0o700);
    let secret = std::fs::read_dir(state.join("sources"))
        .unwrap()
        .flatten()
        .map(|source| source.path().join("trees").join(&sha).join("secret.yaml"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no written-out tree of {sha} in {}", state.display()));
    assert_eq!(mode(&secret), 0o600, "{}", secret.display());
    let open = open_to_others(state, &setup.config);
    assert!(open.is_empty(), "open to others: {open:#?}");
}

/// One sync says every error of a broken commit at once — render errors (an object out of
/// the app's scope, one defined twice), a kind the cluster does not serve, the server's
/// dry run of what rendered — not in rounds; and writes nothing.
#[tokio::test]
async fn a_broken_commit_says_every_error_in_one_pass() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "one-pass").await;
    let repo = Repo::new();
    repo.write("ok.yaml", &config_map("ok", "1"));
    repo.write(
        "out.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: out\n  namespace: elsewhere\n",
    );
    repo.write(
        "dup.yaml",
        &format!("{}---\n{}", config_map("dup", "1"), config_map("dup", "2")),
    );
    repo.write(
        "gadget.yaml",
        "apiVersion: x.berth.dev/v1\nkind: Gadget\nmetadata:\n  name: g\n",
    );
    repo.commit("four mistakes");
    let scope = format!("[app.scope]\nnamespaces = [\"{ns}\"]");
    let setup = Setup::new(cp, "one-pass", &repo, &ns, &scope);
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    for said in [
        "out.yaml:1 (document 1): ConfigMap elsewhere/out is in namespace \"elsewhere\", outside the app's scope",
        "is defined twice",
        "gadget.yaml:1 (document 1): unknown kind Gadget in x.berth.dev/v1",
        "render failed: nothing was written",
    ] {
        assert!(out.contains(said), "missing {said:?} in {out}");
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(
        maps.get_opt("ok").await.unwrap().is_none(),
        "nothing written"
    );

    // A refusal of the server's dry run is said beside the render's errors.
    repo.git(&["rm", "-q", "gadget.yaml"]);
    repo.write("svc.yaml", &common::refused_service(""));
    repo.commit("a Service the server refuses");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("outside the app's scope")
            && out.contains(&format!("dry run refused Service {ns}/web"))
            && out.contains("nothing was written"),
        "{out}"
    );
    assert_eq!(setup.history().pop().unwrap().errors.len(), 3, "{out}");
    assert!(
        maps.get_opt("ok").await.unwrap().is_none(),
        "nothing written"
    );
}
