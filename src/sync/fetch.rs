//! The fetch step: the app's commit, from the fetch it shares with its repository's other
//! apps (one fetch per push, one written-out tree per commit), and the history a shallow
//! cache lacks when a later step needs an older commit.

use super::context::{Ctx, Journal, Stop};
use super::SyncError;
use crate::source::git::{self, Checkout};

/// The app's commit, checked out.
pub(super) async fn fetch(ctx: &Ctx<'_>, journal: &mut Journal<'_>) -> Result<Checkout, Stop> {
    ctx.say(&format!(
        "fetching {}",
        git::redact_url(&git::remote_url(&ctx.app.repo))
    ));
    match ctx
        .syncer
        .sources
        .fetch(ctx.app, ctx.options.fetch_since())
        .await
    {
        Ok(checkout) => {
            let c = &checkout.commit;
            ctx.say(&format!(
                "commit {} {:?} by {}",
                c.short(),
                c.subject,
                c.author
            ));
            Ok(checkout)
        }
        Err(cause) => Err(journal.stop(SyncError::Fetch { cause })),
    }
}

/// Fetches the history a shallow cache lacks (its first fetch took the newest commit
/// alone); whether it did. A failure is logged: the caller goes on with what it has.
pub(super) async fn deepen(ctx: &Ctx<'_>) -> bool {
    let app = ctx.app.clone();
    let state_dir = ctx.syncer.agent.state_dir.clone();
    let deepened = tokio::task::spawn_blocking(move || git::deepen(&app, &state_dir)).await;
    match deepened {
        Ok(Ok(deepened)) => deepened,
        Ok(Err(e)) => {
            tracing::warn!(app = %ctx.app.name, error = %e, "cannot fetch the repository's history");
            false
        }
        Err(_) => false,
    }
}
