//! What changed between two listings of a set, as a value: the apps it makes now and did
//! not, those whose folder was renamed (their objects handed over to the new folder's
//! apps), and those it no longer makes (removed). Pure: every host computes the same
//! transition from the same listings, and [`Transition::share`] gives each the part it
//! acts on; [`super::execute`] acts on it.

use std::sync::Arc;

use crate::config::{AppConfig, AppSetConfig, Config};
use crate::service::shards;

use super::{Folder, Listed, Listing};

/// What a set's new listing changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transition {
    /// The set.
    pub set: String,
    /// The apps it makes now and did not before.
    pub added: Vec<String>,
    /// `(from, to)`: an app whose folder was renamed (its files unchanged), and the new
    /// folder's app on the same cluster, which takes its objects over before it runs.
    pub renamed: Vec<(Arc<AppConfig>, Arc<AppConfig>)>,
    /// The apps it made and makes no more (not renamed): their objects pruned with
    /// `prune = true`, dependents first.
    pub removed: Vec<Arc<AppConfig>>,
}

impl Transition {
    /// What `now` changes since the set listed `before`, when it made the apps `had`;
    /// `next` is the configuration that runs after it (the set's apps made from `now`). A
    /// listing with a problem changes nothing (its apps stay as they were), and an app
    /// refused in `next` (a name two apps have) is neither removed nor handed over.
    pub fn between(
        config: &Config,
        set: &AppSetConfig,
        before: &Listed,
        had: &[Arc<AppConfig>],
        now: &Listing,
        next: &Config,
    ) -> Transition {
        let mut transition = Transition {
            set: set.name.clone(),
            ..Transition::default()
        };
        if now.problem.is_some() {
            return transition;
        }
        let was = |name: &str| had.iter().any(|a| a.name == name);
        let leaves = |name: &str| !next.has_app(name);
        transition.renamed = renamed(config, set, before, &now.listed)
            .into_iter()
            .filter(|(from, _)| was(&from.name) && leaves(&from.name))
            .filter(|(_, to)| !was(&to.name) && next.app(&to.name).is_some())
            .collect();
        let handed = |name: &str| transition.renamed.iter().any(|(from, _)| from.name == name);
        transition.removed = (had.iter())
            .filter(|a| leaves(&a.name) && !handed(&a.name))
            .cloned()
            .collect();
        transition.added = (next.apps.iter())
            .filter(|a| a.set.as_deref() == Some(&set.name) && !was(&a.name))
            .map(|a| a.name.clone())
            .collect();
        transition
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.renamed.is_empty() && self.removed.is_empty()
    }

    /// The part `host` acts on, among the live `members` (`None`: a host alone, or
    /// `berth sync`, acts on all of it): a hand-over by the host that runs the new folder's
    /// app (the assignment of `next`'s apps) — before it starts it, so no other host's
    /// sync races it — and a removal by the host the assignment of the removed apps gives
    /// it. Every host computes the same shares.
    pub fn share(&self, host: Option<(&str, &[String])>, next: &Config) -> Transition {
        let Some((me, members)) = host else {
            return self.clone();
        };
        let names = |apps: &mut dyn Iterator<Item = &Arc<AppConfig>>| -> Vec<String> {
            apps.map(|a| a.name.clone()).collect()
        };
        let running = names(&mut next.apps.iter());
        let runs = shards::assign(&running, members);
        let gone = names(&mut self.removed.iter());
        let prunes = shards::assign(&gone, members);
        let mine = |owners: &std::collections::BTreeMap<String, &str>, app: &AppConfig| {
            owners.get(&app.name).is_some_and(|m| *m == me)
        };
        Transition {
            set: self.set.clone(),
            added: Vec::new(),
            renamed: (self.renamed.iter())
                .filter(|(_, to)| mine(&runs, to))
                .cloned()
                .collect(),
            removed: (self.removed.iter())
                .filter(|a| mine(&prunes, a))
                .cloned()
                .collect(),
        }
    }

    /// The apps that must not run while it is acted on: those renamed and removed.
    pub fn leaving(&self) -> impl Iterator<Item = &str> {
        let from = self.renamed.iter().map(|(from, _)| from.name.as_str());
        from.chain(self.removed.iter().map(|a| a.name.as_str()))
    }
}

/// The apps a rename hands over, `(from, to)`: for each folder `before` has and `now` has
/// not, whose tree a folder new in `now` has, its app on each cluster and the new folder's
/// app on the same cluster.
fn renamed(
    config: &Config,
    set: &AppSetConfig,
    before: &Listed,
    now: &Listed,
) -> Vec<(Arc<AppConfig>, Arc<AppConfig>)> {
    let zero = git2::Oid::ZERO_SHA1.to_string();
    let has = |listed: &Listed, path: &str| listed.folders.iter().any(|f| f.path == path);
    let mut gone: Vec<&Folder> = (before.folders.iter())
        .filter(|f| f.tree != zero && !has(now, &f.path))
        .collect();
    let mut pairs = Vec::new();
    for new in now.folders.iter().filter(|f| !has(before, &f.path)) {
        let Some(at) = gone.iter().position(|old| old.tree == new.tree) else {
            continue;
        };
        let old = gone.swap_remove(at);
        // A set of refs makes no app here (no ref given): its folders' apps are removed
        // and made again rather than handed over.
        let apps = |path: &str| {
            let made = set.generate(&[path.to_string()], &[], &config.cluster);
            made.ok()?
                .into_iter()
                .map(|app| app.ok().map(Arc::new))
                .collect::<Option<Vec<_>>>()
        };
        if let (Some(from), Some(to)) = (apps(&old.path), apps(&new.path)) {
            pairs.extend(from.into_iter().zip(to));
        }
    }
    pairs
}

#[cfg(test)]
mod tests;
