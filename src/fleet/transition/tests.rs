use super::*;
use crate::fleet::{expand, Problem};

const CONFIG: &str = r#"
[agent]
state_dir = "/var/lib/berth"

[[cluster]]
name = "east"
labels = { env = "prod" }

[[cluster]]
name = "west"
labels = { env = "prod" }

[[app_set]]
name = "addons"
repo = "/srv/git/fleet"
folders = ["addons/*"]
clusters = { env = "prod" }
namespace = "{folder}"
prune = true
"#;

fn config() -> Config {
    let c = crate::config::parse(CONFIG).unwrap();
    c.validate().unwrap();
    c
}

/// A listing of `folders`, each `(path, tree)` (the tree's id one character repeated).
fn listing(folders: &[(&str, char)]) -> Listing {
    Listing {
        set: "addons".into(),
        listed: Listed {
            commit: "0".repeat(40),
            folders: (folders.iter())
                .map(|(path, tree)| Folder {
                    path: path.to_string(),
                    tree: tree.to_string().repeat(40),
                })
                .collect(),
            refs: Vec::new(),
        },
        problem: None,
    }
}

/// The transition from `before` to `now`, with the apps `before` made and the
/// configuration `now` makes.
fn between(before: &Listing, now: &Listing) -> (Transition, Config) {
    let c = config();
    let had = expand(&c, &mut [before.clone()], &|_| Vec::new()).apps;
    let next = expand(&c, &mut [now.clone()], &|_| Vec::new());
    let transition = Transition::between(&c, &c.app_sets[0], &before.listed, &had, now, &next);
    (transition, next)
}

fn names<'a>(apps: impl IntoIterator<Item = &'a Arc<AppConfig>>) -> Vec<&'a str> {
    apps.into_iter().map(|a| a.name.as_str()).collect()
}

fn pairs(t: &Transition) -> Vec<(&str, &str)> {
    (t.renamed.iter())
        .map(|(from, to)| (from.name.as_str(), to.name.as_str()))
        .collect()
}

#[test]
fn a_folder_renamed_with_its_files_hands_its_apps_over_cluster_by_cluster() {
    let before = listing(&[("addons/dns", 'a'), ("addons/logs", 'b')]);
    let now = listing(&[
        ("addons/dns", 'a'),
        ("addons/logging", 'b'),
        ("addons/other", 'c'),
    ]);
    let (t, _) = between(&before, &now);
    assert_eq!(
        pairs(&t),
        [
            ("addons-logs-east", "addons-logging-east"),
            ("addons-logs-west", "addons-logging-west")
        ]
    );
    assert!(t.removed.is_empty(), "handed over, not removed: {t:?}");
    assert_eq!(
        t.added,
        [
            "addons-logging-east",
            "addons-logging-west",
            "addons-other-east",
            "addons-other-west"
        ]
    );
    assert_eq!(
        t.leaving().collect::<Vec<_>>(),
        ["addons-logs-east", "addons-logs-west"]
    );
    // Changed as it moved: a different tree, no hand-over; the old folder's apps removed.
    let changed = listing(&[("addons/dns", 'a'), ("addons/logging", 'd')]);
    let (t, _) = between(&before, &changed);
    assert!(t.renamed.is_empty());
    assert_eq!(names(&t.removed), ["addons-logs-east", "addons-logs-west"]);
}

#[test]
fn a_listing_with_a_problem_changes_nothing() {
    let before = listing(&[("addons/dns", 'a'), ("addons/logs", 'b')]);
    let mut now = listing(&[]);
    now.problem = Some(Problem::Unlisted("the repository cannot be fetched".into()));
    let (t, _) = between(&before, &now);
    assert!(t.is_empty(), "{t:?}");
    let (t, _) = between(&before, &before);
    assert!(t.is_empty(), "listed again unchanged: {t:?}");
}

#[test]
fn an_app_refused_is_neither_removed_nor_handed_over() {
    let c = config();
    let before = listing(&[("addons/dns", 'a')]);
    let had = expand(&c, &mut [before.clone()], &|_| Vec::new()).apps;
    let mut next = c.clone();
    next.refused.push(crate::config::Refused {
        app: "addons-dns-east".into(),
        set: "addons".into(),
        folder: Some("addons/dns".into()),
        git_ref: None,
        cluster: "east".into(),
        why: "a written app has its name".into(),
    });
    let now = listing(&[("addons/dns", 'a')]);
    let t = Transition::between(&c, &c.app_sets[0], &before.listed, &had, &now, &next);
    assert_eq!(names(&t.removed), ["addons-dns-west"]);
}

#[test]
fn each_part_is_acted_on_by_one_host_and_a_hand_over_by_the_new_apps_host() {
    let before = listing(&[
        ("addons/dns", 'a'),
        ("addons/logs", 'b'),
        ("addons/gone", 'c'),
        ("addons/old", 'e'),
    ]);
    let now = listing(&[("addons/dns", 'a'), ("addons/logging", 'b')]);
    let (t, next) = between(&before, &now);
    assert_eq!(t.renamed.len(), 2);
    assert_eq!(t.removed.len(), 4);
    let members: Vec<String> = ["host-a", "host-b", "host-c"].map(String::from).into();
    let running: Vec<String> = names(&next.apps).into_iter().map(String::from).collect();
    let runs = shards::assign(&running, &members);
    let shares: Vec<Transition> = (members.iter())
        .map(|m| t.share(Some((m, &members)), &next))
        .collect();
    for (from, to) in &t.renamed {
        let by: Vec<&String> = (members.iter().zip(&shares))
            .filter(|(_, s)| s.renamed.iter().any(|(f, _)| f.name == from.name))
            .map(|(m, _)| m)
            .collect();
        assert_eq!(by, [runs[&to.name]], "{} handed over by", from.name);
    }
    for app in &t.removed {
        let by = shares.iter().filter(|s| s.removed.contains(app)).count();
        assert_eq!(by, 1, "{} removed by {by} hosts", app.name);
    }
    assert_eq!(t.share(None, &next), t, "alone: all of it");
}
