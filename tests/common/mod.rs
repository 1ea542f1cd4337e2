//! The shared harness of the integration tests: one real control plane per test binary
//! (etcd, kube-apiserver, kube-controller-manager and the kubelet stand-in), started on
//! first use and stopped when the binary exits; each test works in its own namespace.
//!
//! Without the binaries a test run by hand is skipped with a printed reason; under CI
//! (`CI=true`) it fails loudly instead.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use berth::testenv::{assets, ControlPlane, UpOptions};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

static CONTROL_PLANE: OnceLock<Option<ControlPlane>> = OnceLock::new();
static STATE_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The shared control plane, or `None` (test skipped) when run by hand without binaries.
pub fn control_plane() -> Option<&'static ControlPlane> {
    CONTROL_PLANE.get_or_init(start).as_ref()
}

fn start() -> Option<ControlPlane> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let Some(bin) = assets::find() else {
        let why = "control plane binaries not found: set KUBEBUILDER_ASSETS or run `cargo run --bin berth-testenv -- assets`";
        assert!(!ci, "{why}");
        eprintln!("SKIPPED: {why}");
        return None;
    };
    let dir = std::env::temp_dir().join(format!("berth-test-{}", std::process::id()));
    STATE_DIR.set(dir.clone()).expect("started once");
    let opts = UpOptions {
        dir,
        bin,
        deployment_controller: std::env::var("BERTH_TEST_NO_DEPLOYMENT_CONTROLLER").is_err(),
        kubelet: Some(PathBuf::from(env!("CARGO_BIN_EXE_berth-testenv"))),
    };
    // Its own thread and runtime: the tests' runtimes come and go.
    let started = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        rt.block_on(ControlPlane::up(&opts))
    })
    .join()
    .expect("control plane thread");
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(stop) };
    match started {
        Ok(cp) => Some(cp),
        Err(e) => panic!("the control plane did not start: {e}"),
    }
}

extern "C" fn stop() {
    if let Some(dir) = STATE_DIR.get() {
        let _ = ControlPlane::down(dir);
    }
}

/// A client for this test's runtime.
pub async fn client(cp: &ControlPlane) -> kube::Client {
    cp.client()
        .await
        .expect("client for the test control plane")
}

/// Creates a fresh namespace named after the test.
pub async fn namespace(client: &kube::Client, test: &str) -> String {
    let name = format!(
        "{}-{}",
        test.replace('_', "-"),
        std::process::id() % 100_000
    );
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create the test namespace");
    name
}

/// Waits for `condition` on a namespaced object, up to `timeout`.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    condition: impl kube::runtime::wait::Condition<K>,
) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let wait = kube::runtime::wait::await_condition(api.clone(), name, condition);
    match tokio::time::timeout(timeout, wait).await {
        Ok(Ok(Some(obj))) => obj,
        Ok(Ok(None)) => panic!("{name} was deleted while waiting"),
        Ok(Err(e)) => panic!("watching {name} failed: {e}"),
        Err(_) => {
            let now = api.get_opt(name).await.ok().flatten();
            panic!("timed out after {timeout:?} waiting for {name}; it is now: {now:#?}")
        }
    }
}
