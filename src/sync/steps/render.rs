//! The render step: the cluster's kinds from the agent's shared discovery, the commit
//! through the manifest pipeline (kustomize, typed checks, `[app.scope]`), what the render
//! read, and the refusal to prune everything when a commit renders nothing.

use std::path::Path;
use std::sync::Arc;

use crate::cluster::discovery::ClusterKinds;
use crate::manifest::helm::Helm;
use crate::manifest::{kustomize, yaml11, Builder, Manifest, ManifestError};
use crate::plan::Inventory;
use crate::source::git::Checkout;
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;
use crate::sync::inputs::Inputs;
use crate::sync::progress::Level;

/// What the render step made of a commit.
pub(in crate::sync) struct Rendered {
    /// The commit's objects.
    pub manifests: Vec<Manifest>,
    /// The kinds they were resolved against.
    pub kinds: Arc<ClusterKinds>,
    /// What the render read (the app's paths and what its kustomizations reach).
    pub inputs: Option<Inputs>,
}

/// Renders the commit against the cluster's kinds; a kind the shared discovery does not
/// know may be new since it ran, so it is discovered again once.
pub(in crate::sync) async fn render(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    journal: &mut Journal<'_>,
) -> Result<Rendered, Stop> {
    let (mut kinds, discovered) = ctx.discover(None, journal).await?;
    let errors = journal.errors.len();
    let mut manifests = render_with(ctx, checkout, &kinds, journal).await?;
    // A plan that went on past render errors has them in the journal already.
    let whole = journal.errors.len() == errors;
    if whole && discovered < ctx.begun && manifests.iter().any(|m| kinds.resolve(m).is_none()) {
        kinds = ctx.discover(Some(ctx.begun), journal).await?.0;
        manifests = render_with(ctx, checkout, &kinds, journal).await?;
    }
    Ok(Rendered {
        manifests,
        kinds,
        inputs: inputs_of(ctx, checkout),
    })
}

/// The values kubectl would read otherwise than berth (`DEBUG: yes`, see [`yaml11`]),
/// in words; only the files of objects holding such a value are read again, no further
/// than the render read them (`limit`).
fn yaml11_warnings(dir: &Path, manifests: &[Manifest], limit: u64) -> Vec<String> {
    use std::io::Read;
    let mut warnings = Vec::new();
    for m in manifests
        .iter()
        .filter(|m| !yaml11::candidates(m).is_empty())
    {
        let mut text = String::new();
        let path = dir.join(&m.origin.path);
        let read = std::fs::File::open(path).and_then(|f| f.take(limit).read_to_string(&mut text));
        if read.is_ok() {
            warnings.extend(yaml11::warnings(m, &text));
        }
    }
    warnings
}

/// What the manifest pipeline made of a commit: the objects, the errors, and the warnings
/// of values kubectl would read otherwise.
struct Pipeline {
    manifests: Vec<Manifest>,
    errors: Vec<ManifestError>,
    warnings: Vec<String>,
}

/// Runs the manifest pipeline on a thread of its own at a lower priority, not on the
/// async workers (`crate::blocking::in_background`): reading and decoding the files,
/// decrypting them, kustomize's and helm's runs. At most `agent.max_concurrent_syncs`
/// run at once, one per sync.
async fn run_pipeline(
    ctx: &Ctx<'_>,
    dir: &Path,
    kinds: &Arc<ClusterKinds>,
) -> Result<Pipeline, globset::Error> {
    let (app, agent) = (ctx.app.clone(), ctx.syncer.agent.clone());
    let (dir, kinds) = (dir.to_path_buf(), kinds.clone());
    crate::blocking::in_background("berth-render", move || {
        let builder = Builder::for_app(&app, &agent, &dir, &*kinds)?;
        let builder = builder.capabilities(kinds.version(), kinds.api_versions());
        let (manifests, errors) = builder.render_partial();
        let warnings = match errors.is_empty() {
            true => yaml11_warnings(&dir, &manifests, agent.max_file_size),
            false => Vec::new(),
        };
        Ok(Pipeline {
            manifests,
            errors,
            warnings,
        })
    })
    .await
}

/// The commit's objects through the manifest pipeline; every error of a broken commit is
/// recorded.
pub(in crate::sync) async fn render_with(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    kinds: &Arc<ClusterKinds>,
    journal: &mut Journal<'_>,
) -> Result<Vec<Manifest>, Stop> {
    let pipeline = run_pipeline(ctx, &checkout.dir, kinds).await;
    let Pipeline {
        manifests,
        errors,
        warnings,
    } = pipeline.map_err(|cause| {
        journal.stop(SyncError::Glob {
            app: ctx.app.name.clone(),
            cause,
        })
    })?;
    if errors.is_empty() {
        ctx.say(&format!(
            "rendered {}",
            crate::plural(manifests.len(), "object")
        ));
        for warning in &warnings {
            ctx.warn(warning);
        }
        return Ok(manifests);
    }
    let failed = errors.len();
    for e in errors {
        journal.fail(e);
    }
    if !manifests.is_empty() {
        // One pass says every error: the objects that rendered are planned and dry-run
        // too (a sync then stops before anything is written: `steps::refuse_broken`).
        let then = if ctx.partial { "planning" } else { "checking" };
        ctx.say(&format!(
            "{} did not render: {then} the {} that did",
            crate::plural(failed, "error"),
            crate::plural(manifests.len(), "object")
        ));
        return Ok(manifests);
    }
    Err(refused(ctx))
}

/// A render with errors ends the sync, nothing written: said.
pub(in crate::sync) fn refused(ctx: &Ctx<'_>) -> Stop {
    ctx.tell(Level::Error, "render failed: nothing was written");
    Stop::Failed
}

/// What the render read: the app's paths, what its kustomizations reach, and its charts'
/// values files.
pub(in crate::sync) fn inputs_of(ctx: &Ctx<'_>, checkout: &Checkout) -> Option<Inputs> {
    let root = checkout.dir.canonicalize().ok()?;
    let charts = Helm::renders(ctx.app);
    let values = ctx.app.helm.values_files.iter().filter(|_| charts);
    let paths: Vec<String> = ctx
        .app
        .path
        .iter()
        .chain(values)
        .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_string())
        .map(|p| if p == "." { String::new() } else { p })
        .collect();
    let paths = kustomize::reach(&root, &paths);
    let digest = crate::source::paths_digest(checkout, &paths)?;
    Some(Inputs {
        config: ctx.syncer.inputs.config(ctx.app),
        paths,
        digest,
        commit: checkout.commit.sha.clone(),
        objects: 0,
    })
}

/// A commit with no objects would prune every object of the app: refused unless the app
/// allows it (`allow_empty`) or does not prune.
pub(in crate::sync) fn refuse_empty(
    ctx: &Ctx<'_>,
    manifests: &[Manifest],
    inventory: &Inventory,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    if manifests.is_empty()
        && !inventory.objects.is_empty()
        && ctx.app.prune
        && !ctx.app.allow_empty
    {
        return Err(journal.stop(SyncError::EmptyCommit {
            app: ctx.app.name.clone(),
            objects: inventory.objects.len(),
        }));
    }
    Ok(())
}
