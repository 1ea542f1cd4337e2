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

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_yaml::Value;

use super::bounds::Limits;
use super::decrypt::Decryption;
use super::error::ManifestError;
use super::helm::{
    self, chart_in, missing_dependencies, refusal, Capabilities, ChartError, Sandbox, CHART_FILE,
};
use super::read::{check_links, confined, read_confined, regular_file};
use super::tool::Tool;
use crate::config::{AgentConfig, AppConfig, RenderMode};
use decrypted::PlainCopy;

/// The file names kustomize looks for in a folder, in its order.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Fields whose entries are paths (or, for resources-like fields, remote references).
const RESOURCE_FIELDS: [&str; 3] = ["resources", "bases", "components"];
const FILE_FIELDS: [&str; 6] = [
    "crds",
    "configurations",
    "patchesStrategicMerge",
    "transformers",
    "generators",
    "validators",
];
/// Fields whose entries are objects with a `path`.
const PATH_OBJECT_FIELDS: [&str; 3] = ["patches", "patchesJson6902", "replacements"];
/// Plugin configurations that ask for a KRM function or an exec plugin.
const FUNCTION_MARKERS: [&str; 3] = [
    "config.kubernetes.io/function",
    "config.k8s.io/function",
    "exec:",
];

/// Where kustomize's HTTP requests go when remote resources are not allowed: the discard
/// port on loopback, where nothing listens.
const CLOSED_PROXY: &str = "http://127.0.0.1:9";

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
                ManifestError::Kustomization { path, message } => ManifestError::Kustomization {
                    path,
                    message: copy.redact(message),
                },
                e => e,
            })?;
        Ok(Built {
            output,
            decrypted: copy.values.clone(),
        })
    }

    /// Checks one kustomization and, recursively, the ones it reaches; whether any of them
    /// inflates a chart. The files encrypted with sops that they read go to `encrypted`.
    fn check(
        &self,
        root: &Path,
        dir: &Path,
        shown: &str,
        seen: &mut HashSet<PathBuf>,
        encrypted: &mut Vec<PathBuf>,
    ) -> Result<bool, ManifestError> {
        if !seen.insert(dir.to_path_buf()) {
            return Ok(false);
        }
        let refuse = |message: String| ManifestError::Kustomization {
            path: shown.to_string(),
            message,
        };
        let file = kustomization_in(dir)
            .ok_or_else(|| refuse("no kustomization.yaml in this folder".into()))?;
        let bytes = read_confined(root, &dir.join(file), self.max_file_size)
            .map_err(|e| refuse(format!("{file} {e}")))?;
        let doc: Value =
            serde_yaml::from_slice(&bytes).map_err(|e| refuse(format!("invalid YAML: {e}")))?;
        if doc.get("helmChartInflationGenerator").is_some() {
            return Err(refuse(
                "helmChartInflationGenerator: the deprecated Helm generator is not supported; use helmCharts".into(),
            ));
        }
        let charts = charts(&doc).map_err(|e| refuse(e.to_string()))?;
        let mut inflates = !charts.is_empty();
        for (field, entry) in charts {
            let resolved = confined(root, &dir.join(&entry))
                .map_err(|e| refuse(format!("{field}: {entry:?} {e}")))?;
            let checked = if field == "helmCharts" {
                if chart_in(&resolved) {
                    // kustomize runs helm on the chart as it is: nothing is downloaded,
                    // and no link leads out of the checkout.
                    check_links(root, &resolved)
                        .map_err(ChartError::from)
                        .and_then(|()| missing_dependencies(root, &resolved, self.max_file_size))
                        .and_then(|missing| refusal(&missing, false).map_or(Ok(()), Err))
                        .map_err(|e| e.to_string())
                } else {
                    Err(format!("holds no {CHART_FILE}"))
                }
            } else {
                regular_file(&resolved, self.max_file_size).map_err(|e| e.to_string())
            };
            checked.map_err(|e| refuse(format!("{field}: {entry:?} {e}")))?;
        }
        for (field, entry) in references(&doc) {
            let remote = is_remote(&entry);
            if remote && RESOURCE_FIELDS.contains(&field.as_str()) {
                if self.allow_remote {
                    continue;
                }
                return Err(refuse(format!(
                    "{field}: remote resource {entry:?} refused (set allow_remote_bases = true in the app to allow it)"
                )));
            }
            if remote {
                return Err(refuse(format!(
                    "{field}: {entry:?} is not a path in the repository"
                )));
            }
            let resolved = confined(root, &dir.join(&entry))
                .map_err(|e| refuse(format!("{field}: {entry:?} {e}")))?;
            if resolved.is_dir() {
                let inner = kustomization_in(&resolved).ok_or_else(|| {
                    refuse(format!(
                        "{field}: {entry:?} is a folder without a kustomization"
                    ))
                })?;
                let inner_shown = relative(root, &resolved.join(inner));
                inflates |= self.check(root, &resolved, &inner_shown, seen, encrypted)?;
            } else {
                // kustomize reads it: the same bounds as any file of the render.
                regular_file(&resolved, self.max_file_size)
                    .map_err(|e| refuse(format!("{field}: {entry:?} {e}")))?;
                if decrypted::is_encrypted(root, &resolved, self.max_file_size) {
                    if self.decrypt.is_none() {
                        return Err(refuse(format!(
                            "{field}: {entry:?} is encrypted with sops, and the app decrypts nothing: set [app.decrypt] provider = \"sops\" with the keys that open it"
                        )));
                    }
                    encrypted.push(resolved.clone());
                }
            }
            if ["transformers", "generators", "validators"].contains(&field.as_str())
                && resolved.is_file()
            {
                let config = read_confined(root, &resolved, self.max_file_size)
                    .map_err(|e| refuse(format!("{field}: {entry:?} {e}")))?;
                let config = String::from_utf8_lossy(&config);
                if FUNCTION_MARKERS.iter().any(|m| config.contains(m)) {
                    return Err(refuse(format!(
                        "{field}: {entry:?} asks for a KRM function or exec plugin; plugins are not enabled in berth"
                    )));
                }
            }
        }
        Ok(inflates)
    }

    /// Runs the tool in the checkout, with a clean environment and the timeout; with
    /// helm to inflate charts when `inflates`.
    fn run(
        &self,
        root: &Path,
        dir: &Path,
        shown: &str,
        max_bytes: u64,
        inflates: bool,
    ) -> Result<Vec<u8>, ManifestError> {
        let fail = |message: String| ManifestError::Kustomization {
            path: shown.to_string(),
            message,
        };
        let mut command: Vec<OsString> = self.command().into_iter().map(OsString::from).collect();
        let shown_command = command.join(" ".as_ref()).to_string_lossy().into_owned();
        let mut env = vec![("PATH", std::env::var_os("PATH").unwrap_or_default())];
        // kustomize's helm may download the charts it is allowed to: on a disk then.
        let sandbox =
            Sandbox::new(inflates).map_err(|e| fail(format!("cannot make its folder: {e}")))?;
        let mut reach = sandbox.reach(root, self.allow_remote);
        if inflates {
            let helm = helm::program(self.helm.as_deref()).map_err(|e| fail(e.to_string()))?;
            // kustomize runs helm in its own walls.
            reach.run(&helm);
            command.extend(["--enable-helm".into(), "--helm-command".into(), helm.into()]);
            command.extend(self.capabilities.args("helm-"));
        }
        env.extend(sandbox.env(None));
        if !self.allow_remote {
            // The second wall, behind the reference check: git may use no transport at all
            // (an empty allow-list refuses every protocol, file and ssh included), and
            // kustomize's own HTTP requests for remote files go to a closed port.
            env.extend([
                ("GIT_ALLOW_PROTOCOL", "".into()),
                ("GIT_TERMINAL_PROMPT", "0".into()),
                ("HTTPS_PROXY", CLOSED_PROXY.into()),
                ("HTTP_PROXY", CLOSED_PROXY.into()),
            ]);
        }
        command.push(dir.as_os_str().to_owned());
        let tool = Tool {
            command,
            dir: root,
            env,
            timeout: self.timeout,
            max_bytes,
            memory: self.memory,
            reach,
        };
        let output = tool.render(&shown_command, shown, |message| {
            fail(if message.contains("version -c --short") {
                format!("{message}; kustomize before 5.8.1 inflates charts with helm 3 only: set [agent] kustomize to a newer kustomize, or [agent] helm to a helm 3")
            } else {
                message
            })
        });
        drop(sandbox);
        output
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

/// Every path of the repository at `root` (canonical) that a render of `paths` reads,
/// relative to `root` (`""` is the root), none inside another: the paths themselves and
/// whatever their kustomizations reach outside them. A commit that changes none of them
/// renders the same objects.
pub fn reach(root: &Path, paths: &[String]) -> Vec<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<PathBuf> = paths.iter().map(|p| root.join(p)).collect();
    while let Some(path) = stack.pop() {
        let Ok(path) = path.canonicalize() else {
            continue;
        };
        if !path.starts_with(root) || !seen.insert(path.clone()) || !path.is_dir() {
            found.extend(path.starts_with(root).then(|| relative(root, &path)));
            continue;
        }
        found.insert(relative(root, &path));
        if let Some(file) = kustomization_in(&path) {
            // Read under the render's rules (a kustomization it could not read reaches
            // nothing more); the default cap, as berth's own is checked when it renders.
            let doc = read_confined(root, &path.join(file), Limits::default().max_file_size)
                .ok()
                .and_then(|bytes| serde_yaml::from_slice::<Value>(&bytes).ok());
            let charts = doc.as_ref().and_then(|d| charts(d).ok());
            for (_, entry) in doc.as_ref().map(references).unwrap_or_default() {
                if !is_remote(&entry) {
                    stack.push(path.join(entry));
                }
            }
            stack.extend(charts.into_iter().flatten().map(|(_, e)| path.join(e)));
        }
        let folders = std::fs::read_dir(&path).into_iter().flatten().flatten();
        stack.extend(folders.map(|e| e.path()).filter(|p| p.is_dir()));
    }
    let mut outermost: Vec<String> = Vec::new();
    for path in found {
        let inside = |o: &String| o.is_empty() || path.starts_with(&format!("{o}/"));
        if !outermost.iter().any(inside) {
            outermost.push(path);
        }
    }
    outermost
}

/// Every local or remote reference of a kustomization, with its field.
fn references(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_sequence)
            .map(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for field in RESOURCE_FIELDS.into_iter().chain(FILE_FIELDS) {
        for entry in strings(doc.get(field)) {
            // An inline patch or plugin configuration is YAML, not a path.
            if !entry.contains('\n') {
                out.push((field.to_string(), entry));
            }
        }
    }
    for field in PATH_OBJECT_FIELDS {
        for item in doc
            .get(field)
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            if let Some(path) = item.get("path").and_then(Value::as_str) {
                out.push((field.to_string(), path.to_string()));
            }
        }
    }
    if let Some(path) = doc
        .get("openapi")
        .and_then(|o| o.get("path"))
        .and_then(Value::as_str)
    {
        out.push(("openapi".into(), path.to_string()));
    }
    for field in ["configMapGenerator", "secretGenerator"] {
        for generator in doc
            .get(field)
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            for file in strings(generator.get("files")) {
                // `key=path` or `path`
                let path = file.split_once('=').map_or(file.as_str(), |(_, p)| p);
                out.push((format!("{field}.files"), path.to_string()));
            }
            for env in strings(generator.get("envs")) {
                out.push((format!("{field}.envs"), env));
            }
            if let Some(env) = generator.get("env").and_then(Value::as_str) {
                out.push((format!("{field}.env"), env.to_string()));
            }
        }
    }
    out
}

/// Why a kustomization's `helmCharts` are refused.
#[derive(Debug, thiserror::Error)]
enum HelmChartsError {
    #[error("helmGlobals.configHome: berth gives helm a private folder of its own; leave it out")]
    ConfigHome,
    #[error("helmCharts: an entry without a name")]
    NoName,
    #[error("helmCharts: {name} from {repo}: berth downloads no chart; vendor it in {home}/{name} (`helm pull {name} --repo {repo} --untar --untardir {home}`) and leave repo out")]
    Remote {
        name: String,
        repo: String,
        home: String,
    },
    #[error("helmCharts: {name}: values file {file:?} is not a path in the repository")]
    ValuesUrl { name: String, file: String },
}

/// What a kustomization's `helmCharts` read, with their field: each chart's folder
/// (`chartHome/name`) and values files. A chart to download (`repo`), a values file that
/// is a URL and helm's own config folder (`helmGlobals.configHome`) are refused.
fn charts(doc: &Value) -> Result<Vec<(String, String)>, HelmChartsError> {
    let globals = doc.get("helmGlobals");
    if globals.and_then(|g| g.get("configHome")).is_some() {
        return Err(HelmChartsError::ConfigHome);
    }
    let home = globals
        .and_then(|g| g.get("chartHome"))
        .and_then(Value::as_str)
        .unwrap_or("charts");
    let mut out = Vec::new();
    for chart in doc
        .get("helmCharts")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        let name = chart
            .get("name")
            .and_then(Value::as_str)
            .ok_or(HelmChartsError::NoName)?;
        if let Some(repo) = chart
            .get("repo")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            return Err(HelmChartsError::Remote {
                name: name.into(),
                repo: repo.into(),
                home: home.into(),
            });
        }
        out.push(("helmCharts".to_string(), format!("{home}/{name}")));
        let values = chart.get("valuesFile").into_iter().chain(
            chart
                .get("additionalValuesFiles")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten(),
        );
        for file in values.filter_map(Value::as_str) {
            if file.contains("://") {
                return Err(HelmChartsError::ValuesUrl {
                    name: name.into(),
                    file: file.into(),
                });
            }
            out.push(("helmCharts.valuesFile".to_string(), file.to_string()));
        }
    }
    Ok(out)
}

/// Whether kustomize could read `entry` as something to fetch rather than a path. A
/// superset of what its repospec parsing takes for a git repository (schemes, `git::`
/// and `gh:`, scp-like `user@host:path` and `host:path`, `.git` and `_git/` markers,
/// `?ref=`/`?version=` queries, bare `github.com/org/repo`) and of its remote files
/// (URLs). Whether a folder of that name exists does not matter: some kustomize versions
/// try the git reference first.
fn is_remote(entry: &str) -> bool {
    let lower = entry.to_ascii_lowercase();
    let first = lower.split('/').next().unwrap_or("");
    lower.contains("://")
        || lower.starts_with("git::")
        || lower.starts_with("gh:")
        // scp-like: `git@host:org/repo`, `x@127.0.0.1:repo.git`, `github.com:org/repo`
        || first.contains(['@', ':'])
        || lower.contains("?ref=")
        || lower.contains("?version=")
        || lower.contains("_git/")
        || lower.ends_with(".git")
        || lower.contains(".git/")
        || lower.contains(".git?")
        || ["github.com", "gitlab.com", "bitbucket.org"].contains(&first)
}

/// `path` relative to `root`, `/`-separated, for messages.
pub fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

fn on_path(program: &str) -> bool {
    super::tool::find(program).is_some()
}

mod decrypted;

#[cfg(test)]
mod tests;
