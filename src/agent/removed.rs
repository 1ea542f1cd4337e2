//! Apps removed from the configuration. The agent keeps a copy of the configuration it
//! runs (`state_dir/apps.toml`) and, on start and after each reload, finds the apps the
//! copy has and the configuration no longer does — removed while berth ran, or while it
//! was down: written apps, and the apps of a set no longer configured (a set's listing
//! removes the apps it no longer makes itself, `fleet::execute`). An app removed with `prune = true` has its objects deleted
//! ([`Syncer::remove`](crate::sync::Syncer::remove)), the apps that depended on it before
//! it (what depends on the operator goes before the operator); one with `prune = false`
//! is left as it is, said once. With sharding, the host the assignment gives a removed app
//! to prunes it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::app_loop::log_progress;
use super::apps::Agent;
use crate::config::{self, AppConfig, Config};
use crate::fleet;
use crate::service::shards;
use crate::shutdown::Signal;

/// The copy is read no further than this (a configuration of 1000 apps is ~300 KiB).
const MAX_COPY: u64 = 4 << 20;

fn copy_path(state_dir: &Path) -> PathBuf {
    state_dir.join("apps.toml")
}

/// Reads at most [`MAX_COPY`] bytes of `path` as text.
fn read_bounded(path: &Path) -> Option<String> {
    let mut text = String::new();
    crate::state::open_state(path)
        .ok()?
        .take(MAX_COPY)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The apps of the last configuration the agent ran — its written apps, and its sets'
/// apps as they listed them last; none when there is no copy, or it is not a valid
/// configuration (said: nothing is pruned on its word).
fn last_apps(state_dir: &Path) -> Vec<Arc<AppConfig>> {
    let path = copy_path(state_dir);
    let Some(text) = read_bounded(&path) else {
        return Vec::new();
    };
    match config::parse(&text).and_then(|c| c.validate().map(|()| c)) {
        Ok(mut c) => {
            c.agent.state_dir = state_dir.to_path_buf();
            fleet::expand_remembered(&c).apps
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the copy of the last configuration is not valid: no removed app is pruned on its word");
            Vec::new()
        }
    }
}

/// Forgets the listings of the sets no longer configured, and keeps a copy of the
/// configuration file when it still holds the apps the agent runs (it may have changed
/// since it was loaded: the next reload copies it then).
fn remember(state_dir: &Path, config_path: &Path, running: &Config) {
    fleet::forget_others(running);
    let Some(text) = read_bounded(config_path) else {
        return;
    };
    let written = running.apps.iter().filter(|a| a.set.is_none());
    if config::parse(&text).is_ok_and(|c| c.apps.iter().eq(written)) {
        if let Err(e) = crate::state::write_private(&copy_path(state_dir), text.as_bytes()) {
            tracing::warn!(error = %e, "cannot keep a copy of the configuration: an app removed while berth is down is not found");
        }
    }
}

/// Whether `app` is written, or its set is no longer configured: the apps a configured
/// set no longer makes are its listing's to remove.
fn set_gone(config: &Config, app: &AppConfig) -> bool {
    let set = app.set.as_deref();
    set.is_none_or(|set| !config.app_sets.iter().any(|s| s.name == set))
}

impl Agent {
    /// Prunes the apps removed from the configuration (see the module), then keeps a copy
    /// of this one. With sharding and the live hosts not known yet, it waits for them.
    pub(super) async fn prune_removed(&mut self, shutdown: &Signal) {
        let state_dir = self.config().agent.state_dir.clone();
        let removed: Vec<Arc<AppConfig>> = last_apps(&state_dir)
            .into_iter()
            .filter(|a| !self.config().has_app(&a.name) && set_gone(&self.config(), a))
            .collect();
        let owners = match &self.shared.shard {
            Some(_) if !removed.is_empty() && self.members.is_empty() => return,
            Some(shard) => {
                let names: Vec<String> = removed.iter().map(|a| a.name.clone()).collect();
                let owners = shards::assign(&names, &self.members);
                Some((
                    shard.identity.clone(),
                    owners
                        .into_iter()
                        .map(|(a, m)| (a, m.to_string()))
                        .collect::<std::collections::BTreeMap<_, _>>(),
                ))
            }
            None => None,
        };
        let syncer = self.shared.syncer();
        // Dependents first: the reverse of the order they sync in.
        for app in config::order::in_order(&removed).into_iter().rev() {
            if let Some((me, owners)) = &owners {
                if owners.get(&app.name) != Some(me) {
                    continue;
                }
            }
            if !app.prune {
                tracing::info!(app = %app.name, set = app.set.as_deref(), "removed from the configuration, or no longer generated by its set; prune is off, so its objects stay as they are");
                continue;
            }
            let removed = match &app.set {
                Some(set) => format!("no longer generated by app set {set}"),
                None => "removed from the configuration".to_string(),
            };
            tracing::warn!(app = %app.name, "{removed} with prune = true: deleting its objects");
            let log = |progress: crate::sync::Progress<'_>| log_progress(&app.name, progress);
            let record = syncer.remove(app, shutdown, &log).await;
            self.shared.metrics.observe(&record);
        }
        remember(&state_dir, &self.config_path, &self.config());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_that_is_not_a_valid_configuration_names_no_app() {
        let state = tempfile::tempdir().unwrap();
        let copy = copy_path(state.path());
        std::fs::write(
            &copy,
            "[[app]]\nname = \"shop\"\nrepo = \"/srv/git/shop\"\nprune = true\n",
        )
        .unwrap();
        assert_eq!(last_apps(state.path())[0].name, "shop");
        // Edited by hand into something berth would not load: nothing is pruned on it.
        std::fs::write(&copy, "[[app]]\nname = \"Not A Label\"\nrepo = \"/r\"\n").unwrap();
        assert!(last_apps(state.path()).is_empty());
        std::fs::write(&copy, [0xff, 0xfe, 0x00]).unwrap();
        assert!(last_apps(state.path()).is_empty());
    }
}
