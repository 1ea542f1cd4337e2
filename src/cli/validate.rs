//! `berth validate`: load and check the configuration, then render what a sync would: each
//! app's configured ref, fetched into the repository's cache as a sync fetches it (or a
//! folder given with `--dir`, such as a working tree), without a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use berth::config::{self, AppConfig, AppSetConfig, Config, GitRef, SourceRef};
use berth::manifest::helm::{chart_in, Helm};
use berth::manifest::{Builder, BuiltinScopes, Manifest};
use berth::notifications;
use berth::source::verify::Trust;
use berth::source::{folders, git};

/// Arguments of `berth validate`.
#[derive(clap::Args)]
pub struct Args {
    /// Render every app from this folder (a working tree, say) instead of the commit its
    /// configured ref names.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Runs `berth validate`.
pub fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = config::load(config_path)?;
    if args.dir.is_none() {
        // It fetches each app's commit into state_dir.
        super::own_state(&config, "validate")?;
    }
    let mut failed = !trusted_keys(&config) | !receivers(&config);
    let mut generated_apps = Vec::new();
    for set in &config.app_sets {
        match generated(&config, set, args.dir.as_ref()) {
            Some((made, refused)) => {
                generated_apps.extend(made);
                failed |= refused > 0;
            }
            None => failed = true,
        }
    }
    for refused in berth::fleet::refuse_clashes(&config.apps, &mut generated_apps) {
        println!("{refused}");
        failed = true;
    }
    // Every app it runs, written or generated, counted once the sets are listed.
    let sets = match generated_apps.len() {
        0 if config.app_sets.is_empty() => String::new(),
        made => format!(": {} written, {made} from app sets", config.apps.len()),
    };
    println!(
        "config {}: ok ({}{sets})",
        config_path.display(),
        berth::plural(config.apps.len() + generated_apps.len(), "app")
    );
    let mut apps = config.apps.clone();
    apps.extend(generated_apps);
    for app in &apps {
        failed |= !renders(&config, app, args.dir.as_ref());
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// What `set` lists: the folders of `root` its globs match, and its remote's refs (not
/// with `--dir`: a folder stands for the repository, and no remote is asked).
fn listed_at(
    set: &AppSetConfig,
    sample: &AppConfig,
    root: &std::path::Path,
    dir: bool,
) -> anyhow::Result<berth::fleet::Listed> {
    let folders = match set.folder_globs()? {
        Some(globs) => folders::matching(root, &globs, set.folder_depth())?,
        None => Vec::new(),
    };
    let refs = match (set.ref_globs()?, dir) {
        (Some(globs), false) => berth::source::git::matching_refs(sample, &globs)?,
        (Some(_), true) => {
            println!("app set {}: its refs are not listed with --dir", set.name);
            Vec::new()
        }
        (None, _) => Vec::new(),
    };
    let now = jiff::Timestamp::now();
    let folder = |path| berth::fleet::Folder {
        path,
        tree: String::new(),
    };
    let found = |(name, sha)| berth::config::FoundRef {
        name,
        sha,
        since: now,
    };
    Ok(berth::fleet::Listed {
        commit: String::new(),
        folders: folders.into_iter().map(folder).collect(),
        refs: refs.into_iter().map(found).collect(),
    })
}

/// The apps `set` generates from the folders of its repository's commit (or `--dir`),
/// listed (set, app, cluster, path, namespace) so that a change to a set can be reviewed,
/// with how many it makes that are refused (said); `None`, said why, when it cannot make
/// them.
fn generated(
    config: &Config,
    set: &AppSetConfig,
    dir: Option<&PathBuf>,
) -> Option<(Vec<std::sync::Arc<AppConfig>>, usize)> {
    let said = |e: &dyn std::fmt::Display| {
        let text = e.to_string();
        match text.starts_with(&format!("app set {}", set.name)) {
            true => println!("{text}"),
            false => println!("app set {}: {text}", set.name),
        }
        None
    };
    let sample = match set.sample(&config.cluster) {
        Ok(Some(sample)) => sample,
        Ok(None) => return said(&"it selects no cluster"),
        Err(e) => return said(&e),
    };
    let (root, shown) = source_of(config, &sample, &format!("app set {}", set.name), dir)?;
    let listed = match listed_at(set, &sample, &root, dir.is_some()) {
        Ok(listed) => listed,
        Err(e) => return said(&e),
    };
    let (apps, refused) = match berth::fleet::made(config, set, &listed) {
        Ok(made) => made,
        Err(e) => return said(&e),
    };
    for r in &refused {
        println!("{r}");
    }
    println!(
        "app set {}: {} from {shown}",
        set.name,
        berth::plural(apps.len(), "app")
    );
    let head = ["SET", "APP", "CLUSTER", "PATH", "NAMESPACE"].map(String::from);
    let rows = std::iter::once(head).chain(apps.iter().map(|a| {
        let cluster = a.cluster.clone().unwrap_or_default();
        let row = [
            &set.name,
            &a.name,
            &cluster,
            &a.path.join(","),
            &a.namespace,
        ];
        row.map(|cell| cell.to_string())
    }));
    if !apps.is_empty() {
        print!("{}", super::history::table(&rows.collect::<Vec<_>>()));
    }
    Some((apps, refused.len()))
}

/// Renders one app as a sync would and says what it made; false when it cannot.
fn renders(config: &Config, app: &AppConfig, dir: Option<&PathBuf>) -> bool {
    let Some((root, shown)) = source_of(config, app, &format!("app {}", app.name), dir) else {
        return false;
    };
    let kube_version = config.cluster_of(app).kube_version.as_deref();
    let rendered = Builder::for_app(app, &config.agent, &root, &BuiltinScopes)
        .map_err(anyhow::Error::from)
        .and_then(|b| Ok(b.capabilities(kube_version, Vec::new().into()).render()?));
    if kube_version.is_none()
        && Helm::renders(app)
        && app.path.iter().any(|p| chart_in(&root.join(p)))
    {
        println!("app {}: note: its chart is rendered for helm's default Kubernetes version ([cluster] kube_version sets your cluster's)", app.name);
    }
    match rendered {
        Ok(manifests) => {
            println!(
                "app {}: {} from {shown} ({})",
                app.name,
                berth::plural(manifests.len(), "object"),
                kinds(&manifests)
            );
            true
        }
        Err(e) => {
            println!("app {}: {shown} — {e}", app.name);
            false
        }
    }
}

/// The folder an app renders from and its name (`--dir`, or its ref fetched); None, said
/// why (as `who`: `app NAME`, `app set NAME`).
fn source_of(
    config: &Config,
    app: &AppConfig,
    who: &str,
    dir: Option<&PathBuf>,
) -> Option<(PathBuf, String)> {
    let local = match app.source() {
        SourceRef::Git(repo) => git::local_path(repo),
        _ => None,
    };
    if let (None, Some(path)) = (dir, local) {
        if !path.exists() {
            println!("{who}: repository path {} does not exist", path.display());
            return None;
        }
    }
    match dir {
        Some(dir) => Some((dir.clone(), dir.display().to_string())),
        None => match berth::source::fetch_now(app, &config.agent) {
            Ok(checkout) => {
                let shown = format!("{} at {}", what(app), checkout.commit.short());
                Some((checkout.dir, shown))
            }
            Err(e) => {
                println!("{who}: {}", berth::Chain(&e));
                None
            }
        },
    }
}

/// Reads each app's `[app.verify]` keys; false when one cannot be used.
fn trusted_keys(config: &Config) -> bool {
    let mut ok = true;
    for app in &config.apps {
        match Trust::load(&app.verify) {
            Ok(None) => {}
            Ok(Some(trust)) => {
                let (openpgp, ssh) = trust.counts();
                println!(
                    "app {}: commits must be signed by one of {} and {}",
                    app.name,
                    berth::plural(openpgp, "OpenPGP key"),
                    berth::plural(ssh, "SSH signer")
                );
            }
            Err(e) => {
                ok = false;
                println!("app {}: [app.verify] {}", app.name, berth::Chain(&e));
            }
        }
    }
    ok
}

/// Reads each `[[notify]]` receiver's address and secrets; false when one cannot be used.
fn receivers(config: &Config) -> bool {
    let mut ok = true;
    for (i, n) in config.notify.iter().enumerate() {
        match notifications::secrets(n, i) {
            Ok(s) => {
                let events: Vec<&str> = n.events.iter().map(|e| e.as_str()).collect();
                println!(
                    "{}: {:?} receiver, events {}{}",
                    s.name,
                    n.format,
                    events.join(", "),
                    if s.secret.is_some() { ", signed" } else { "" }
                );
            }
            Err(e) => {
                ok = false;
                println!("{e}");
            }
        }
    }
    ok
}

/// The ref the app follows (or the registry source), as a sync names it.
fn what(app: &AppConfig) -> String {
    if !matches!(app.source(), SourceRef::Git(_)) {
        return app.origin();
    }
    match app.git_ref() {
        GitRef::DefaultBranch => "the default branch".into(),
        GitRef::Branch(b) => format!("branch {b}"),
        GitRef::Tag(t) => format!("tag {t}"),
        GitRef::Commit(c) => format!("commit {c}"),
        GitRef::Ref(r) => format!("ref {r}"),
    }
}

fn kinds(manifests: &[Manifest]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for m in manifests {
        *counts.entry(m.kind()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}
