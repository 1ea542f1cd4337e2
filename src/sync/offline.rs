//! `berth plan --offline`: a revision planned without a cluster — rendered (typed checks,
//! `[app.scope]`, decryption, kustomize and helm as a sync renders) and compared object by
//! object with another commit of the app: the one it applied last (from berth's local
//! copy of its inventory), or the one `--against` names. What needs the API server — its
//! dry run (defaults, admission, validation), drift in the live objects, rollout
//! predictions, the hooks' and prunes' dry runs — is said to be skipped, not dropped.

use std::collections::BTreeMap;

use super::preview::{PlannedObject, Preview};
use super::steps::verify;
use crate::config::{AgentConfig, AppConfig};
use crate::manifest::{Builder, BuiltinScopes, Manifest, ObjectKey};
use crate::plan::phases::wave_of;
use crate::source::git::{self, Checkout};

/// What an offline plan cannot know.
pub const SKIPPED: &str = "planned without a cluster: the API server's dry run (defaults, admission, validation), drift in the live objects, rollout predictions and the hooks' and prunes' dry runs were skipped";

/// The plan of `app` at `revision` against `base` (the app at the commit to compare with;
/// `None`: every object is new), charts rendered for `kube_version` (`[cluster]
/// kube_version`). Nothing is written but the repository cache.
pub fn preview_offline(
    agent: &AgentConfig,
    kube_version: Option<&str>,
    revision: &AppConfig,
    base: Option<&AppConfig>,
    show_secrets: bool,
) -> Preview {
    let mut preview = Preview::of(&revision.name);
    preview.notes.push(SKIPPED.to_string());
    let after = match checkout(agent, revision) {
        Ok(checkout) => {
            preview.commit = Some(checkout.commit.clone());
            render(
                agent,
                kube_version,
                revision,
                &checkout,
                &mut preview.errors,
            )
        }
        Err(e) => {
            preview.errors.push(crate::Chain(&e).to_string());
            return preview;
        }
    };
    let before = match base.map(|b| (b, checkout(agent, b))) {
        Some((b, Ok(checkout))) => {
            preview.previous_commit = Some(checkout.commit.sha.clone());
            // The base's own errors are not the revision's: it renders what it can.
            render(agent, kube_version, b, &checkout, &mut Vec::new())
        }
        Some((_, Err(e))) => {
            preview.errors.push(crate::Chain(&e).to_string());
            return preview;
        }
        None => {
            preview
                .notes
                .push("no applied commit known here (no sync on this host; --against names one): every object is new".into());
            Vec::new()
        }
    };
    compare(&before, &after, revision.prune, show_secrets, &mut preview);
    preview
}

/// Why a revision has no commit to plan.
#[derive(Debug, thiserror::Error)]
enum CheckoutError {
    #[error(transparent)]
    Fetch(#[from] git::SourceError),
    #[error(transparent)]
    Verify(#[from] crate::source::verify::VerifyError),
}

/// The app's commit, fetched and verified as a sync's.
fn checkout(agent: &AgentConfig, app: &AppConfig) -> Result<Checkout, CheckoutError> {
    let checkout = crate::source::fetch_now(app, agent)?;
    verify::check(app, &checkout)?;
    Ok(checkout)
}

/// The objects of a checkout that render; every error into `errors`.
fn render(
    agent: &AgentConfig,
    kube_version: Option<&str>,
    app: &AppConfig,
    checkout: &Checkout,
    errors: &mut Vec<String>,
) -> Vec<Manifest> {
    match Builder::for_app(app, agent, &checkout.dir, &BuiltinScopes) {
        Ok(builder) => {
            let (manifests, failed) = builder
                .capabilities(kube_version, Vec::new().into())
                .render_partial();
            errors.extend(failed.iter().map(ToString::to_string));
            manifests
        }
        Err(e) => {
            errors.push(format!("invalid glob in app {}: {e}", app.name));
            Vec::new()
        }
    }
}

/// Each object of `after` created or changed against `before`, and each of `before` that
/// `after` no longer holds (pruned when the app prunes).
fn compare(
    before: &[Manifest],
    after: &[Manifest],
    prune: bool,
    show_secrets: bool,
    preview: &mut Preview,
) {
    let old: BTreeMap<ObjectKey, &Manifest> = before.iter().map(|m| (m.key(), m)).collect();
    let mut seen = std::collections::BTreeSet::new();
    for m in after {
        let key = m.key();
        seen.insert(key.clone());
        let planned = serde_json::Value::Object(m.object.clone());
        let live = old
            .get(&key)
            .map(|b| serde_json::Value::Object(b.object.clone()));
        let diff = crate::diff::object_diff(
            live.as_ref(),
            &planned,
            &key.kubectl(),
            &m.decrypted,
            show_secrets,
        );
        let action = match (&live, &diff) {
            (None, _) => "create",
            (Some(_), Some(_)) => "configure",
            (Some(_), None) => {
                preview.unchanged += 1;
                continue;
            }
        };
        preview.objects.push(PlannedObject {
            key,
            action,
            note: None,
            diff,
            wave: Some(wave_of(m)),
        });
    }
    for (key, _) in old.iter().filter(|(k, _)| !seen.contains(*k)) {
        preview.objects.push(PlannedObject {
            key: key.clone(),
            action: if prune { "prune" } else { "kept" },
            note: (!prune).then(|| "the app does not prune".to_string()),
            diff: None,
            wave: None,
        });
    }
}
