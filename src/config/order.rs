//! The apps' dependency graph (`depends_on`), pure: the cycle configuration validation
//! refuses, the order `berth sync` runs apps in, and who waits on whom.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::AppConfig;

/// The apps by name.
fn by_name(apps: &[Arc<AppConfig>]) -> BTreeMap<&str, &AppConfig> {
    apps.iter().map(|a| (a.name.as_str(), &**a)).collect()
}

/// A dependency cycle, as the path that closes it (`["crds", "operator", "crds"]`, from
/// the app the configuration lists first), or none. Names that are not apps and an app
/// naming itself are skipped (validation reports them on their own).
pub fn cycle(apps: &[Arc<AppConfig>]) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit<'a>(
        name: &'a str,
        apps: &BTreeMap<&'a str, &'a AppConfig>,
        marks: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match marks.get(name) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|n| *n == name).unwrap_or(0);
                return Some(path[from..].iter().map(|n| n.to_string()).collect());
            }
            None => {}
        }
        let app = apps.get(name)?;
        marks.insert(name, Mark::Open);
        path.push(name);
        for dep in app.depends_on.iter().filter(|d| **d != name) {
            if let Some(found) = visit(dep, apps, marks, path) {
                return Some(found);
            }
        }
        path.pop();
        marks.insert(name, Mark::Done);
        None
    }
    let listed = by_name(apps);
    let mut marks = BTreeMap::new();
    let mut cycle = apps
        .iter()
        .find_map(|a| visit(&a.name, &listed, &mut marks, &mut Vec::new()))?;
    let position = |name: &String| apps.iter().position(|a| &a.name == name);
    let first = (0..cycle.len()).min_by_key(|i| position(&cycle[*i]))?;
    cycle.rotate_left(first);
    cycle.push(cycle[0].clone());
    Some(cycle)
}

/// `names` and every app they depend on, directly or not (`berth sync --with-deps`).
pub fn with_dependencies(apps: &[Arc<AppConfig>], names: &[&str]) -> BTreeSet<String> {
    let apps = by_name(apps);
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = names.to_vec();
    while let Some(name) = todo.pop() {
        if seen.insert(name.to_string()) {
            if let Some(app) = apps.get(name) {
                todo.extend(app.depends_on.iter().map(String::as_str));
            }
        }
    }
    seen
}

/// The apps that depend on `name` directly: whom its sync wakes.
pub fn dependents<'a>(apps: &'a [Arc<AppConfig>], name: &str) -> Vec<&'a str> {
    apps.iter()
        .filter(|a| a.depends_on.iter().any(|d| d == name))
        .map(|a| a.name.as_str())
        .collect()
}

/// The apps in dependency order: each after every app it depends on, otherwise in the
/// configuration's order. The configuration is free of cycles (validated).
pub fn in_order(apps: &[Arc<AppConfig>]) -> Vec<&AppConfig> {
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut order = Vec::with_capacity(apps.len());
    let known: BTreeSet<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    while order.len() < apps.len() {
        let before = order.len();
        for app in apps {
            let ready = app
                .depends_on
                .iter()
                .all(|d| placed.contains(d.as_str()) || !known.contains(d.as_str()));
            if !placed.contains(app.name.as_str()) && ready {
                placed.insert(&app.name);
                order.push(&**app);
            }
        }
        if order.len() == before {
            // A cycle (refused by validation): the rest as written.
            order.extend((apps.iter().map(|a| &**a)).filter(|a| !placed.contains(a.name.as_str())));
            break;
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apps(edges: &[(&str, &[&str])]) -> Vec<Arc<AppConfig>> {
        edges
            .iter()
            .map(|(name, deps)| {
                let body = format!("name = {name:?}\nrepo = \"/r\"\ndepends_on = {deps:?}");
                Arc::new(crate::config::test_app(&body))
            })
            .collect()
    }

    #[test]
    fn a_cycle_is_named_from_where_it_closes() {
        let graph = apps(&[
            ("app", &["operator"]),
            ("crds", &["operator"]),
            ("operator", &["crds"]),
        ]);
        assert_eq!(cycle(&graph).unwrap(), ["crds", "operator", "crds"]);
        let own = apps(&[("solo", &["solo"])]);
        assert_eq!(
            cycle(&own),
            None,
            "an app naming itself is refused on its own"
        );
    }

    #[test]
    fn a_graph_without_cycles_has_none() {
        let graph = apps(&[
            ("app", &["operator", "crds"]),
            ("operator", &["crds"]),
            ("crds", &[]),
            ("other", &["missing"]),
        ]);
        assert_eq!(cycle(&graph), None);
    }

    #[test]
    fn apps_come_after_what_they_depend_on() {
        let graph = apps(&[
            ("app", &["operator"]),
            ("web", &[]),
            ("operator", &["crds"]),
            ("crds", &[]),
        ]);
        let order: Vec<&str> = in_order(&graph).iter().map(|a| a.name.as_str()).collect();
        assert_eq!(order, ["web", "crds", "operator", "app"]);
    }

    #[test]
    fn with_dependencies_follows_the_chain() {
        let graph = apps(&[
            ("app", &["operator"]),
            ("operator", &["crds"]),
            ("crds", &[]),
            ("web", &[]),
        ]);
        let all: Vec<String> = with_dependencies(&graph, &["app"]).into_iter().collect();
        assert_eq!(all, ["app", "crds", "operator"]);
        assert_eq!(dependents(&graph, "crds"), ["operator"]);
    }
}
