//! Apps a set makes that may not run ([`Refused`]): a name another app has (every
//! generated app of it, never the first made), or a namespace no template may reach.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{compile_globs, AgentConfig, AppConfig, AppSetConfig, Config, Refused};

/// Takes out of `generated` every app whose name another app has (see [`clashes`]), and
/// returns them refused.
pub fn refuse_clashes(
    written: &[Arc<AppConfig>],
    generated: &mut Vec<Arc<AppConfig>>,
) -> Vec<Refused> {
    let clashes = clashes(written, generated);
    let refused = (generated.iter())
        .filter_map(|app| Some(Refused::of(app, clashes.get(&app.name)?.clone())))
        .collect();
    generated.retain(|a| !clashes.contains_key(&a.name));
    refused
}

/// The names more than one app has, each with what says so: every generated app of such a
/// name is refused — never the first made — naming each app that has it. A written app
/// keeps its name: a folder cannot take it, nor stop it.
fn clashes(written: &[Arc<AppConfig>], generated: &[Arc<AppConfig>]) -> BTreeMap<String, String> {
    let mut holders: BTreeMap<&str, Vec<&AppConfig>> = BTreeMap::new();
    for app in written.iter().chain(generated) {
        holders.entry(app.name.as_str()).or_default().push(app);
    }
    let said = |app: &AppConfig| match (&app.set, &app.folder) {
        (None, _) => "the written [[app]]".to_string(),
        (Some(set), Some(folder)) => format!(
            "app set {set} (folder {folder}, cluster {})",
            app.cluster.as_deref().unwrap_or_default()
        ),
        (Some(set), None) => format!(
            "app set {set} (cluster {})",
            app.cluster.as_deref().unwrap_or_default()
        ),
    };
    holders
        .into_iter()
        .filter(|(_, apps)| apps.len() > 1)
        .map(|(name, apps)| {
            let who: Vec<String> = apps.iter().map(|a| said(a)).collect();
            let why = format!(
                "the name {name:?} is made by {}: each app of the sets that make it is refused until one is renamed (give app_name a template that tells them apart)",
                who.join(" and by ")
            );
            (name.to_string(), why)
        })
        .collect()
}

/// The apps of `set` that may run, and those refused: each whose templates reach a
/// reserved namespace (see [`out_of_reach`]).
pub fn within_reach(
    config: &Config,
    set: &AppSetConfig,
    apps: Vec<Arc<AppConfig>>,
) -> (Vec<Arc<AppConfig>>, Vec<Refused>) {
    let reserved = reserved_namespaces(&config.agent);
    let (mut made, mut refused) = (Vec::with_capacity(apps.len()), Vec::new());
    for app in apps {
        match out_of_reach(set, &app, &reserved) {
            Some(why) => refused.push(Refused::of(&app, why)),
            None => made.push(app),
        }
    }
    (made, refused)
}

/// The namespaces no set's app may have or reach: Kubernetes' own, and berth's
/// (`agent.inventory_namespace`). Only a written app may name them.
pub fn reserved_namespaces(agent: &AgentConfig) -> [&str; 5] {
    [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "default",
        agent.inventory_namespace.as_str(),
    ]
}

/// Why a set's app may not run: a namespace or scope its templates fill in (from a
/// folder's name, a ref's, a cluster's, a label) reaches a reserved namespace, or a
/// folder's or ref's name holding a glob's character fills in a scope (a folder named `*` would make
/// `scope = ["{folder}"]` every namespace). What the set writes literally stands.
fn out_of_reach(set: &AppSetConfig, app: &AppConfig, reserved: &[&str]) -> Option<String> {
    let filled = |v: Option<&toml::Value>| v.and_then(toml::Value::as_str).is_some_and(is_template);
    let template = &set.template;
    let scope_template = (template.get("scope"))
        .and_then(|s| s.get("namespaces"))
        .and_then(toml::Value::as_array);
    let mut reached: Vec<&str> = Vec::new();
    if filled(template.get("namespace")) && reserved.contains(&app.namespace.as_str()) {
        reached.push(&app.namespace);
    }
    let filled_scope: Vec<&String> = match (scope_template, &app.scope.namespaces) {
        (Some(written), Some(made)) => (written.iter().zip(made))
            .filter(|(w, _)| filled(Some(w)))
            .map(|(_, m)| m)
            .collect(),
        _ => Vec::new(),
    };
    // A folder's or a ref's name is the repository's to choose (a ref's, anyone's who
    // opens a pull request): one holding a glob's character never fills a scope.
    let named = [
        ("folder", app.folder.as_deref()),
        ("ref", app.preview.as_deref()),
    ];
    for (what, name) in named {
        if let Some(name) = name.filter(|n| !filled_scope.is_empty() && n.contains(GLOB_CHARS)) {
            return Some(format!(
                "its {what} {name:?} holds a glob's character, which its scope's template would take as one: skipped"
            ));
        }
    }
    let globs = compile_globs(&filled_scope.into_iter().cloned().collect::<Vec<_>>())
        .ok()
        .flatten();
    reached.extend(
        reserved
            .iter()
            .filter(|ns| globs.as_ref().is_some_and(|g| g.is_match(ns))),
    );
    let reached = reached.first()?;
    Some(format!(
        "its templates make namespace {:?} and scope {:?}, which reach namespace {reached:?}: {} are out of any template's reach (only a written [[app]] may name them); skipped",
        app.namespace,
        app.scope_namespaces(),
        reserved.join(", ")
    ))
}

/// Whether a set's value is a template: it holds a placeholder.
fn is_template(text: &str) -> bool {
    text.replace("{{", "").contains('{')
}

/// The characters of a glob: a folder's name holding one could widen a scope.
const GLOB_CHARS: &[char] = &['*', '?', '[', ']', '{', '}', '!', '\\'];
