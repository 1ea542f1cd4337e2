//! The rewind guard: a branch or tag that moved to a commit not descending from the last
//! applied one is refused (a force-push could replay any older commit), as is a registry
//! source whose version is older than the last applied one, unless the app
//! (`allow_rewind`) or `berth sync --accept-rewind` accepts it. An accepted rewind stays
//! accepted for its commit until a sync applies that commit (a sync that fails after the
//! guard does not use it up): `state_dir/rewinds/<app>` names it.

use std::path::{Path, PathBuf};

use crate::config::{GitRef, OciPick, SourceRef};
use crate::source::git::{self, Checkout};
use crate::source::registry;
use crate::sync::context::{Ctx, Journal, Stop};
use crate::sync::error::SyncError;
use crate::versions::parse_version;

/// What moved where, when `checkout` does not descend from `previous` (the history a
/// shallow cache lacks is fetched first); `None` when it does. For a local repository, a
/// previous commit still on one of its branches is named with them: a branch switched, not
/// a force-push.
pub(in crate::sync) async fn rewritten(
    ctx: &Ctx<'_>,
    checkout: &Checkout,
    previous: Option<&str>,
) -> Option<String> {
    let previous = previous?;
    if !matches!(ctx.app.source(), SourceRef::Git(_)) {
        return older_version(&checkout.commit.sha, previous);
    }
    let ancestry = || git::ancestry(&checkout.source, previous, &checkout.commit.sha);
    let mut rewritten = ancestry();
    if rewritten.is_some() && ctx.syncer.sources.deepen(ctx.app).await {
        rewritten = ancestry();
    }
    let note = rewritten?;
    let Some(path) = git::local_path(&ctx.app.repo) else {
        return Some(note);
    };
    let branches = git::branches_holding(&path, previous);
    if branches.is_empty() {
        return Some(note);
    }
    Some(format!(
        "previous commit {} is not an ancestor of {}, but is on branch {} of the local repository: the commits came from another branch (a branch switched in its work tree?), not from a force-push",
        &previous[..previous.len().min(7)],
        checkout.commit.short(),
        branches.join(", ")
    ))
}

/// For a registry source, what moved back when `revision`'s version is older than the
/// `previous` one's (the rewind rule for versions); `None` when it is not, or when either
/// has no version to compare (a pinned digest, a source that was git).
fn older_version(revision: &str, previous: &str) -> Option<String> {
    let (now, _) = registry::parse_revision(revision)?;
    let (before, _) = registry::parse_revision(previous)?;
    let older = parse_version(now)? < parse_version(before)?;
    older.then(|| format!("version {now} is older than {before}, the last applied"))
}

/// Refuses a rewritten history unless it is accepted: by the app, by this sync (which
/// then accepts it until its commit is applied), or by an earlier sync's acceptance of
/// this very commit. A pinned commit is the operator's own choice in the configuration,
/// never a replay.
pub(in crate::sync) fn guard_rewind(
    ctx: &Ctx<'_>,
    note: &str,
    sha: &str,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let pinned = match ctx.app.source() {
        SourceRef::Git(_) => matches!(ctx.app.git_ref(), GitRef::Commit(_)),
        SourceRef::Oci(oci) => matches!(oci.pick(), OciPick::Digest(_)),
        SourceRef::Chart(_) => false,
    };
    let state_dir = &ctx.syncer.agent.state_dir;
    if ctx.options.accept_rewind {
        if let Err(e) = accept(state_dir, &ctx.app.name, sha) {
            tracing::warn!(app = %ctx.app.name, error = %e, "cannot keep the rewind accepted: a sync that fails before applying it needs --accept-rewind again");
        }
    }
    if pinned || ctx.app.allow_rewind || accepted(state_dir, &ctx.app.name, sha) {
        ctx.warn(note);
        return Ok(());
    }
    let why = match ctx.app.source() {
        SourceRef::Git(_) => "a force-push could replay any older commit",
        _ => "a range or tag moved back could replay any older release",
    };
    Err(journal.stop(SyncError::Rewound {
        app: ctx.app.name.clone(),
        note: note.to_string(),
        why,
    }))
}

/// The acceptance of `app`'s rewind is used up once its inventory's commit is the one it
/// accepted (that sync applied it).
pub(in crate::sync) fn settle(state_dir: &Path, app: &str, applied: Option<&str>) {
    let path = marker(state_dir, app);
    if applied.is_some_and(|sha| read(&path).as_deref() == Some(sha)) {
        let _ = std::fs::remove_file(path);
    }
}

fn marker(state_dir: &Path, app: &str) -> PathBuf {
    state_dir.join("rewinds").join(app)
}

fn accept(state_dir: &Path, app: &str, sha: &str) -> std::io::Result<()> {
    crate::state::private_dir(&state_dir.join("rewinds"))?;
    crate::state::write_private(&marker(state_dir, app), sha.as_bytes())
}

fn accepted(state_dir: &Path, app: &str, sha: &str) -> bool {
    read(&marker(state_dir, app)).as_deref() == Some(sha)
}

/// The commit (or registry revision) a marker names (read bounded, without following a
/// link).
fn read(path: &Path) -> Option<String> {
    let bytes = crate::manifest::read::read_capped(crate::state::open_state(path), 256).ok()?;
    Some(String::from_utf8(bytes).ok()?.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accepted_rewind_holds_for_its_commit_until_it_is_applied() {
        let state = tempfile::tempdir().unwrap();
        let (sha, other) = ("a".repeat(40), "b".repeat(40));
        assert!(!accepted(state.path(), "web", &sha));
        accept(state.path(), "web", &sha).unwrap();
        assert!(accepted(state.path(), "web", &sha));
        assert!(!accepted(state.path(), "web", &other), "another commit");
        settle(state.path(), "web", Some(&other));
        assert!(accepted(state.path(), "web", &sha), "not applied yet");
        settle(state.path(), "web", Some(&sha));
        assert!(!accepted(state.path(), "web", &sha), "used up once applied");
        let version = registry::revision("1.2.0", &format!("sha256:{}", "c".repeat(64)));
        accept(state.path(), "web", &version).unwrap();
        assert!(
            accepted(state.path(), "web", &version),
            "a registry revision"
        );
    }

    #[test]
    fn a_registry_source_moving_to_an_older_version_is_a_rewind() {
        let at = |v: &str| registry::revision(v, &format!("sha256:{}", "a".repeat(64)));
        let note = older_version(&at("1.2.0"), &at("1.10.0")).unwrap();
        assert_eq!(note, "version 1.2.0 is older than 1.10.0, the last applied");
        assert_eq!(older_version(&at("1.10.0"), &at("1.2.0")), None, "newer");
        assert_eq!(older_version(&at("1.2.0"), &at("1.2.0")), None, "the same");
        assert_eq!(
            older_version(&at("1.0.0"), &"b".repeat(40)),
            None,
            "the app was git"
        );
        assert_eq!(
            older_version(&at("latest"), &at("1.2.0")),
            None,
            "no version"
        );
    }
}
