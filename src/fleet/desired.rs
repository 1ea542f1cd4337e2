//! Which apps a host runs, computed, not guessed: [`desired`] is a pure function of the
//! running configuration (its sets' apps made from their listings) and the host's
//! [`Role`] — alone, leader, standby, or one shard among the live hosts — and [`diff`]
//! compares it with the apps running to give what to start, stop and restart. The agent
//! runs this one reconcile on every trigger (a start, a reload, a listing, a change of the
//! Lease's holder or of the live hosts), each of which changes one of its inputs.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{AppConfig, Config};
use crate::service::shards;

/// What decides which apps a host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role<'a> {
    /// No leader election, no sharding: every app.
    Alone,
    /// It holds the leader Lease: every app.
    Leader,
    /// Another host holds the leader Lease (or nobody yet): none.
    Standby,
    /// Sharding: the apps the assignment over the live `members` gives `identity` (none
    /// while the members are not known).
    Shard {
        /// This host.
        identity: &'a str,
        /// The live hosts.
        members: &'a [String],
    },
}

/// The apps of `config` a host in `role` runs.
pub fn desired<'c>(config: &'c Config, role: Role<'_>) -> Vec<&'c Arc<AppConfig>> {
    match role {
        Role::Alone | Role::Leader => config.apps.iter().collect(),
        Role::Standby => Vec::new(),
        Role::Shard { identity, members } => {
            let names: Vec<String> = config.apps.iter().map(|a| a.name.clone()).collect();
            let owners = shards::assign(&names, members);
            (config.apps.iter())
                .filter(|a| owners.get(&a.name).is_some_and(|m| *m == identity))
                .collect()
        }
    }
}

/// What to do to the running apps.
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    /// Apps to start.
    pub start: Vec<Arc<AppConfig>>,
    /// Apps to stop.
    pub stop: Vec<String>,
    /// Apps whose configuration changed: stopped, then started with the new one.
    pub restart: Vec<Arc<AppConfig>>,
}

impl Changes {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.start.is_empty() && self.stop.is_empty() && self.restart.is_empty()
    }
}

/// What turns the `running` apps (each name with the configuration it runs) into
/// `desired`.
pub fn diff(running: &BTreeMap<String, &AppConfig>, desired: &[&Arc<AppConfig>]) -> Changes {
    let wanted: BTreeMap<&str, &Arc<AppConfig>> =
        desired.iter().map(|a| (a.name.as_str(), *a)).collect();
    let mut changes = Changes::default();
    for (name, app) in running {
        match wanted.get(name.as_str()) {
            None => changes.stop.push(name.clone()),
            Some(new) if ***new != **app => changes.restart.push(Arc::clone(new)),
            Some(_) => {}
        }
    }
    changes.start = (desired.iter())
        .filter(|a| !running.contains_key(&a.name))
        .map(|a| Arc::clone(a))
        .collect();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(apps: &[&str]) -> Config {
        let mut text = String::new();
        for app in apps {
            text += &format!("[[app]]\nname = \"{app}\"\nrepo = \"/srv/git/{app}\"\n");
        }
        let config = crate::config::parse(&text).unwrap();
        config.validate().unwrap();
        config
    }

    fn names(apps: &[&Arc<AppConfig>]) -> Vec<String> {
        apps.iter().map(|a| a.name.clone()).collect()
    }

    fn running(apps: &[&Arc<AppConfig>]) -> BTreeMap<String, AppConfig> {
        apps.iter()
            .map(|a| (a.name.clone(), (***a).clone()))
            .collect()
    }

    fn refs(running: &BTreeMap<String, AppConfig>) -> BTreeMap<String, &AppConfig> {
        running.iter().map(|(n, a)| (n.clone(), a)).collect()
    }

    #[test]
    fn alone_or_leading_a_host_runs_every_app_and_a_standby_none() {
        let c = config(&["a", "b", "c"]);
        assert_eq!(names(&desired(&c, Role::Alone)), ["a", "b", "c"]);
        assert_eq!(names(&desired(&c, Role::Leader)), ["a", "b", "c"]);
        assert!(desired(&c, Role::Standby).is_empty());
        // The leader turned standby: everything stops.
        let was = running(&desired(&c, Role::Leader));
        let changes = diff(&refs(&was), &desired(&c, Role::Standby));
        assert_eq!(changes.stop, ["a", "b", "c"]);
        assert!(changes.start.is_empty() && changes.restart.is_empty());
    }

    #[test]
    fn shards_split_the_apps_and_a_host_without_members_runs_none() {
        let apps: Vec<String> = (0..30).map(|i| format!("app{i:02}")).collect();
        let c = config(&apps.iter().map(String::as_str).collect::<Vec<_>>());
        let members: Vec<String> = ["h1", "h2", "h3"].map(String::from).into();
        let mut all: Vec<String> = Vec::new();
        for identity in &members {
            let role = Role::Shard {
                identity,
                members: &members,
            };
            let mine = names(&desired(&c, role));
            assert!(
                mine.len() <= shards::capacity(30, 3),
                "{identity}: {mine:?}"
            );
            all.extend(mine);
        }
        all.sort();
        assert_eq!(all, apps, "every app on exactly one host");
        let nobody = Role::Shard {
            identity: "h1",
            members: &[],
        };
        assert!(desired(&c, nobody).is_empty());
    }

    #[test]
    fn a_renamed_app_stops_under_its_old_name_and_starts_under_the_new() {
        let before = config(&["shop", "logs"]);
        let after = config(&["shop", "logging"]);
        let was = running(&desired(&before, Role::Alone));
        let changes = diff(&refs(&was), &desired(&after, Role::Alone));
        assert_eq!(changes.stop, ["logs"]);
        assert_eq!(
            names(&changes.start.iter().collect::<Vec<_>>()),
            ["logging"]
        );
        assert!(changes.restart.is_empty());
        // Changed in place: restarted; unchanged: left running.
        let mut changed = after.clone();
        let shop = Arc::make_mut(&mut changed.apps[0]);
        shop.prune = !shop.prune;
        let now = running(&desired(&after, Role::Alone));
        let changes = diff(&refs(&now), &desired(&changed, Role::Alone));
        assert_eq!(names(&changes.restart.iter().collect::<Vec<_>>()), ["shop"]);
        assert!(changes.start.is_empty() && changes.stop.is_empty());
        let same = diff(&refs(&now), &desired(&after, Role::Alone));
        assert!(same.is_empty());
    }
}
