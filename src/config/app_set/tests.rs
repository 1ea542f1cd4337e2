use crate::config::{parse, AppConfig, AppSetConfig, Clusters, Config, FoundRef, SetError};

const CLUSTERS: &str = "[[cluster]]\nname = \"east\"\nlabels = { env = \"prod\", region = \"eu\" }\n[[cluster]]\nname = \"west\"\nlabels = { env = \"prod\", region = \"us\" }\n[[cluster]]\nname = \"lab\"\nlabels = { env = \"test\" }\n";

const ADDONS: &str = "[[app_set]]\nname = \"addons\"\nrepo = \"https://git.example.com/fleet.git\"\nbranch = \"main\"\nfolders = [\"addons/*\"]\nclusters = { env = \"prod\" }\nnamespace = \"{folder}\"\nprune = true\n";

fn config(text: &str) -> Config {
    let config = parse(text).unwrap();
    config.validate().unwrap();
    config
}

fn invalid(text: &str) -> String {
    parse(text).unwrap().validate().unwrap_err().to_string()
}

/// Every app of the set's combinations, or the first that cannot be made.
fn generate(
    set: &AppSetConfig,
    folders: &[String],
    refs: &[FoundRef],
    clusters: &Clusters,
) -> Result<Vec<AppConfig>, SetError> {
    set.generate(folders, refs, clusters)?.into_iter().collect()
}

fn folders(paths: &[&str]) -> Vec<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

#[test]
fn one_app_per_folder_and_selected_cluster_with_the_templates_filled() {
    let c = config(&format!("{CLUSTERS}{ADDONS}"));
    let set = &c.app_sets[0];
    let apps = generate(
        set,
        &folders(&["addons/ingress", "addons/dns"]),
        &[],
        &c.cluster,
    )
    .unwrap();
    let made: Vec<(&str, Option<&str>, &str, &[String])> = apps
        .iter()
        .map(|a| {
            let cluster = a.cluster.as_deref();
            (
                a.name.as_str(),
                cluster,
                a.namespace.as_str(),
                a.path.as_slice(),
            )
        })
        .collect();
    let ingress = [String::from("addons/ingress")];
    let dns = [String::from("addons/dns")];
    assert_eq!(
        made,
        [
            ("addons-ingress-east", Some("east"), "ingress", &ingress[..]),
            ("addons-ingress-west", Some("west"), "ingress", &ingress[..]),
            ("addons-dns-east", Some("east"), "dns", &dns[..]),
            ("addons-dns-west", Some("west"), "dns", &dns[..]),
        ]
    );
    assert!(apps
        .iter()
        .all(|a| a.prune && a.repo.ends_with("fleet.git")));
}

#[test]
fn names_and_values_are_templates_with_labels() {
    let text = format!(
        "{CLUSTERS}[[app_set]]\nname = \"svc\"\nrepo = \"r\"\nfolders = \"services/*\"\nclusters = \"*\"\napp_name = \"{{folder}}-{{label.env}}-{{cluster}}\"\npath = [\"{{path}}/base\", \"{{path}}/{{label.env}}\"]\nnamespace = \"{{set}}-{{{{x}}}}\"\n"
    );
    let c = parse(&text).unwrap();
    let apps = generate(
        &c.app_sets[0],
        &folders(&["services/shop"]),
        &[],
        &c.cluster,
    )
    .unwrap();
    let names: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["shop-prod-east", "shop-prod-west", "shop-test-lab"]);
    assert_eq!(apps[2].path, ["services/shop/base", "services/shop/test"]);
    assert_eq!(apps[0].namespace, "svc-{x}");
}

#[test]
fn a_set_without_clusters_goes_to_the_only_cluster_and_is_refused_with_several() {
    let one = config("[[app_set]]\nname = \"apps\"\nrepo = \"r\"\nfolders = [\"apps/*\"]\n");
    let apps = generate(&one.app_sets[0], &folders(&["apps/web"]), &[], &one.cluster).unwrap();
    assert_eq!(apps[0].name, "apps-web");
    assert_eq!(apps[0].cluster.as_deref(), Some("default"));
    let several = invalid(&format!(
        "{CLUSTERS}[[app_set]]\nname = \"apps\"\nrepo = \"r\"\nfolders = [\"apps/*\"]\n"
    ));
    assert!(
        several.contains("app_set[0].clusters: give its clusters (clusters = \"*\" or labels to match): 3 clusters are configured"),
        "{several}"
    );
    let none = invalid(&format!(
        "{CLUSTERS}[[app_set]]\nname = \"apps\"\nrepo = \"r\"\nclusters = {{ env = \"staging\" }}\n"
    ));
    assert!(
        none.contains("app_set[0].clusters: selects no configured cluster"),
        "{none}"
    );
}

#[test]
fn a_wrong_template_or_name_names_the_set_the_folder_and_the_cluster() {
    let c = parse(&format!(
        "{CLUSTERS}[[app_set]]\nname = \"addons\"\nrepo = \"r\"\nfolders = [\"addons/*\"]\nclusters = \"*\"\nnamespace = \"{{label.region}}\"\n"
    ))
    .unwrap();
    let e = generate(&c.app_sets[0], &folders(&["addons/dns"]), &[], &c.cluster)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "app set addons, folder addons/dns, cluster lab: namespace: {label.region}: cluster lab has no label \"region\""
    );
    let upper = generate(
        &c.app_sets[0],
        &folders(&["addons/Big_Name"]),
        &[],
        &c.cluster,
    )
    .unwrap_err()
    .to_string();
    assert!(upper.contains("folder addons/Big_Name, cluster east: the app's name \"addons-Big_Name-east\" is not a DNS label"), "{upper}");
    let unknown = invalid(&format!("{CLUSTERS}{ADDONS}namespace_x = \"{{nope}}\"\n"));
    assert!(
        unknown.contains("app_set[0]: app set addons, folder example"),
        "{unknown}"
    );
    let placeholder = invalid(
        "[[app_set]]\nname = \"a\"\nrepo = \"r\"\nfolders = \"x/*\"\nnamespace = \"{nope}\"\n",
    );
    assert!(
        placeholder.contains("unknown placeholder {nope}"),
        "{placeholder}"
    );
    let no_folders = invalid("[[app_set]]\nname = \"a\"\nrepo = \"r\"\nnamespace = \"{folder}\"\n");
    assert!(
        no_folders.contains("{folder} needs folders: the set has none"),
        "{no_folders}"
    );
}

#[test]
fn the_sets_own_keys_are_checked_with_their_key() {
    let bad = invalid(
        "[[app_set]]\nname = \"Bad\"\nrepo = \"r\"\nfolders = [\"../up/*\", \"a/[\"]\n[[app_set]]\nname = \"dup\"\nrepo = \"r\"\n[[app_set]]\nname = \"dup\"\nrepo = \"r\"\n",
    );
    assert!(
        bad.contains("app_set[0].name: \"Bad\" is not a DNS label"),
        "{bad}"
    );
    assert!(bad.contains("app_set[0].folders: \"../up/*\""), "{bad}");
    assert!(
        bad.contains("app_set[2].name: duplicate set name \"dup\""),
        "{bad}"
    );
    let cluster = parse("[[app_set]]\nname = \"a\"\nrepo = \"r\"\ncluster = \"x\"\n").unwrap_err();
    assert!(
        cluster
            .to_string()
            .contains("cluster: a set's apps take theirs from the set"),
        "{cluster}"
    );
    let selector = parse("[[app_set]]\nname = \"a\"\nrepo = \"r\"\nclusters = 3\n").unwrap_err();
    assert!(
        selector
            .to_string()
            .contains("clusters: must be \"*\" or a table of labels"),
        "{selector}"
    );
    let unknown_app_key = invalid("[[app_set]]\nname = \"a\"\nrepo = \"r\"\nprune = \"yes\"\n");
    assert!(
        unknown_app_key.contains("app_set[0]: app set a, cluster default:"),
        "{unknown_app_key}"
    );
}

fn found(names: &[&str]) -> Vec<FoundRef> {
    (names.iter().enumerate())
        .map(|(i, name)| FoundRef {
            name: name.to_string(),
            sha: format!("{i:x}").repeat(40)[..40].to_string(),
            since: jiff::Timestamp::UNIX_EPOCH,
        })
        .collect()
}

const PREVIEWS: &str = "[[app_set]]\nname = \"previews\"\nrepo = \"https://git.example.com/shop.git\"\nrefs = [\"refs/pull/*/head\"]\napp_name = \"pr-{number}\"\nnamespace = \"pr-{number}\"\ncreate_namespace = true\nprune = true\npath = \"deploy\"\nmax_apps = 50\nttl = \"14d\"\nhelm = { set = { sha = \"{short_sha}\", ref = \"{ref}\" } }\n[app_set.decrypt]\nprovider = \"sops\"\nage_key_files = [\"/etc/berth/age.key\"]\n";

#[test]
fn refs_make_one_preview_per_ref_following_it_untrusted() {
    let c = config(PREVIEWS);
    let set = &c.app_sets[0];
    assert_eq!(set.ttl, Some(std::time::Duration::from_secs(14 * 86_400)));
    let refs = found(&["refs/pull/1/head", "refs/pull/22/head"]);
    let apps = generate(set, &[], &refs, &c.cluster).unwrap();
    let made: Vec<(&str, &str, Option<&str>)> = (apps.iter())
        .map(|a| {
            (
                a.name.as_str(),
                a.namespace.as_str(),
                a.follow_ref.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        made,
        [
            ("pr-1", "pr-1", Some("refs/pull/1/head")),
            ("pr-22", "pr-22", Some("refs/pull/22/head"))
        ]
    );
    let first = &apps[0];
    assert_eq!(first.preview.as_deref(), Some("refs/pull/1/head"));
    assert!(
        first.allow_rewind,
        "a pull request's head is rewritten as a matter of course"
    );
    assert!(
        first.decrypt.is_none(),
        "no keys unless the set allows them"
    );
    assert!(
        first.no_remote_charts,
        "no chart downloaded unless the set allows it"
    );
    assert_eq!(first.helm.set["sha"], "0000000");
    assert_eq!(
        first.git_ref(),
        crate::config::GitRef::Ref("refs/pull/1/head")
    );
    // The sample the set's repository is listed with follows no ref of its own.
    let sample = set.sample(&c.cluster).unwrap().unwrap();
    assert!(sample.follow_ref.is_none() && sample.preview.is_none());

    let allowed = config(&PREVIEWS.replace(
        "max_apps = 50",
        "max_apps = 50\nallow_decrypt = true\nallow_rewind = false",
    ));
    let app = &generate(&allowed.app_sets[0], &[], &refs, &allowed.cluster).unwrap()[0];
    assert!(app.decrypt.is_some() && !app.allow_rewind);
}

#[test]
fn refs_past_max_apps_make_none_and_name_the_bound() {
    let c = config(PREVIEWS);
    let names: Vec<String> = (1..=200).map(|n| format!("refs/pull/{n}/head")).collect();
    let refs = found(&names.iter().map(String::as_str).collect::<Vec<_>>());
    let e = c.app_sets[0]
        .generate(&[], &refs, &c.cluster)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "app set previews: its 200 refs × 1 cluster make 200 apps, more than its max_apps (50); none is made (raise max_apps on the set, or split it)"
    );
}

#[test]
fn a_list_and_refs_and_clusters_combine_as_a_matrix() {
    let c = config(&format!(
        "{CLUSTERS}[[app_set]]\nname = \"shop\"\nrepo = \"r\"\nrefs = \"refs/heads/preview/*\"\nclusters = {{ env = \"prod\" }}\nlist = [{{ region = \"eu\", replicas = 3 }}, {{ region = \"us\", replicas = 5 }}]\nnamespace = \"shop-{{item.region}}\"\nhelm = {{ set = {{ replicas = \"{{item.replicas}}\", branch = \"{{branch}}\" }} }}\n"
    ));
    let refs = found(&["refs/heads/preview/Big_Feature"]);
    let apps = generate(&c.app_sets[0], &[], &refs, &c.cluster).unwrap();
    assert_eq!(apps[0].helm.set["branch"], "preview/Big_Feature");
    let follows = (apps[0].branch.as_deref(), apps[0].follow_ref.as_deref());
    assert_eq!(
        follows,
        (Some("preview/Big_Feature"), None),
        "a branch's preview follows the branch"
    );
    let made: Vec<(&str, &str, &str)> = (apps.iter())
        .map(|a| {
            (
                a.name.as_str(),
                a.namespace.as_str(),
                a.helm.set["replicas"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        made,
        [
            ("shop-preview-big-feature-0-east", "shop-eu", "3"),
            ("shop-preview-big-feature-0-west", "shop-eu", "3"),
            ("shop-preview-big-feature-1-east", "shop-us", "5"),
            ("shop-preview-big-feature-1-west", "shop-us", "5"),
        ]
    );
}

#[test]
fn a_list_alone_makes_one_app_per_item() {
    let c = config("[[app_set]]\nname = \"regions\"\nrepo = \"r\"\nlist = [{ region = \"eu\" }, { region = \"us\" }]\napp_name = \"shop-{item.region}\"\nnamespace = \"shop-{item.region}\"\npath = \"deploy\"\n");
    let apps = generate(&c.app_sets[0], &[], &[], &c.cluster).unwrap();
    let names: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["shop-eu", "shop-us"]);
    assert!(apps
        .iter()
        .all(|a| a.preview.is_none() && a.follow_ref.is_none()));
    let missing = invalid("[[app_set]]\nname = \"regions\"\nrepo = \"r\"\nlist = [{ region = \"eu\" }]\nnamespace = \"{item.zone}\"\n");
    assert!(
        missing.contains("{item.zone}: a list item has no key \"zone\""),
        "{missing}"
    );
}

#[test]
fn generators_are_checked() {
    for (text, said) in [
        (
            "refs = \"heads/*\"",
            "app_set[0].refs: \"heads/*\" is not a full ref name's glob",
        ),
        ("ttl = \"2d\"", "app_set[0].ttl: only a ref's apps expire"),
        (
            "refs = \"refs/pull/*/head\"\nref = \"refs/x\"",
            "app_set[0].ref: each app of the set's refs follows its own ref",
        ),
        (
            "refs = \"refs/pull/*/head\"\nfolders = \"a/*\"\nclusters = \"*\"\nlist = [{ a = 1 }]",
            "a set combines at most three of folders, clusters, refs and list",
        ),
        (
            "list = [{ \"a-b\" = 1 }]",
            "list[0].a-b: keys are letters, digits and _",
        ),
        (
            "namespace = \"{number}\"",
            "{number} needs refs: the set has none",
        ),
    ] {
        let text = format!("[[app_set]]\nname = \"s\"\nrepo = \"r\"\n{text}\n");
        let e = match parse(&text) {
            Ok(c) => c.validate().unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(said), "{text}: {e}");
    }
}
