//! `[[app_set]]`: the set's own keys, and its templates made into an app for a sample
//! folder on each cluster it selects, checked as a written `[[app]]` is.

use std::collections::HashSet;

use super::{check_repo_path, is_dns_label, one_app, Problems};
use crate::config::{AppConfig, Config, SetError, SAMPLE_FOLDER};

pub(super) fn app_sets(config: &Config, problems: &mut Problems) {
    let mut names = HashSet::new();
    for (i, set) in config.app_sets.iter().enumerate() {
        let key = |k: &str| format!("app_set[{i}].{k}");
        if !is_dns_label(&set.name) {
            let why = "is not a DNS label (lower-case letters, digits and '-')";
            problems.add(key("name"), format!("{:?} {why}", set.name));
        } else if !names.insert(set.name.as_str()) {
            let why = "set names must be unique";
            problems.add(
                key("name"),
                format!("duplicate set name {:?}: {why}", set.name),
            );
        }
        for fixed in ["repo", "branch", "tag", "commit", "ref"] {
            let templated = set.template.get(fixed).and_then(|v| v.as_str());
            if templated.is_some_and(|v| v.contains('{')) {
                let why = "is read once for the whole set: it cannot hold a placeholder";
                problems.add(key(fixed), why);
            }
        }
        for pattern in &set.folders {
            if let Err(e) = check_repo_path(pattern) {
                problems.add(key("folders"), format!("{pattern:?}: {e}"));
            }
        }
        if let Err(SetError::Key { message, .. }) = set.folder_globs() {
            problems.add(key("folders"), message);
        }
        if let Err(SetError::Key { message, .. }) = set.ref_globs() {
            problems.add(key("refs"), message);
        }
        if !set.refs.is_empty() && set.template.contains_key("ref") {
            problems.add(key("ref"), "each app of the set's refs follows its own ref");
        }
        if set.ttl.is_some() && set.refs.is_empty() {
            problems.add(key("ttl"), "only a ref's apps expire: the set has no refs");
        }
        if set.generators() > 3 {
            let why = "a set combines at most three of folders, clusters, refs and list";
            problems.add(key("refs"), why);
        }
        match set.clusters(&config.cluster) {
            Err(SetError::Clusters { message, .. }) => problems.add(key("clusters"), message),
            Ok(selected) if selected.is_empty() => {
                problems.add(key("clusters"), "selects no configured cluster");
            }
            _ => {}
        }
        match set.sample(&config.cluster) {
            Ok(Some(app)) => one_app(&app, &config.cluster, &key, problems),
            Ok(None) | Err(SetError::Clusters { .. }) => {}
            Err(e) => problems.add(
                format!("app_set[{i}]"),
                format!("{e} (its templates tried with a sample folder {SAMPLE_FOLDER:?}, ref or list item)"),
            ),
        }
    }
}

/// The checks of an app a set generated, as a written one passes them.
///
/// # Errors
/// Each problem, its key the app's (`namespace`, `path`).
pub fn check_generated(
    app: &AppConfig,
    clusters: &crate::config::Clusters,
) -> Result<(), Vec<crate::config::Problem>> {
    let mut problems = Problems::default();
    one_app(app, clusters, &|k: &str| k.to_string(), &mut problems);
    if problems.0.is_empty() {
        Ok(())
    } else {
        Err(problems.0)
    }
}
