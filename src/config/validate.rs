//! [`Config::validate`]: what the schema cannot check, one function per section, every
//! problem collected (not only the first) with its key path.

use std::collections::HashSet;
use std::path::{Component, Path};
use std::time::Duration;

mod clusters;

use super::{compile_globs, AgentConfig, AppConfig, Config, ConfigError, Problem};
use clusters::{app_cluster, clusters};

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            key: key.into(),
            message: message.into(),
            at: None,
        });
    }
}

impl Config {
    /// Checks what the schema cannot: unique DNS-label app names, one ref per app, paths
    /// that stay inside the repository, globs that compile, sensible durations and sizes.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing every problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Problems::default();
        agent(&self.agent, &mut problems);
        clusters(&self.cluster, &mut problems);
        let mut names = HashSet::new();
        for (i, app) in self.apps.iter().enumerate() {
            let key = |k: &str| format!("app[{i}].{k}");
            if is_dns_label(&app.name) && !names.insert(app.name.as_str()) {
                problems.add(
                    key("name"),
                    format!(
                        "duplicate app name {:?}: app names must be unique",
                        app.name
                    ),
                );
            }
            app_cluster(app, &self.cluster, &key, &mut problems);
            app_identity(app, &key, &mut problems);
            app_scope(app, &key, &mut problems);
            app_source(app, &key, &mut problems);
            app_files(app, &key, &mut problems);
            app_decrypt(app, &key, &mut problems);
            if app.rollout.timeout.is_zero() {
                problems.add(key("rollout.timeout"), "must be more than 0s");
            }
        }
        dependencies(&self.apps, &mut problems);
        for (i, target) in self.notify.iter().enumerate() {
            notify(target, &|k: &str| format!("notify[{i}].{k}"), &mut problems);
        }
        if problems.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                file: None,
                problems: problems.0,
            })
        }
    }
}

/// `depends_on`: names of other apps, without a cycle.
fn dependencies(apps: &[AppConfig], problems: &mut Problems) {
    let names: HashSet<&str> = apps.iter().map(|a| a.name.as_str()).collect();
    for (i, app) in apps.iter().enumerate() {
        for dep in &app.depends_on {
            if dep == &app.name {
                problems.add(
                    format!("app[{i}].depends_on"),
                    format!("{dep:?} is the app itself"),
                );
            } else if !names.contains(dep.as_str()) {
                problems.add(
                    format!("app[{i}].depends_on"),
                    format!("no app named {dep:?} (apps: {})", {
                        let mut known: Vec<&str> = names.iter().copied().collect();
                        known.sort_unstable();
                        known.join(", ")
                    }),
                );
            }
        }
    }
    if let Some(cycle) = super::order::cycle(apps) {
        let first = apps.iter().position(|a| a.name == cycle[0]).unwrap_or(0);
        problems.add(
            format!("app[{first}].depends_on"),
            format!("a dependency cycle: {}", cycle.join(" -> ")),
        );
    }
}

/// `[agent]`.
fn agent(agent: &AgentConfig, problems: &mut Problems) {
    if agent.interval.is_zero() {
        problems.add("agent.interval", "must be more than 0s");
    }
    if agent.field_manager.trim().is_empty() {
        problems.add("agent.field_manager", "must not be empty");
    }
    if agent.lease_duration < Duration::from_secs(3) {
        problems.add("agent.lease_duration", "must be at least 3s");
    }
    if agent.leader_election && agent.sharding {
        problems.add(
            "agent.sharding",
            "leader_election and sharding exclude each other: one host applies everything, or the hosts share the apps",
        );
    }
    if agent.concurrency == 0 {
        problems.add("agent.concurrency", "must be at least 1");
    }
    if agent.max_concurrent_syncs == 0 {
        problems.add("agent.max_concurrent_syncs", "must be at least 1");
    }
    if agent.max_connections == 0 {
        problems.add("agent.max_connections", "must be at least 1");
    }
    if !is_dns_label(&agent.inventory_namespace) {
        problems.add(
            "agent.inventory_namespace",
            format!(
                "{:?} is not a valid namespace name",
                agent.inventory_namespace
            ),
        );
    }
    if agent.max_file_size == 0 || agent.max_app_size == 0 || agent.max_objects == 0 {
        problems.add("agent.max_file_size", "size caps must be more than 0");
    }
    if agent.render_memory < 64 << 20 {
        problems.add(
            "agent.render_memory",
            "must be at least 64MiB (a Go program needs that much to start)",
        );
    }
    status_page(agent, problems);
    remote_charts(&agent.allow_remote_charts, problems);
}

/// `[agent] status_page`: served on a listening address, with credentials unless that
/// address is loopback.
fn status_page(agent: &AgentConfig, problems: &mut Problems) {
    if !agent.status_page {
        return;
    }
    match agent.listen {
        None => problems.add(
            "agent.status_page",
            "the status page is served on agent.listen, which is off",
        ),
        Some(address)
            if !address.ip().is_loopback() && agent.status_page_credentials.is_none() =>
        {
            problems.add(
                "agent.status_page",
                format!("agent.listen ({address}) is not a loopback address: set agent.status_page_credentials, or serve the page on 127.0.0.1 and reach it through an SSH tunnel"),
            )
        }
        Some(_) if agent.status_page_credentials_on_loopback
            && agent.status_page_credentials.is_none() =>
        {
            problems.add(
                "agent.status_page_credentials_on_loopback",
                "is on, and agent.status_page_credentials is not set: set it (every local user could otherwise read the page)",
            )
        }
        Some(_) => {}
    }
}

/// `[agent] allow_remote_charts`: each a chart repository's URL.
fn remote_charts(urls: &[String], problems: &mut Problems) {
    for url in urls {
        let host = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .and_then(|rest| rest.split('/').next());
        if host.is_none_or(|h| h.is_empty() || h.contains('@')) || url.contains(['?', '#', ' ']) {
            problems.add(
                "agent.allow_remote_charts",
                format!("{url:?} is not a chart repository URL such as \"https://charts.example.com/stable\""),
            );
        }
    }
}

/// `[app.scope]` and the identity the app's requests impersonate.
fn app_scope(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    if let Err(e) = compile_globs(&app.scope_namespaces()) {
        problems.add(key("scope.namespaces"), e.to_string());
    }
    if let Some(sa) = &app.service_account {
        let valid = sa
            .split_once('/')
            .is_some_and(|(ns, name)| is_dns_label(ns) && !name.is_empty() && !name.contains('/'));
        if !valid {
            problems.add(
                key("service_account"),
                format!("{sa:?} must be NAMESPACE/NAME, e.g. \"guestbook/deployer\""),
            );
        }
        if app.user.is_some() {
            problems.add(key("user"), "set user or service_account, not both");
        }
    }
    let names = app
        .user
        .iter()
        .chain(&app.service_account)
        .chain(&app.groups);
    for name in names.filter(|n| n.is_empty() || !n.bytes().all(|b| (0x21..0x7f).contains(&b))) {
        problems.add(
            key("user"),
            format!("{name:?} cannot be impersonated: names are printable ASCII without spaces"),
        );
    }
    if !app.groups.is_empty() && app.user.is_none() && app.service_account.is_none() {
        problems.add(
            key("groups"),
            "groups are impersonated with a user or service_account; set one",
        );
    }
}

/// An app's name and namespace.
fn app_identity(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    if !is_dns_label(&app.name) {
        problems.add(
            key("name"),
            format!(
                "{:?} is not a DNS label (lower-case letters, digits and '-', at most 63)",
                app.name
            ),
        );
    }
    if !is_dns_label(&app.namespace) {
        problems.add(
            key("namespace"),
            format!("{:?} is not a valid namespace name", app.namespace),
        );
    }
}

/// An app's repository, ref and credentials.
fn app_source(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    if app.repo.trim().is_empty() {
        problems.add(key("repo"), "must not be empty");
    }
    let refs = [&app.branch, &app.tag, &app.commit];
    if refs.iter().filter(|r| r.is_some()).count() > 1 {
        problems.add(key("branch"), "give at most one of branch, tag and commit");
    }
    if let Some(c) = &app.commit {
        if !is_full_sha(c) {
            problems.add(
                key("commit"),
                format!("{c:?} is not a full 40-character commit SHA"),
            );
        }
    }
    if app.verify.mode != super::VerifyMode::Off
        && app.verify.openpgp_keys.is_empty()
        && app.verify.ssh_allowed_signers.is_none()
    {
        let mode = if app.verify.mode == super::VerifyMode::Tag {
            "tag"
        } else {
            "head"
        };
        problems.add(
            key("verify.mode"),
            format!("\"{mode}\" needs trusted keys: give openpgp_keys or ssh_allowed_signers"),
        );
    }
    if app.verify.mode == super::VerifyMode::Tag && app.tag.is_none() {
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

/// A `[[notify]]` receiver: one address, at most one source per secret, a sensible
/// address, globs that compile.
fn notify(n: &super::NotifyConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    let sources = [n.url.is_some(), n.url_file.is_some(), n.url_env.is_some()];
    if sources.iter().filter(|s| **s).count() != 1 {
        problems.add(key("url"), "give exactly one of url, url_file and url_env");
    }
    if let Some(url) = &n.url {
        if let Err(e) = check_notify_url(url) {
            problems.add(key("url"), e.to_string());
        }
    }
    for (k, file, env) in [
        ("secret_file", &n.secret_file, &n.secret_env),
        ("token_file", &n.token_file, &n.token_env),
    ] {
        if file.is_some() && env.is_some() {
            problems.add(
                key(k),
                format!("give {k} or {}, not both", k.replace("_file", "_env")),
            );
        }
    }
    if n.events.is_empty() {
        problems.add(key("events"), "give at least one event");
    }
    if n.timeout.is_zero() {
        problems.add(key("timeout"), "must be more than 0s");
    }
    if n.queue == 0 {
        problems.add(key("queue"), "must be at least 1");
    }
    if let Err(e) = n.apps.set() {
        problems.add(
            key("apps"),
            format!(
                "invalid glob {:?}: {}",
                e.glob().unwrap_or_default(),
                e.kind()
            ),
        );
    }
}

/// Why [`check_notify_url`] or [`check_repo_path`] refuses a value; the caller adds the
/// file, line and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// A receiver's address does not parse (the address is not shown: it may hold a
    /// secret).
    #[error("is not a URL")]
    NotAUrl,
    /// A receiver's address is not http(s) or names no host.
    #[error("must be an http:// or https:// URL with a host")]
    NotHttp,
    /// A path climbs out of the repository.
    #[error("{0:?} escapes the repository root")]
    EscapesRoot(String),
    /// A path is absolute.
    #[error("{0:?} is absolute: paths are relative to the repository root")]
    Absolute(String),
}

/// Checks a receiver's address: `http://` or `https://` and a host.
///
/// # Errors
/// Why the address is refused (without the address: it may hold a secret).
pub fn check_notify_url(url: &str) -> Result<(), ValueError> {
    let uri: http::Uri = url.trim().parse().map_err(|_| ValueError::NotAUrl)?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(ValueError::NotHttp),
    }
}

/// An app's paths and globs.
fn app_files(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    if app.path.is_empty() {
        problems.add(key("path"), "give at least one path");
    }
    for p in &app.path {
        if let Err(e) = check_repo_path(p) {
            problems.add(key("path"), e.to_string());
        }
    }
    for (k, globs) in [
        ("include", &app.include),
        ("exclude", &app.exclude),
        ("include_objects", &app.include_objects),
        ("exclude_objects", &app.exclude_objects),
    ] {
        if let Err(e) = globs.set() {
            problems.add(
                key(k),
                format!(
                    "invalid glob {:?}: {}",
                    e.glob().unwrap_or_default(),
                    e.kind()
                ),
            );
        }
    }
}

/// An app's `[app.decrypt]`: keys to decrypt with, and kinds named as the API names them.
fn app_decrypt(app: &AppConfig, key: &dyn Fn(&str) -> String, problems: &mut Problems) {
    let Some(d) = &app.decrypt else {
        return;
    };
    if d.age_key_files.is_empty() && d.openpgp_key_files.is_empty() {
        problems.add(
            key("decrypt"),
            "give the keys that open the app's files: age_key_files or openpgp_key_files",
        );
    }
    if d.openpgp_passphrase_file.is_some() && d.openpgp_key_files.is_empty() {
        problems.add(
            key("decrypt.openpgp_passphrase_file"),
            "a passphrase without openpgp_key_files opens nothing",
        );
    }
    for kind in &d.allow_decrypted_in {
        if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric()) {
            problems.add(
                key("decrypt.allow_decrypted_in"),
                format!("{kind:?} is not a kind (such as ConfigMap)"),
            );
        }
    }
}

/// Checks that a configured path is relative and never climbs out of the repository.
///
/// # Errors
/// A message naming the path and why it is refused.
pub fn check_repo_path(p: &str) -> Result<(), ValueError> {
    let path = Path::new(p);
    let mut depth: usize = 0;
    for c in path.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| ValueError::EscapesRoot(p.to_string()))?;
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(ValueError::Absolute(p.to_string()))
            }
        }
    }
    Ok(())
}

/// Whether `s` is a full commit SHA: 40 hexadecimal digits.
pub fn is_full_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// True for an RFC 1123 DNS label: what app names and namespaces must be.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `v` is a Kubernetes version helm takes for `--kube-version`: `1.31`, `v1.31.2`.
pub fn is_kube_version(v: &str) -> bool {
    let parts: Vec<&str> = v.strip_prefix('v').unwrap_or(v).split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 9 && p.bytes().all(|b| b.is_ascii_digit()))
}
