//! The refs a remote has that match globs: what an app set of previews lists at each fetch
//! of its repository — the remote's advertisement, one request, nothing downloaded. Any
//! git server serves them (`refs/pull/*/head` on GitHub, `refs/merge-requests/*/head` on
//! GitLab, `refs/changes/…` on Gerrit, branches anywhere); no API, no token.
use git2::{Direction, Remote};
use globset::GlobSet;

use super::fetch::{callbacks, classify};
use super::{bound_network_waits, redact_url, remote_url, SourceError};
use crate::config::AppConfig;

/// The most refs of a remote read: an advertisement past it is refused, not cut.
pub const MAX_ADVERTISED: usize = 200_000;

/// The refs of `app`'s remote whose full names `globs` match, with the commit each names,
/// sorted by name.
///
/// # Errors
/// The remote cannot be reached or authenticated to, or advertises more than
/// [`MAX_ADVERTISED`] refs.
pub fn matching_refs(
    app: &AppConfig,
    globs: &GlobSet,
) -> Result<Vec<(String, String)>, SourceError> {
    bound_network_waits();
    let url = remote_url(&app.repo);
    let shown = redact_url(&app.repo);
    let fault = |e: git2::Error| classify(e, &url, &shown, std::path::Path::new(""));
    let mut remote = Remote::create_detached(url.as_str()).map_err(fault)?;
    let connection = remote
        .connect_auth(Direction::Fetch, Some(callbacks(app, &url)?), None)
        .map_err(fault)?;
    let heads = connection.list().map_err(fault)?;
    if heads.len() > MAX_ADVERTISED {
        return Err(SourceError::Fetch {
            url: shown,
            message: format!(
                "the remote advertises {} refs, more than {MAX_ADVERTISED}: berth reads no more",
                heads.len()
            ),
        });
    }
    let mut found: Vec<(String, String)> = (heads.iter())
        .filter(|h| globs.is_match(h.name()) && !h.name().ends_with("^{}"))
        .map(|h| (h.name().to_string(), h.oid().to_string()))
        .collect();
    found.sort();
    Ok(found)
}
