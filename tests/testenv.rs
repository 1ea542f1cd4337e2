//! The local control plane and kubelet stand-in, with the manifest pipeline: the
//! guestbook example applied with server-side apply rolls out; an unready one does not.

mod common;

use std::time::Duration;

use berth::config;
use berth::manifest::{Builder, BuiltinScopes, Manifest};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::pinned_kind;

/// Renders an example folder into `namespace` (its Namespace object left out).
fn render(dir: &str, namespace: &str) -> Vec<Manifest> {
    let app = config::parse(&format!(
        "[[app]]\nname = \"example\"\nrepo = \"{dir}\"\nnamespace = \"{namespace}\"\nexclude_objects = [\"Namespace/*\"]\n"
    ))
    .expect("app config")
    .apps
    .remove(0);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    Builder::for_app(&app, &config::AgentConfig::default(), &root, &BuiltinScopes)
        .expect("globs")
        .render()
        .expect("the example renders")
}

async fn apply(client: &kube::Client, manifests: &[Manifest]) {
    for m in manifests {
        let (group, version) = m
            .api_version()
            .rsplit_once('/')
            .unwrap_or(("", m.api_version()));
        let gvk = GroupVersionKind::gvk(group, version, m.kind());
        let (resource, _) = pinned_kind(client, &gvk).await.expect("discovery");
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            m.namespace().unwrap_or("default"),
            &resource,
        );
        api.patch(
            m.name(),
            &PatchParams::apply("berth-test"),
            &Patch::Apply(&m.object),
        )
        .await
        .unwrap_or_else(|e| panic!("server-side apply of {} failed: {e}", m.key()));
    }
}

fn condition<'a>(
    d: &'a Deployment,
    type_: &str,
) -> Option<&'a k8s_openapi::api::apps::v1::DeploymentCondition> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

#[tokio::test]
async fn guestbook_applies_and_rolls_out() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "guestbook").await;
    let manifests = render("examples/guestbook", &ns);
    // The example's ports name no protocol: v1.20 refuses that unless the pipeline fills it in.
    apply(&client, &manifests).await;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let done = common::wait_for(
        &deployments,
        "frontend",
        Duration::from_secs(60),
        |d: Option<&Deployment>| {
            d.is_some_and(|d| {
                let observed =
                    d.status.as_ref().and_then(|s| s.observed_generation) >= d.metadata.generation;
                observed
                    && condition(d, "Available").is_some_and(|c| c.status == "True")
                    && condition(d, "Progressing")
                        .is_some_and(|c| c.reason.as_deref() == Some("NewReplicaSetAvailable"))
            })
        },
    )
    .await;
    assert_eq!(done.status.and_then(|s| s.available_replicas), Some(3));
    let live = deployments.get("frontend").await.unwrap();
    let labels = live.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("berth.dev/app").map(String::as_str),
        Some("example")
    );
}

#[tokio::test]
async fn unready_pods_keep_a_deployment_unavailable() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "unready").await;
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "stuck", "namespace": ns},
        "spec": {
            "replicas": 2,
            "progressDeadlineSeconds": 3,
            "selector": {"matchLabels": {"app": "stuck"}},
            "template": {
                "metadata": {"labels": {"app": "stuck"}, "annotations": {"testenv.berth.dev/ready": "false"}},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}
            }
        }
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .patch(
            "stuck",
            &PatchParams::apply("berth-test"),
            &Patch::Apply(&deployment),
        )
        .await
        .unwrap();
    let failed = common::wait_for(
        &deployments,
        "stuck",
        Duration::from_secs(60),
        |d: Option<&Deployment>| {
            d.and_then(|d| condition(d, "Progressing"))
                .is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
        },
    )
    .await;
    assert_eq!(
        condition(&failed, "Available").map(|c| c.status.as_str()),
        Some("False")
    );
    assert_eq!(
        failed
            .status
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
        0
    );
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let pods = pods.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(pods.len(), 2);
    for pod in pods {
        let status = pod.status.unwrap();
        assert_eq!(
            status.phase.as_deref(),
            Some("Running"),
            "the stand-in ran it"
        );
        let waiting = status.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    }
}

#[tokio::test]
async fn ready_after_delays_readiness() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "slow").await;
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "slow", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "slow"}},
            "template": {
                "metadata": {"labels": {"app": "slow"}, "annotations": {"testenv.berth.dev/ready-after": "3s"}},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}]}
            }
        }
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .patch(
            "slow",
            &PatchParams::apply("berth-test"),
            &Patch::Apply(&deployment),
        )
        .await
        .unwrap();
    common::wait_for(
        &deployments,
        "slow",
        Duration::from_secs(60),
        |d: Option<&Deployment>| d.and_then(|d| d.status.as_ref()?.available_replicas) == Some(1),
    )
    .await;
    let pod = Api::<Pod>::namespaced(client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    let created = pod.metadata.creation_timestamp.unwrap().0;
    let ready_at = pod
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready_at.status, "True");
    let waited = ready_at
        .last_transition_time
        .unwrap()
        .0
        .duration_since(created);
    assert!(
        waited.as_secs() >= 3,
        "ready after {waited:?}, expected at least 3s"
    );
}

/// `scripts/demo` evaluates what `berth-testenv up` prints: on a fresh machine, where the
/// control plane is built first, nothing but `export` lines may reach stdout. A stand-in
/// build (noisy on stdout, as apt and make are) copies the real binaries into the cache.
#[test]
fn up_prints_only_exports_while_building_the_control_plane() {
    let Some(real) = common::assets_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let stand_in = tmp.path().join("build");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\necho 'Reading package lists...'\necho 'make: building kube-apiserver'\nmkdir -p \"$1\" && cp {0}/etcd {0}/kube-apiserver {0}/kube-controller-manager \"$1\"/\necho \"$1\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir = tmp.path().join("cp");
    let testenv = |args: &[&str], build: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_berth-testenv"))
            .args(args)
            .arg("--dir")
            .arg(&dir)
            .env_remove("KUBEBUILDER_ASSETS")
            .env("XDG_CACHE_HOME", tmp.path().join("cache"))
            .env("BERTH_TESTENV_BUILD", build)
            .output()
            .expect("run berth-testenv")
    };

    let failing = tmp.path().join("fail");
    std::fs::write(
        &failing,
        "#!/bin/sh\necho 'E: Unable to locate package'\nexit 100\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &failing,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = testenv(&["up"], &failing);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("E: Unable to locate package"), "{err}");
    assert!(err.contains("building them failed"), "{err}");

    let out = testenv(&["up"], &stand_in);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let down = testenv(&["down"], &stand_in);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(down.status.success());
    assert!(!stdout.is_empty());
    for line in stdout.lines() {
        assert!(
            line.starts_with("export "),
            "not an export line on stdout: {line:?}"
        );
    }
    assert!(stderr.contains("Reading package lists..."), "{stderr}");
    assert!(stderr.contains("building the control plane"), "{stderr}");
}

/// The pids a control plane recorded in its state folder that are zombies: exited, their
/// exit never collected by this process, which started them.
fn zombies(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        })
        .collect()
}

/// A component killed as a crash would be, and a control plane stopped, leave no zombie
/// in the process that started them (the fault suite kills components dozens of times; a
/// benchmark starts and stops a dozen control planes).
#[tokio::test]
async fn killed_components_and_stopped_control_planes_leave_no_zombies() {
    let Some(bin) = common::assets_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let cp = berth_testenv::ControlPlane::up(&berth_testenv::UpOptions {
        dir: tmp.path().join("cp"),
        bin,
        deployment_controller: false,
        kubelet: None,
        controller_qps: None,
    })
    .await
    .expect("the control plane starts");
    let pids: Vec<i32> = std::fs::read_to_string(cp.dir.join("pids"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert_eq!(
        pids.len(),
        3,
        "etcd, kube-apiserver, kube-controller-manager: {pids:?}"
    );

    cp.kill("kube-controller-manager").unwrap();
    assert_eq!(zombies(&pids), Vec::<i32>::new(), "after the kill");
    berth_testenv::ControlPlane::down(&cp.dir).unwrap();
    assert_eq!(zombies(&pids), Vec::<i32>::new(), "after down");
    assert!(pids
        .iter()
        .all(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()));
}
