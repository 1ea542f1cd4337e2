//! An app's source: exactly one of `repo`, `chart` and `oci`, and for a registry what git
//! alone takes (a ref, `[app.auth]`, commit signatures) refused rather than ignored.

use super::Problems;
use crate::config::{is_digest, split_oci, AppConfig, ChartSource, OciSource, SourceRef};
use crate::versions::Range;

/// Checks the app's registry source, or that a git app says nothing of one.
pub(super) fn app_registry(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    let given = [
        !app.repo.trim().is_empty(),
        app.chart.is_some(),
        app.oci.is_some(),
    ];
    match given.iter().filter(|g| **g).count() {
        0 => problems.add(
            key("repo"),
            "give the app's source: repo (git), chart or oci",
        ),
        1 => {}
        _ => problems.add(key("repo"), "give one of repo, chart and oci, not more"),
    }
    match app.source() {
        SourceRef::Git(_) => git_only(app, key, problems),
        SourceRef::Chart(chart) => {
            registry_only(app, key, problems);
            chart_source(app, chart, key, problems);
        }
        SourceRef::Oci(oci) => {
            registry_only(app, key, problems);
            oci_source(oci, key, problems);
        }
    }
}

/// `chart = { … }`: a range (or an OCI chart's digest), a chart name, a repository.
fn chart_source(
    app: &AppConfig,
    chart: &ChartSource,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) {
    let pinned = chart.is_oci() && is_digest(&chart.version);
    if let (false, Err(e)) = (pinned, Range::parse(&chart.version)) {
        problems.add(key("chart.version"), e.to_string());
    }
    let name = &chart.name;
    if name.is_empty() || name.contains(['/', ' ']) || name.starts_with('.') {
        problems.add(key("chart.name"), format!("{name:?} is not a chart name"));
    }
    if chart.is_oci() {
        let reference = format!("{}/{name}", chart.repository.trim_end_matches('/'));
        if let Err(e) = split_oci(&reference) {
            problems.add(key("chart.repository"), e.to_string());
        }
        return;
    }
    http_repository(&chart.repository, app.registry.insecure, key, problems);
    if !app.verify.cosign_keys.is_empty() {
        problems.add(key("verify.cosign_keys"), "cosign signatures live in OCI registries: a Helm repository's archives are checked against its index's digest instead");
    }
}

/// `oci = { … }`: a reference, and at most one of a range, a tag and a digest.
fn oci_source(oci: &OciSource, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    if let Err(e) = split_oci(&oci.url) {
        problems.add(key("oci.url"), e.to_string());
    }
    let picks = [&oci.version, &oci.tag, &oci.digest];
    if picks.iter().filter(|p| p.is_some()).count() > 1 {
        problems.add(
            key("oci.version"),
            "give at most one of version, tag and digest",
        );
    }
    if let Some(Err(e)) = oci.version.as_deref().map(Range::parse) {
        problems.add(key("oci.version"), e.to_string());
    }
    if oci.digest.as_deref().is_some_and(|d| !is_digest(d)) {
        let why = "write the digest as sha256: and 64 lowercase hex digits";
        problems.add(key("oci.digest"), why);
    }
}

/// A git app: no cosign keys (its `[app.registry]` reaches its charts' downloaded
/// dependencies).
fn git_only(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    if !app.verify.cosign_keys.is_empty() {
        problems.add(key("verify.cosign_keys"), "cosign keys verify chart and oci sources; a git repository's commits are verified by openpgp_keys or ssh_allowed_signers");
    }
}

/// A registry app: no git ref, `[app.auth]` or commit signatures.
fn registry_only(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    for (given, name) in [
        (&app.branch, "branch"),
        (&app.tag, "tag"),
        (&app.commit, "commit"),
    ] {
        if given.is_some() {
            problems.add(key(name), format!("{name} is a git ref: a registry source picks its version with version, tag or digest"));
        }
    }
    if app.auth != Default::default() {
        problems.add(key("auth"), "[app.auth] is for git: give a registry's login in [app.registry] credentials (a Docker config.json)");
    }
    let git_signatures = !app.verify.openpgp_keys.is_empty()
        || app.verify.ssh_allowed_signers.is_some()
        || app.verify.mode != crate::config::VerifyMode::Off;
    if git_signatures {
        problems.add(
            key("verify"),
            "commit signatures are git's: a registry source is verified by cosign_keys",
        );
    }
}

/// A Helm repository's URL: https (or http where `insecure` is written), no credentials.
fn http_repository(
    url: &str,
    insecure: bool,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) {
    let parsed = url::Url::parse(url);
    let Ok(parsed) = parsed else {
        problems.add(key("chart.repository"), format!("{url:?} is not a chart repository URL such as \"https://charts.example.com/stable\" or \"oci://registry.example.com/charts\""));
        return;
    };
    match parsed.scheme() {
        "https" => {}
        "http" if insecure => {}
        "http" => problems.add(key("chart.repository"), format!("{url:?} is plain HTTP: write insecure = true in [app.registry] to allow it for this source")),
        _ => problems.add(key("chart.repository"), format!("{url:?} is not an https:// or oci:// chart repository")),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        problems.add(
            key("chart.repository"),
            "the URL holds credentials: give them in [app.registry] credentials",
        );
    }
}
