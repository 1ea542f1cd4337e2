//! `berth render`: the manifest pipeline on a folder, a file or stdin, without a cluster.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use berth::config::is_kube_version;
use berth::config::{
    compile_globs, AgentConfig, ChartSource, OciSource, RegistryConfig, SourceRef,
};
use berth::diff::mask_secret_values;
use berth::manifest::decrypt::{mask, Decryption};
use berth::manifest::helm::{chart_in, Helm};
use berth::manifest::kustomize::kustomization_in;
use berth::manifest::source::{PathSource, Stdin};
use berth::manifest::{Builder, BuiltinScopes, ErrorPolicy, Input, Kustomize, Limits, Manifest};
use berth::source::registry::{self, archive::ArchiveLimits, Wanted};

/// Arguments of `berth render`.
#[derive(clap::Args)]
pub struct Args {
    /// A folder (walked recursively), a file, - for stdin, or an OCI artifact or chart
    /// (`oci://host/repository:tag`, `…@sha256:…`; no tag: the newest version).
    pub path: PathBuf,
    /// Render the chart PATH names from this Helm repository (as `helm template --repo`).
    #[arg(long)]
    pub repo: Option<String>,
    /// With --repo (or an oci:// reference without a tag): the chart's version or range.
    #[arg(long = "version")]
    pub chart_version: Option<String>,
    /// For oci:// and --repo: a Docker config.json with the registry's login.
    #[arg(long)]
    pub registry_credentials: Option<PathBuf>,
    /// For oci:// and --repo: PEM certificates trusted beside the system's roots.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// For oci:// and --repo: allow plain HTTP.
    #[arg(long)]
    pub insecure: bool,
    /// For oci://: the artifact must carry a cosign signature by this public key
    /// (repeatable: one of them).
    #[arg(long = "cosign-key")]
    pub cosign_keys: Vec<PathBuf>,
    /// How the files' origins are shown (an oci:// reference for a fetched artifact).
    #[arg(skip)]
    pub shown_root: Option<String>,
    /// What a kustomization may reach (`../base`): nothing outside it is read. Default: the
    /// git repository holding the folder, else the current folder.
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Namespace for namespaced objects that name none.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Add the ownership label of this app.
    #[arg(long)]
    pub app: Option<String>,
    /// Only objects whose Kind/name matches (repeatable).
    #[arg(long = "include-objects")]
    pub include_objects: Vec<String>,
    /// Leave out objects whose Kind/name matches (repeatable).
    #[arg(long = "exclude-objects")]
    pub exclude_objects: Vec<String>,
    /// Stop at the first error instead of reporting all of them.
    #[arg(long)]
    pub fail_fast: bool,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Yaml)]
    pub output: Output,
    /// Print Secret values (masked as `***` otherwise).
    #[arg(long)]
    pub show_secrets: bool,
    /// A chart's release name. Default: --app, else the chart's folder name.
    #[arg(long)]
    pub release: Option<String>,
    /// A values file for a chart (repeatable), inside --root.
    #[arg(short = 'f', long = "values")]
    pub values: Vec<PathBuf>,
    /// The Kubernetes version a chart is rendered for (`.Capabilities.KubeVersion`, such as
    /// 1.31). Default: helm's own.
    #[arg(long)]
    pub kube_version: Option<String>,
    /// A group/version (or group/version/Kind) the cluster serves, for a chart's
    /// `.Capabilities.APIVersions` (repeatable).
    #[arg(long = "api-versions")]
    pub api_versions: Vec<String>,
    /// An age identity file that opens files encrypted with sops (repeatable; default:
    /// $SOPS_AGE_KEY_FILE, as sops).
    #[arg(long = "age-key-file", env = "SOPS_AGE_KEY_FILE")]
    pub age_key_files: Vec<PathBuf>,
    /// An ASCII-armored OpenPGP secret key file that opens files encrypted with sops
    /// (repeatable).
    #[arg(long = "openpgp-key-file")]
    pub openpgp_key_files: Vec<PathBuf>,
    /// The file holding the OpenPGP keys' passphrase.
    #[arg(long)]
    pub openpgp_passphrase_file: Option<PathBuf>,
    /// A kind besides Secret that may hold decrypted values (repeatable).
    #[arg(long = "allow-decrypted-in")]
    pub allow_decrypted_in: Vec<String>,
}

/// How objects are printed.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Output {
    /// A YAML stream, each object under a `# Source:` comment; every string that a YAML
    /// 1.1 parser (kubectl's) would read as a boolean, null or number is quoted.
    Yaml,
    /// One JSON object a line.
    Json,
}

/// Runs `berth render`.
pub fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    if let Some(v) = args.kube_version.as_deref().filter(|v| !is_kube_version(v)) {
        anyhow::bail!("--kube-version {v:?} is not a Kubernetes version such as 1.31 or v1.31.2");
    }
    // An artifact's files live in a scratch folder as long as the render.
    let reference = args.path.to_str().filter(|p| p.starts_with("oci://"));
    let _scratch = match (reference.map(str::to_string), args.repo.clone()) {
        (Some(reference), _) => {
            let (url, pick) = split_reference(&reference);
            let source = OciSource {
                url: url.to_string(),
                version: args.chart_version.clone().filter(|_| pick.is_none()),
                tag: pick.and_then(|p| p.strip_prefix(':')).map(str::to_string),
                digest: pick.and_then(|p| p.strip_prefix('@')).map(str::to_string),
            };
            Some(fetch_into(SourceRef::Oci(&source), &mut args)?)
        }
        (None, Some(repository)) => {
            let chart = ChartSource {
                repository,
                name: args.path.display().to_string(),
                version: args.chart_version.clone().unwrap_or_else(|| "*".into()),
            };
            Some(fetch_into(SourceRef::Chart(&chart), &mut args)?)
        }
        (None, None) => None,
    };
    let input = input(&args)?;
    let builder = Builder {
        input,
        namespace: args.namespace,
        app: args.app,
        commit: None,
        include_objects: compile_globs(&args.include_objects).context("--include-objects")?,
        exclude_objects: compile_globs(&args.exclude_objects).context("--exclude-objects")?,
        policy: if args.fail_fast {
            ErrorPolicy::FailFast
        } else {
            ErrorPolicy::CollectAll
        },
        scopes: &BuiltinScopes,
        confinement: None,
    }
    .capabilities(args.kube_version.as_deref(), args.api_versions.into());
    match builder.render() {
        Ok(manifests) => {
            let printed = print(&manifests, args.output, args.show_secrets);
            // The process ends here: freeing the objects one by one is work for nothing.
            std::mem::forget(manifests);
            match printed {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
                result => result.map(|()| ExitCode::SUCCESS).map_err(Into::into),
            }
        }
        // A lone error names its file; several are listed under the path rendered.
        Err(e @ berth::manifest::ManifestError::Many(_)) => {
            eprintln!("error: {}: {e}", args.path.display());
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The source visitor for a path argument: origins show the path as the user typed it.
fn input(args: &Args) -> anyhow::Result<Input> {
    let (path, root) = (args.path.as_path(), args.root.as_deref());
    if path.as_os_str() == "-" {
        return Ok(Input::Stdin(Stdin {
            limits: Limits::default(),
            decrypt: decryption(args),
        }));
    }
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    let chart = meta.is_dir() && chart_in(path);
    let (root, paths) = if meta.is_dir() && (kustomization_in(path).is_some() || chart) {
        // A kustomization may reach sibling folders (`../base`), a chart values files
        // beside it: its root is --root, else the git repository it is in, else the
        // current folder.
        let root = match (root, repository_of(path)) {
            (Some(root), _) => root.to_path_buf(),
            (None, Some(top)) => top,
            (None, None) => {
                eprintln!(
                    "note: {} is in no git repository: it may reach what is under the current folder (--root sets another)",
                    path.display()
                );
                PathBuf::from(".")
            }
        };
        within(path, &root)?
    } else if meta.is_dir() {
        // Read from the repository's root, so that origins and the `exclude` hint are
        // written as an app's paths are: relative to the repository.
        match root.map(Path::to_path_buf).or_else(|| repository_of(path)) {
            Some(root) => within(path, &root)?,
            None => (path.to_path_buf(), vec![".".to_string()]),
        }
    } else {
        let name = path.file_name().context("a file path needs a file name")?;
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (
            parent.to_path_buf(),
            vec![name.to_string_lossy().into_owned()],
        )
    };
    Ok(Input::Paths(Box::new(PathSource {
        prefix: match &args.shown_root {
            Some(shown) => shown.clone(),
            None if root == Path::new(".") => String::new(),
            None => root.display().to_string(),
        },
        paths,
        include: None,
        exclude: None,
        limits: Limits::default(),
        kustomize: Some(Kustomize {
            decrypt: decryption(args),
            ..Kustomize::new(None, AgentConfig::default().render_timeout)
        }),
        helm: Some(helm(args, chart, &root)?),
        root,
        allow_empty: false,
        decrypt: decryption(args),
    })))
}

/// A scratch folder, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fetches `source` (an OCI artifact, a chart) into a scratch folder and points `args` at
/// it: its files are rendered as a local folder's (a chart's folder, when it holds one).
fn fetch_into(source: SourceRef<'_>, args: &mut Args) -> anyhow::Result<Scratch> {
    let registry = RegistryConfig {
        credentials: args.registry_credentials.clone(),
        ca_file: args.ca_file.clone(),
        insecure: args.insecure,
    };
    let wanted = Wanted {
        source,
        registry: &registry,
        cosign_keys: &args.cosign_keys,
    };
    let scratch =
        Scratch(std::env::temp_dir().join(format!("berth-render-{}", std::process::id())));
    berth::state::private_dir(&scratch.0).with_context(|| scratch.0.display().to_string())?;
    let limits = ArchiveLimits::of(&AgentConfig::default());
    let checkout = registry::fetch_blocking(wanted, &scratch.0, limits)
        .map_err(|e| anyhow::anyhow!("{}", berth::Chain(&e)))?;
    if let SourceRef::Chart(chart) = source {
        args.release.get_or_insert(chart.name.clone());
    }
    let origin = source.origin();
    eprintln!("note: {origin} at {}", checkout.commit.short());
    let digest = checkout.commit.sha.rsplit('@').next().unwrap_or_default();
    args.shown_root = Some(format!("{origin}@{digest}"));
    args.root = Some(checkout.dir.clone());
    // An OCI chart's archive holds its folder: that is what is rendered.
    let folders: Vec<_> = std::fs::read_dir(&checkout.dir)?.flatten().collect();
    args.path = match folders.as_slice() {
        [only] if chart_in(&only.path()) => only.path(),
        _ => checkout.dir,
    };
    Ok(scratch)
}

/// `oci://host/repo:tag` as the repository and `:tag` (or `@sha256:…`), when given.
fn split_reference(reference: &str) -> (&str, Option<&str>) {
    let last = reference.rfind('/').unwrap_or(0);
    let at = reference[last..].find(['@', ':']).map(|i| last + i);
    match at {
        Some(i) => (&reference[..i], Some(&reference[i..])),
        None => (reference, None),
    }
}

/// How files encrypted with sops are opened: with the keys given, if any.
fn decryption(args: &Args) -> Option<Decryption> {
    (!args.age_key_files.is_empty() || !args.openpgp_key_files.is_empty()).then(|| Decryption {
        age_key_files: args.age_key_files.clone(),
        openpgp_key_files: args.openpgp_key_files.clone(),
        openpgp_passphrase_file: args.openpgp_passphrase_file.clone(),
        allow_in: args.allow_decrypted_in.clone(),
    })
}

/// How a chart is rendered: `--release`, `--values`, in `--namespace`.
fn helm(args: &Args, chart: bool, root: &Path) -> anyhow::Result<Helm> {
    let folder = args.path.canonicalize()?;
    let top = root.canonicalize()?;
    let release = match (&args.release, &args.app) {
        (Some(r), _) | (None, Some(r)) => r.clone(),
        (None, None) => folder
            .file_name()
            .map_or("release".into(), |n| n.to_string_lossy().into_owned()),
    };
    let values_files = args
        .values
        .iter()
        .map(|v| {
            let full = v
                .canonicalize()
                .with_context(|| format!("cannot read {}", v.display()))?;
            let rel = full.strip_prefix(&top).map_err(|_| {
                anyhow::anyhow!(
                    "{} is not inside {} (--root names the folder a chart may reach)",
                    v.display(),
                    root.display()
                )
            })?;
            Ok(rel.to_string_lossy().into_owned())
        })
        .collect::<anyhow::Result<_>>()?;
    if chart && args.kube_version.is_none() {
        eprintln!("note: the chart is rendered for helm's default Kubernetes version (--kube-version sets your cluster's)");
    }
    Ok(Helm {
        values_files,
        ..Helm::new(&release, &args.namespace, &AgentConfig::default())
    })
}

/// `root` and `dir` relative to it, both as shown (`root` as given).
///
/// # Errors
/// `dir` is not inside `root`.
fn within(dir: &Path, root: &Path) -> anyhow::Result<(PathBuf, Vec<String>)> {
    let (full, top) = (dir.canonicalize()?, root.canonicalize()?);
    let rel = full.strip_prefix(&top).map_err(|_| {
        anyhow::anyhow!(
            "{} is not inside {} (--root names the folder a kustomization may reach)",
            dir.display(),
            root.display()
        )
    })?;
    let rel = rel.to_string_lossy();
    let rel = if rel.is_empty() {
        ".".into()
    } else {
        rel.into_owned()
    };
    Ok((root.to_path_buf(), vec![rel]))
}

/// The git repository holding `dir`, shown as `.` when it is the current folder.
fn repository_of(dir: &Path) -> Option<PathBuf> {
    let dir = dir.canonicalize().ok()?;
    let top = dir.ancestors().find(|a| a.join(".git").exists())?;
    let cwd = std::env::current_dir().ok()?.canonicalize().ok()?;
    Some(if cwd == top {
        PathBuf::from(".")
    } else {
        top.to_path_buf()
    })
}

fn print(manifests: &[Manifest], output: Output, show_secrets: bool) -> std::io::Result<()> {
    use std::io::Write;
    // In 64 KiB writes: a chart's render goes out in one or a few.
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    for m in manifests {
        let secret = m.kind() == "Secret";
        // Decrypted values show with --show-secrets, and only in a Secret; an object with
        // nothing to mask is printed as it is.
        let masked = (secret && !show_secrets || !m.decrypted.is_empty()).then(|| {
            let mut object = serde_json::Value::Object(m.object.clone());
            if !show_secrets {
                mask_secret_values(&mut object);
            }
            if !show_secrets || !secret {
                mask(&mut object, &m.decrypted);
            }
            object
        });
        let object = match &masked {
            Some(serde_json::Value::Object(map)) => map,
            _ => &m.object,
        };
        match output {
            Output::Yaml => {
                let yaml = berth::manifest::emit::object_to_yaml(object);
                write!(out, "---\n# Source: {}\n{yaml}", m.origin)?;
            }
            Output::Json => writeln!(out, "{}", serde_json::to_string(object)?)?,
        }
    }
    out.flush()
}
