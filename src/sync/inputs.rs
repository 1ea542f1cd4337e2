//! What each app's last good sync read — the repository paths its render reached and
//! their digest at that commit — so that a commit changing none of them costs the app no
//! request and no write, in `berth run` (kept in memory) and across one-shot `berth sync`
//! runs (kept in `state_dir/inputs/<app>.json`).
//!
//! The file is berth's own, but a skip is all it can buy: it is read only when one host
//! syncs the apps (no leader election, no sharding: another host's syncs would not be in
//! it), only when it parses, fits in [`MAX_FILE`] and names this berth, this cluster and
//! this configuration of the app; otherwise the sync compares with the cluster as usual.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::config::{AgentConfig, AppConfig, Clusters};

/// Largest inputs file read (a kustomization reaching thousands of folders fits).
const MAX_FILE: u64 = 1 << 20;

/// What an app's last successful sync read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Inputs {
    /// The digest of what the render depends on besides the repository: berth's version,
    /// the agent's and cluster's settings and the app's configuration ([`Remembered::config`]).
    pub config: String,
    /// Repository paths the render reached (`""` is the root).
    pub paths: Vec<String>,
    /// Their digest at [`Inputs::commit`].
    pub digest: String,
    /// The commit last synced or found untouched.
    pub commit: String,
    /// The objects the app managed after that sync (a skipped commit changes none).
    pub objects: usize,
}

/// Every app's [`Inputs`], in memory and (for one host) in `state_dir/inputs`.
pub(super) struct Remembered {
    memory: Mutex<HashMap<String, Inputs>>,
    /// `state_dir/inputs`, or `None` when several hosts sync the apps.
    dir: Option<PathBuf>,
    /// Digest of berth's version and the agent's and cluster's settings.
    scope: String,
}

impl Remembered {
    pub fn new(agent: &AgentConfig, clusters: &Clusters) -> Self {
        let single_host = !agent.leader_election && !agent.sharding;
        Remembered {
            memory: Mutex::new(HashMap::new()),
            dir: single_host.then(|| agent.state_dir.join("inputs")),
            scope: crate::digest::sha256_hex(
                format!("{} {agent:?} {clusters:?}", env!("CARGO_PKG_VERSION")).as_bytes(),
            ),
        }
    }

    /// The digest that [`Inputs::config`] must hold for `app`.
    pub fn config(&self, app: &AppConfig) -> String {
        crate::digest::sha256_hex(format!("{} {app:?}", self.scope).as_bytes())
    }

    /// The app's inputs as its last good sync left them (in this process, else on disk),
    /// if they belong to its current configuration.
    pub fn get(&self, app: &AppConfig) -> Option<Inputs> {
        let kept = self.memory.lock().ok()?.get(&app.name).cloned();
        let last = kept.or_else(|| self.read(&app.name))?;
        (last.config == self.config(app)).then_some(last)
    }

    /// Keeps the inputs of a good sync.
    pub fn keep(&self, app: &str, inputs: Inputs) {
        if let Some(path) = self.path(app) {
            let written = serde_json::to_vec(&inputs)
                .map_err(std::io::Error::other)
                .and_then(|bytes| {
                    crate::state::private_dir(path.parent().unwrap_or(Path::new(".")))?;
                    crate::state::write_private(&path, &bytes)
                });
            if let Err(e) = written {
                // Only a later skip is lost: that sync compares with the cluster.
                tracing::debug!(app, error = %e, "cannot keep the sync's inputs");
            }
        }
        if let Ok(mut all) = self.memory.lock() {
            all.insert(app.to_string(), inputs);
        }
    }

    /// Forgets them: the next sync compares with the cluster.
    pub fn forget(&self, app: &str) {
        if let Some(path) = self.path(app) {
            let _ = std::fs::remove_file(path);
        }
        if let Ok(mut all) = self.memory.lock() {
            all.remove(app);
        }
    }

    fn path(&self, app: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{app}.json")))
    }

    fn read(&self, app: &str) -> Option<Inputs> {
        let path = self.path(app)?;
        let bytes =
            crate::manifest::read::read_capped(crate::state::open_state(&path), MAX_FILE).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str) -> AppConfig {
        crate::config::test_app(&format!("name = \"{name}\"\nrepo = \"/srv/git/r\""))
    }

    fn remembered(dir: &Path, sharding: bool) -> Remembered {
        let agent = AgentConfig {
            state_dir: dir.to_path_buf(),
            sharding,
            ..AgentConfig::default()
        };
        Remembered::new(&agent, &Clusters::default())
    }

    fn inputs(r: &Remembered, app: &AppConfig) -> Inputs {
        Inputs {
            config: r.config(app),
            paths: vec!["app".into()],
            digest: "d1".into(),
            commit: "c1".into(),
            objects: 3,
        }
    }

    #[test]
    fn a_later_process_finds_what_the_last_good_sync_read() {
        let dir = tempfile::tempdir().unwrap();
        let guestbook = app("guestbook");
        let first = remembered(dir.path(), false);
        first.keep("guestbook", inputs(&first, &guestbook));
        let later = remembered(dir.path(), false);
        assert_eq!(later.get(&guestbook), Some(inputs(&later, &guestbook)));
        later.forget("guestbook");
        assert_eq!(remembered(dir.path(), false).get(&guestbook), None);
    }

    #[test]
    fn inputs_of_another_configuration_are_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let r = remembered(dir.path(), false);
        let guestbook = app("guestbook");
        r.keep("guestbook", inputs(&r, &guestbook));
        let moved = AppConfig {
            path: vec!["elsewhere".into()],
            ..guestbook
        };
        assert_eq!(remembered(dir.path(), false).get(&moved), None);
    }

    #[test]
    fn with_several_hosts_nothing_is_read_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let guestbook = app("guestbook");
        let single = remembered(dir.path(), false);
        single.keep("guestbook", inputs(&single, &guestbook));
        assert_eq!(remembered(dir.path(), true).get(&guestbook), None);
    }

    #[test]
    fn a_damaged_or_oversized_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let guestbook = app("guestbook");
        std::fs::create_dir_all(dir.path().join("inputs")).unwrap();
        let file = dir.path().join("inputs/guestbook.json");
        std::fs::write(&file, b"{\"config\": ").unwrap();
        assert_eq!(remembered(dir.path(), false).get(&guestbook), None);
        std::fs::write(&file, vec![b' '; MAX_FILE as usize + 1]).unwrap();
        assert_eq!(remembered(dir.path(), false).get(&guestbook), None);
    }
}
