//! The fetch step: the app's commit, from the fetch it shares with its repository's other
//! apps (one fetch per push, one written-out tree per commit).

use crate::source::git::{self, Checkout};
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;

/// The app's commit, checked out.
pub(in crate::sync) async fn fetch(
    ctx: &Ctx<'_>,
    journal: &mut Journal<'_>,
) -> Result<Checkout, Stop> {
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
