//! The render step: the cluster's kinds from the agent's shared discovery, the commit
//! through the manifest pipeline (kustomize, typed checks, `[app.scope]`), what the render
//! read, and the refusal to prune everything when a commit renders nothing.

use std::sync::Arc;

use crate::cluster::discovery::ClusterKinds;
use crate::manifest::helm::Helm;
use crate::manifest::{kustomize, yaml11, Builder, Manifest};
use crate::plan::Inventory;
use crate::source::git::{self, Checkout};
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
    let mut manifests = render_with(ctx, checkout, &kinds, journal)?;
    // A plan that went on past render errors has them in the journal already.
    let whole = journal.errors.len() == errors;
    if whole && discovered < ctx.begun && manifests.iter().any(|m| kinds.resolve(m).is_none()) {
        kinds = ctx.discover(Some(ctx.begun), journal).await?.0;
        manifests = render_with(ctx, checkout, &kinds, journal)?;
    }
    Ok(Rendered {
        manifests,
        kinds,
        inputs: inputs_of(ctx, checkout),
    })
}

/// Warns of the values kubectl would read otherwise than berth (`DEBUG: yes`, see
/// [`yaml11`]); only the files of objects holding such a value are read again.
fn warn_yaml11(ctx: &Ctx<'_>, checkout: &Checkout, manifests: &[Manifest]) {
    use std::io::Read;
    for m in manifests
        .iter()
        .filter(|m| !yaml11::candidates(m).is_empty())
    {
        // Read as the render read it: no further than max_file_size.
        let mut text = String::new();
        let path = checkout.dir.join(&m.origin.path);
        let limit = ctx.syncer.agent.max_file_size;
        let read = std::fs::File::open(path).and_then(|f| f.take(limit).read_to_string(&mut text));
        if read.is_err() {
            continue;
        }
        for warning in yaml11::warnings(m, &text) {
            ctx.warn(&warning);
        }
    }
}

/// The commit's objects through the manifest pipeline; every error of a broken commit is
/// recorded.
pub(in crate::sync) fn render_with(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    kinds: &ClusterKinds,
    journal: &mut Journal<'_>,
) -> Result<Vec<Manifest>, Stop> {
    let agent = &ctx.syncer.agent;
    let builder = Builder::for_app(ctx.app, agent, &checkout.dir, kinds).map_err(|cause| {
        journal.stop(SyncError::Glob {
            app: ctx.app.name.clone(),
            cause,
        })
    })?;
    let builder = builder.capabilities(kinds.version(), kinds.api_versions());
    let (manifests, errors) = builder.render_partial();
    if errors.is_empty() {
        ctx.say(&format!(
            "rendered {}",
            crate::plural(manifests.len(), "object")
        ));
        warn_yaml11(ctx, checkout, &manifests);
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
fn inputs_of(ctx: &Ctx<'_>, checkout: &Checkout) -> Option<Inputs> {
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
    let digest = git::paths_digest(&checkout.source, &checkout.commit.sha, &paths)?;
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
