//! Helm charts against the real control plane, rendered by the real `helm template` (on
//! PATH: `scripts/test` puts the one `scripts/helm` fetched there), with charts made at
//! test time by `helm create`.

mod common;

use std::process::Command;

use berth::history::Outcome;
use common::{Repo, Setup};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use kube::api::Api;

/// `helm create NAME` in `dir`, with helm's folders in a throwaway place.
fn helm_create(dir: &std::path::Path, name: &str) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("helm")
        .args(["create", name])
        .current_dir(dir)
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("helm on PATH (scripts/helm fetches it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
