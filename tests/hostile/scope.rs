//! Apps confined to their scope: an app whose namespace is its own cannot write
//! `kube-system` or bind `cluster-admin`; no app can write berth's own inventories, Leases
//! or namespace; and an app that impersonates a ServiceAccount is held to that account's
//! RBAC by the API server itself, even where berth's own check lets it through.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};

use crate::common::{self, Repo, Setup};

fn config_map(name: &str, namespace: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata: {{k: v}}\n")
}

#[tokio::test]
async fn an_app_writes_only_its_own_namespace_by_default() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "confined").await;
    let repo = Repo::new();
    repo.write("own.yaml", &config_map("own", &ns));
    repo.write("system.yaml", &config_map("planted", "kube-system"));
    repo.write(
        "admin.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: hostile-admin\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects:\n  - {kind: ServiceAccount, name: default, namespace: default}\n",
    );
    repo.commit("reach out");
    let setup = Setup::new(cp, "confined", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!("{out}{err}");
    for named in [
        "system.yaml:1 (document 1): ConfigMap kube-system/planted is in namespace \"kube-system\", outside the app's scope",
        "admin.yaml:1 (document 1): ClusterRoleBinding hostile-admin is cluster-scoped, outside the app's scope (add \"ClusterRoleBinding\" to [app.scope] cluster_kinds to allow it); refused",
    ] {
        assert!(said.contains(named), "missing {named:?} in {said}");
    }
    // Nothing written: not even the object inside the scope.
    let planted = Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    assert!(planted.get_opt("planted").await.unwrap().is_none());
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    assert!(bindings.get_opt("hostile-admin").await.unwrap().is_none());
    let own = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(own.get_opt("own").await.unwrap().is_none());
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, berth::history::Outcome::Failed);
}

#[tokio::test]
async fn no_app_writes_berths_own_state_whatever_its_scope() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "state-guard").await;
    // A victim app with an inventory.
    let victim_repo = Repo::new();
    victim_repo.write("cm.yaml", &config_map("victim", &ns));
    victim_repo.commit("victim");
    let victim = Setup::new(cp, "victim", &victim_repo, &ns, "");
    let (code, out, err) = victim.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let state = Api::<ConfigMap>::namespaced(client.clone(), "berth-system");
    let before = state.get("berth-inventory-victim").await.unwrap().data;

    let repo = Repo::new();
    repo.write(
        "lease.yaml",
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: berth\n  namespace: berth-system\nspec:\n  holderIdentity: attacker\n  renewTime: \"2030-01-01T00:00:00.000000Z\"\n  leaseDurationSeconds: 999999\n",
    );
    repo.write(
        "inventory.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: berth-inventory-victim\n  namespace: berth-system\ndata: {}\n",
    );
    repo.write(
        "namespace.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: berth-system\n  labels: {owned: attacker}\n",
    );
    repo.commit("take over");
    let open = "[app.scope]\nnamespaces = [\"*\"]\ncluster_kinds = [\"*\"]";
    let setup = Setup::new(cp, "attacker", &repo, &ns, open);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!("{out}{err}");
    for object in [
        "Lease berth-system/berth",
        "ConfigMap berth-system/berth-inventory-victim",
        "Namespace berth-system",
    ] {
        assert!(
            said.contains(&format!("{object} is berth's own state")),
            "missing {object} in {said}"
        );
    }
    assert_eq!(
        state.get("berth-inventory-victim").await.unwrap().data,
        before
    );
    let leases = Api::<Lease>::namespaced(client.clone(), "berth-system");
    let holder = leases
        .get_opt("berth")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity);
    assert_ne!(holder.as_deref(), Some("attacker"));
}

#[tokio::test]
async fn an_impersonated_account_is_held_to_its_rbac_by_the_api_server() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "impersonated").await;
    let other = common::namespace(&client, "impersonated-other").await;
    // The app's account may write ConfigMaps in its own namespace only.
    let create = |v: serde_json::Value| v;
    let account: ServiceAccount = serde_json::from_value(create(
        serde_json::json!({"metadata": {"name": "deployer", "namespace": ns}}),
    ))
    .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "deployer", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "deployer", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deployer"},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();

    let repo = Repo::new();
    repo.write("own.yaml", &config_map("own", &ns));
    repo.commit("own");
    // berth's own check is opened wide: only the API server's RBAC stands in the way.
    let extra = format!("service_account = \"{ns}/deployer\"\n[app.scope]\nnamespaces = [\"*\"]");
    let setup = Setup::new(cp, "impersonated", &repo, &ns, &extra);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let own = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(own.get_opt("own").await.unwrap().is_some());

    repo.write("other.yaml", &config_map("planted", &other));
    repo.commit("reach out");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains(&format!("system:serviceaccount:{ns}:deployer"))
            && said.contains("forbidden"),
        "{said}"
    );
    let planted = Api::<ConfigMap>::namespaced(client.clone(), &other);
    assert!(planted.get_opt("planted").await.unwrap().is_none());
}

#[tokio::test]
async fn a_commits_crd_cannot_re_declare_a_built_in_kinds_scope() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "crd-spoof").await;
    let spoof = |annotations: &str| {
        format!("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: clusterrolebindings.rbac.authorization.k8s.io\n{annotations}spec:\n  group: rbac.authorization.k8s.io\n  scope: Namespaced\n  names: {{kind: ClusterRoleBinding, plural: clusterrolebindings}}\n  versions: [{{name: v1, served: true, storage: true, schema: {{openAPIV3Schema: {{type: object}}}}}}]\n")
    };
    let binding = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: spoofed-admin\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects:\n  - {kind: ServiceAccount, name: default, namespace: default}\n";
    let repo = Repo::new();
    repo.write(
        "crd.yaml",
        &spoof("  annotations: {berth.dev/ignore: \"true\"}\n"),
    );
    repo.write("binding.yaml", binding);
    repo.write("own.yaml", &config_map("own", &ns));
    repo.commit("an ignored CRD re-declares ClusterRoleBinding as namespaced");
    let setup = Setup::new(cp, "crd-spoof", &repo, &ns, "");
    let sync_fails_saying = |says: &str| {
        let (code, out, err) = setup.berth(&["sync"]);
        let said = format!("{out}{err}");
        assert_eq!(code, 1, "{said}");
        assert!(said.contains(says), "missing {says:?} in {said}");
    };
    sync_fails_saying("binding.yaml:1 (document 1): ClusterRoleBinding spoofed-admin is cluster-scoped, outside the app's scope");
    // The CRD itself, not ignored, is refused by its rule.
    repo.write("crd.yaml", &spoof(""));
    repo.commit("the CRD applied");
    sync_fails_saying("crd.yaml:1 (document 1): CustomResourceDefinition clusterrolebindings.rbac.authorization.k8s.io defines ClusterRoleBinding (namespaced) in \"rbac.authorization.k8s.io\": refused, \"rbac.authorization.k8s.io\" is a group Kubernetes serves itself");
    let bindings = Api::<ClusterRoleBinding>::all(client.clone());
    assert!(bindings.get_opt("spoofed-admin").await.unwrap().is_none());
    let own = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    assert!(own.get_opt("own").await.unwrap().is_none());
}

#[tokio::test]
async fn an_object_another_app_owns_is_refused_naming_it_unless_both_share_it() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "one-owner").await;
    let shared = |annotations: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\n  annotations: {{{annotations}}}\ndata: {{k: v}}\n")
    };
    let first_repo = Repo::new();
    first_repo.write("settings.yaml", &shared(""));
    first_repo.commit("first");
    let first = Setup::new(cp, "owner-first", &first_repo, &ns, "");
    let (code, out, err) = first.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let second_repo = Repo::new();
    second_repo.write("settings.yaml", &shared(""));
    second_repo.write("own.yaml", &config_map("own", &ns));
    second_repo.commit("second");
    let second = Setup::new(cp, "owner-second", &second_repo, &ns, "");
    let (code, out, err) = second.berth(&["sync"]);
    let said = format!("{out}{err}");
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!("settings.yaml:1 (document 1): ConfigMap {ns}/settings belongs to app owner-first (its berth.dev/app label); refused")),
        "{said}"
    );
    let maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let label = |cm: ConfigMap| cm.metadata.labels.unwrap_or_default()["berth.dev/app"].clone();
    assert_eq!(label(maps.get("settings").await.unwrap()), "owner-first");
    assert!(
        maps.get_opt("own").await.unwrap().is_none(),
        "nothing of the commit written"
    );
    // Shared by both: allowed.
    first_repo.write("settings.yaml", &shared("berth.dev/shared: \"true\""));
    first_repo.commit("first shares it");
    let (code, out, err) = first.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    second_repo.write("settings.yaml", &shared("berth.dev/shared: \"true\""));
    second_repo.commit("second shares it");
    let (code, out, err) = second.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
}
