//! What a kustomization names, read from its YAML: its local and remote references with
//! their fields, and what its `helmCharts` read; a reference that kustomize could fetch
//! rather than read as a path is told apart ([`is_remote`]).

use serde_yaml::Value;

/// Fields whose entries are paths (or, for resources-like fields, remote references).
pub(super) const RESOURCE_FIELDS: [&str; 3] = ["resources", "bases", "components"];
/// Fields whose entries are paths of files.
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

/// Every local or remote reference of a kustomization, with its field.
pub(super) fn references(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for field in RESOURCE_FIELDS.into_iter().chain(FILE_FIELDS) {
        for entry in strings(doc.get(field)) {
            // An inline patch or plugin configuration is YAML, not a path.
            if !entry.contains('\n') {
                out.push((field.to_string(), entry));
            }
        }
    }
    for field in PATH_OBJECT_FIELDS {
        for item in sequence(doc.get(field)) {
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
    out.extend(generator_references(doc));
    out
}

/// The files and env files of a kustomization's `configMapGenerator` and
/// `secretGenerator`, with their field (`secretGenerator.files`, …).
fn generator_references(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for field in ["configMapGenerator", "secretGenerator"] {
        for generator in sequence(doc.get(field)) {
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

/// The items of a field that is a sequence (none when it is absent or not one).
fn sequence(v: Option<&Value>) -> impl Iterator<Item = &Value> {
    v.and_then(Value::as_sequence).into_iter().flatten()
}

/// The strings of a field that is a sequence (its other items skipped).
fn strings(v: Option<&Value>) -> Vec<String> {
    sequence(v)
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Why a kustomization's `helmCharts` are refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum HelmChartsError {
    /// Helm's own config folder, which berth gives helm.
    #[error("helmGlobals.configHome: berth gives helm a private folder of its own; leave it out")]
    ConfigHome,
    /// A chart without a name.
    #[error("helmCharts: an entry without a name")]
    NoName,
    /// A chart to download.
    #[error("helmCharts: {name} from {repo}: berth downloads no chart; vendor it in {home}/{name} (`helm pull {name} --repo {repo} --untar --untardir {home}`) and leave repo out")]
    Remote {
        name: String,
        repo: String,
        home: String,
    },
    /// A values file that is a URL.
    #[error("helmCharts: {name}: values file {file:?} is not a path in the repository")]
    ValuesUrl { name: String, file: String },
}

/// What a kustomization's `helmCharts` read, with their field: each chart's folder
/// (`chartHome/name`) and values files. A chart to download (`repo`), a values file that
/// is a URL and helm's own config folder (`helmGlobals.configHome`) are refused.
pub(super) fn charts(doc: &Value) -> Result<Vec<(String, String)>, HelmChartsError> {
    let globals = doc.get("helmGlobals");
    if globals.and_then(|g| g.get("configHome")).is_some() {
        return Err(HelmChartsError::ConfigHome);
    }
    let home = globals
        .and_then(|g| g.get("chartHome"))
        .and_then(Value::as_str)
        .unwrap_or("charts");
    let mut out = Vec::new();
    for chart in sequence(doc.get("helmCharts")) {
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
        let values = chart
            .get("valuesFile")
            .into_iter()
            .chain(sequence(chart.get("additionalValuesFiles")));
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
pub(super) fn is_remote(entry: &str) -> bool {
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
