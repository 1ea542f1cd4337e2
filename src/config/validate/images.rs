//! `[[image_policy]]` and `[app.image_updates]`: a policy's name, image, one order and
//! expressions that compile; an update's author, branch and message.

use std::collections::HashSet;
use std::time::Duration;

use super::{is_dns_label, Problems};
use crate::config::{AppConfig, Config, GitRef, ImagePolicyConfig};
use crate::versions::Range;

/// The shortest scan interval: a registry is not asked more than once a 10 s per policy.
const MIN_INTERVAL: Duration = Duration::from_secs(10);

pub(super) fn image_policies(config: &Config, problems: &mut Problems) {
    let mut names = HashSet::new();
    for (i, policy) in config.image_policies.iter().enumerate() {
        let key = |k: &str| format!("image_policy[{i}].{k}");
        if !is_dns_label(&policy.name) {
            let why = "is not a DNS label (lower-case letters, digits and '-'): markers name it";
            problems.add(key("name"), format!("{:?} {why}", policy.name));
        } else if !names.insert(policy.name.as_str()) {
            let why = "policy names must be unique";
            problems.add(
                key("name"),
                format!("duplicate policy name {:?}: {why}", policy.name),
            );
        }
        one_policy(policy, &key, problems);
    }
}

fn one_policy(policy: &ImagePolicyConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    if let Err(why) = check_image(&policy.image) {
        problems.add(key("image"), format!("{:?} {why}", policy.image));
    }
    match (&policy.semver, policy.order) {
        (Some(range), None) => {
            if let Err(e) = Range::parse(range) {
                problems.add(key("semver"), e.to_string());
            }
        }
        (None, Some(_)) => {}
        (Some(_), Some(_)) => problems.add(key("order"), "give semver or order, not both"),
        (None, None) => problems.add(
            key("semver"),
            "give the policy's order: semver = \"RANGE\", or order = \"numerical\" | \"alphabetical\"",
        ),
    }
    for (given, name) in [(&policy.extract, "extract"), (&policy.filter, "filter")] {
        if let Some(Err(e)) = given.as_deref().map(regex::Regex::new) {
            problems.add(key(name), format!("not a regular expression: {e}"));
        }
    }
    if policy.interval < MIN_INTERVAL {
        problems.add(key("interval"), "must be at least 10s");
    }
}

/// An image repository with its registry's host: `host[:port]/path` (no scheme, tag or
/// digest).
fn check_image(image: &str) -> Result<(), &'static str> {
    let Some((host, path)) = image.split_once('/') else {
        return Err("names no registry: write host/path, e.g. registry.example.com/team/shop or docker.io/library/nginx");
    };
    let host_like = host.contains('.') || host.contains(':') || host == "localhost";
    if !host_like {
        return Err("names no registry host: write host/path, e.g. docker.io/library/nginx");
    }
    if image.contains("://") || path.contains([':', '@']) {
        return Err("is an image repository: no scheme, tag or digest");
    }
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    };
    if !path.split('/').all(component_ok) {
        return Err(
            "has a path that is not an image name (lower-case letters, digits, '.', '_', '-')",
        );
    }
    Ok(())
}

pub(super) fn image_updates(
    app: &AppConfig,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) {
    let Some(updates) = &app.image_updates else {
        return;
    };
    let key = |k: &str| key(&format!("image_updates.{k}"));
    if app.chart.is_some() || app.oci.is_some() {
        problems.add(
            key("author"),
            "image updates are committed to git: a chart or oci app has no repository to write",
        );
    }
    if let GitRef::Tag(_) | GitRef::Commit(_) | GitRef::Ref(_) = app.git_ref() {
        if updates.push_branch.is_none() {
            problems.add(
                key("push_branch"),
                "the app follows a tag, a commit or a ref: name the branch berth pushes to",
            );
        }
    }
    let (name, email) = author_parts(&updates.author);
    if name.is_empty() || !email.contains('@') || git2::Signature::now(name, email).is_err() {
        let why = "is not an author: write \"Name <email>\"";
        problems.add(key("author"), format!("{:?} {why}", updates.author));
    }
    if let Some(branch) = &updates.push_branch {
        if !git2::Branch::name_is_valid(branch).unwrap_or(false) {
            problems.add(
                key("push_branch"),
                format!("{branch:?} is not a branch name"),
            );
        }
    }
    if updates.message.trim().is_empty() {
        problems.add(key("message"), "must not be empty");
    }
}

/// `Name <email>` taken apart (the whole text as the name when there is no `<`).
pub fn author_parts(author: &str) -> (&str, &str) {
    match author.split_once('<') {
        Some((name, email)) => (name.trim(), email.trim().trim_end_matches('>').trim()),
        None => (author.trim(), ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_names_its_registry_and_nothing_past_the_repository() {
        assert!(check_image("registry.example.com/team/shop").is_ok());
        assert!(check_image("127.0.0.1:5000/shop").is_ok());
        assert!(check_image("localhost/shop").is_ok());
        assert!(check_image("shop").is_err());
        assert!(check_image("library/nginx").is_err());
        assert!(check_image("registry.example.com/shop:1.0").is_err());
        assert!(check_image("https://registry.example.com/shop").is_err());
        assert!(check_image("registry.example.com/Shop").is_err());
    }

    #[test]
    fn an_author_is_taken_apart() {
        assert_eq!(
            author_parts("berth <berth@example.com>"),
            ("berth", "berth@example.com")
        );
        assert_eq!(author_parts("berth"), ("berth", ""));
    }
}
