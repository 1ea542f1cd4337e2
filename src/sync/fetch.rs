//! The fetch step: the app's commit, from the fetch it shares with its repository's other
//! apps (one fetch per push, one written-out tree per commit), and the history a shallow
//! cache lacks when a later step needs an older commit.

use super::context::{Ctx, Journal, Stop};
use super::SyncError;
use crate::history::Trigger;
use crate::source::git::{self, Checkout};
use crate::source::shared::INTERVAL_SHARE;

/// The app's commit, checked out.
pub(super) async fn fetch(ctx: &Ctx<'_>, journal: &mut Journal<'_>) -> Result<Checkout, Stop> {
    ctx.say(&format!(
        "fetching {}",
        git::redact_url(&git::remote_url(&ctx.app.repo))
    ));
    // An interval's sync shares a fetch started a little before it was asked for.
    let since = match ctx.options.trigger {
        Trigger::Interval => ctx.options.requested - INTERVAL_SHARE,
        _ => ctx.options.requested,
    };
    match ctx.syncer.sources.fetch(ctx.app, since).await {
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
