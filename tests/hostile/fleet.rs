//! A team's folder in a shared app set, as an attacker: it chooses its folder's name and
//! what the folder holds, nothing else. It must not take another set's app by its name,
//! reach a namespace no template may reach, take or delete a namespace it did not make,
//! nor have anything deleted outside the scope of the app it feeds.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::Api;

use crate::common::{self, Repo};

fn config_map(name: &str, namespace: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata: {{k: v}}\n")
}

fn namespace_doc(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n")
}

/// A state folder with `berth.toml`: the agent and the test control plane, then `apps`.
struct Fleet {
    state: tempfile::TempDir,
    config: std::path::PathBuf,
}

impl Fleet {
    fn new(cp: &berth_testenv::ControlPlane, apps: &str) -> Fleet {
        let state = tempfile::tempdir().unwrap();
        let config = state.path().join("berth.toml");
        let fleet = Fleet { state, config };
        fleet.write(cp, apps);
        fleet
    }

    fn write(&self, cp: &berth_testenv::ControlPlane, apps: &str) {
        let text = format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\n[cluster]\nkubeconfig = \"{}\"\n{apps}\n",
            self.state.path().display(),
            cp.kubeconfig.display(),
        );
        std::fs::write(&self.config, text).unwrap();
    }

    fn berth(&self, args: &[&str]) -> (i32, String) {
        let (code, out, err) = common::berth_on(&self.config, args);
        (code, out + &err)
    }
}

/// Finding 1: set `<a>` over `teama/*` and set `<a>-b` over `teamb/*` share a repository.
/// Team A's folder `b-web` makes the name team B's folder `web` does: neither app runs,
/// whichever set is listed first, both named; team B's objects stay; and when the folder
/// goes, team B's app is back as it was, its inventory its own.
#[tokio::test]
async fn a_folder_making_another_sets_app_name_takes_nothing_over() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns_a = common::namespace(&client, "mono-a").await;
    let ns_b = common::namespace(&client, "mono-b").await;
    let set = format!("mono{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("teamb/web/cm.yaml", &config_map("b-precious", &ns_b));
    repo.commit("team b");
    let sets = format!(
        "[[app_set]]\nname = \"{set}\"\nrepo = \"{r}\"\nfolders = \"teama/*\"\nnamespace = \"{ns_a}\"\nprune = true\nallow_empty = true\n\
         [[app_set]]\nname = \"{set}-b\"\nrepo = \"{r}\"\nfolders = \"teamb/*\"\nnamespace = \"{ns_b}\"\nprune = true\n",
        r = repo.dir.path().display()
    );
    let fleet = Fleet::new(cp, &sets);
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 0, "{said}");
    let victim = format!("{set}-b-web");
    let maps_b: Api<ConfigMap> = Api::namespaced(client.clone(), &ns_b);
    assert!(maps_b.get_opt("b-precious").await.unwrap().is_some());

    // Team A's folder, named to make team B's app name.
    repo.write("teama/b-web/cm.yaml", &config_map("a-thing", &ns_a));
    repo.commit("team a takes the name");
    for _ in 0..2 {
        // Twice: the second run starts from the listings the first one kept, as a
        // restarted agent does.
        let (code, said) = fleet.berth(&["sync"]);
        assert_eq!(code, 1, "refused apps fail the run: {said}");
        let both = format!(
            "the name \"{victim}\" is made by app set {set} (folder teama/b-web, cluster default) and by app set {set}-b (folder teamb/web, cluster default)"
        );
        assert_eq!(said.matches(&both).count(), 2, "both apps named: {said}");
        assert!(!said.contains("pruned"), "{said}");
    }
    assert!(
        maps_b.get_opt("b-precious").await.unwrap().is_some(),
        "team B's object stays"
    );
    let maps_a: Api<ConfigMap> = Api::namespaced(client.clone(), &ns_a);
    assert!(maps_a.get_opt("a-thing").await.unwrap().is_none());
    let (code, status) = fleet.berth(&["status"]);
    assert!(
        status.contains(&victim) && status.contains("refused"),
        "{code} {status}"
    );

    // The folder goes: team B's app is back, its own.
    repo.git(&["rm", "-q", "-r", "teama"]);
    repo.commit("team a gives up");
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 0, "{said}");
    assert!(maps_b.get_opt("b-precious").await.unwrap().is_some());
    let inventories: Api<ConfigMap> = Api::namespaced(client.clone(), "berth-system");
    let inventory = inventories
        .get(&format!("berth-inventory-{victim}"))
        .await
        .unwrap();
    let text = &inventory.data.unwrap()["inventory.json"];
    assert!(
        text.contains(&format!("\"set\":\"{set}-b\",\"folder\":\"teamb/web\"")),
        "{text}"
    );
}

/// An inventory left by one set's app (its folder removed without prune) is not taken by
/// another set's app that comes to have the name: refused, naming whose it is; nothing
/// of it written or pruned.
#[tokio::test]
async fn an_inventory_of_another_origin_is_refused() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns_a = common::namespace(&client, "origin-a").await;
    let ns_b = common::namespace(&client, "origin-b").await;
    let set = format!("orig{}", std::process::id() % 100_000);
    let repo = Repo::new();
    repo.write("teamb/web/cm.yaml", &config_map("b-kept", &ns_b));
    repo.commit("team b");
    let r = repo.dir.path().display();
    let sets = format!(
        "[[app_set]]\nname = \"{set}\"\nrepo = \"{r}\"\nfolders = \"teama/*\"\nnamespace = \"{ns_a}\"\nprune = true\nallow_empty = true\n\
         [[app_set]]\nname = \"{set}-b\"\nrepo = \"{r}\"\nfolders = \"teamb/*\"\nnamespace = \"{ns_b}\"\nallow_empty = true\n"
    );
    let fleet = Fleet::new(cp, &sets);
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 0, "{said}");
    // Team B's folder goes (no prune: its objects and inventory stay); team A's folder
    // takes the name.
    repo.git(&["rm", "-q", "-r", "teamb"]);
    repo.write("teama/b-web/cm.yaml", &config_map("a-thing", &ns_a));
    repo.commit("team a");
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!(
            "belongs to app set {set}-b's folder teamb/web on cluster default"
        )) && said.contains(&format!(
            "not to this app (app set {set}'s folder teama/b-web"
        )),
        "{said}"
    );
    let maps_b: Api<ConfigMap> = Api::namespaced(client.clone(), &ns_b);
    let kept = maps_b.get("b-kept").await.unwrap();
    assert_eq!(
        kept.metadata.labels.unwrap()["berth.dev/app"],
        format!("{set}-b-web"),
        "not relabelled"
    );
    let maps_a: Api<ConfigMap> = Api::namespaced(client.clone(), &ns_a);
    assert!(maps_a.get_opt("a-thing").await.unwrap().is_none());
}

/// Finding 3: under `namespace = "{folder}"` and `scope = ["{folder}"]` (the shipped
/// example's templates), folders named after Kubernetes' namespaces and berth's own are
/// skipped, said; the set's other folders sync.
#[tokio::test]
async fn folder_names_cannot_choose_a_reserved_namespace() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ok = common::namespace(&client, "reserved-ok").await;
    let planted = format!("planted-{}", std::process::id() % 100_000);
    let repo = Repo::new();
    for folder in ["kube-system", "default", "berth-system", ok.as_str()] {
        repo.write(
            &format!("addons/{folder}/cm.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {planted}\ndata: {{k: v}}\n"
            ),
        );
    }
    repo.commit("folders");
    let set = format!("res{}", std::process::id() % 100_000);
    let fleet = Fleet::new(
        cp,
        &format!(
            "[[app_set]]\nname = \"{set}\"\nrepo = \"{}\"\nfolders = \"addons/*\"\nnamespace = \"{{folder}}\"\nprune = true\n[app_set.scope]\nnamespaces = [\"{{folder}}\"]\n",
            repo.dir.path().display()
        ),
    );
    let (code, said) = fleet.berth(&["validate"]);
    assert_eq!(code, 1, "{said}");
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 1, "{said}");
    for reserved in ["kube-system", "default", "berth-system"] {
        assert!(
            said.contains(&format!("folder addons/{reserved}"))
                && said.contains(&format!("reach namespace \"{reserved}\"")),
            "{reserved}: {said}"
        );
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), reserved);
        assert!(
            maps.get_opt(&planted).await.unwrap().is_none(),
            "{reserved}"
        );
    }
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ok);
    assert!(maps.get_opt(&planted).await.unwrap().is_some(), "{said}");
}

/// Finding 2: a namespace berth made for one app (`create_namespace`) is neither taken nor
/// deleted by another app rendering it; an administrator's namespace is not taken by a
/// set's folder (chained with finding 3: `addons/payments`).
#[tokio::test]
async fn a_namespace_one_app_asked_for_or_berth_did_not_make_is_not_taken() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let id = std::process::id() % 100_000;
    let shared = format!("shared-{id}");
    let payments = common::namespace(&client, "payments").await;
    let maps_payments: Api<ConfigMap> = Api::namespaced(client.clone(), &payments);
    let ledger: ConfigMap = serde_yaml::from_str(&config_map("ledger", &payments)).unwrap();
    maps_payments
        .create(&Default::default(), &ledger)
        .await
        .unwrap();
    let victim_repo = Repo::new();
    victim_repo.write("cm.yaml", &config_map("victim-data", &shared));
    victim_repo.commit("victim");
    let repo = Repo::new();
    repo.write("ns.yaml", &namespace_doc(&shared));
    repo.write(
        &format!("addons/{payments}/ns.yaml"),
        &namespace_doc(&payments),
    );
    repo.commit("take them");
    let apps = format!(
        "[[app]]\nname = \"victim{id}\"\nrepo = \"{}\"\nnamespace = \"{shared}\"\ncreate_namespace = true\nprune = true\n\
         [[app]]\nname = \"taker{id}\"\nrepo = \"{r}\"\npath = \"ns.yaml\"\nnamespace = \"{shared}\"\nprune = true\n\
         [[app_set]]\nname = \"adds{id}\"\nrepo = \"{r}\"\nfolders = \"addons/*\"\nnamespace = \"{{folder}}\"\nprune = true\n",
        victim_repo.dir.path().display(),
        r = repo.dir.path().display(),
    );
    let fleet = Fleet::new(cp, &apps);
    let (code, said) = fleet.berth(&["sync", &format!("victim{id}")]);
    assert_eq!(code, 0, "{said}");
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 1, "{said}");
    assert!(
        said.contains(&format!(
            "Namespace {shared} was created for app victim{id} (create_namespace); refused"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "Namespace {payments} exists and berth did not make it; refused"
        )),
        "{said}"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [&shared, &payments] {
        let live = namespaces.get(ns).await.unwrap();
        let labels = live.metadata.labels.unwrap_or_default();
        assert!(!labels.contains_key("berth.dev/app"), "{ns}: {labels:?}");
    }
    // The folder goes: nothing of it is pruned, the ledger stays.
    repo.git(&["rm", "-q", "-r", "addons", "ns.yaml"]);
    repo.commit("gone");
    let _ = fleet.berth(&["sync"]);
    assert!(maps_payments.get_opt("ledger").await.unwrap().is_some());
    let maps_shared: Api<ConfigMap> = Api::namespaced(client.clone(), &shared);
    assert!(maps_shared.get_opt("victim-data").await.unwrap().is_some());
}

/// Every delete is inside the app's scope as it is now: an object its inventory lists in
/// a namespace its scope no longer holds is kept and said, never pruned.
#[tokio::test]
async fn prune_keeps_what_is_outside_the_apps_current_scope() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let own = common::namespace(&client, "scope-own").await;
    let other = common::namespace(&client, "scope-other").await;
    let id = std::process::id() % 100_000;
    let repo = Repo::new();
    repo.write("own.yaml", &config_map("mine", &own));
    repo.write("other.yaml", &config_map("elsewhere", &other));
    repo.commit("both");
    let app = |scope: &str| {
        format!(
            "[[app]]\nname = \"scoped{id}\"\nrepo = \"{}\"\nnamespace = \"{own}\"\nprune = true\n[app.scope]\nnamespaces = [{scope}]\n",
            repo.dir.path().display()
        )
    };
    let fleet = Fleet::new(cp, &app(&format!("\"{own}\", \"{other}\"")));
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 0, "{said}");
    fleet.write(cp, &app(&format!("\"{own}\"")));
    std::fs::remove_file(repo.dir.path().join("other.yaml")).unwrap();
    repo.commit("drop the other");
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!("configmap/elsewhere -n {other} kept (not pruned: it is in namespace \"{other}\", outside the app's scope")),
        "{said}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &other);
    assert!(maps.get_opt("elsewhere").await.unwrap().is_some());
}

/// Finding 7: a folder renamed under `namespace = "{folder}"` hands over only what keeps
/// its kind, namespace and name; everything else the old app held is pruned, as for a
/// removed folder, its namespace with it — nothing is left owned by no app.
#[tokio::test]
async fn a_rename_hands_over_only_what_keeps_its_identity() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let id = std::process::id() % 100_000;
    let (old, new) = (format!("old-{id}"), format!("new-{id}"));
    let repo = Repo::new();
    repo.write(
        &format!("addons/{old}/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata: {k: v}\n",
    );
    repo.commit("old");
    let set = format!("ren{id}");
    let fleet = Fleet::new(
        cp,
        &format!(
            "[[app_set]]\nname = \"{set}\"\nrepo = \"{}\"\nfolders = \"addons/*\"\nnamespace = \"{{folder}}\"\ncreate_namespace = true\nprune = true\n[app_set.scope]\nnamespaces = [\"{{folder}}\"]\n",
            repo.dir.path().display()
        ),
    );
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 0, "{said}");
    let old_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &old);
    assert!(old_maps.get_opt("settings").await.unwrap().is_some());
    repo.git(&["mv", &format!("addons/{old}"), &format!("addons/{new}")]);
    repo.commit("renamed");
    let (code, said) = fleet.berth(&["sync"]);
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains(&format!("{set}-{old}: its folder renamed: 0 objects handed over to app {set}-{new}, 1 other object (not the new folder's) pruned")),
        "{said}"
    );
    let new_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &new);
    assert!(new_maps.get_opt("settings").await.unwrap().is_some());
    assert!(
        old_maps.get_opt("settings").await.unwrap().is_none(),
        "the old folder's object is pruned"
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let left = namespaces.get_opt(&old).await.unwrap();
    assert!(
        left.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the old folder's namespace goes"
    );
}

/// Finding 8: a folder removed from a set while `berth run` follows it: its apps are not
/// synced at the commit that removed it (no failed record, no false notification); they
/// are removed.
#[tokio::test(flavor = "multi_thread")]
async fn a_removed_folders_app_does_not_fail_before_its_set_is_listed() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "gone-folder").await;
    let id = std::process::id() % 100_000;
    let repo = Repo::new();
    for folder in ["stays", "goes"] {
        repo.write(
            &format!("addons/{folder}/cm.yaml"),
            &config_map(folder, &ns),
        );
    }
    repo.commit("two");
    let set = format!("gone{id}");
    let fleet = Fleet::new(
        cp,
        &format!(
            "[[app_set]]\nname = \"{set}\"\nrepo = \"{}\"\nfolders = \"addons/*\"\nnamespace = \"{ns}\"\nprune = true\n",
            repo.dir.path().display()
        ),
    );
    let _daemon = common::Daemon::start(&fleet.config, &[]);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let present = |name: &'static str| {
        let maps = maps.clone();
        async move { maps.get_opt(name).await.ok().flatten().is_some() }
    };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(present("stays").await && present("goes").await) {
        assert!(std::time::Instant::now() < end, "first sync");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    repo.git(&["rm", "-q", "-r", "addons/goes"]);
    repo.commit("one goes");
    while present("goes").await {
        assert!(
            std::time::Instant::now() < end + std::time::Duration::from_secs(30),
            "removal"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let history = berth::history::HistoryLog::new(fleet.state.path());
    let records = history.read(&format!("{set}-goes")).unwrap();
    let failed: Vec<_> = records
        .iter()
        .filter(|r| r.outcome == berth::history::Outcome::Failed)
        .map(|r| r.errors.clone())
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}

/// Finding 5: a commit of 45,000 folders sharing one tree (a few hundred KB) under a set's
/// glob: refused at `berth validate` and at `berth sync`, naming the set and the bound,
/// before any app is made — not 45,000 apps.
#[test]
fn a_set_of_45000_folders_is_refused_at_its_bound() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    const FOLDERS: usize = 45_000;
    let repo = Repo::new();
    repo.commit_folders("teams", FOLDERS);
    let fleet = Fleet::new(
        cp,
        &format!(
            "[[app_set]]\nname = \"wide\"\nrepo = \"{}\"\nfolders = \"teams/*\"\nnamespace = \"wide\"\n",
            repo.dir.path().display()
        ),
    );
    let config = fleet.config.to_string_lossy().into_owned();
    for command in ["validate", "sync"] {
        let run = crate::bounded(
            fleet.state.path(),
            &[command, "--config", &config],
            1024,
            std::time::Duration::from_secs(120),
        );
        eprintln!(
            "measured: {FOLDERS} folders, berth {command}: {} MiB resident at most, {:?}",
            run.peak_mib, run.took
        );
        assert_eq!(run.code, Some(1), "{}", run.out);
        assert!(
            run.out.contains("app set wide: its 45000 folders × 1 cluster make 45000 apps, more than its max_apps (10000); none is made"),
            "{}",
            &run.out[..run.out.len().min(2000)]
        );
        assert!(run.peak_mib < 300, "{} MiB", run.peak_mib);
    }
    assert!(
        !fleet.state.path().join("sets/wide.json").exists(),
        "nothing listed is kept"
    );
}
