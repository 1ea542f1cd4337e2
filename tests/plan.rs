//! A plan for every pull request, against the real control plane: `berth plan --revision
//! BRANCH -o markdown --exit-code` says what the branch would do to the live cluster, and
//! nothing moves — not the cluster, the history, the inventory or the lock.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::ApiResource;

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n";
const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports:\n  - port: 80\n";

/// What the branch of these tests does: the Deployment's image changed, a ConfigMap
/// added, the Service deleted.
fn the_branch_changes(repo: &Repo) {
    repo.write(
        "app/web.yaml",
        &DEPLOYMENT.replace("nginx:1.25", "nginx:1.26"),
    );
    repo.write(
        "app/b.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  k: v\n",
    );
    std::fs::remove_file(repo.dir.path().join("app/svc.yaml")).unwrap();
}

/// Every file of the state folder but the repository caches, by path.
fn state_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel.starts_with("sources") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                found.insert(rel, std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    found
}

/// What the cluster holds of the app: each object's kind, name and resourceVersion (a
/// Deployment's generation), and the app's inventory whole.
async fn cluster_state(client: &kube::Client, ns: &str, app: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for (group, version, kind, plural) in [
        ("apps", "v1", "Deployment", "deployments"),
        ("", "v1", "Service", "services"),
        ("", "v1", "ConfigMap", "configmaps"),
    ] {
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        for o in api.list(&ListParams::default()).await.unwrap() {
            // A Deployment's status moves with its rollout; its spec only with a write.
            let version = match o.metadata.generation {
                Some(generation) => format!("generation {generation}"),
                None => o.metadata.resource_version.unwrap_or_default(),
            };
            seen.push(format!(
                "{kind} {} {version}",
                o.metadata.name.unwrap_or_default()
            ));
        }
    }
    let inventories: Api<ConfigMap> = Api::namespaced(client.clone(), "berth-system");
    let inventory = inventories
        .get(&format!("berth-inventory-{app}"))
        .await
        .unwrap();
    seen.push(serde_json::to_string(&inventory).unwrap());
    seen
}

/// A branch that changes a Deployment's image, adds a ConfigMap, deletes a Service and
/// breaks two objects (one the API server refuses, one that does not render): the
/// markdown plan has exactly those entries and both errors, exit code 1; fixed, exit code 2; a branch with no effect, 0. Nothing moves, and the same
/// plan twice is the same bytes.
#[tokio::test]
async fn a_branch_is_planned_against_the_live_cluster_and_nothing_moves() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "plan-pr").await;
    let repo = Repo::new();
    repo.write("app/web.yaml", DEPLOYMENT);
    repo.write("app/svc.yaml", SERVICE);
    repo.write(
        "app/a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n",
    );
    repo.write(
        "other/c.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
    );
    repo.commit("the app, and another no branch touches");
    let other = format!(
        "[[app]]\nname = \"plan-other\"\nrepo = \"{}\"\nnamespace = \"{ns}\"\npath = \"other\"\n",
        repo.dir.path().display()
    );
    let setup = Setup::new(
        cp,
        "plan-pr",
        &repo,
        &ns,
        &format!("path = \"app\"\nprune = true\n{other}"),
    );
    let (code, out, err) = setup.berth(&["sync", "--no-wait"]);
    assert_eq!(code, 0, "{out}{err}");

    repo.git(&["checkout", "-q", "-b", "same"]);
    repo.git(&["checkout", "-q", "-b", "feature"]);
    the_branch_changes(&repo);
    repo.write(
        "app/broken.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad-key\ndata:\n  \"bad key!\": v\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: bad-data\nspec:\n  ports: 80\n",
    );
    repo.commit("nginx 1.26, b, no Service, two broken objects");
    repo.git(&["checkout", "-q", "-b", "fixed"]);
    std::fs::remove_file(repo.dir.path().join("app/broken.yaml")).unwrap();
    repo.commit("the broken objects removed");
    repo.git(&["checkout", "-q", "main"]);

    let files = state_files(setup.state.path());
    let cluster = cluster_state(&client, &ns, "plan-pr").await;
    // After each plan: the history, the inventory's copy, the locks and the cluster as
    // they were.
    let unmoved = |after: &'static str| {
        let (client, ns, files, cluster) = (&client, &ns, &files, &cluster);
        let state = setup.state.path();
        async move {
            assert_eq!(
                &state_files(state),
                files,
                "the state folder moved ({after})"
            );
            assert_eq!(
                &cluster_state(client, ns, "plan-pr").await,
                cluster,
                "the cluster moved ({after})"
            );
        }
    };
    let plan = |revision: &str| {
        setup.berth(&[
            "plan",
            "--revision",
            revision,
            "-o",
            "markdown",
            "--exit-code",
        ])
    };

    let (code, broken, err) = plan("feature");
    unmoved("the broken branch").await;
    assert_eq!(code, 1, "{broken}{err}");
    assert!(
        broken.contains("| `plan-pr` | ") && broken.contains("nginx 1.26, b, no Service"),
        "{broken}"
    );
    assert!(
        broken.contains(&format!("**Create**\n\n- `configmap/b -n {ns}`\n")),
        "{broken}"
    );
    assert!(
        broken.contains(&format!(
            "<summary><code>deployment.apps/web -n {ns}</code></summary>"
        )),
        "{broken}"
    );
    assert!(broken.contains("+        image: nginx:1.26"), "{broken}");
    assert!(
        broken.contains(&format!(
            "**Prune**\n\n- `service/web -n {ns}` — unless it is one of the objects that did not render\n"
        )),
        "{broken}"
    );
    let errors = broken
        .split("**Errors**\n\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_default();
    assert_eq!(errors.lines().count(), 2, "{broken}");
    assert!(
        broken.contains(&format!(
            "**Refused by the API server**\n\n- `configmap/bad-key -n {ns}`\n"
        )),
        "{broken}"
    );
    assert!(
        errors.contains("bad-key") && errors.contains("app/broken.yaml"),
        "{errors}"
    );
    // Render errors and dry-run refusals together.
    assert!(
        errors.contains("app/broken.yaml:8 (document 2): Service bad-data: spec.ports"),
        "{errors}"
    );
    assert!(broken.contains("2 errors"), "{broken}");
    let (_, again, _) = plan("feature");
    assert_eq!(again, broken, "the same plan twice");

    let (code, fixed, err) = plan("fixed");
    unmoved("the fixed branch").await;
    assert_eq!(code, 2, "{fixed}{err}");
    assert!(fixed.contains("+1 ~1 -1, 1 rollout, 0 errors"), "{fixed}");
    assert!(!fixed.contains("**Errors**"), "{fixed}");

    let (code, same, err) = plan("same");
    unmoved("the branch with no effect").await;
    assert_eq!(code, 0, "{same}{err}");
    assert!(same.contains("+0 ~0 -0, 0 rollouts, 0 errors"), "{same}");

    // Only the apps the branch touches, against what their last sync read.
    let (code, affected, err) = setup.berth(&[
        "plan",
        "--revision",
        "fixed",
        "--all-affected",
        "-o",
        "markdown",
        "--exit-code",
    ]);
    assert_eq!(code, 2, "{affected}{err}");
    assert!(
        affected.contains("| `plan-other` | - | not affected: ")
            && affected.contains("changes nothing under other |"),
        "{affected}"
    );
    assert!(
        affected.contains("### `plan-pr` at") && !affected.contains("### `plan-other`"),
        "{affected}"
    );
    assert!(!err.contains("plan-other: fetching"), "{err}");

    unmoved("--all-affected").await;
    let image =
        |d: DynamicObject| d.data["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
    );
    assert_eq!(image(deployments.get("web").await.unwrap()), "nginx:1.25");
}

/// `--offline`: no cluster at all (the kubeconfig names nothing); the revision is
/// rendered and compared with another, typed checks included, and what needs the API
/// server is said to be skipped.
#[test]
fn a_revision_is_planned_offline_against_another() {
    let repo = Repo::new();
    repo.write("app/web.yaml", DEPLOYMENT);
    repo.write("app/svc.yaml", SERVICE);
    repo.commit("the app");
    repo.git(&["checkout", "-q", "-b", "feature"]);
    the_branch_changes(&repo);
    repo.commit("nginx 1.26, b, no Service");
    repo.git(&["checkout", "-q", "-b", "broken"]);
    repo.write(
        "app/bad.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  ports: 80\n",
    );
    repo.commit("a broken Service");
    repo.git(&["checkout", "-q", "main"]);
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\n[cluster]\nkubeconfig = \"/nonexistent/kubeconfig\"\n[[app]]\nname = \"offline\"\nrepo = \"{}\"\nnamespace = \"shop\"\npath = \"app\"\nprune = true\n",
            state.path().display(),
            repo.dir.path().display()
        ),
    )
    .unwrap();
    let plan = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["plan", "--offline", "-o", "markdown", "--exit-code"])
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, md, err) = plan(&["--revision", "feature", "--against", "main"]);
    assert_eq!(code, 2, "{md}{err}");
    assert!(md.contains("+1 ~1 -1, 0 rollouts, 0 errors"), "{md}");
    assert!(
        md.contains("**Create**\n\n- `configmap/b -n shop`\n"),
        "{md}"
    );
    assert!(md.contains("+        image: nginx:1.26"), "{md}");
    assert!(
        md.contains("**Prune**\n\n- `service/web -n shop`\n"),
        "{md}"
    );
    assert!(
        md.contains("> planned without a cluster: the API server's dry run"),
        "{md}"
    );
    let (code, md, err) = plan(&["--revision", "broken", "--against", "main"]);
    assert_eq!(code, 1, "{md}{err}");
    assert!(
        md.contains("app/bad.yaml:1 (document 1): Service bad: spec.ports"),
        "{md}"
    );
    // No sync on this host and no --against: every object is new, and it says so.
    let (code, md, err) = plan(&["--revision", "main"]);
    assert_eq!(code, 2, "{md}{err}");
    assert!(
        md.contains("+2 ~0 -0") && md.contains("no applied commit known here"),
        "{md}"
    );
}

/// The shipped `berth-planner` roles suffice for `berth plan`, and a `berth sync` with the
/// same credentials is refused before it writes any object.
#[tokio::test]
async fn the_planner_roles_suffice_and_a_sync_with_them_is_refused() {
    use kube::api::{Patch, PatchParams, PostParams};
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "plan-rbac").await;
    // The roles as shipped, and a ServiceAccount bound as the file says.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/berth-planner.yaml"
    ))
    .unwrap();
    let roles: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&()),
    );
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let role: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        let name = role["metadata"]["name"].as_str().unwrap().to_string();
        roles
            .patch(
                &name,
                &PatchParams::apply("test").force(),
                &Patch::Apply(&role),
            )
            .await
            .unwrap();
    }
    fn json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &ns);
    accounts
        .create(
            &PostParams::default(),
            &json(serde_json::json!({"metadata": {"name": "planner"}})),
        )
        .await
        .unwrap();
    let subject =
        serde_json::json!([{"kind": "ServiceAccount", "name": "planner", "namespace": ns}]);
    let cluster_bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> =
        Api::all(client.clone());
    cluster_bindings
        .create(
            &PostParams::default(),
            &json(serde_json::json!({
                "metadata": {"name": format!("berth-planner-{ns}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "berth-planner"},
                "subjects": subject,
            })),
        )
        .await
        .unwrap();
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), &ns);
    bindings
        .create(
            &PostParams::default(),
            &json(serde_json::json!({
                "metadata": {"name": "berth-planner-dry-run"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "berth-planner-dry-run"},
                "subjects": subject,
            })),
        )
        .await
        .unwrap();

    let repo = Repo::new();
    let config_map = |name: &str, value: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: {value}\n")
    };
    repo.write("app/a.yaml", &config_map("a", "one"));
    repo.commit("a");
    let setup = Setup::new(
        cp,
        "plan-rbac",
        &repo,
        &ns,
        "path = \"app\"\nprune = true\n",
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("app/a.yaml", &config_map("a", "two"));
    repo.write("app/b.yaml", &config_map("b", "new"));
    repo.commit("a changed, b added");

    // berth with the planner's credentials: the admin's kubeconfig acting as the account.
    let planner = setup.state.path().join("planner.kubeconfig");
    let kubeconfig = std::fs::read_to_string(&cp.kubeconfig).unwrap().replacen(
        "  user:\n",
        &format!("  user:\n    as: system:serviceaccount:{ns}:planner\n"),
        1,
    );
    std::fs::write(&planner, kubeconfig).unwrap();
    let config = std::fs::read_to_string(&setup.config).unwrap().replace(
        &cp.kubeconfig.display().to_string(),
        &planner.display().to_string(),
    );
    std::fs::write(&setup.config, config).unwrap();
    let (code, plan, err) = setup.berth(&["plan", "--revision", "feature", "--exit-code"]);
    assert_eq!(code, 2, "the planner roles suffice: {plan}{err}");
    assert!(
        plan.contains(&format!("configmap/b -n {ns} create")),
        "{plan}"
    );
    assert!(
        plan.contains(&format!("configmap/a -n {ns} configure")),
        "{plan}"
    );

    repo.git(&["checkout", "-q", "main"]);
    repo.git(&["merge", "-q", "--ff-only", "feature"]);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "a sync with the planner's credentials: {out}{err}");
    assert!(out.contains("forbidden"), "{out}");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert_eq!(
        maps.get("a").await.unwrap().data.unwrap()["k"],
        "one",
        "nothing written"
    );
    assert!(
        maps.get_opt("b").await.unwrap().is_none(),
        "nothing written"
    );
}
