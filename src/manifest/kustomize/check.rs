//! The checks of a kustomization's references before the tool runs: every kustomization
//! it reaches is read and checked in turn; a local reference must resolve inside the
//! checkout, a remote one is refused unless the app allows them, a chart must be in the
//! repository with its dependencies vendored, and a plugin configuration may not ask for
//! a KRM function or an exec plugin.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::references::{charts, is_remote, references, RESOURCE_FIELDS};
use super::{decrypted, kustomization_in, relative, Kustomize};
use crate::manifest::error::ManifestError;
use crate::manifest::helm::{chart_in, missing_dependencies, refusal, ChartError, CHART_FILE};
use crate::manifest::read::{check_links, confined, read_confined, regular_file, Unreadable};

/// Plugin configurations that ask for a KRM function or an exec plugin.
const FUNCTION_MARKERS: [&str; 3] = [
    "config.kubernetes.io/function",
    "config.k8s.io/function",
    "exec:",
];

/// Why a kustomization file cannot be checked.
#[derive(Debug, thiserror::Error)]
enum KustomizationError {
    /// The folder holds none.
    #[error("no kustomization.yaml in this folder")]
    Missing,
    /// It may not be read.
    #[error("{file} {why}")]
    Unreadable { file: &'static str, why: Unreadable },
    /// It is not YAML.
    #[error("invalid YAML: {0}")]
    Yaml(serde_yaml::Error),
    /// It asks for the deprecated Helm generator.
    #[error("helmChartInflationGenerator: the deprecated Helm generator is not supported; use helmCharts")]
    InflationGenerator,
}

/// Why one entry of a kustomization is refused, shown after its field and the entry
/// (`resources: "../x" is a folder without a kustomization`).
#[derive(Debug, thiserror::Error)]
enum EntryError {
    /// It does not resolve to a file berth may read.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// The chart it names reads outside the checkout or needs a download.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// A `helmCharts` folder without a chart.
    #[error("holds no {}", CHART_FILE)]
    NoChart,
    /// Something to fetch where a path is wanted.
    #[error("is not a path in the repository")]
    NotAPath,
    /// A folder kustomize could not build.
    #[error("is a folder without a kustomization")]
    NoKustomization,
    /// A file encrypted with sops, in an app that decrypts nothing.
    #[error("is encrypted with sops, and the app decrypts nothing: set [app.decrypt] provider = \"sops\" with the keys that open it")]
    Encrypted,
    /// A plugin configuration that asks for a function or an exec plugin.
    #[error("asks for a KRM function or exec plugin; plugins are not enabled in berth")]
    Plugin,
}

impl Kustomize {
    /// Checks one kustomization and, recursively, the ones it reaches; whether any of them
    /// inflates a chart. The files encrypted with sops that they read go to `encrypted`.
    pub(super) fn check(
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
        let doc = self
            .kustomization(root, dir)
            .map_err(|e| refuse(e.to_string()))?;
        let charts = charts(&doc).map_err(|e| refuse(e.to_string()))?;
        let mut inflates = !charts.is_empty();
        for (field, entry) in charts {
            self.check_chart(root, &dir.join(&entry), &field)
                .map_err(|e| refuse(format!("{field}: {entry:?} {e}")))?;
        }
        for (field, entry) in references(&doc) {
            let refuse_entry = |e: EntryError| refuse(format!("{field}: {entry:?} {e}"));
            if is_remote(&entry) {
                if !RESOURCE_FIELDS.contains(&field.as_str()) {
                    return Err(refuse_entry(EntryError::NotAPath));
                }
                if self.allow_remote {
                    continue;
                }
                return Err(refuse(format!(
                    "{field}: remote resource {entry:?} refused (set allow_remote_bases = true in the app to allow it)"
                )));
            }
            let resolved = confined(root, &dir.join(&entry)).map_err(|e| refuse_entry(e.into()))?;
            if resolved.is_dir() {
                let inner = kustomization_in(&resolved)
                    .ok_or_else(|| refuse_entry(EntryError::NoKustomization))?;
                let inner_shown = relative(root, &resolved.join(inner));
                inflates |= self.check(root, &resolved, &inner_shown, seen, encrypted)?;
            } else if self
                .check_file(root, &resolved, &field)
                .map_err(refuse_entry)?
            {
                encrypted.push(resolved);
            }
        }
        Ok(inflates)
    }

    /// The kustomization in `dir`, read under the render's rules; one that asks for the
    /// deprecated Helm generator is refused.
    fn kustomization(&self, root: &Path, dir: &Path) -> Result<Value, KustomizationError> {
        let file = kustomization_in(dir).ok_or(KustomizationError::Missing)?;
        let bytes = read_confined(root, &dir.join(file), self.max_file_size)
            .map_err(|why| KustomizationError::Unreadable { file, why })?;
        let doc: Value = serde_yaml::from_slice(&bytes).map_err(KustomizationError::Yaml)?;
        if doc.get("helmChartInflationGenerator").is_some() {
            return Err(KustomizationError::InflationGenerator);
        }
        Ok(doc)
    }

    /// Checks what one `helmCharts` entry reads (`field` says which): a chart's folder
    /// inside the checkout, links and all, with its dependencies vendored — kustomize runs
    /// helm on the chart as it is, so nothing is downloaded — or a values file.
    fn check_chart(&self, root: &Path, path: &Path, field: &str) -> Result<(), EntryError> {
        let resolved = confined(root, path)?;
        if field != "helmCharts" {
            return Ok(regular_file(&resolved, self.max_file_size)?);
        }
        if !chart_in(&resolved) {
            return Err(EntryError::NoChart);
        }
        check_links(root, &resolved).map_err(ChartError::from)?;
        let missing = missing_dependencies(root, &resolved, self.max_file_size)?;
        refusal(&missing, false).map_or(Ok(()), |e| Err(e.into()))
    }

    /// Checks a file a kustomization reads through `field`: the same bounds as any file
    /// of the render, as kustomize reads it; encrypted with sops only when the app
    /// decrypts; a plugin configuration asking for no KRM function or exec plugin.
    /// Whether it is encrypted.
    fn check_file(&self, root: &Path, file: &Path, field: &str) -> Result<bool, EntryError> {
        regular_file(file, self.max_file_size)?;
        let encrypted = decrypted::is_encrypted(root, file, self.max_file_size);
        if encrypted && self.decrypt.is_none() {
            return Err(EntryError::Encrypted);
        }
        if ["transformers", "generators", "validators"].contains(&field) && file.is_file() {
            let config = read_confined(root, file, self.max_file_size)?;
            let config = String::from_utf8_lossy(&config);
            if FUNCTION_MARKERS.iter().any(|m| config.contains(m)) {
                return Err(EntryError::Plugin);
            }
        }
        Ok(encrypted)
    }
}
