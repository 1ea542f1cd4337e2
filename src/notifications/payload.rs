//! What a receiver is sent, by format: berth's JSON document (version 1, described in
//! `docs/notifications.md`), Slack/Mattermost incoming-webhook text, or Alertmanager alerts.

use serde_json::{json, Value};

use super::events::Message;
use crate::config::{NotifyEvent, NotifyFormat};

/// The JSON document's version: a field is only ever added within a version.
pub const VERSION: u32 = 1;
/// How long an Alertmanager alert stays firing without being sent again (berth sends an
/// unchanged problem again after [`super::events::REMIND_AFTER`]).
const ALERT_HOLD: jiff::SignedDuration = jiff::SignedDuration::from_hours(24);

/// The body for `format`; `None` when the format has nothing to say about the event
/// (Alertmanager is told of problems and recoveries only).
pub fn body(format: NotifyFormat, m: &Message, link: Option<&str>) -> Option<Value> {
    let link = link.map(|l| expand(l, m));
    match format {
        NotifyFormat::Json => Some(document(m, link)),
        NotifyFormat::Slack => Some(json!({ "text": slack(m, link.as_deref()) })),
        NotifyFormat::Alertmanager => alerts(m, link),
    }
}

/// The link template with `{app}`, `{commit}` and `{record}` replaced.
fn expand(template: &str, m: &Message) -> String {
    template
        .replace("{app}", &m.app)
        .replace("{commit}", m.commit.as_ref().map_or("", |c| c.0.as_str()))
        .replace("{record}", &m.record)
}

fn document(m: &Message, link: Option<String>) -> Value {
    json!({
        "version": VERSION,
        "event": m.event.as_str(),
        "resolves": m.resolves.map(NotifyEvent::as_str),
        "app": m.app,
        "set": m.set,
        "cluster": m.cluster,
        "outcome": m.outcome.as_str(),
        "commit": m.commit.as_ref().map(|(sha, subject, author)| json!({
            "sha": sha, "short": crate::source::short(sha), "subject": subject, "author": author,
        })),
        "errors": m.errors,
        "rollouts": m.rollouts,
        "changes": m.changes,
        "record": m.record,
        "host": m.host,
        "at": m.at.to_string(),
        "link": link,
    })
}

fn headline(m: &Message) -> String {
    let commit = m
        .commit
        .as_ref()
        .map(|(sha, subject, _)| format!(" at commit {} {subject:?}", crate::source::short(sha)))
        .unwrap_or_default();
    let what = match m.event {
        NotifyEvent::SyncFailed => "sync failed",
        NotifyEvent::RolloutFailed => "rollout failed",
        NotifyEvent::RolledBack => "rolled back",
        NotifyEvent::Recovered => "recovered",
        NotifyEvent::Synced => "synced",
        NotifyEvent::Held => "held: waiting for a new commit",
        NotifyEvent::SetHeld => "keeps its last apps, removes none",
        NotifyEvent::ImageUpdated => "image update pushed",
        NotifyEvent::ImageSkipped => "image tag skipped from now on: its rollout failed",
        NotifyEvent::PreviewCreated => "preview created",
        NotifyEvent::PreviewRemoved => "preview removed",
    };
    let cluster = match m.cluster.as_deref() {
        Some(name) if name != "default" => format!(" (cluster {name})"),
        _ => String::new(),
    };
    let whose = if m.set { "app set" } else { "app" };
    format!("{whose} {}{cluster}: {what}{commit}", m.app)
}

fn slack(m: &Message, link: Option<&str>) -> String {
    let icon = match m.event {
        NotifyEvent::Recovered | NotifyEvent::Synced => ":white_check_mark:",
        NotifyEvent::Held | NotifyEvent::SetHeld => ":pause_button:",
        NotifyEvent::ImageUpdated => ":arrow_up:",
        NotifyEvent::ImageSkipped => ":no_entry_sign:",
        NotifyEvent::PreviewCreated => ":sparkles:",
        NotifyEvent::PreviewRemoved => ":wastebasket:",
        _ => ":x:",
    };
    let mut text = format!("{icon} berth: {}", headline(m));
    if m.event == NotifyEvent::Synced {
        text += &format!(" ({} changed)", crate::plural(m.changes, "object"));
    }
    for r in &m.rollouts {
        text += &format!(
            "\n• Deployment {}: {} — {}",
            r.deployment, r.outcome, r.message
        );
        if let Some(to) = r.rolled_back_to {
            text += &format!(" (rolled back to revision {to})");
        }
    }
    for e in &m.errors {
        text += &format!("\n• {e}");
    }
    if let Some(link) = link {
        text += &format!("\n<{link}|details>");
    }
    text
}

fn alert_name(event: NotifyEvent) -> Option<&'static str> {
    match event {
        NotifyEvent::SyncFailed => Some("BerthSyncFailed"),
        NotifyEvent::RolloutFailed => Some("BerthRolloutFailed"),
        NotifyEvent::RolledBack => Some("BerthRolledBack"),
        NotifyEvent::Held => Some("BerthAppHeld"),
        NotifyEvent::SetHeld => Some("BerthAppSetHeld"),
        NotifyEvent::Recovered
        | NotifyEvent::Synced
        | NotifyEvent::ImageUpdated
        | NotifyEvent::ImageSkipped
        | NotifyEvent::PreviewCreated
        | NotifyEvent::PreviewRemoved => None,
    }
}

fn alerts(m: &Message, link: Option<String>) -> Option<Value> {
    let alert = |name: &str, ends: jiff::Timestamp| {
        json!({
            "labels": {"alertname": name, (if m.set { "set" } else { "app" }): m.app, "cluster": m.cluster.as_deref().unwrap_or("default"), "severity": "warning", "source": "berth"},
            "annotations": {
                "summary": headline(m),
                "description": m.errors.join("\n"),
                "record": m.record,
            },
            "startsAt": m.at.to_string(),
            "endsAt": ends.to_string(),
            "generatorURL": link.clone().unwrap_or_default(),
        })
    };
    let mut out = Vec::new();
    if let Some(name) = m.resolves.and_then(alert_name) {
        out.push(alert(name, m.at));
    }
    if let Some(name) = alert_name(m.event) {
        out.push(alert(name, m.at + ALERT_HOLD));
    }
    (!out.is_empty()).then(|| Value::Array(out))
}

/// Where an Alertmanager receiver is sent: its `/api/v2/alerts`, added when the address
/// is the server's root.
pub fn alertmanager_url(url: &str) -> String {
    if url.trim_end_matches('/').ends_with("/api/v2/alerts") {
        url.to_string()
    } else {
        format!("{}/api/v2/alerts", url.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Outcome;

    fn message(event: NotifyEvent, resolves: Option<NotifyEvent>) -> Message {
        Message {
            event,
            resolves,
            app: "shop".into(),
            set: false,
            record: "r1".into(),
            host: Some("h/1".into()),
            cluster: Some("east".into()),
            at: "2026-11-23T10:00:00Z".parse().unwrap(),
            outcome: Outcome::Failed,
            commit: Some(("0123456789abcdef".into(), "Bump web".into(), "Dev".into())),
            errors: vec!["web.yaml: boom".into()],
            rollouts: Vec::new(),
            changes: 0,
        }
    }

    #[test]
    fn the_json_document_names_app_commit_outcome_errors_and_link() {
        let m = message(NotifyEvent::SyncFailed, None);
        let v = body(
            NotifyFormat::Json,
            &m,
            Some("https://git.example/{app}/{commit}"),
        )
        .unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(v["event"], "sync_failed");
        assert_eq!(v["app"], "shop");
        assert_eq!(v["cluster"], "east");
        assert_eq!(v["commit"]["short"], "0123456");
        assert_eq!(v["errors"][0], "web.yaml: boom");
        assert_eq!(v["link"], "https://git.example/shop/0123456789abcdef");
        assert_eq!(v["resolves"], Value::Null);
    }

    #[test]
    fn slack_text_says_what_happened() {
        let v = body(
            NotifyFormat::Slack,
            &message(NotifyEvent::SyncFailed, None),
            None,
        )
        .unwrap();
        let text = v["text"].as_str().unwrap();
        assert!(
            text.starts_with(":x: berth: app shop (cluster east): sync failed at commit 0123456"),
            "{text}"
        );
        assert!(text.contains("• web.yaml: boom"), "{text}");
    }

    #[test]
    fn alertmanager_fires_on_a_problem_and_resolves_on_recovery() {
        let fired = body(
            NotifyFormat::Alertmanager,
            &message(NotifyEvent::RolledBack, None),
            None,
        )
        .unwrap();
        assert_eq!(fired[0]["labels"]["alertname"], "BerthRolledBack");
        assert_eq!(fired[0]["endsAt"], "2026-11-24T10:00:00Z");
        let resolved = body(
            NotifyFormat::Alertmanager,
            &message(NotifyEvent::Recovered, Some(NotifyEvent::RolledBack)),
            None,
        )
        .unwrap();
        assert_eq!(resolved.as_array().unwrap().len(), 1);
        assert_eq!(resolved[0]["labels"]["alertname"], "BerthRolledBack");
        assert_eq!(resolved[0]["endsAt"], "2026-11-23T10:00:00Z", "ends now");
        assert!(body(
            NotifyFormat::Alertmanager,
            &message(NotifyEvent::Synced, None),
            None
        )
        .is_none());
        assert_eq!(
            alertmanager_url("http://am:9093/"),
            "http://am:9093/api/v2/alerts"
        );
        assert_eq!(
            alertmanager_url("http://am:9093/api/v2/alerts"),
            "http://am:9093/api/v2/alerts"
        );
    }
}
