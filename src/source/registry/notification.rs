//! A registry's push notification, in the CNCF distribution registry's format (its
//! `notifications` endpoints: an envelope of `events`, each with an `action`, a `target`
//! naming the repository, and the `request`'s host): the sources it pushed to, named as an
//! app's origin (`oci://HOST/REPOSITORY`), so that a webhook wakes every app of each.

use serde::Deserialize;

#[derive(Deserialize)]
struct Envelope {
    events: Vec<Event>,
}

#[derive(Deserialize)]
struct Event {
    action: String,
    target: Target,
    request: Request,
}

#[derive(Deserialize)]
struct Target {
    repository: String,
}

#[derive(Deserialize)]
struct Request {
    host: String,
}

/// The sources pushed to in `body` (a notification's envelope), each once, in order;
/// `None` when `body` is no envelope (a git host's webhook).
pub fn pushed(body: &[u8]) -> Option<Vec<String>> {
    let envelope: Envelope = serde_json::from_slice(body).ok()?;
    let mut sources: Vec<String> = Vec::new();
    for event in envelope.events.iter().filter(|e| e.action == "push") {
        let source = format!("oci://{}/{}", event.request.host, event.target.repository);
        if !sources.contains(&source) {
            sources.push(source);
        }
    }
    Some(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_names_its_source_and_a_pull_or_a_git_hook_does_not() {
        let body = br#"{"events": [
            {"id": "1", "action": "push", "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:ab", "repository": "charts/web", "tag": "1.1.0"}, "request": {"host": "127.0.0.1:5000", "method": "PUT"}},
            {"id": "2", "action": "pull", "target": {"repository": "charts/db"}, "request": {"host": "127.0.0.1:5000"}},
            {"id": "3", "action": "push", "target": {"repository": "charts/web"}, "request": {"host": "127.0.0.1:5000"}}
        ]}"#;
        assert_eq!(
            pushed(body),
            Some(vec!["oci://127.0.0.1:5000/charts/web".to_string()])
        );
        assert_eq!(
            pushed(br#"{"ref": "refs/heads/main", "commits": []}"#),
            None
        );
    }
}
