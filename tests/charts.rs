//! Helm charts against the real control plane, rendered by the real `helm template` (on
//! PATH: `scripts/test` puts the one `scripts/helm` fetched there), with charts made at
//! test time by `helm create`.

mod common;

use std::process::Command;

use berth::history::Outcome;
use common::registry::helm_in as helm;
use common::{Repo, Setup};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use serde::Deserialize;
use serde_json::Value;

/// `helm create NAME` in `dir`, with helm's folders in a throwaway place.
fn helm_create(dir: &std::path::Path, name: &str) {
    helm(dir, &["create", name]);
}

/// A chart from `helm create`: synced as helm renders it, a values change rolls its
/// Deployment out, a template removed prunes its object.
#[tokio::test]
async fn a_chart_syncs_rolls_out_on_a_values_change_and_prunes_a_removed_template() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "chart-sync").await;
    let repo = Repo::new();
    std::fs::create_dir_all(repo.dir.path().join("charts")).unwrap();
    helm_create(&repo.dir.path().join("charts"), "demo");
    repo.write("values/prod.yaml", "image:\n  tag: \"1.25\"\n");
    // What the chart sees of the cluster: the real one's version and API versions.
    repo.write(
        "charts/demo/templates/capabilities.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: capabilities\ndata:\n  version: {{ .Capabilities.KubeVersion.Version | quote }}\n  deployments: {{ .Capabilities.APIVersions.Has \"apps/v1/Deployment\" | quote }}\n  gadgets: {{ .Capabilities.APIVersions.Has \"gadgets.example.com/v1\" | quote }}\n",
    );
    repo.commit("the demo chart");
    let setup = Setup::new(
        cp,
        "chart-sync",
        &repo,
        &ns,
        "path = \"charts/demo\"\nprune = true\n[app.helm]\nvalues_files = [\"values/prod.yaml\"]\n",
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    // helm create's chart: a ServiceAccount, a Service and a Deployment, named after the
    // release (the app); its test Pod is left out.
    let name = "chart-sync-demo";
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert!(accounts.get_opt(name).await.unwrap().is_some(), "{out}");
    assert!(services.get_opt(name).await.unwrap().is_some(), "{out}");
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    let seen = maps.get("capabilities").await.unwrap().data.unwrap();
    let server = client.apiserver_version().await.unwrap().git_version;
    assert_eq!(seen["version"], server, "not helm's default (v1.35.0)");
    assert_eq!(
        (seen["deployments"].as_str(), seen["gadgets"].as_str()),
        ("true", "false")
    );
    let image = |d: Deployment| {
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .clone()
            .unwrap()
    };
    assert_eq!(image(deployments.get(name).await.unwrap()), "nginx:1.25");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded);
    let origins: Vec<&str> = record
        .objects
        .iter()
        .filter_map(|o| o.source.as_deref())
        .collect();
    assert!(
        origins
            .contains(&"demo/templates/deployment.yaml (helm template of charts/demo/Chart.yaml)"),
        "{origins:?}"
    );

    // A values change: the Deployment's rollout followed.
    repo.write("values/prod.yaml", "image:\n  tag: \"1.26\"\n");
    repo.commit("nginx 1.26");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(image(deployments.get(name).await.unwrap()), "nginx:1.26");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.rollouts.len(), 1, "{out}");

    // A template removed: its object pruned.
    std::fs::remove_file(repo.dir.path().join("charts/demo/templates/service.yaml")).unwrap();
    repo.commit("no Service");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let gone = services.get_opt(name).await.unwrap();
    assert!(
        gone.is_none_or(|s| s.metadata.deletion_timestamp.is_some()),
        "{out}"
    );
}

/// What berth refuses before helm runs: a dependency helm would download, a values file
/// outside the checkout. Nothing is written.
#[tokio::test]
async fn a_chart_to_download_and_a_values_file_outside_are_refused() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "chart-refused").await;
    let repo = Repo::new();
    helm_create(repo.dir.path(), "app");
    helm_create(repo.dir.path(), "plain");
    let chart = repo.dir.path().join("app/Chart.yaml");
    let mut text = std::fs::read_to_string(&chart).unwrap();
    text.push_str("dependencies:\n  - name: redis\n    version: 19.0.0\n    repository: https://charts.example.com/stable\n");
    std::fs::write(&chart, text).unwrap();
    repo.commit("a chart with a dependency to download");
    let setup = Setup::new(cp, "chart-refused", &repo, &ns, "path = \"app\"\n");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("app/Chart.yaml: its dependencies redis (https://charts.example.com/stable) are not in charts/, and berth downloads no chart: vendor them (run `helm dependency build` in the chart's folder and commit charts/)"),
        "{out}"
    );

    let outside = Setup::new(
        cp,
        "chart-outside",
        &repo,
        &ns,
        "path = \"plain\"\n[app.helm]\nvalues_files = [\"../../etc/passwd\"]\n",
    );
    let (code, out, _) = outside.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("values file \"../../etc/passwd\""), "{out}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    assert!(deployments
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .is_empty());
}

/// A hook Job of the chart, annotated as helm's hooks are.
fn hook_job(name: &str, hook: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {{{{ .Release.Name }}}}-{name}
  annotations:
    helm.sh/hook: {hook}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: run
          image: tools:1
"
    )
}

/// A chart with a vendored dependency unpacked and one packed, a CRD in `crds/` and a
/// custom resource of it, and pre-install and post-install hooks: `berth render` gives
/// exactly `helm template`'s objects; a sync writes the CRD before its resource, runs the
/// pre-install hook before the objects and the post-install one after them.
#[tokio::test]
async fn a_chart_with_vendored_dependencies_a_crd_and_hooks_syncs_them_in_order() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "chart-parts").await;
    let repo = Repo::new();
    let root = repo.dir.path();
    helm_create(root, "shop");
    helm_create(&root.join("shop/charts"), "cache");
    let scratch = tempfile::tempdir().unwrap();
    helm_create(scratch.path(), "queue");
    helm(
        scratch.path(),
        &[
            "package",
            "queue",
            "-d",
            root.join("shop/charts").to_str().unwrap(),
        ],
    );
    let chart = root.join("shop/Chart.yaml");
    let mut text = std::fs::read_to_string(&chart).unwrap();
    text.push_str("dependencies:\n  - name: cache\n    version: 0.1.0\n    repository: https://charts.example.com/stable\n  - name: queue\n    version: 0.1.0\n    repository: https://charts.example.com/stable\n");
    std::fs::write(&chart, text).unwrap();
    repo.write(
        "shop/crds/gadgets.yaml",
        &common::crd("charts.example.com", "Gadget"),
    );
    repo.write(
        "shop/templates/gadget.yaml",
        "apiVersion: charts.example.com/v1\nkind: Gadget\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  size: 3\n",
    );
    repo.write(
        "shop/templates/migrate.yaml",
        &hook_job("migrate", "pre-install"),
    );
    repo.write(
        "shop/templates/smoke.yaml",
        &hook_job("smoke", "post-install"),
    );
    repo.commit("a chart with its parts");

    // berth render: helm template's objects, each as helm printed it.
    let render = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "render",
            "shop",
            "--release",
            "chart-parts",
            "-n",
            &ns,
            "-o",
            "json",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        render.status.success(),
        "{}",
        String::from_utf8_lossy(&render.stderr)
    );
    let rendered: Vec<Value> = String::from_utf8(render.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let templated = helm(
        root,
        &[
            "template",
            "chart-parts",
            "shop",
            "--namespace",
            &ns,
            "--include-crds",
            "--skip-tests",
        ],
    );
    let templated: Vec<Value> = serde_yaml::Deserializer::from_str(&templated)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect();
    assert_eq!(
        templated.len(),
        13,
        "3 objects of each chart, the CRD, the Gadget, 2 hooks"
    );
    assert_eq!(
        sorted(rendered.into_iter().map(without_berth).collect()),
        sorted(templated.into_iter().map(without_berth).collect()),
    );

    let setup = Setup::new(
        cp,
        "chart-parts",
        &repo,
        &ns,
        "path = \"shop\"\n[app.scope]\ncluster_kinds = [\"CustomResourceDefinition\"]\n",
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    for name in ["chart-parts-shop", "chart-parts-cache", "chart-parts-queue"] {
        assert!(
            deployments.get_opt(name).await.unwrap().is_some(),
            "{name}: {out}"
        );
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds
        .get_opt("gadgets.charts.example.com")
        .await
        .unwrap()
        .is_some());
    let gadget = ApiResource {
        group: "charts.example.com".into(),
        version: "v1".into(),
        api_version: "charts.example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &gadget);
    assert_eq!(
        gadgets.get("chart-parts").await.unwrap().data["spec"]["size"],
        3
    );
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{out}");
    let hooks: Vec<(&str, &str, &str)> = record
        .hooks
        .iter()
        .map(|h| (h.phase.as_str(), h.key.name.as_str(), h.outcome.as_str()))
        .collect();
    assert_eq!(
        hooks,
        [
            ("pre", "chart-parts-migrate", "succeeded"),
            ("post", "chart-parts-smoke", "succeeded")
        ],
        "{out}"
    );
    let line = |what: &str| {
        out.lines()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{what}: {out}"))
    };
    assert!(
        line("pre hook succeeded") < line("deployment.apps/chart-parts-shop"),
        "{out}"
    );
    assert!(
        line("deployment.apps/chart-parts-shop") < line("post hook succeeded"),
        "{out}"
    );
    // A second sync is an upgrade: pre-install and post-install hooks do not run again.
    repo.write(
        "shop/values.yaml",
        &std::fs::read_to_string(root.join("shop/values.yaml"))
            .unwrap()
            .replace("replicaCount: 1", "replicaCount: 2"),
    );
    repo.commit("two replicas");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(setup.history().pop().unwrap().hooks.is_empty(), "{out}");
}

/// An object without what berth adds (its namespace, its source annotation).
fn without_berth(mut object: Value) -> Value {
    let metadata = object["metadata"].as_object_mut().unwrap();
    metadata.remove("namespace");
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove("berth.dev/source-path");
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
    object
}

fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(|o| format!("{}/{}", o["kind"], o["metadata"]["name"]));
    objects
}

/// A kustomization inflating a chart of the repository (`helmCharts`, with its values
/// file) and patching what it renders: synced as kustomize builds it. kubectl's kustomize
/// (before 5.8.1) runs helm 3 only: `[agent] helm` names the one `scripts/helm 3` fetched.
#[tokio::test]
async fn a_kustomization_inflates_a_chart_of_the_repository() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let helm3 = std::env::var("BERTH_TEST_HELM3")
        .expect("BERTH_TEST_HELM3 names a helm 3 (scripts/test sets it from scripts/helm 3)");
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "chart-kustomize").await;
    let repo = Repo::new();
    std::fs::create_dir_all(repo.dir.path().join("app/charts")).unwrap();
    helm_create(&repo.dir.path().join("app/charts"), "web");
    repo.write("app/values-prod.yaml", "image:\n  tag: \"1.27\"\n");
    repo.write(
        "app/kustomization.yaml",
        "helmCharts:\n- name: web\n  releaseName: shop\n  valuesFile: values-prod.yaml\nlabels:\n- pairs: {team: payments}\n",
    );
    repo.commit("a chart inflated by kustomize");
    let setup = Setup::new(cp, "chart-kustomize", &repo, &ns, "path = \"app\"\n");
    setup.agent_setting(&format!("helm = \"{helm3}\""));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let web = deployments.get("shop-web").await.unwrap();
    assert_eq!(web.metadata.labels.unwrap()["team"], "payments");
    let image = web.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("nginx:1.27"));
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{out}");
}

/// A chart repository on loopback: `python3 -m http.server` serving `dir`.
struct ChartRepository {
    server: std::process::Child,
    url: String,
}

impl ChartRepository {
    fn serve(dir: &std::path::Path) -> ChartRepository {
        let port = common::free_port();
        let server = Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        common::eventually(
            "the chart repository answers",
            std::time::Duration::from_secs(10),
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        );
        ChartRepository {
            server,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for ChartRepository {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// A dependency from a repository `[agent] allow_remote_charts` names, pinned by the
/// committed Chart.lock: fetched once into the cache (a later sync renders with the
/// repository gone), never written into the checkout; without the allowance, refused.
#[tokio::test]
async fn a_dependency_from_an_allowed_repository_is_fetched_once_per_lock() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "chart-remote").await;
    let served = tempfile::tempdir().unwrap();
    helm_create(served.path(), "cache");
    helm(served.path(), &["package", "cache"]);
    std::fs::remove_dir_all(served.path().join("cache")).unwrap();
    let charts = ChartRepository::serve(served.path());
    helm(served.path(), &["repo", "index", ".", "--url", &charts.url]);

    let repo = Repo::new();
    let root = repo.dir.path();
    helm_create(root, "shop");
    let chart = root.join("shop/Chart.yaml");
    let mut text = std::fs::read_to_string(&chart).unwrap();
    text.push_str(&format!(
        "dependencies:\n  - name: cache\n    version: 0.1.0\n    repository: {}\n",
        charts.url
    ));
    std::fs::write(&chart, text).unwrap();
    helm(&root.join("shop"), &["dependency", "update", "."]);
    assert!(root.join("shop/Chart.lock").exists());
    std::fs::remove_dir_all(root.join("shop/charts")).unwrap();
    repo.commit("a chart with a dependency pinned by its lock");

    let refused = Setup::new(cp, "chart-remote", &repo, &ns, "path = \"shop\"\n");
    let (code, out, _) = refused.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "its dependencies cache ({}) are not in charts/",
            charts.url
        )) && out.contains("or name their repository in [agent] allow_remote_charts"),
        "{out}"
    );

    let setup = Setup::new(cp, "chart-remote", &repo, &ns, "path = \"shop\"\n");
    setup.agent_setting(&format!("allow_remote_charts = [\"{}\"]", charts.url));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    for name in ["chart-remote-shop", "chart-remote-cache"] {
        assert!(
            deployments.get_opt(name).await.unwrap().is_some(),
            "{name}: {out}"
        );
    }
    let cache: Vec<_> = std::fs::read_dir(setup.state.path().join("charts"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let lock = std::fs::read_to_string(root.join("shop/Chart.lock")).unwrap();
    assert_eq!(cache.len(), 1, "{cache:?}");
    assert!(
        lock.contains(&format!("digest: sha256:{}", cache[0])),
        "{lock}"
    );

    // The repository gone, a new commit still renders: from the cache.
    drop(charts);
    let values = root.join("shop/values.yaml");
    let text = std::fs::read_to_string(&values).unwrap();
    std::fs::write(&values, text.replace("replicaCount: 1", "replicaCount: 2")).unwrap();
    repo.commit("two replicas");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let shop = deployments.get("chart-remote-shop").await.unwrap();
    assert_eq!(shop.spec.unwrap().replicas, Some(2));
    assert!(
        !root.join("shop/charts").exists(),
        "the checkout is not written"
    );
}
