//! Ordering against the real control plane: apps that depend on apps (`depends_on`).

mod common;

use std::time::Duration;

use berth::history::{Outcome, Trigger};
use common::{Daemon, Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;

/// The operator: a Deployment whose pods become ready (or, with `never`, never do: its
/// rollout fails after its 4 s progress deadline).
fn operator(image: &str, never: bool) -> String {
    let annotations = if never {
        "testenv.berth.dev/ready: \"false\""
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: operator
spec:
  replicas: 1
  progressDeadlineSeconds: 4
  selector:
    matchLabels: {{app: operator}}
  template:
    metadata:
      labels: {{app: operator}}
      annotations: {{{annotations}}}
    spec:
      containers:
        - name: operator
          image: {image}
"
    )
}

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.order.berth.dev
spec:
  group: order.berth.dev
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
";

fn gadget(size: u32) -> String {
    format!("apiVersion: order.berth.dev/v1\nkind: Gadget\nmetadata:\n  name: g\nspec: {{size: {size}}}\n")
}

fn config_map(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  value: \"{value}\"\n")
}

/// `[[app]]` tables after the first (which `Setup` writes): `(name, path, depends_on)`.
fn more_apps(repo: &Repo, ns: &str, apps: &[(&str, &str, &str)]) -> String {
    apps.iter()
        .map(|(name, path, deps)| {
            format!(
                "[[app]]\nname = \"{name}\"\nrepo = \"{}\"\nnamespace = \"{ns}\"\npath = \"{path}\"\ndepends_on = [{deps}]\n[app.rollout]\ntimeout = \"60s\"\n",
                repo.dir.path().display()
            )
        })
        .collect()
}

fn history(setup: &Setup, app: &str) -> Vec<berth::history::SyncRecord> {
    berth::history::HistoryLog::new(setup.state.path())
        .read(app)
        .expect("history")
}

/// Three apps from one commit, listed against their order: the custom resource's app
/// after the operator's, the operator's after the CRD's. Each starts once what it depends
/// on has ended healthy; without the order the custom resource's kind is unknown.
#[tokio::test]
async fn crds_then_operator_then_app_from_one_commit() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-chain").await;
    let repo = Repo::new();
    repo.write("crds/gadget.yaml", CRD);
    repo.write("operator/deployment.yaml", &operator("operator:1", false));
    repo.write("app/gadget.yaml", &gadget(1));
    repo.commit("crds, operator and app");
    let rest = more_apps(
        &repo,
        &ns,
        &[
            ("chain-operator", "operator", "\"chain-crds\""),
            ("chain-crds", "crds", ""),
        ],
    );
    let setup = Setup::new(
        cp,
        "chain-app",
        &repo,
        &ns,
        &format!("path = \"app\"\ndepends_on = [\"chain-operator\"]\n{rest}[app.scope]\ncluster_kinds = [\"CustomResourceDefinition\"]\n"),
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let last = |app: &str| {
        history(&setup, app)
            .pop()
            .unwrap_or_else(|| panic!("no record of {app}: {out}"))
    };
    let (crds, op, app) = (
        last("chain-crds"),
        last("chain-operator"),
        last("chain-app"),
    );
    for r in [&crds, &op, &app] {
        assert_eq!(r.outcome, Outcome::Succeeded, "{}: {out}", r.app);
    }
    assert!(op.started_at >= crds.finished_at, "{out}");
    assert!(app.started_at >= op.finished_at, "{out}");
    let gadgets = ApiResource {
        group: "order.berth.dev".into(),
        version: "v1".into(),
        api_version: "order.berth.dev/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &gadgets);
    assert_eq!(api.get("g").await.unwrap().data["spec"]["size"], 1);

    // `berth sync app` alone with a dependency not ready at its commit: not synced, said.
    repo.write("operator/deployment.yaml", &operator("operator:2", false));
    repo.write("app/gadget.yaml", &gadget(2));
    let second = repo.commit("operator 2, gadget 2");
    let (code, out, _) = setup.berth(&["sync", "chain-app"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "chain-app: waiting on chain-operator: {} not synced yet",
            &second[..7]
        )),
        "{out}"
    );
    assert!(out.contains("berth sync --with-deps chain-app"), "{out}");
    assert_eq!(api.get("g").await.unwrap().data["spec"]["size"], 1);
    // With its dependencies: the operator first, then the app.
    let (code, out, err) = setup.berth(&["sync", "chain-app", "--with-deps"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(api.get("g").await.unwrap().data["spec"]["size"], 2);
    assert_eq!(last("chain-operator").outcome, Outcome::Succeeded, "{out}");
}

/// The operator's rollout fails: the app that depends on it is held (one record, and
/// `berth status` says why), keeps its last commit, and syncs by itself once a new commit
/// fixes the operator.
#[tokio::test]
async fn a_failed_dependency_holds_its_dependent_until_it_recovers() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-hold").await;
    let repo = Repo::new();
    repo.write("operator/deployment.yaml", &operator("operator:1", false));
    repo.write("app/settings.yaml", &config_map("one"));
    repo.commit("operator and app");
    let rest = more_apps(&repo, &ns, &[("hold-operator", "operator", "")]);
    let setup = Setup::new(
        cp,
        "hold-app",
        &repo,
        &ns,
        &format!("path = \"app\"\ndepends_on = [\"hold-operator\"]\n{rest}"),
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let _daemon = Daemon::start(&setup.config, &[]);
    common::wait_for_value(&maps, "settings", "one", Duration::from_secs(60)).await;

    repo.write(
        "operator/deployment.yaml",
        &operator("operator:broken", true),
    );
    repo.write("app/settings.yaml", &config_map("two"));
    let broken = repo.commit("a broken operator, app two");
    let waiting = format!(
        "waiting on hold-operator: rollout failed at {} and was rolled back",
        &broken[..7]
    );
    common::eventually("the app is held", Duration::from_secs(90), || {
        history(&setup, "hold-app")
            .last()
            .is_some_and(|r| r.outcome == Outcome::Held && r.note.as_deref() == Some(&waiting))
    });
    let (code, out, _) = setup.berth(&["status"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&waiting), "{out}");
    let data = maps.get("settings").await.unwrap().data.unwrap();
    assert_eq!(data["value"], "one", "the app keeps its last commit");

    // Fixed: the operator syncs, then the app, with nobody asking.
    repo.write("operator/deployment.yaml", &operator("operator:2", false));
    let fixed = repo.commit("operator fixed");
    common::eventually("the app syncs by itself", Duration::from_secs(60), || {
        history(&setup, "hold-app")
            .last()
            .is_some_and(|r| r.outcome == Outcome::Succeeded)
    });
    let data = maps.get("settings").await.unwrap().data.unwrap();
    assert_eq!(data["value"], "two");
    let records = history(&setup, "hold-app");
    let held = records
        .iter()
        .filter(|r| r.outcome == Outcome::Held)
        .count();
    assert_eq!(held, 1, "one record for the whole wait: {records:#?}");
    let released = records.last().unwrap();
    assert_eq!(released.outcome, Outcome::Succeeded);
    assert_eq!(released.commit.as_ref().unwrap().sha, fixed);
    assert!(matches!(
        released.trigger,
        Trigger::Dependency | Trigger::Notify
    ));
    let (_, out, _) = setup.berth(&["status"]);
    assert!(!out.contains("waiting on"), "{out}");
}

/// A dependency cycle is refused when the configuration is loaded, naming it.
#[test]
fn a_dependency_cycle_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("berth.toml");
    let app = |name: &str, deps: &str| {
        format!("[[app]]\nname = \"{name}\"\nrepo = \"/srv/git/platform\"\ndepends_on = [{deps}]\n")
    };
    std::fs::write(
        &config,
        format!(
            "{}{}{}",
            app("crds", "\"app\""),
            app("operator", "\"crds\""),
            app("app", "\"operator\"")
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("app[0].depends_on: a dependency cycle: crds -> app -> operator -> crds"),
        "{err}"
    );
}
