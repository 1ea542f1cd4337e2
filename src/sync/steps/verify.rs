//! The verify step (`[app.verify]`): nothing is rendered unless a trusted key signed the
//! commit (or, with `mode = "tag"`, the tag).

use crate::config::VerifyMode;
use crate::source::git::{self, Checkout};
use crate::source::verify::{Signature, Trust, VerifyError};
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;

/// The commit's signature, checked against the trusted keys (read again each sync, so a
/// key added or removed counts at once) on a thread of the blocking pool, not on the
/// async workers; `None` when the app does not verify.
pub(in crate::sync) async fn verify(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    journal: &mut Journal<'_>,
) -> Result<Option<Signature>, Stop> {
    if ctx.app.verify.mode == VerifyMode::Off {
        return Ok(None);
    }
    let (app, owned) = (ctx.app.clone(), checkout.clone());
    match crate::blocking::off_runtime(move || check(&app, &owned)).await {
        Ok(Some(signature)) => {
            ctx.say(&format!(
                "signed by {} ({} key {})",
                signature.signer, signature.format, signature.fingerprint
            ));
            Ok(Some(signature))
        }
        Ok(None) => Ok(None),
        Err(cause) => Err(journal.stop(SyncError::Verify { cause })),
    }
}

/// The checkout's signature as `app` wants it checked; `None` when it does not verify.
pub(in crate::sync) fn check(
    app: &crate::config::AppConfig,
    checkout: &Checkout,
) -> Result<Option<Signature>, VerifyError> {
    // A registry source's signatures are cosign's, checked as it is fetched.
    if !matches!(app.source(), crate::config::SourceRef::Git(_)) {
        return Ok(None);
    }
    let Some(trust) = Trust::load(&app.verify)? else {
        return Ok(None);
    };
    let repo = git::repository(&checkout.source).map_err(|e| {
        let why = format!("cannot open berth's repository cache ({})", e.message());
        VerifyError::bad(checkout.commit.short(), None, why)
    })?;
    let now = jiff::Timestamp::now();
    let signature = match (&app.verify.mode, &app.tag) {
        (VerifyMode::Tag, Some(name)) => {
            let Some(tag) = &checkout.tag else {
                return Err(VerifyError::UnsignedTag { tag: name.clone() });
            };
            trust.verify_tag(&repo, tag, name, &checkout.commit.sha, now)?
        }
        _ => trust.verify(&repo, &checkout.commit.sha, now)?,
    };
    Ok(Some(signature))
}
