//! An app's source: at most one of branch, tag, commit and ref; a full commit SHA; a ref
//! name `ref = …` may follow; a verification that has keys to check with.
use super::{is_full_sha, AppConfig, Problems};
use crate::config::VerifyMode;

/// An app's repository, ref and credentials.
pub(super) fn app_source(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    let refs = [&app.branch, &app.tag, &app.commit, &app.follow_ref];
    if refs.iter().filter(|r| r.is_some()).count() > 1 {
        problems.add(
            key("branch"),
            "give at most one of branch, tag, commit and ref",
        );
    }
    if let Some(name) = &app.follow_ref {
        if let Err(why) = check_ref(name) {
            problems.add(key("ref"), format!("{name:?} {why}"));
        }
    }
    if let Some(c) = &app.commit {
        if !is_full_sha(c) {
            problems.add(
                key("commit"),
                format!("{c:?} is not a full 40-character commit SHA"),
            );
        }
    }
    if app.verify.mode != VerifyMode::Off
        && app.verify.openpgp_keys.is_empty()
        && app.verify.ssh_allowed_signers.is_none()
    {
        let mode = if app.verify.mode == VerifyMode::Tag {
            "tag"
        } else {
            "head"
        };
        problems.add(
            key("verify.mode"),
            format!("\"{mode}\" needs trusted keys: give openpgp_keys or ssh_allowed_signers"),
        );
    }
    if app.verify.mode == VerifyMode::Tag && app.tag.is_none() {
        problems.add(
            key("verify.mode"),
            "\"tag\" checks the signature of the tag the app follows: set tag = \"…\"",
        );
    }
    if app.auth.password_file.is_some() && app.auth.password_env.is_some() {
        problems.add(
            key("auth.password_file"),
            "give password_file or password_env, not both",
        );
    }
}

/// Whether `name` is a ref `ref = …` may follow: a full, valid ref name outside
/// `refs/heads/` and `refs/tags/` (`branch` and `tag` name those).
///
/// # Errors
/// What is wrong with it.
pub fn check_ref(name: &str) -> Result<(), &'static str> {
    if !name.starts_with("refs/") || !git2::Reference::is_valid_name(name) {
        return Err("is not a full ref name (refs/…)");
    }
    if name.starts_with("refs/heads/") || name.starts_with("refs/tags/") {
        return Err("is a branch or a tag: give branch or tag instead");
    }
    if name.len() > 255 {
        return Err("is longer than 255 bytes");
    }
    Ok(())
}
