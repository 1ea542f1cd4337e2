//! `[[app]]`: one git source and what to do with it — its ref, paths and globs, scope,
//! signature verification, credentials and rollout — with their defaults.
use std::path::PathBuf;

use serde::Deserialize;

use super::credentials;
use super::registry::{ChartSource, OciSource, RegistryConfig, SourceRef};
use super::rollout::RolloutConfig;
use super::values::one_or_many;
use super::Globs;

/// `[[app]]`: one git source and what to do with it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    /// The app's name: a DNS label, used in labels and the inventory's name.
    pub name: String,
    /// `https://…`, `ssh://…`, `git@host:path`, `file://…` or a local path (empty when
    /// the app reads a registry: `chart` or `oci`).
    #[serde(default)]
    pub repo: String,
    /// A chart from a Helm repository or an OCI registry, instead of `repo`.
    pub chart: Option<ChartSource>,
    /// An OCI artifact of manifests, instead of `repo`.
    pub oci: Option<OciSource>,
    /// How `chart`'s or `oci`'s registry is reached, and the registries of the
    /// dependencies its charts download (`[agent] allow_remote_charts`).
    #[serde(default)]
    pub registry: RegistryConfig,
    /// Follow this branch (the remote's default branch when no ref is given).
    pub branch: Option<String>,
    /// Follow this tag.
    pub tag: Option<String>,
    /// Pin this full commit SHA.
    pub commit: Option<String>,
    /// Follow this ref by its full name (`refs/pull/7/head`): a pull request's, which no
    /// branch names (each preview of an app set follows its own).
    #[serde(rename = "ref")]
    pub follow_ref: Option<String>,
    /// Folders (or files) in the repository to render, relative to its root.
    #[serde(default = "root_path", deserialize_with = "one_or_many")]
    pub path: Vec<String>,
    /// Only files matching one of these globs (relative to the repository root) are read.
    #[serde(default)]
    pub include: Globs,
    /// Files matching one of these globs are skipped.
    #[serde(default)]
    pub exclude: Globs,
    /// Only objects whose `Kind/name` matches one of these globs are kept.
    #[serde(default)]
    pub include_objects: Globs,
    /// Objects whose `Kind/name` matches one of these globs are dropped.
    #[serde(default)]
    pub exclude_objects: Globs,
    /// The cluster it is synced to (a `[[cluster]]`'s name); optional when one cluster
    /// is configured.
    pub cluster: Option<String>,
    /// Namespace for namespaced objects that name none.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Create `namespace` when it is missing (after the dry run, before anything is
    /// written in it), labelled as berth's; apps that ask for the same one share it, and
    /// the last of them removed with `prune = true` deletes it.
    #[serde(default)]
    pub create_namespace: bool,
    /// Leave the app alone: not synced by `berth run` nor `berth sync`, its objects as
    /// they are (as `berth suspend` does, until removed).
    #[serde(default)]
    pub suspend: bool,
    /// The `[[app_set]]` that generated it; `None` for a written `[[app]]`.
    #[serde(skip)]
    pub set: Option<String>,
    /// The set's folder it was generated from (its path in the repository).
    #[serde(skip)]
    pub folder: Option<String>,
    /// The ref it was generated from, when it is a preview (a pull request's: untrusted).
    #[serde(skip)]
    pub preview: Option<String>,
    /// Downloads no chart whatever `[agent] allow_remote_charts` names (a preview's).
    #[serde(skip)]
    pub no_remote_charts: bool,
    /// Delete objects that an earlier commit applied and this one no longer holds.
    #[serde(default)]
    pub prune: bool,
    /// Allow a commit that holds no objects to prune every object of the app.
    #[serde(default)]
    pub allow_empty: bool,
    /// Take back the fields git sets that another field manager took (git wins, as Argo
    /// CD's self-heal and Flux do; each taken back is recorded); false: a conflict fails
    /// the sync instead.
    #[serde(default = "yes")]
    pub force_conflicts: bool,
    /// Credentials for the repository.
    #[serde(default)]
    pub auth: AuthConfig,
    /// File holding the webhook's HMAC secret (`POST /hooks/<app>`); no secret, no webhook.
    #[serde(default, deserialize_with = "credentials::file")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Environment variable holding the webhook's HMAC secret.
    pub webhook_secret_env: Option<String>,
    /// How changed Deployments are rolled out.
    #[serde(default)]
    pub rollout: RolloutConfig,
    /// How the app's folders are rendered: a folder with a kustomization by kustomize and
    /// one with a `Chart.yaml` by helm (`auto`), every folder as plain manifests (`plain`),
    /// kustomize only, or helm only.
    #[serde(default)]
    pub render: RenderMode,
    /// How the app's Helm charts are rendered (`[app.helm]`).
    #[serde(default)]
    pub helm: HelmConfig,
    /// Let kustomizations reach remote resources (URLs, git repositories).
    #[serde(default)]
    pub allow_remote_bases: bool,
    /// Apply a branch or tag that moved to a commit not descending from the last applied
    /// one (refused by default: a force-push could replay any older signed commit).
    #[serde(default)]
    pub allow_rewind: bool,
    /// Which commits may be applied: only those signed by a trusted key, or any.
    #[serde(default)]
    pub verify: VerifyConfig,
    /// Where the app may write (`[app.scope]`), checked before the dry run.
    #[serde(default)]
    pub scope: ScopeConfig,
    /// How SOPS-encrypted files are decrypted (`[app.decrypt]`); unset: an encrypted file
    /// is refused.
    pub decrypt: Option<DecryptConfig>,
    /// A ServiceAccount (`namespace/name`) that every request made for the app
    /// impersonates, so that the API server's RBAC decides what the app may write.
    pub service_account: Option<String>,
    /// A user that every request made for the app impersonates (instead of a
    /// ServiceAccount).
    pub user: Option<String>,
    /// Groups impersonated with `user` or `service_account`.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Apps that must have synced their current commit and be healthy before this app
    /// syncs one (`depends_on = ["crds", "infra"]`); see `docs/ordering.md`.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Tags chosen by `[[image_policy]]` committed into this app's markers and pushed
    /// (`[app.image_updates]`); see `docs/image-updates.md`.
    pub image_updates: Option<super::ImageUpdatesConfig>,
}

/// `[app.scope]`: the namespaces and cluster-scoped kinds an app may write.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScopeConfig {
    /// Namespaces (globs) the app's objects may be in; unset: the app's own `namespace`
    /// alone; `["*"]`: any.
    pub namespaces: Option<Vec<String>>,
    /// Cluster-scoped kinds the app may write (`"*"`: any). A Namespace whose name
    /// `namespaces` allows needs no entry.
    pub cluster_kinds: Vec<String>,
}

impl AppConfig {
    /// The namespace globs of `[app.scope]`, the app's own namespace when unset.
    pub fn scope_namespaces(&self) -> Vec<String> {
        self.scope
            .namespaces
            .clone()
            .unwrap_or_else(|| vec![self.namespace.clone()])
    }
}

/// `[app.helm]`: the release a chart is rendered as, and its values.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HelmConfig {
    /// The release name (`.Release.Name`); unset: the app's name.
    pub release: Option<String>,
    /// The release namespace (`.Release.Namespace`); unset: the app's namespace.
    pub namespace: Option<String>,
    /// Values files, relative to the repository root (they must stay inside it), in order.
    pub values_files: Vec<String>,
    /// Values written inline, after the files.
    pub values: toml::Table,
    /// `--set-string` values (`"image.tag" = "1.2.3"`), last.
    pub set: std::collections::BTreeMap<String, String>,
    /// Render the chart's `crds/` folder too.
    pub include_crds: bool,
    /// Leave out the chart's test hooks (`helm.sh/hook: test`), which a sync never runs.
    pub skip_tests: bool,
}

impl Default for HelmConfig {
    fn default() -> Self {
        HelmConfig {
            release: None,
            namespace: None,
            values_files: Vec::new(),
            values: toml::Table::new(),
            set: std::collections::BTreeMap::new(),
            include_crds: true,
            skip_tests: true,
        }
    }
}

/// `[app.verify]`: apply only commits signed by a trusted key (OpenPGP or SSH).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyConfig {
    /// `head`: the commit about to be applied must carry a valid signature; `off`.
    pub mode: VerifyMode,
    /// Armored OpenPGP public keys: files, or a glob in the last part of a path
    /// (`/etc/berth/keys/*.asc`).
    pub openpgp_keys: Vec<String>,
    /// SSH signing keys in git's `allowed_signers` format (`gpg.ssh.allowedSignersFile`).
    #[serde(default, deserialize_with = "credentials::file")]
    pub ssh_allowed_signers: Option<PathBuf>,
    /// For `chart` from OCI and `oci`: artifacts must carry a cosign signature by one of
    /// these public keys (PEM files, or `credential:NAME`).
    #[serde(default, deserialize_with = "credentials::files")]
    pub cosign_keys: Vec<PathBuf>,
}

/// `[app.decrypt]`: the keys that open SOPS-encrypted files, read at every render (a key
/// rotated on disk is used by the next sync), and where decrypted values may land.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecryptConfig {
    /// The format: `"sops"`.
    pub provider: DecryptProvider,
    /// age identity files (`AGE-SECRET-KEY-1…` lines), or `credential:NAME`.
    #[serde(default, deserialize_with = "credentials::files")]
    pub age_key_files: Vec<PathBuf>,
    /// ASCII-armored OpenPGP secret key files, or `credential:NAME`.
    #[serde(default, deserialize_with = "credentials::files")]
    pub openpgp_key_files: Vec<PathBuf>,
    /// The passphrase of the OpenPGP secret keys (its first line), when they have one.
    #[serde(default, deserialize_with = "credentials::file")]
    pub openpgp_passphrase_file: Option<PathBuf>,
    /// Kinds besides Secret that may hold decrypted values (`["ConfigMap"]`): anyone who
    /// can read such objects reads the values.
    #[serde(default)]
    pub allow_decrypted_in: Vec<String>,
}

/// The encrypted-file formats berth decrypts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecryptProvider {
    /// Mozilla SOPS files (YAML, JSON, dotenv, binary), with age or OpenPGP keys.
    Sops,
}

/// Whether commits are verified.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// Any commit is applied.
    #[default]
    Off,
    /// The commit about to be applied must be signed by a trusted key.
    Head,
    /// The annotated tag the app follows (`tag = …`) must be signed by a trusted key; its
    /// signature vouches for the commit it points at.
    Tag,
}

/// How an app's folders are rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RenderMode {
    /// A folder holding `kustomization.yaml` (`.yml`, `Kustomization`) is rendered by
    /// kustomize; other folders are read as plain manifests.
    #[default]
    Auto,
    /// Every file is a plain manifest, kustomization files included.
    Plain,
    /// Every path must be a kustomization.
    Kustomize,
    /// Every path must be a Helm chart (a folder holding `Chart.yaml`), rendered by
    /// `helm template`.
    Helm,
}

/// Which commit of its repository an app follows (validation allows at most one of
/// `branch`, `tag` and `commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitRef<'a> {
    /// The remote's default branch (its `HEAD`).
    DefaultBranch,
    /// A branch's newest commit.
    Branch(&'a str),
    /// The commit a tag names.
    Tag(&'a str),
    /// One commit, by its full SHA.
    Commit(&'a str),
    /// A ref by its full name, outside `refs/heads/` and `refs/tags/` (a pull request's).
    Ref(&'a str),
}

/// A revision that names nothing the app's source would take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--revision {0:?} is not a {1}")]
pub struct RevisionError(pub String, pub &'static str);

impl AppConfig {
    /// The app as it would be at another revision of its repository, for `berth plan
    /// --revision`: a full commit SHA, `tags/NAME` (or `refs/tags/NAME`), another full ref
    /// name (`refs/pull/7/head`), or a branch (`refs/heads/NAME` or the bare name). Such a revision need not descend from the
    /// commit applied last (a branch forked before it): that is what is planned. A registry
    /// source takes a version or range (an OCI artifact also a tag), a digest, or a
    /// revision a sync recorded (`1.2.0@sha256:…`).
    ///
    /// # Errors
    /// A revision that names nothing git would take (empty, starting with `-`, holding
    /// `..`, a space or a control character); for a chart, no version, range or digest.
    pub fn at_revision(&self, revision: &str) -> Result<AppConfig, RevisionError> {
        let mut app = self.clone();
        if app.at_version(revision) {
            let valid = match app.source() {
                SourceRef::Chart(c) => {
                    (c.is_oci() && super::is_digest(&c.version))
                        || crate::versions::Range::parse(&c.version).is_ok()
                }
                _ => !revision.trim().is_empty(),
            };
            if !valid {
                let what = "version, range or digest of the app's chart";
                return Err(RevisionError(revision.to_string(), what));
            }
            return Ok(app);
        }
        let bad = revision.is_empty()
            || revision.starts_with('-')
            || revision.contains("..")
            || revision
                .chars()
                .any(|c| c.is_whitespace() || c.is_control());
        if bad {
            return Err(RevisionError(
                revision.to_string(),
                "commit, branch or tag name",
            ));
        }
        (app.branch, app.tag, app.commit, app.follow_ref) = (None, None, None, None);
        if super::validate::is_full_sha(revision) {
            app.commit = Some(revision.to_ascii_lowercase());
        } else if let Some(tag) = revision
            .strip_prefix("refs/tags/")
            .or_else(|| revision.strip_prefix("tags/"))
        {
            app.tag = Some(tag.to_string());
        } else if super::validate::check_ref(revision).is_ok() {
            app.follow_ref = Some(revision.to_string()); // a pull request's, `refs/pull/7/head`
        } else {
            let branch = revision.strip_prefix("refs/heads/").unwrap_or(revision);
            app.branch = Some(branch.to_string());
        }
        app.allow_rewind = true;
        Ok(app)
    }

    /// For a registry source, moves it to `revision`: a revision a sync recorded
    /// (`1.2.0@sha256:…`, pinned: for a Helm repository's chart, that version exactly), a
    /// digest, or a version or range; whether it is one (`false` for git).
    fn at_version(&mut self, revision: &str) -> bool {
        let (version, digest) = match revision.split_once('@') {
            Some((v, d)) if super::is_digest(d) => (v, Some(d)),
            _ if super::is_digest(revision) => ("", Some(revision)),
            _ => (revision, None),
        };
        if let Some(chart) = &mut self.chart {
            chart.version = match (digest, chart.is_oci(), version) {
                (Some(d), true, _) => d.to_string(),
                (Some(_), false, v) => format!("={v}"),
                (None, _, v) => v.to_string(),
            };
            return true;
        }
        let Some(oci) = &mut self.oci else {
            return false;
        };
        (oci.version, oci.tag, oci.digest) = match digest {
            Some(d) => (None, None, Some(d.to_string())),
            // A version or range; else a tag.
            None if crate::versions::Range::parse(version).is_ok() => {
                (Some(version.to_string()), None, None)
            }
            None => (None, Some(version.to_string()), None),
        };
        true
    }

    /// The source as people read it ([`SourceRef::origin`]).
    pub fn origin(&self) -> String {
        self.source().origin()
    }

    /// Where its manifests come from: `chart`, else `oci`, else `repo`.
    pub fn source(&self) -> SourceRef<'_> {
        match (&self.chart, &self.oci) {
            (Some(chart), _) => SourceRef::Chart(chart),
            (None, Some(oci)) => SourceRef::Oci(oci),
            (None, None) => SourceRef::Git(&self.repo),
        }
    }

    /// The ref this app follows.
    pub fn git_ref(&self) -> GitRef<'_> {
        match (&self.tag, &self.commit, &self.follow_ref, &self.branch) {
            (Some(tag), ..) => GitRef::Tag(tag),
            (None, Some(sha), ..) => GitRef::Commit(sha),
            (None, None, Some(name), _) => GitRef::Ref(name),
            (None, None, None, Some(branch)) => GitRef::Branch(branch),
            (None, None, None, None) => GitRef::DefaultBranch,
        }
    }
}

/// `[app.auth]`: how to authenticate to the repository. Secrets come from files or
/// environment variables, never from the configuration itself.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// User name for https (a token usually takes any name, e.g. `x-access-token`) or ssh
    /// (default: the URL's, else `git`).
    pub username: Option<String>,
    /// File holding the https password or token.
    #[serde(default, deserialize_with = "credentials::file")]
    pub password_file: Option<PathBuf>,
    /// Environment variable holding the https password or token.
    pub password_env: Option<String>,
    /// Private key for ssh.
    #[serde(default, deserialize_with = "credentials::file")]
    pub ssh_key_file: Option<PathBuf>,
    /// known_hosts file that ssh host keys are verified against.
    #[serde(default, deserialize_with = "credentials::file")]
    pub known_hosts: Option<PathBuf>,
}

/// Where ssh host keys are looked up when `known_hosts` is not set.
pub const DEFAULT_KNOWN_HOSTS: &str = "/etc/berth/known_hosts";

fn root_path() -> Vec<String> {
    vec![".".to_string()]
}

fn default_namespace() -> String {
    "default".to_string()
}

fn yes() -> bool {
    true
}
