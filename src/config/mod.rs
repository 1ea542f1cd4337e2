//! The TOML configuration: [`Config`], [`parse`] (text in, no I/O), [`load`] (read a
//! file, parse, validate) and [`Config::validate`].
//!
//! Every error names the key path (`app[1].rollout.timeout`) and, once loaded from a file,
//! the file and line.
//!
//! The schema is split by section: `agent.rs` (`[agent]`, `[cluster]`), `app.rs`
//! (`[[app]]` and its tables), `notify.rs` (`[[notify]]`); `values.rs` reads the values
//! written as text (durations, sizes, addresses, one path or many).

mod agent;
mod anchor;
mod app;
mod app_set;
mod credentials;
mod error;
mod globs;
mod images;
mod notify;
pub mod order;
mod registry;
mod rollout;
mod validate;
mod values;

pub use agent::{AgentConfig, ClusterConfig, Clusters, LogFormat, DEFAULT_RENDER_MEMORY};
pub use app::{
    AppConfig, AuthConfig, DecryptConfig, DecryptProvider, GitRef, HelmConfig, RenderMode,
    RevisionError, ScopeConfig, VerifyConfig, VerifyMode, DEFAULT_KNOWN_HOSTS,
};
pub use app_set::{
    AppSetConfig, Combination, FoundRef, Refused, Selector, SetError, DEFAULT_MAX_APPS,
    SAMPLE_FOLDER,
};
pub use error::{io_message, ConfigError, Problem};
use error::{toml_error, unknown_field};
pub use globs::{compile_globs, Globs};
pub use images::{ImagePolicyConfig, ImageUpdatesConfig, StalePushBranch, TagOrder};
pub use notify::{NotifyConfig, NotifyEvent, NotifyFormat};
pub use registry::{
    is_digest, split_oci, ChartSource, OciPick, OciSource, RegistryConfig, SourceRef,
};
pub use rollout::{
    check_steps, AnalysisConfig, AnnotatedRollout, BlueGreen, CanaryStep, OnFailure, Pause,
    Progressive, RolloutConfig, RolloutEngine, StepsError, Strategy, ROLLOUT_ANNOTATION,
};
pub use validate::{
    author_parts, check_generated, check_notify_url, check_repo_path, is_dns_label,
    is_kube_version, ValueError,
};
pub use values::{parse_byte_size, show_size};

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

/// Where `berth` looks for its configuration when neither `--config` nor `BERTH_CONFIG`
/// names one.
pub const DEFAULT_PATH: &str = "/etc/berth/berth.toml";

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Settings of the agent process.
    #[serde(default)]
    pub agent: AgentConfig,
    /// How to reach the cluster (`[cluster]`), or each cluster (`[[cluster]]`).
    #[serde(default)]
    pub cluster: Clusters,
    /// The applications: one git source each (shared with the apps' tasks, so that
    /// a thousand apps are held once).
    #[serde(default, rename = "app")]
    pub apps: Vec<Arc<AppConfig>>,
    /// Apps generated from a repository's folders and the clusters.
    #[serde(default, rename = "app_set")]
    pub app_sets: Vec<AppSetConfig>,
    /// Where berth tells people what happened.
    #[serde(default, rename = "notify")]
    pub notify: Vec<NotifyConfig>,
    /// Image repositories whose newest tag berth commits into the apps' markers.
    #[serde(default, rename = "image_policy")]
    pub image_policies: Vec<ImagePolicyConfig>,
    /// The checks canary steps run, by name.
    #[serde(default, rename = "analysis")]
    pub analyses: Vec<AnalysisConfig>,
    /// The apps the sets make that do not run (see [`Refused`]), once the sets are listed.
    #[serde(skip)]
    pub refused: Vec<Refused>,
}

/// The running configuration, published once: the agent sends a reloaded one, and each
/// part that reads the apps (the syncer's dependency gate, the status page) sees it.
pub type Published = tokio::sync::watch::Receiver<std::sync::Arc<Config>>;

/// Parses configuration text. Does not validate it: see [`Config::validate`].
///
/// # Errors
/// Invalid TOML, unknown keys, missing required keys and badly formed values, each
/// naming the key path, line and column.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| toml_error(text, String::new(), &e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let mut key = e.path().to_string();
        if let Some(field) = unknown_field(e.inner().message())
            .filter(|f| key != *f && !key.ends_with(&format!(".{f}")))
        {
            key = if key == "." || key.is_empty() {
                field.to_string()
            } else {
                format!("{key}.{field}")
            };
        }
        toml_error(text, key, e.inner())
    })
}

/// Reads, parses and validates a configuration file.
///
/// # Errors
/// The file cannot be read, or [`parse`] or [`Config::validate`] fails; the error names
/// the file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let mut config = parse(&text).map_err(|e| e.in_file(path))?;
    config
        .validate()
        .map_err(|e| e.located(&text).in_file(path))?;
    if let Some(folder) = path.parent() {
        config.anchor(&std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf()));
    }
    Ok(config)
}

impl Config {
    /// Holds each app `before` has unchanged by `before`'s copy: a listing or a reload
    /// that changes a few apps of a thousand does not hold the others twice (the running
    /// apps' tasks share their configuration with the running `Config`).
    pub fn share_apps(&mut self, before: &Config) {
        let held: HashMap<&str, &Arc<AppConfig>> =
            (before.apps.iter()).map(|a| (a.name.as_str(), a)).collect();
        for app in &mut self.apps {
            if let Some(old) = held.get(app.name.as_str()) {
                if ***old == **app {
                    *app = Arc::clone(old);
                }
            }
        }
    }

    /// The image policy of that name.
    pub fn image_policy(&self, name: &str) -> Option<&ImagePolicyConfig> {
        self.image_policies.iter().find(|p| p.name == name)
    }

    /// The app of that name.
    pub fn app(&self, name: &str) -> Option<&AppConfig> {
        self.apps.iter().find(|a| a.name == name).map(|a| &**a)
    }

    /// Whether an app of that name is configured, running or [refused](Refused): an app
    /// it has is not removed.
    pub fn has_app(&self, name: &str) -> bool {
        self.app(name).is_some() || self.refused.iter().any(|r| r.app == name)
    }

    /// The clusters `apps` are synced to, in the order the apps first name them, each with
    /// the indices of its apps in `apps`.
    pub fn clusters_of(&self, apps: &[&AppConfig]) -> Vec<(&ClusterConfig, Vec<usize>)> {
        let mut clusters: Vec<(&ClusterConfig, Vec<usize>)> = Vec::new();
        for (i, app) in apps.iter().enumerate() {
            let cluster = self.cluster_of(app);
            match clusters
                .iter_mut()
                .find(|(c, _)| c.name() == cluster.name())
            {
                Some((_, of)) => of.push(i),
                None => clusters.push((cluster, vec![i])),
            }
        }
        clusters
    }

    /// The cluster `app` is synced to: the one it names, else the only one (validation
    /// refuses an app that names none when there are several).
    pub fn cluster_of(&self, app: &AppConfig) -> &ClusterConfig {
        app.cluster
            .as_deref()
            .and_then(|name| self.cluster.named(name))
            .unwrap_or(&self.cluster.list()[0])
    }
}

/// The app `[[app]]` followed by `body` makes (for unit tests).
#[cfg(test)]
pub(crate) fn test_app(body: &str) -> AppConfig {
    let mut config = parse(&format!("[[app]]\n{body}\n")).expect("an app's configuration");
    Arc::unwrap_or_clone(config.apps.remove(0))
}

#[cfg(test)]
mod tests;
