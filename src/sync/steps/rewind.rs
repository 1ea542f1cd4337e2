//! The rewind guard: a branch or tag that moved to a commit not descending from the last
//! applied one is refused (a force-push could replay any older commit), unless the app
//! (`allow_rewind`) or this sync (`--accept-rewind`) accepts it.

use crate::config::GitRef;
use crate::source::git::{self, Checkout};
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;

/// What moved where, when `checkout` does not descend from `previous` (the history a
/// shallow cache lacks is fetched first); `None` when it does.
pub(in crate::sync) async fn rewritten(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    previous: Option<&str>,
) -> Option<String> {
    let previous = previous?;
    let ancestry = || git::ancestry(&checkout.source, previous, &checkout.commit.sha);
    let rewritten = ancestry();
    if rewritten.is_some() && ctx.syncer.sources.deepen(ctx.app).await {
        return ancestry();
    }
    rewritten
}

/// Refuses a rewritten history unless it is accepted. A pinned commit is the operator's
/// own choice in the configuration, never a replay.
pub(in crate::sync) fn guard_rewind(
    ctx: &Ctx<'_>,
    note: &str,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let pinned = matches!(ctx.app.git_ref(), GitRef::Commit(_));
    if pinned || ctx.app.allow_rewind || ctx.options.accept_rewind {
        ctx.warn(note);
        return Ok(());
    }
    Err(journal.stop(SyncError::Rewound {
        app: ctx.app.name.clone(),
        note: note.to_string(),
    }))
}
