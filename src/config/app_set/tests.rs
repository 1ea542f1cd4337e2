use crate::config::{parse, Config};

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

fn folders(paths: &[&str]) -> Vec<String> {
    paths.iter().map(|p| p.to_string()).collect()
}

#[test]
fn one_app_per_folder_and_selected_cluster_with_the_templates_filled() {
    let c = config(&format!("{CLUSTERS}{ADDONS}"));
    let set = &c.app_sets[0];
    let apps = set
        .generate(&folders(&["addons/ingress", "addons/dns"]), &c.cluster)
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
    let apps = c.app_sets[0]
        .generate(&folders(&["services/shop"]), &c.cluster)
        .unwrap();
    let names: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["shop-prod-east", "shop-prod-west", "shop-test-lab"]);
    assert_eq!(apps[2].path, ["services/shop/base", "services/shop/test"]);
    assert_eq!(apps[0].namespace, "svc-{x}");
}

#[test]
fn a_set_without_clusters_goes_to_the_only_cluster_and_is_refused_with_several() {
    let one = config("[[app_set]]\nname = \"apps\"\nrepo = \"r\"\nfolders = [\"apps/*\"]\n");
    let apps = one.app_sets[0]
        .generate(&folders(&["apps/web"]), &one.cluster)
        .unwrap();
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
    let e = c.app_sets[0]
        .generate(&folders(&["addons/dns"]), &c.cluster)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "app set addons, folder addons/dns, cluster lab: namespace: {label.region}: cluster lab has no label \"region\""
    );
    let upper = c.app_sets[0]
        .generate(&folders(&["addons/Big_Name"]), &c.cluster)
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
