//! What real GitOps repositories tripped on, each reproduced against the real control
//! plane: a health failure the next sync forgot, a namespace written by a "nothing was
//! written" dry run, a permanent error retried for a minute, Jobs and claims re-applied
//! after their status moved, a Jsonnet folder rendered to nothing, a wrong hint for an
//! API version the server does not serve, a damaged source blamed on the cache.

mod common;

use std::time::Duration;

use berth::history::Outcome;
use common::{Repo, Setup};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

#[tokio::test]
async fn every_sync_of_an_unhealthy_commit_waits_again_and_fails_again() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "unhealthy").await;
    let repo = Repo::new();
    // No cloud controller here: the load balancer never gets an address.
    repo.write(
        "lb.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: lb\nspec:\n  type: LoadBalancer\n  ports:\n    - port: 80\n",
    );
    repo.commit("a load balancer");
    let setup = Setup::new(
        cp,
        "unhealthy",
        &repo,
        &ns,
        "[app.rollout]\ntimeout = \"2s\"",
    );
    for attempt in 1..=3 {
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 1, "sync {attempt}: {out}{err}");
        assert!(
            out.contains("did not become ready within 2s"),
            "sync {attempt}: {out}"
        );
        assert_eq!(
            setup.history().last().unwrap().outcome,
            Outcome::Failed,
            "sync {attempt}"
        );
    }
}

#[tokio::test]
async fn a_refusal_in_the_namespace_the_commit_creates_deletes_it_again() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let home = common::namespace(&client, "nsfirst").await;
    let created = format!("{home}-new");
    let repo = Repo::new();
    repo.write(
        "ns.yaml",
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {created}\n"),
    );
    // Port 0 passes berth's checks and is refused by the server's validation.
    repo.write(
        "svc.yaml",
        &common::refused_service(&format!("  namespace: {created}\n")),
    );
    repo.commit("a namespace and a bad Service in it");
    let setup = Setup::new(
        cp,
        "nsfirst",
        &repo,
        &home,
        &format!("[app.scope]\nnamespaces = [\"{created}\"]"),
    );
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "dry run failed: nothing was written (namespace {created}, created to dry-run the objects in it, deleted again)"
        )),
        "{out}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let left = namespaces.get_opt(&created).await.unwrap();
    assert!(
        left.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the commit's Namespace is deleted again"
    );
}

#[tokio::test]
async fn a_schema_error_the_server_answers_with_500_is_not_retried() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "schema500").await;
    let repo = Repo::new();
    repo.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: odd\nspec:\n  value: 1\n",
    );
    repo.commit("a field ConfigMaps do not have");
    let setup = Setup::new(cp, "schema500", &repo, &ns, "");
    let start = jiff::Timestamp::now();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(".spec: field not declared in schema: Kubernetes 1.33's ConfigMap has no such field either: is it misspelt?"),
        "{out}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await; // the audit log is written on response
    let sent = cp
        .audit_events(start)
        .iter()
        .filter(|e| e["verb"] == "patch" && e["objectRef"]["name"] == "odd")
        .count();
    assert_eq!(sent, 1, "the final 500 was sent once");

    // A field newer than the cluster (gRPC probes came with Kubernetes 1.24; the test's
    // cluster is 1.20): said as such, with what to do.
    repo.git(&["rm", "-q", "cm.yaml"]);
    repo.write(
        "web.yaml",
        &common::web_deployment("web:1", "", "").replace(
            "          ports:",
            "          startupProbe: {grpc: {port: 8080}}\n          ports:",
        ),
    );
    repo.commit("a gRPC probe");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("startupProbe.grpc: field not declared in schema: the cluster (Kubernetes v1.20.2) is older than this field, which Kubernetes 1.33's Deployment has: remove it, or upgrade the cluster"),
        "{out}"
    );
}

#[tokio::test]
async fn jobs_and_claims_whose_status_moved_are_not_applied_again() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "statusmoves").await;
    let pv = format!("pv-{ns}");
    let repo = Repo::new();
    repo.write(
        "job.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: migrate\n          image: busybox\n",
    );
    repo.write(
        "storage.yaml",
        &format!(
            "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: {pv}\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: \"\"\n  hostPath: {{path: /tmp/{pv}}}\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: data\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: \"\"\n  volumeName: {pv}\n  resources:\n    requests: {{storage: 1Gi}}\n"
        ),
    );
    repo.commit("a job and a claim");
    let setup = Setup::new(
        cp,
        "statusmoves",
        &repo,
        &ns,
        "[app.scope]\ncluster_kinds = [\"PersistentVolume\"]",
    );
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    let start = jiff::Timestamp::now();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        setup.history().last().unwrap().outcome,
        Outcome::NoChange,
        "{out}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let writes: Vec<String> = cp
        .audit_events(start)
        .iter()
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("berth/"))
                && matches!(
                    e["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete")
                )
                && (e["objectRef"]["namespace"] == ns.as_str()
                    || e["objectRef"]["name"] == pv.as_str()
                    || e["objectRef"]["name"] == "berth-inventory-statusmoves")
        })
        .map(|e| format!("{} {}", e["verb"], e["objectRef"]["name"]))
        .collect();
    assert!(writes.is_empty(), "{writes:?}\n{out}");
}

#[tokio::test]
async fn a_jsonnet_folder_is_refused_and_says_why() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "jsonnet").await;
    let repo = Repo::new();
    repo.write(
        "guestbook/guestbook.jsonnet",
        "local k = import 'lib.libsonnet';\n[k.deployment('guestbook')]\n",
    );
    repo.write("guestbook/lib.libsonnet", "{ deployment(n):: {} }\n");
    repo.commit("jsonnet only");
    let setup = Setup::new(cp, "jsonnet", &repo, &ns, "path = \"guestbook\"");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("guestbook: holds Jsonnet (2 .jsonnet/.libsonnet files)")
            && out.contains("berth does not render Jsonnet"),
        "{out}"
    );
    assert_eq!(setup.history().last().unwrap().outcome, Outcome::Failed);

    // berth render of the folder says the same, and exits non-zero.
    let render = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["render", "guestbook"])
        .current_dir(repo.dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&render.stderr);
    assert!(
        !render.status.success() && err.contains("berth does not render Jsonnet"),
        "{err}"
    );
    // berth render writes nothing anyway: it does not say it.
    assert!(!err.contains("nothing was written"), "{err}");
    assert_eq!(err.matches("guestbook:").count(), 1, "the path once: {err}");
}

#[tokio::test]
async fn a_built_in_kind_in_a_version_the_server_does_not_serve_names_those_it_does() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "apiversion").await;
    let repo = Repo::new();
    repo.write(
        "hpa.yaml",
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: web\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  maxReplicas: 3\n",
    );
    repo.write(
        "widget.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n",
    );
    repo.commit("newer APIs");
    let setup = Setup::new(cp, "apiversion", &repo, &ns, "");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    let hpa = out
        .lines()
        .find(|l| l.contains("HorizontalPodAutoscaler in autoscaling/v2"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        hpa.contains("(Kubernetes v1.20")
            && hpa.contains("autoscaling/v2beta2")
            && !hpa.contains("CRD"),
        "{hpa}"
    );
    let widget = out
        .lines()
        .find(|l| l.contains("Widget in example.com/v1"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(widget.contains("is its CRD installed?"), "{widget}");
}

#[tokio::test]
async fn a_source_missing_an_object_is_blamed_and_the_cache_kept() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "damaged").await;
    let repo = Repo::new();
    repo.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n",
    );
    repo.commit("first");
    let setup = Setup::new(cp, "damaged", &repo, &ns, "");
    assert_eq!(setup.berth(&["sync"]).0, 0);
    let marker = std::fs::read_dir(setup.state.path().join("sources"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("git/kept");
    std::fs::write(&marker, "").unwrap();
    // A second commit whose new blob is then lost from the source.
    repo.write(
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n",
    );
    repo.commit("second");
    let blob = repo.git(&["rev-parse", "HEAD:cm2.yaml"]);
    let loose = repo
        .dir
        .path()
        .join(".git/objects")
        .join(&blob[..2])
        .join(&blob[2..]);
    std::fs::remove_file(loose).unwrap();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("it is damaged at the source"), "{out}");
    assert!(marker.exists(), "the cache was cloned again: {out}");
}

/// The first fetch from a remote takes the newest commit alone (as `git clone --depth 1`);
/// the history comes when a check needs it: a cache lost with the previous commit applied
/// still tells a fast-forward from a force-push, and an app pinned to an older commit
/// finds it.
#[tokio::test]
async fn a_fresh_cache_fetches_history_only_when_it_needs_it() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "shallow").await;
    let repo = Repo::new();
    let cm = |value: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  v: \"{value}\"\n")
    };
    repo.write("cm.yaml", &cm("1"));
    let first = repo.commit("first");
    let daemon = common::GitDaemon::serve(repo.dir.path());
    let setup = Setup::new(cp, "shallow", &repo, &ns, "");
    let path = format!("repo = \"{}\"", repo.dir.path().display());
    let config = std::fs::read_to_string(&setup.config).unwrap();
    assert!(config.contains(&path));
    std::fs::write(
        &setup.config,
        config.replace(&path, &format!("repo = \"{}\"", daemon.url)),
    )
    .unwrap();
    assert_eq!(setup.berth(&["sync"]).0, 0);
    let sources = setup.state.path().join("sources");
    let shallow_file = || {
        std::fs::read_dir(&sources)
            .unwrap()
            .flatten()
            .any(|d| d.path().join("git/shallow").exists())
    };
    assert!(shallow_file(), "the first fetch was not shallow");

    // Two commits later, with the cache gone (a new host, a wiped state): a fast-forward.
    repo.write("cm.yaml", &cm("2"));
    repo.commit("second");
    repo.write("cm.yaml", &cm("3"));
    repo.commit("third");
    std::fs::remove_dir_all(&sources).unwrap();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("rewritten"), "{out}");

    // A force-push back to the first commit, again from a fresh cache: still refused.
    repo.git(&["reset", "-q", "--hard", &first]);
    std::fs::remove_dir_all(&sources).unwrap();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("history was rewritten"), "{out}");

    // An app pinned to an older commit, in a cache whose first fetch was shallow.
    repo.write("cm.yaml", &cm("4"));
    repo.commit("fourth");
    assert_eq!(setup.berth(&["sync", "--accept-rewind"]).0, 0);
    std::fs::remove_dir_all(&sources).unwrap();
    assert_eq!(setup.berth(&["sync"]).0, 0);
    assert!(shallow_file());
    let config = std::fs::read_to_string(&setup.config)
        .unwrap()
        .replace("[[app]]\n", &format!("[[app]]\ncommit = \"{first}\"\n"));
    std::fs::write(&setup.config, config).unwrap();
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&first[..7]), "{out}");
}
