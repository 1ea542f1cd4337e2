use super::*;

const CONFIG: &str = r#"
[agent]
state_dir = "STATE"

[[cluster]]
name = "east"
labels = { env = "prod" }

[[cluster]]
name = "west"
labels = { env = "prod" }

[[app]]
name = "addons-dns-east"
repo = "/srv/git/solo"
cluster = "east"

[[app_set]]
name = "addons"
repo = "/srv/git/fleet"
folders = ["addons/*"]
clusters = { env = "prod" }
namespace = "{folder}"
"#;

fn config(state: &Path, text: &str) -> Config {
    let c = crate::config::parse(&text.replace("STATE", &state.display().to_string())).unwrap();
    c.validate().unwrap();
    c
}

fn listing(paths: &[&str]) -> Listing {
    Listing {
        set: "addons".into(),
        listed: Listed {
            commit: "0".repeat(40),
            folders: paths
                .iter()
                .map(|p| Folder {
                    path: p.to_string(),
                    tree: "1".repeat(40),
                })
                .collect(),
        },
        problem: None,
    }
}

fn names(config: &Config) -> Vec<&str> {
    config.apps.iter().map(|a| a.name.as_str()).collect()
}

#[test]
fn a_set_makes_one_app_per_folder_and_cluster_after_the_written_ones() {
    let state = tempfile::tempdir().unwrap();
    let text = CONFIG.replace("addons-dns-east", "solo");
    let c = config(state.path(), &text);
    let mut listings = [listing(&["addons/dns", "addons/metrics"])];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert_eq!(
        names(&expanded),
        [
            "solo",
            "addons-dns-east",
            "addons-dns-west",
            "addons-metrics-east",
            "addons-metrics-west"
        ]
    );
    let dns = expanded.app("addons-dns-west").unwrap();
    assert_eq!(
        (
            dns.set.as_deref(),
            dns.cluster.as_deref(),
            dns.namespace.as_str()
        ),
        (Some("addons"), Some("west"), "dns")
    );
    assert_eq!(dns.path, ["addons/dns"]);
    assert_eq!(listings[0].problem, None);
    // Expanding an expanded configuration makes the same apps again.
    let again = expand(&expanded, &mut listings, &|_| Vec::new());
    assert_eq!(again.apps, expanded.apps);
}

#[test]
fn a_name_another_app_has_keeps_the_sets_apps_and_says_why() {
    let state = tempfile::tempdir().unwrap();
    let c = config(state.path(), CONFIG);
    let mut listings = [listing(&["addons/dns"])];
    let kept = |set: &str| {
        assert_eq!(set, "addons");
        Vec::new()
    };
    let expanded = expand(&c, &mut listings, &kept);
    assert_eq!(
        names(&expanded),
        ["addons-dns-east"],
        "the written app only"
    );
    let problem = listings[0].problem.as_ref().unwrap().to_string();
    assert!(
        problem.contains("it makes an app named \"addons-dns-east\", which another app has")
            && problem.ends_with("its apps stay as they were"),
        "{problem}"
    );
}

#[test]
fn a_folder_that_is_no_app_name_or_namespace_is_refused_naming_it() {
    let state = tempfile::tempdir().unwrap();
    let c = config(state.path(), &CONFIG.replace("addons-dns-east", "solo"));
    let mut listings = [listing(&["addons/Not_A_Label"])];
    expand(&c, &mut listings, &|_| Vec::new());
    let problem = listings[0].problem.as_ref().unwrap().to_string();
    assert!(problem.contains("folder addons/Not_A_Label"), "{problem}");
}

#[test]
fn what_a_set_listed_is_kept_and_a_hostile_state_file_names_nothing() {
    let state = tempfile::tempdir().unwrap();
    let c = config(state.path(), &CONFIG.replace("addons-dns-east", "solo"));
    assert_eq!(remembered(state.path(), "addons"), None);
    remember(state.path(), &listing(&["addons/dns"]));
    assert_eq!(
        remembered(state.path(), "addons"),
        Some(listing(&["addons/dns"]).listed)
    );
    let made = remembered_apps(&c, &c.app_sets[0]);
    assert_eq!(made.len(), 2);
    assert_eq!(names(&expand_remembered(&c)).len(), 3);
    // A listing with a problem keeps the last one.
    let mut held = listing(&[]);
    held.problem = Some(Problem::Unlisted("down".into()));
    remember(state.path(), &held);
    assert_eq!(remembered(state.path(), "addons").unwrap().folders.len(), 1);
    // A path out of the repository, written by someone else: no app is made from it.
    remember(state.path(), &listing(&["../../etc"]));
    assert!(remembered_apps(&c, &c.app_sets[0]).is_empty());
    std::fs::write(state_path(state.path(), "addons"), b"{\"commit\": 1}").unwrap();
    assert_eq!(remembered(state.path(), "addons"), None);
    // A set no longer configured is forgotten.
    remember(state.path(), &listing(&["addons/dns"]));
    let mut without = c.clone();
    without.app_sets.clear();
    forget_others(&without);
    assert_eq!(remembered(state.path(), "addons"), None);
}

#[test]
fn a_folder_renamed_with_its_files_hands_its_apps_over_cluster_by_cluster() {
    let state = tempfile::tempdir().unwrap();
    let c = config(state.path(), &CONFIG.replace("addons-dns-east", "solo"));
    let folder = |path: &str, tree: char| Folder {
        path: path.into(),
        tree: tree.to_string().repeat(40),
    };
    let listed = |folders: Vec<Folder>| Listed {
        commit: "0".repeat(40),
        folders,
    };
    let before = listed(vec![folder("addons/dns", 'a'), folder("addons/logs", 'b')]);
    let now = listed(vec![
        folder("addons/dns", 'a'),
        folder("addons/logging", 'b'),
        folder("addons/other", 'c'),
    ]);
    let pairs: Vec<(String, String)> = renamed(&c, &c.app_sets[0], &before, &now)
        .into_iter()
        .map(|(from, to)| (from.name, to.name))
        .collect();
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        pairs,
        [
            pair("addons-logs-east", "addons-logging-east"),
            pair("addons-logs-west", "addons-logging-west")
        ]
    );
    // Changed as it moved: a different tree, no hand-over.
    let changed = listed(vec![
        folder("addons/dns", 'a'),
        folder("addons/logging", 'd'),
    ]);
    assert!(renamed(&c, &c.app_sets[0], &before, &changed).is_empty());
}

#[test]
fn a_dependency_on_an_app_no_set_makes_is_said() {
    let state = tempfile::tempdir().unwrap();
    let text = CONFIG.replace(
        "name = \"addons-dns-east\"",
        "name = \"solo\"\ndepends_on = [\"addons-dns-east\", \"addons-dsn-east\"]",
    );
    let c = config(state.path(), &text);
    let mut listings = [listing(&["addons/dns"])];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert_eq!(
        unknown_dependencies(&expanded),
        ["app solo: depends_on names \"addons-dsn-east\", which no app is (nor any app set makes): not waited on"]
    );
}
