//! Kustomize: a folder holding a kustomization is rendered by the real tool (`kustomize
//! build`, else `kubectl kustomize`), as Argo CD does; its output then goes through the
//! same pipeline as any file.
//!
//! Before the tool runs, every local reference of every kustomization it will reach
//! (resources, bases, components, patches, crds, configurations, generator files and
//! envs, …) is checked: one that resolves outside the repository checkout, through `..` or
//! a symbolic link, is refused, as is a remote resource unless the app allows them, and a
//! kustomization that asks for KRM function / exec plugins (never enabled). Its
//! `helmCharts` are inflated by helm when the chart is in the repository (`chartHome`),
//! its dependencies vendored, under the same checks and sandbox as a chart of its own
//! (`helm.rs`); a chart to download is refused. The tool runs in the checkout, with a
//! clean environment and a timeout.
//!
//! In files of their own:
//! - `check.rs`: the checks of every kustomization reached, before the tool runs;
//! - `references.rs`: what a kustomization names, read from its YAML;
//! - `reach.rs`: what a render of an app's paths reads of the repository;
//! - `run.rs`: the tool run in its walls;
//! - `decrypted.rs`: the copy in clear for a kustomization that reads encrypted files.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use super::bounds::Limits;
use super::decrypt::Decryption;
use super::error::ManifestError;
use super::helm::Capabilities;
use crate::config::{AgentConfig, AppConfig, RenderMode};
use decrypted::PlainCopy;

pub use reach::reach;

mod check;
mod decrypted;
mod reach;
mod references;
mod run;

/// The file names kustomize looks for in a folder, in its order.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// How kustomizations are rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kustomize {
    /// The program and its first arguments (the folder is added last); `None`: found on
    /// PATH when a kustomization is first rendered (see [`Kustomize::command`]).
    pub command: Option<Vec<String>>,
    /// How long one run may take.
    pub timeout: Duration,
    /// Remote resources (URLs, git refs) are allowed.
    pub allow_remote: bool,
    /// Every named folder must be a kustomization (`render = "kustomize"`).
    pub required: bool,
    /// Largest file a kustomization may name (`agent.max_file_size`), the kustomization
    /// itself included.
    pub max_file_size: u64,
    /// The helm program that inflates `helmCharts`; `None`: `helm` on PATH.
    pub helm: Option<String>,
    /// What an inflated chart sees of the cluster.
    pub capabilities: Capabilities,
    /// How files encrypted with sops are opened; `None`: a kustomization reading one is
    /// refused.
    pub decrypt: Option<Decryption>,
    /// The most memory one kustomize run may have (`[agent] render_memory`), helm's
    /// under it included.
    pub memory: u64,
}

/// What kustomize printed, and the values it was given decrypted (to mark in its
/// objects).
pub struct Built {
    /// kustomize's output.
    pub output: Vec<u8>,
    /// Each value of an encrypted file, in clear.
    pub decrypted: Vec<String>,
}

impl Kustomize {
    /// Renders with the configured command (`"kustomize build"`), or the one on PATH.
    pub fn new(configured: Option<&str>, timeout: Duration) -> Self {
        Kustomize {
            command: configured.map(|c| c.split_whitespace().map(str::to_string).collect()),
            timeout,
            allow_remote: false,
            required: false,
            max_file_size: Limits::default().max_file_size,
            helm: None,
            capabilities: Capabilities::default(),
            decrypt: None,
            memory: crate::config::DEFAULT_RENDER_MEMORY,
        }
    }

    /// The command run: the configured one, else `kustomize build` when a `kustomize`
    /// binary is on PATH, else `kubectl kustomize`.
    pub fn command(&self) -> Vec<String> {
        match &self.command {
            Some(c) => c.clone(),
            None if on_path("kustomize") => vec!["kustomize".into(), "build".into()],
            None => vec!["kubectl".into(), "kustomize".into()],
        }
    }

    /// How an app's kustomizations are rendered, or `None` with `render = "plain"` or
    /// `"helm"`.
    pub fn for_app(app: &AppConfig, agent: &AgentConfig) -> Option<Self> {
        matches!(app.render, RenderMode::Auto | RenderMode::Kustomize).then(|| Kustomize {
            allow_remote: app.allow_remote_bases,
            required: app.render == RenderMode::Kustomize,
            max_file_size: agent.max_file_size,
            helm: agent.helm.clone(),
            decrypt: Decryption::for_app(app),
            memory: agent.render_memory,
            ..Kustomize::new(agent.kustomize.as_deref(), agent.render_timeout)
        })
    }

    /// Checks the kustomization in `dir` (and every one it reaches), then runs the tool on
    /// it; returns its output, at most `max_bytes` of it. `root` is the canonical
    /// repository root; `shown` the kustomization file as errors name it. When it reads
    /// files encrypted with sops, the tool runs on a copy with them in clear, in memory
    /// ([`decrypted`]).
    ///
    /// # Errors
    /// [`ManifestError::Kustomization`]: a refused reference, a missing file, an
    /// encrypted file that does not open, the tool's failure (with its stderr, decrypted
    /// values masked) or its timeout.
    pub fn build(
        &self,
        root: &Path,
        dir: &Path,
        shown: &str,
        max_bytes: u64,
    ) -> Result<Built, ManifestError> {
        let mut seen = HashSet::new();
        let mut encrypted = Vec::new();
        let inflates = self.check(root, dir, shown, &mut seen, &mut encrypted)?;
        let Some(decryption) = self.decrypt.as_ref().filter(|_| !encrypted.is_empty()) else {
            let output = self.run(root, dir, shown, max_bytes, inflates)?;
            return Ok(Built {
                output,
                decrypted: Vec::new(),
            });
        };
        let fail = |message: String| ManifestError::Kustomization {
            path: shown.to_string(),
            message,
        };
        let rel = relative(root, dir);
        let reached = reach(root, std::slice::from_ref(&rel));
        let copy = PlainCopy::make(
            root,
            &reached,
            &encrypted,
            decryption,
            self.max_file_size,
            max_bytes,
        )
        .map_err(|e| fail(e.to_string()))?;
        let output = self
            .run(
                &copy.root,
                &copy.root.join(&rel),
                shown,
                max_bytes,
                inflates,
            )
            .map_err(|e| match e {
                ManifestError::Tool {
                    path,
                    tool,
                    cause,
                    hint,
                } => ManifestError::Tool {
                    path,
                    tool,
                    cause: cause.map_stderr(|stderr| copy.redact(stderr)),
                    hint,
                },
                e => e,
            })?;
        Ok(Built {
            output,
            decrypted: copy.values.clone(),
        })
    }
}

/// The kustomization file in `dir`, when it holds one: anything by that name but a
/// folder (kustomize would read a link to a device too, so it is found here and refused
/// when read).
pub fn kustomization_in(dir: &Path) -> Option<&'static str> {
    KUSTOMIZATION_FILES.into_iter().find(|f| {
        let path = dir.join(f);
        path.symlink_metadata().is_ok() && !path.is_dir()
    })
}

/// `path` relative to `root`, `/`-separated, for messages.
pub fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Whether `program` is found on PATH.
fn on_path(program: &str) -> bool {
    super::tool::find(program).is_some()
}

#[cfg(test)]
mod tests;
