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
            refs: Vec::new(),
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
fn a_name_a_written_app_has_is_refused_to_the_set_and_kept_by_the_written_app() {
    let state = tempfile::tempdir().unwrap();
    let c = config(state.path(), CONFIG);
    let mut listings = [listing(&["addons/dns"])];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert_eq!(
        names(&expanded),
        ["addons-dns-east", "addons-dns-west"],
        "the written app, and the set's other cluster"
    );
    assert_eq!(expanded.app("addons-dns-east").unwrap().set, None);
    assert_eq!(listings[0].problem, None, "the set's other apps are listed");
    let refused: Vec<String> = expanded.refused.iter().map(|r| r.to_string()).collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("the name \"addons-dns-east\" is made by the written [[app]] and by app set addons (folder addons/dns, cluster east)"),
        "{refused:?}"
    );
    assert!(expanded.has_app("addons-dns-east"));
}

/// Set `mono` over `teama/*` and set `mono-b` over `teamb/*`: folder `teama/b-web` makes
/// the name folder `teamb/web` does. Neither wins, whichever is listed first, and neither
/// is removed.
#[test]
fn two_sets_making_one_name_are_both_refused_naming_both_folders() {
    let state = tempfile::tempdir().unwrap();
    let text = r#"
[agent]
state_dir = "STATE"

[cluster]

[[app_set]]
name = "mono"
repo = "/srv/git/mono"
folders = ["teama/*"]
namespace = "mono-a"

[[app_set]]
name = "mono-b"
repo = "/srv/git/mono"
folders = ["teamb/*"]
namespace = "mono-b"
"#;
    let c = config(state.path(), text);
    let of = |set: &str, paths: &[&str]| Listing {
        set: set.into(),
        ..listing(paths)
    };
    for order in [[0, 1], [1, 0]] {
        let all = [
            of("mono", &["teama/b-web", "teama/api"]),
            of("mono-b", &["teamb/web"]),
        ];
        let mut listings = order.map(|i| all[i].clone());
        let expanded = expand(&c, &mut listings, &|_| Vec::new());
        assert_eq!(names(&expanded), ["mono-api"], "{order:?}");
        assert!(listings.iter().all(|l| l.problem.is_none()));
        let refused: Vec<String> = expanded.refused.iter().map(|r| r.to_string()).collect();
        assert_eq!(refused.len(), 2, "{refused:?}");
        for r in &refused {
            assert!(
                r.contains("is made by app set mono (folder teama/b-web, cluster default) and by app set mono-b (folder teamb/web, cluster default)"),
                "{r}"
            );
        }
        assert!(expanded.has_app("mono-b-web"), "refused: never removed");
    }
}

#[test]
fn a_template_reaching_a_reserved_namespace_skips_that_folder_and_says_so() {
    let state = tempfile::tempdir().unwrap();
    let text = CONFIG.replace("addons-dns-east", "solo")
        + "[app_set.scope]\nnamespaces = [\"{folder}\", \"shared-{folder}\"]\n";
    let c = config(state.path(), &text);
    let folders = [
        "addons/dns",
        "addons/kube-system",
        "addons/default",
        "addons/berth-system",
        "addons/kube-node-lease",
    ];
    let mut listings = [listing(&folders)];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert_eq!(
        names(&expanded),
        ["solo", "addons-dns-east", "addons-dns-west"]
    );
    assert_eq!(expanded.refused.len(), 8, "4 folders × 2 clusters");
    let said = expanded.refused[0].to_string();
    assert!(
        said.contains("folder addons/kube-system")
            && said.contains("reach namespace \"kube-system\"")
            && said.ends_with("skipped"),
        "{said}"
    );
}

#[test]
fn a_folder_named_as_a_glob_cannot_widen_a_templated_scope() {
    let state = tempfile::tempdir().unwrap();
    let text = CONFIG.replace("addons-dns-east", "solo").replace(
        "namespace = \"{folder}\"",
        "namespace = \"team\"\napp_name = \"any-{cluster}\"\n[app_set.scope]\nnamespaces = [\"{folder}\"]",
    );
    let c = config(state.path(), &text);
    let mut listings = [listing(&["addons/[a-z]*"])];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert_eq!(names(&expanded), ["solo"]);
    assert_eq!(expanded.refused.len(), 2);
    assert!(
        expanded.refused[0].why.contains("glob"),
        "{:?}",
        expanded.refused
    );
}

#[test]
fn a_namespace_the_set_writes_literally_stands() {
    let state = tempfile::tempdir().unwrap();
    let text = CONFIG
        .replace("addons-dns-east", "solo")
        .replace("namespace = \"{folder}\"\n", "");
    let c = config(state.path(), &text);
    let mut listings = [listing(&["addons/dns"])];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert_eq!(
        expanded.app("addons-dns-east").unwrap().namespace,
        "default"
    );
    assert!(expanded.refused.is_empty());
}

#[test]
fn more_apps_than_max_apps_are_refused_naming_the_set_and_the_bound() {
    let state = tempfile::tempdir().unwrap();
    let text = CONFIG.replace("addons-dns-east", "solo") + "max_apps = 3\n";
    let c = config(state.path(), &text);
    let mut listings = [listing(&["addons/a", "addons/b"])];
    let kept = |_: &str| Vec::new();
    let expanded = expand(&c, &mut listings, &kept);
    assert_eq!(names(&expanded), ["solo"]);
    let problem = listings[0].problem.as_ref().unwrap().to_string();
    assert!(
        problem.contains(
            "app set addons: its 2 folders × 2 clusters make 4 apps, more than its max_apps (3)"
        ),
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

const PREVIEWS: &str = r#"
[agent]
state_dir = "STATE"

[[app_set]]
name = "pr"
repo = "/srv/git/shop"
refs = ["refs/pull/*/head", "refs/heads/preview/*"]
namespace = "pr-{number}"
ttl = "1d"
"#;

/// A listing of refs, each `(name, sha's digit, seconds ago)`.
fn refs(found: &[(&str, char, i64)]) -> Listing {
    let now = jiff::Timestamp::now();
    let refs = (found.iter())
        .map(|(name, sha, ago)| FoundRef {
            name: name.to_string(),
            sha: sha.to_string().repeat(40),
            since: now - jiff::SignedDuration::from_secs(*ago),
        })
        .collect();
    Listing {
        set: "pr".into(),
        listed: Listed {
            refs,
            ..Listed::default()
        },
        problem: None,
    }
}

#[test]
fn refs_past_their_ttl_make_no_app_and_one_bad_ref_is_refused_alone() {
    let state = tempfile::tempdir().unwrap();
    let c = config(state.path(), PREVIEWS);
    let day = 86_400;
    let mut listings = [refs(&[
        ("refs/pull/1/head", 'a', 60),
        ("refs/pull/2/head", 'b', 2 * day),
        ("refs/heads/preview/no-number", 'c', 60),
    ])];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert_eq!(names(&expanded), ["pr-1"], "pr-2 expired");
    assert!(listings[0].problem.is_none());
    let refused = &expanded.refused[0];
    assert_eq!(
        refused.git_ref.as_deref(),
        Some("refs/heads/preview/no-number")
    );
    assert!(
        refused
            .why
            .contains("{number}: ref refs/heads/preview/no-number holds no number"),
        "{refused}"
    );
}

#[test]
fn a_ref_named_as_a_glob_cannot_widen_a_templated_scope() {
    let state = tempfile::tempdir().unwrap();
    let text = PREVIEWS.to_string()
        + "app_name = \"pr-{number}\"\n[app_set.scope]\nnamespaces = [\"{branch}\"]\n";
    let c = config(state.path(), &text);
    let mut listings = [refs(&[("refs/heads/preview/{kube-system,x}-1", 'a', 60)])];
    let expanded = expand(&c, &mut listings, &|_| Vec::new());
    assert!(expanded.apps.is_empty());
    assert!(
        expanded.refused[0].why.contains("its ref"),
        "{:?}",
        expanded.refused
    );
}

#[test]
fn a_ref_moved_is_one_that_names_another_commit() {
    let before = refs(&[("refs/pull/1/head", 'a', 0), ("refs/pull/2/head", 'b', 0)]);
    let now = refs(&[
        ("refs/pull/1/head", 'c', 0),
        ("refs/pull/2/head", 'b', 0),
        ("refs/pull/3/head", 'd', 0),
    ]);
    assert_eq!(
        moved_refs(Some(&before.listed), &now.listed),
        ["refs/pull/1/head"]
    );
    assert!(
        moved_refs(None, &now.listed).is_empty(),
        "nothing moved before a first listing"
    );
}
