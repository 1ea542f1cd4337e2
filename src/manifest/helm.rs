//! Helm charts: a folder holding `Chart.yaml` is rendered by the real `helm template` —
//! never a template engine of berth's own — with the care kustomize gets. Before helm
//! runs, the chart's dependencies must be vendored (`charts/`: a dependency helm would
//! download is refused, with how to vendor it) and every values file must stay inside the
//! checkout. helm runs in a sandbox: a clean environment whose config, cache, data and
//! plugin folders are a private folder made for the one render (on a tmpfs unless
//! dependencies are downloaded into it; never the host's `~/.config/helm`; no plugins, no
//! post-renderer), no kubeconfig, its HTTP requests sent to a closed port, the render
//! timeout, and its output bounded.
//!
//! In template mode helm's `lookup` returns nothing and no cluster is asked; `.Capabilities`
//! is what berth passes (`--kube-version`, `--api-versions`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::error::ManifestError;
use super::read::{check_links, confined, read_confined, regular_file, CopyError, Unreadable};
use super::tool::{find, Tool};
use crate::config::{AgentConfig, AppConfig, RegistryConfig, RenderMode};

mod remote;

/// Why a chart is refused before helm runs; each names what in the chart.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    /// A values file given as a URL, a list or stdin.
    #[error("values file {0:?} is not a path in the repository (no URL, no comma)")]
    NotAPath(String),
    /// A values file that may not be read.
    #[error("values file {file:?} {why}")]
    ValuesFile {
        /// As the app names it.
        file: String,
        /// Why.
        why: Unreadable,
    },
    /// No helm to run.
    #[error("{0} is not on PATH: install helm, or set [agent] helm to its path")]
    NoHelm(String),
    /// `Chart.yaml` may not be read.
    #[error("{CHART_FILE} {0}")]
    ChartFile(Unreadable),
    /// `Chart.yaml`'s dependencies are not what helm reads.
    #[error("{CHART_FILE}: invalid dependencies: {0}")]
    Dependencies(serde_yaml::Error),
    /// A link out of the checkout, or a tree too large to walk.
    #[error(transparent)]
    Links(#[from] CopyError),
    /// Dependencies helm would download (`allowable`: a repository `[agent]
    /// allow_remote_charts` names could be downloaded).
    #[error("its dependencies {} are not in charts/, and berth downloads no chart: vendor them (run `helm dependency build` in the chart's folder and commit charts/){}", names.join(", "), if *allowable { ", or name their repository in [agent] allow_remote_charts" } else { "" })]
    NotVendored {
        /// Each as `name (repository)`.
        names: Vec<String>,
        /// Whether allowing their repository would do.
        allowable: bool,
    },
}

/// The file that makes a folder a chart.
pub const CHART_FILE: &str = "Chart.yaml";

/// Where helm's HTTP requests go: the discard port on loopback, where nothing listens.
const CLOSED_PROXY: &str = "http://127.0.0.1:9";

/// How an app's charts are rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct Helm {
    /// The helm program; `None`: `helm` on PATH.
    pub command: Option<String>,
    /// How long one render may take.
    pub timeout: Duration,
    /// `.Release.Name`.
    pub release: String,
    /// `.Release.Namespace`.
    pub namespace: String,
    /// Values files, relative to the repository root.
    pub values_files: Vec<String>,
    /// Inline values, as JSON (which helm reads as YAML); none when empty.
    pub values: Option<String>,
    /// `--set-string` values.
    pub set: Vec<(String, String)>,
    /// Render `crds/` too.
    pub include_crds: bool,
    /// Leave out test hooks.
    pub skip_tests: bool,
    /// Every named folder must be a chart (`render = "helm"`).
    pub required: bool,
    /// What the chart sees of the cluster.
    pub capabilities: Capabilities,
    /// Largest file the chart may hold or a values file may be.
    pub max_file_size: u64,
    /// Repositories whose charts a dependency may download (`[agent] allow_remote_charts`).
    pub remote_charts: Arc<[String]>,
    /// Where downloaded dependencies are kept, a folder per `Chart.lock` digest.
    pub chart_cache: PathBuf,
    /// How downloaded dependencies' registries are reached (the app's `[app.registry]`):
    /// its login, CA file and plain HTTP.
    pub registry: RegistryConfig,
    /// The most memory one helm run may have (`[agent] render_memory`).
    pub memory: u64,
}

/// What a chart sees of the cluster (`.Capabilities`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `.Capabilities.KubeVersion` (`v1.20.2`); `None`: helm's own default.
    pub kube_version: Option<String>,
    /// `.Capabilities.APIVersions` beyond helm's built-in ones (`group/version`).
    pub api_versions: Arc<[String]>,
}

impl Capabilities {
    /// The flags that pass them: `--kube-version` and `--api-versions` to helm (`prefix`
    /// `""`), `--helm-kube-version` and `--helm-api-versions` to kustomize (`"helm-"`).
    pub fn args(&self, prefix: &str) -> Vec<OsString> {
        let mut args = Vec::new();
        if let Some(v) = &self.kube_version {
            args.extend([format!("--{prefix}kube-version").into(), v.into()]);
        }
        if !self.api_versions.is_empty() {
            args.extend([
                format!("--{prefix}api-versions").into(),
                self.api_versions.join(",").into(),
            ]);
        }
        args
    }
}

impl Helm {
    /// Renders the chart as release `release` in `namespace`, with the chart's own values,
    /// its CRDs and without its test hooks.
    pub fn new(release: &str, namespace: &str, agent: &AgentConfig) -> Self {
        Helm {
            command: agent.helm.clone(),
            timeout: agent.render_timeout,
            release: release.to_string(),
            namespace: namespace.to_string(),
            values_files: Vec::new(),
            values: None,
            set: Vec::new(),
            include_crds: true,
            skip_tests: true,
            required: false,
            capabilities: Capabilities::default(),
            max_file_size: agent.max_file_size,
            remote_charts: agent.allow_remote_charts.clone().into(),
            chart_cache: agent.state_dir.join("charts"),
            registry: RegistryConfig::default(),
            memory: agent.render_memory,
        }
    }

    /// Whether `app`'s folders may be charts (not with `render = "plain"` or
    /// `"kustomize"`).
    pub fn renders(app: &AppConfig) -> bool {
        !matches!(app.render, RenderMode::Plain | RenderMode::Kustomize)
    }

    /// How `app`'s charts are rendered, or `None` when its folders are never charts.
    pub fn for_app(app: &AppConfig, agent: &AgentConfig) -> Option<Self> {
        if !Self::renders(app) {
            return None;
        }
        let h = &app.helm;
        let release = h.release.as_deref().unwrap_or(&app.name);
        let namespace = h.namespace.as_deref().unwrap_or(&app.namespace);
        Some(Helm {
            values_files: h.values_files.clone(),
            values: (!h.values.is_empty())
                .then(|| serde_json::to_string(&h.values).unwrap_or_default()),
            set: h.set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            include_crds: h.include_crds,
            skip_tests: h.skip_tests,
            required: app.render == RenderMode::Helm,
            registry: app.registry.clone(),
            remote_charts: match app.no_remote_charts {
                true => Arc::from([]),
                false => agent.allow_remote_charts.clone().into(),
            },
            ..Helm::new(release, namespace, agent)
        })
    }

    /// Checks the chart in `dir` (its dependencies vendored, its values files inside
    /// `root`), then renders it; returns helm's output, at most `max_bytes` of it. `root`
    /// is the canonical repository root; `shown` the chart file as errors name it.
    ///
    /// # Errors
    /// [`ManifestError::Chart`]: a dependency to download, a values file outside the
    /// checkout, helm's failure (with its stderr) or its timeout.
    pub fn template(
        &self,
        root: &Path,
        dir: &Path,
        shown: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, ManifestError> {
        let refuse = |message: String| ManifestError::Chart {
            path: shown.to_string(),
            message,
        };
        let refused = |e: ChartError| refuse(e.to_string());
        let missing = missing_dependencies(root, dir, self.max_file_size).map_err(refused)?;
        let to_download = missing
            .iter()
            .filter(|d| !self.remote_charts.contains(&d.repository));
        if let Some(e) = refusal(to_download, true) {
            return Err(refused(e));
        }
        // helm follows links: one out of the checkout would hand it a host file (berth's
        // kubeconfig through `.Files.Get`).
        check_links(root, dir).map_err(|e| refused(e.into()))?;
        let values = self.values_files(root).map_err(refused)?;
        let helm = program(self.command.as_deref()).map_err(refused)?;
        let sandbox = Sandbox::new(!missing.is_empty())
            .map_err(ManifestError::scratch(shown, "cannot make helm's folder"))?;
        let chart = if missing.is_empty() {
            dir.to_path_buf()
        } else {
            let remote = remote::Remote {
                helm: self,
                program: &helm,
                root,
                dir,
                sandbox: &sandbox,
                shown,
            };
            remote.with_dependencies(&missing, max_bytes)?
        };
        let inline = match &self.values {
            Some(inline) => {
                let file = sandbox.path.join("values.json");
                std::fs::write(&file, inline).map_err(ManifestError::scratch(
                    shown,
                    "cannot write the inline values",
                ))?;
                Some(file)
            }
            None => None,
        };
        let args = self.template_args(helm, chart, values.into_iter().chain(inline));
        let mut env = sandbox.env(Some(&self.namespace));
        env.extend([
            ("HTTPS_PROXY", CLOSED_PROXY.into()),
            ("HTTP_PROXY", CLOSED_PROXY.into()),
        ]);
        let tool = Tool {
            command: args,
            dir: root,
            env,
            timeout: self.timeout,
            max_bytes,
            memory: self.memory,
            reach: sandbox.reach(root, false),
        };
        tool.render("helm template", shown)
    }

    /// `helm template`'s command line for `chart`, with `values` files.
    fn template_args(
        &self,
        helm: PathBuf,
        chart: PathBuf,
        values: impl Iterator<Item = PathBuf>,
    ) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            helm.into_os_string(),
            "template".into(),
            self.release.clone().into(),
            chart.into_os_string(),
            "--namespace".into(),
            self.namespace.clone().into(),
        ];
        args.extend(self.capabilities.args(""));
        if self.include_crds {
            args.push("--include-crds".into());
        }
        if self.skip_tests {
            args.push("--skip-tests".into());
        }
        for file in values {
            args.extend(["--values".into(), file.into_os_string()]);
        }
        for (key, value) in &self.set {
            // helm splits --set-string on unescaped commas.
            let value = value.replace(',', "\\,");
            args.extend(["--set-string".into(), format!("{key}={value}").into()]);
        }
        args
    }

    /// The values files, resolved inside `root`.
    fn values_files(&self, root: &Path) -> Result<Vec<PathBuf>, ChartError> {
        self.values_files
            .iter()
            .map(|v| {
                if v.contains("://") || v.contains(',') || v == "-" {
                    return Err(ChartError::NotAPath(v.clone()));
                }
                let unreadable = |why| ChartError::ValuesFile {
                    file: v.clone(),
                    why,
                };
                let resolved = confined(root, &root.join(v)).map_err(unreadable)?;
                regular_file(&resolved, self.max_file_size).map_err(unreadable)?;
                Ok(resolved)
            })
            .collect()
    }
}

/// The helm program: the configured one (`[agent] helm`), else `helm` on PATH.
pub fn program(configured: Option<&str>) -> Result<PathBuf, ChartError> {
    let program = configured.unwrap_or("helm");
    find(program).ok_or_else(|| ChartError::NoHelm(program.to_string()))
}

/// A dependency of a chart, as `Chart.yaml` or `Chart.lock` names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Dependency {
    pub name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub repository: String,
}

/// The dependencies of `Chart.yaml` in `dir` (read inside `root`).
fn dependencies(
    root: &Path,
    dir: &Path,
    max_file_size: u64,
) -> Result<Vec<Dependency>, ChartError> {
    #[derive(serde::Deserialize)]
    struct Chart {
        #[serde(default)]
        dependencies: Option<Vec<Dependency>>,
    }
    let bytes =
        read_confined(root, &dir.join(CHART_FILE), max_file_size).map_err(ChartError::ChartFile)?;
    let chart: Chart = serde_yaml::from_slice(&bytes).map_err(ChartError::Dependencies)?;
    Ok(chart.dependencies.unwrap_or_default())
}

/// The dependencies of the chart in `dir` that its `charts/` does not hold (unpacked, or
/// a `.tgz`): helm would download them.
pub fn missing_dependencies(
    root: &Path,
    dir: &Path,
    max_file_size: u64,
) -> Result<Vec<Dependency>, ChartError> {
    let vendored = vendored(&dir.join("charts"));
    let mut all = dependencies(root, dir, max_file_size)?;
    all.retain(|d| {
        !vendored
            .iter()
            .any(|v| *v == d.name || v.starts_with(&format!("{}-", d.name)))
    });
    Ok(all)
}

/// Why `dependencies` (to download) are refused, and what to do, unless there are none
/// (`allowable`: a repository `[agent] allow_remote_charts` names could be downloaded).
pub fn refusal<'a>(
    dependencies: impl IntoIterator<Item = &'a Dependency>,
    allowable: bool,
) -> Option<ChartError> {
    let names: Vec<String> = dependencies
        .into_iter()
        .map(|d| format!("{} ({})", d.name, d.repository))
        .collect();
    (!names.is_empty()).then_some(ChartError::NotVendored { names, allowable })
}

/// The names in a chart's `charts/` folder (unpacked charts and archives), as helm reads
/// them: names starting with `_` or `.` left out.
fn vendored(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('_') && !n.starts_with('.'))
        .collect()
}

/// Whether `dir` holds a chart.
pub fn chart_in(dir: &Path) -> bool {
    let path = dir.join(CHART_FILE);
    path.symlink_metadata().is_ok() && !path.is_dir()
}

/// The name of a sandbox's folder, before its pid and number.
const SANDBOX_PREFIX: &str = "berth-helm-";

/// A render's private folder: helm's home, config, cache, data and plugins; removed after.
pub(super) struct Sandbox {
    pub(super) path: PathBuf,
}

impl Sandbox {
    /// A new sandbox in the temporary folder; on a tmpfs when there is one and nothing
    /// is `downloaded` into it (where a disk's journal makes its mkdir and rmdir cost
    /// 0.1–0.3 ms each, on the render's path).
    pub(super) fn new(downloaded: bool) -> std::io::Result<Self> {
        let memory = (!downloaded).then(crate::state::memory_dir).flatten();
        let base = memory.unwrap_or_else(std::env::temp_dir);
        // A berth killed mid-render left its sandbox: gone with the first render after.
        crate::state::remove_stale_dirs(&base, SANDBOX_PREFIX);
        let path = crate::state::fresh_private_dir(&base, SANDBOX_PREFIX)?;
        Ok(Sandbox { path })
    }

    /// helm's environment, but for its network: every folder it uses in the sandbox, no
    /// plugins, no kubeconfig, and `HELM_NAMESPACE` when given.
    pub(super) fn env(&self, namespace: Option<&str>) -> Vec<(&'static str, OsString)> {
        let at = |p: &str| self.path.join(p).into_os_string();
        let mut env = vec![
            ("HOME", self.path.clone().into_os_string()),
            ("HELM_CONFIG_HOME", at("config")),
            ("HELM_CACHE_HOME", at("cache")),
            ("HELM_DATA_HOME", at("data")),
            ("HELM_PLUGINS", at("plugins")),
            ("HELM_NO_PLUGINS", "1".into()),
            ("KUBECONFIG", "/dev/null".into()),
            ("DOCKER_CONFIG", at("docker")),
            ("TMPDIR", self.path.clone().into_os_string()),
        ];
        env.extend(namespace.map(|n| ("HELM_NAMESPACE", n.into())));
        env
    }

    /// What a tool run in this sandbox may touch: read `root` (the checkout) and the
    /// sandbox, write the sandbox alone, and connect out over TCP only when `network`.
    pub(super) fn reach(&self, root: &Path, network: bool) -> super::tool::Reach {
        super::tool::Reach {
            read: vec![root.to_path_buf(), self.path.clone()],
            write: vec![self.path.clone()],
            network,
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Each `# Source: <chart>/templates/<file>` line of helm's output, by line number: the
/// template of the document that starts after it.
pub fn sources(output: &[u8]) -> Vec<(usize, String)> {
    const MARK: &[u8] = b"# Source: ";
    let (mut found, mut line, mut counted) = (Vec::new(), 1, 0);
    for at in memchr::memmem::find_iter(output, MARK) {
        if at > 0 && output[at - 1] != b'\n' {
            continue;
        }
        line += memchr::memchr_iter(b'\n', &output[counted..at]).count();
        counted = at;
        let end = memchr::memchr(b'\n', &output[at..]).map_or(output.len(), |n| at + n);
        let template = String::from_utf8_lossy(&output[at + MARK.len()..end]);
        found.push((line, template.trim().to_string()));
    }
    found
}

/// The template a document starting at `line` came from.
pub fn source_of(sources: &[(usize, String)], line: usize) -> Option<&str> {
    let before = sources.partition_point(|(at, _)| *at < line);
    Some(sources.get(before.checked_sub(1)?)?.1.as_str())
}

#[cfg(test)]
mod tests;
