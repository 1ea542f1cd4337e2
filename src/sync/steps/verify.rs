//! The verify step (`[app.verify]`): nothing is rendered unless a trusted key signed the
//! commit (or, with `mode = "tag"`, the tag).

use crate::config::VerifyMode;
use crate::source::git::{self, Checkout};
use crate::source::verify::{Signature, Trust, VerifyError};
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;

/// The commit's signature, checked against the trusted keys (read again each sync, so a
/// key added or removed counts at once); `None` when the app does not verify.
pub(in crate::sync) fn verify(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    journal: &mut Journal<'_>,
) -> Result<Option<Signature>, Stop> {
    match signature(ctx, checkout) {
        Ok(signature) => Ok(signature),
        Err(cause) => Err(journal.stop(SyncError::Verify { cause })),
    }
}

fn signature(ctx: &Ctx<'_>, checkout: &Checkout) -> Result<Option<Signature>, VerifyError> {
    let signature = check(ctx.app, checkout)?;
    if let Some(signature) = &signature {
        ctx.say(&format!(
            "signed by {} ({} key {})",
            signature.signer, signature.format, signature.fingerprint
        ));
    }
    Ok(signature)
}

/// The checkout's signature as `app` wants it checked; `None` when it does not verify.
pub(in crate::sync) fn check(
    app: &crate::config::AppConfig,
    checkout: &Checkout,
) -> Result<Option<Signature>, VerifyError> {
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
