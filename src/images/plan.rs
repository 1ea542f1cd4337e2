//! What one scan changes in a repository's marked files (pure): for each marked field, the
//! tag the policy chooses when it is newer than the field's — unless a person set the
//! field back by hand (then the field is paused), and never a tag whose rollout failed in
//! the field's app.
use std::collections::BTreeMap;

use super::files::MarkedFile;
use super::markers::{self, Form};
use super::policy::Policy;
use super::state::State;

/// A policy as a scan sees it.
pub struct Choice<'a> {
    pub policy: &'a Policy,
    pub image: &'a str,
    /// The tags it considers, newest first (none: the registry was not read, or holds
    /// none).
    pub newest: &'a [String],
}

/// One field changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub policy: String,
    /// `app:path#n`, the n-th field of the policy in the file.
    pub field: String,
    pub path: String,
    pub line: usize,
    /// The tag it held (or the value, for a name).
    pub old: String,
    pub new: String,
}

/// What a field holds now, for `berth images`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldNow {
    pub policy: String,
    pub field: String,
    /// The tag in git.
    pub tag: String,
    /// Paused at this tag (a person set it back).
    pub paused: bool,
}

/// A file a scan changes.
#[derive(Debug, Clone)]
pub struct FileChange {
    pub path: String,
    pub old: String,
    pub new: String,
}

/// A scan's plan for one repository.
#[derive(Debug, Default)]
pub struct Plan {
    /// The files changed.
    pub files: Vec<FileChange>,
    pub changes: Vec<Change>,
    pub fields: Vec<FieldNow>,
}

/// The plan for `files` with the policies' `choices`; `state` learns which fields a person
/// set back (paused) or moved on by hand, and which were changed again by hand (resumed).
pub fn plan(files: &[MarkedFile], choices: &BTreeMap<&str, Choice<'_>>, state: &mut State) -> Plan {
    let mut out = Plan::default();
    for file in files {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut fields = Vec::new();
        for marker in markers::markers(&file.text) {
            let n = counts.entry(marker.policy.to_string()).or_default();
            *n += 1;
            fields.push(format!("{}:{}#{n}", file.app, file.path));
        }
        let mut index = 0;
        let (text, edits) = markers::rewrite(&file.text, |marker| {
            let field = &fields[index];
            index += 1;
            let choice = choices.get(marker.policy)?;
            let chosen = field_value(marker, (&file.app, field), choice, state, &mut out.fields)?;
            Some(markers::value(marker.form, choice.image, &chosen))
        });
        for edit in edits {
            let field = fields_at(&fields, &file.text, edit.line);
            out.changes.push(Change {
                policy: edit.policy,
                field,
                path: file.path.clone(),
                line: edit.line,
                old: tag_in(&edit.old),
                new: tag_in(&edit.new),
            });
        }
        if text != file.text {
            out.files.push(FileChange {
                path: file.path.clone(),
                old: file.text.clone(),
                new: text,
            });
        }
    }
    out
}

/// The tag a marked field should hold, when the scan changes it.
fn field_value(
    marker: &markers::Marker<'_>,
    (app, field): (&str, &str),
    choice: &Choice<'_>,
    state: &mut State,
    now: &mut Vec<FieldNow>,
) -> Option<String> {
    if marker.form == Form::Name {
        return Some(String::new()); // the name alone: the policy's image
    }
    let current = markers::tag_of(marker)?;
    let policy = state.policies.entry(marker.policy.to_string()).or_default();
    // A person changed a paused field again: it follows the policy from there.
    if let Some(paused_at) = policy.paused.get(field) {
        if *paused_at != current {
            policy.paused.remove(field);
            policy.written.insert(field.to_string(), current.clone());
        }
    }
    // A person set the field back (to a tag the policy does not rank above the one berth
    // wrote): paused at that tag. Moved on by hand: berth follows from there.
    if let Some(written) = policy.written.get(field).cloned() {
        if written != current && !policy.paused.contains_key(field) {
            if choice.policy.newer(&current, &written) {
                policy.written.insert(field.to_string(), current.clone());
            } else {
                policy.paused.insert(field.to_string(), current.clone());
            }
        }
    }
    let paused = policy.paused.contains_key(field);
    now.push(FieldNow {
        policy: marker.policy.to_string(),
        field: field.to_string(),
        tag: current.clone(),
        paused,
    });
    let latest = (choice.newest.iter()).find(|t| !policy.failed_in(app, t))?;
    (!paused && choice.policy.newer(latest, &current)).then(|| latest.to_string())
}

/// The field of the marker on `line` of `text`.
fn fields_at(fields: &[String], text: &str, line: usize) -> String {
    let at = markers::markers(text).iter().position(|m| m.line == line);
    at.and_then(|i| fields.get(i)).cloned().unwrap_or_default()
}

/// The tag in a marked value (the value itself when it holds none: a tag alone).
fn tag_in(value: &str) -> String {
    markers::split_image(value)
        .map_or(value, |(_, tag)| tag)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::policy::Order;
    use crate::versions::Range;

    fn semver() -> Policy {
        Policy {
            order: Order::Semver(Range::parse("^1").unwrap()),
            filter: None,
            extract: None,
        }
    }

    fn file(tag: &str) -> Vec<MarkedFile> {
        vec![MarkedFile {
            app: "shop".into(),
            path: "deploy/shop.yaml".into(),
            text: format!("# the shop\nimage: \"r.example.com/shop:{tag}\" # {{\"$imagepolicy\": \"shop\"}}\nreplicas: 2\n"),
        }]
    }

    fn run(tag: &str, latest: Option<&str>, state: &mut State) -> Plan {
        let policy = semver();
        let newest: Vec<String> = latest
            .into_iter()
            .chain(["1.0.0"])
            .map(String::from)
            .collect();
        let choice = Choice {
            policy: &policy,
            image: "r.example.com/shop",
            newest: &newest,
        };
        plan(&file(tag), &BTreeMap::from([("shop", choice)]), state)
    }

    const FIELD: &str = "shop:deploy/shop.yaml#1";

    #[test]
    fn a_newer_tag_is_written_and_every_other_byte_kept() {
        let mut state = State::default();
        let planned = run("1.4.1", Some("1.4.2"), &mut state);
        assert_eq!(planned.files.len(), 1);
        assert_eq!(planned.files[0].new, file("1.4.2")[0].text);
        let change = &planned.changes[0];
        assert_eq!((change.field.as_str(), change.line), (FIELD, 2));
        assert_eq!(
            (change.old.as_str(), change.new.as_str()),
            ("1.4.1", "1.4.2")
        );
        // Up to date, or nothing newer: no change.
        assert!(run("1.4.2", Some("1.4.2"), &mut state).files.is_empty());
        assert!(run("1.4.2", Some("1.4.1"), &mut state).files.is_empty());
        assert!(run("1.4.2", None, &mut state).files.is_empty());
        // A tag the policy does not consider is replaced.
        assert_eq!(run("latest", Some("1.4.2"), &mut state).changes.len(), 1);
    }

    #[test]
    fn a_field_set_back_by_hand_is_paused_until_changed_again() {
        let mut state = State::default();
        let written = |state: &mut State, tag: &str| {
            let policy = state.policies.entry("shop".into()).or_default();
            policy.written.insert(FIELD.into(), tag.into());
        };
        written(&mut state, "1.5.0");
        // A person set 1.4.2 where berth wrote 1.5.0: paused, even with 1.6.0 out.
        let planned = run("1.4.2", Some("1.6.0"), &mut state);
        assert!(planned.files.is_empty() && planned.fields[0].paused);
        assert_eq!(state.policies["shop"].paused[FIELD], "1.4.2");
        assert!(run("1.4.2", Some("1.6.0"), &mut state).files.is_empty());
        // Changed again by hand: followed from there.
        let planned = run("1.4.3", Some("1.6.0"), &mut state);
        assert_eq!(planned.changes[0].new, "1.6.0");
        assert!(state.policies["shop"].paused.is_empty());
        // A person moving forward is followed, not paused.
        let mut state = State::default();
        written(&mut state, "1.5.0");
        let planned = run("1.5.5", Some("1.6.0"), &mut state);
        assert_eq!(planned.changes[0].new, "1.6.0");
        assert_eq!(state.policies["shop"].written[FIELD], "1.5.5");
    }

    #[test]
    fn a_tag_that_failed_is_skipped_in_its_app_alone() {
        let mut state = State::default();
        let failed = |state: &mut State, app: &str| {
            let policy = state.policies.entry("shop".into()).or_default();
            policy.fail(crate::images::state::Failure {
                tag: "1.5.0".into(),
                app: app.into(),
                record: "r".into(),
                at: jiff::Timestamp::UNIX_EPOCH,
            });
        };
        failed(&mut state, "cart");
        assert_eq!(
            run("1.4.1", Some("1.5.0"), &mut state).changes[0].new,
            "1.5.0"
        );
        failed(&mut state, "shop");
        assert!(run("1.4.1", Some("1.5.0"), &mut state).files.is_empty());
    }

    #[test]
    fn the_state_keeps_the_fields_that_exist() {
        let mut state = State::default();
        let policy = state.policies.entry("shop".into()).or_default();
        policy.written.insert(FIELD.into(), "1".into());
        policy.written.insert("shop:gone.yaml#1".into(), "1".into());
        policy.paused.insert("other:x.yaml#1".into(), "1".into());
        state.keep_fields(&["shop"], &std::collections::HashSet::from([FIELD]));
        let policy = &state.policies["shop"];
        assert_eq!(policy.written.keys().collect::<Vec<_>>(), [FIELD]);
        assert_eq!(policy.paused.len(), 1, "another group's field stays");
    }
}
