//! `[[image_policy]]` (which tag of an image repository is newest) and `[app.image_updates]`
//! (how berth commits the tags policies choose into the app's repository).
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::credentials;
use super::values::duration;
use super::RegistryConfig;

/// `[[image_policy]]`: an image repository and how its newest tag is chosen.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagePolicyConfig {
    /// What markers name (`# {"$imagepolicy": "NAME"}`).
    pub name: String,
    /// The image repository, with its registry: `registry.example.com/team/shop`.
    pub image: String,
    /// A semver range: the newest version inside it.
    pub semver: Option<String>,
    /// Or the order of the tags (or of the part `extract` takes).
    pub order: Option<TagOrder>,
    /// A regular expression whose first named group (else first group, else whole match)
    /// is what tags are ordered by; a tag it does not match is not considered.
    pub extract: Option<String>,
    /// A regular expression a tag must match to be considered at all.
    pub filter: Option<String>,
    /// How often the registry's tags are listed.
    #[serde(default = "default_interval", deserialize_with = "duration")]
    pub interval: Duration,
    /// A Docker `config.json` with the registry's login, or `credential:NAME`.
    #[serde(default, deserialize_with = "credentials::file")]
    pub credentials: Option<PathBuf>,
    /// PEM certificates trusted beside the system's roots.
    #[serde(default, deserialize_with = "credentials::file")]
    pub ca_file: Option<PathBuf>,
    /// Allow plain HTTP to this registry.
    #[serde(default)]
    pub insecure: bool,
}

fn default_interval() -> Duration {
    Duration::from_secs(60)
}

/// `order = …`: how a policy without `semver` orders tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TagOrder {
    /// As numbers (a build number, a timestamp), exactly whatever their length.
    Numerical,
    /// As text, byte by byte.
    Alphabetical,
}

impl ImagePolicyConfig {
    /// How its registry is reached, as `[app.registry]` says it for an app.
    pub fn registry(&self) -> RegistryConfig {
        RegistryConfig {
            credentials: self.credentials.clone(),
            ca_file: self.ca_file.clone(),
            insecure: self.insecure,
        }
    }
}

/// `[app.image_updates]`: berth commits the tags its policies choose into the markers of
/// this app's files, and pushes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageUpdatesConfig {
    /// The commits' author and committer: `Name <email>`.
    pub author: String,
    /// The branch pushed to (default: the branch the app follows).
    pub push_branch: Option<String>,
    /// An SSH (OpenSSH format) or OpenPGP (armored) private key signing each commit.
    #[serde(default, deserialize_with = "credentials::file")]
    pub signing_key: Option<PathBuf>,
    /// The commit message: `{policies}` and `{changes}` (one `policy: old -> new` line
    /// each) are replaced.
    #[serde(default = "default_message")]
    pub message: String,
    /// What berth does when `push_branch` (another branch than the followed one) no
    /// longer descends from the followed branch: rebase its commits onto it, or reset it.
    #[serde(default)]
    pub stale_push_branch: StalePushBranch,
}

/// The default commit message.
fn default_message() -> String {
    "Update images: {policies}\n\n{changes}".into()
}

/// `stale_push_branch = …`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StalePushBranch {
    /// The push branch's own commits replayed onto the followed branch, then pushed.
    #[default]
    Rebase,
    /// The push branch made the followed branch plus the new change, force-pushed.
    Reset,
}
