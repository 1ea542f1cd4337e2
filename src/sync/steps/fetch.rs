//! The fetch step: the app's commit (or registry version), from the fetch it shares with
//! its source's other apps (one fetch per push, one written-out tree per revision).

use crate::config::SourceRef;
use crate::source::git::{self, Checkout};
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;

/// The app's commit, checked out.
pub(in crate::sync) async fn fetch(
    ctx: &Ctx<'_>,
    journal: &mut Journal<'_>,
) -> Result<Checkout, Stop> {
    let shown = match ctx.app.source() {
        SourceRef::Git(repo) => git::redact_url(&git::remote_url(repo)),
        _ => ctx.app.origin(),
    };
    ctx.say(&format!("fetching {shown}"));
    match ctx
        .syncer
        .sources
        .fetch(ctx.app, ctx.options.fetch_since())
        .await
    {
        Ok(checkout) => {
            let c = &checkout.commit;
            ctx.say(&match c.noun() {
                "commit" => format!("commit {} {:?} by {}", c.short(), c.subject, c.author),
                noun => format!("{noun} {} of {}", c.short(), c.author),
            });
            Ok(checkout)
        }
        Err(cause) => Err(journal.stop(SyncError::Fetch { cause })),
    }
}
