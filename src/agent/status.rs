//! `STATUS=` for systemd (`systemctl status berth`'s "Status:" line): each app's last word
//! while they fit in a short line, else a count of the apps and the few that need a look.

use std::fmt::Write as _;

use jiff::Timestamp;

use crate::history::{Outcome, SyncRecord};

/// The longest `STATUS=` text: a line a person reads at a glance (systemd ignores a
/// notification over 4 KiB).
const STATUS_MAX: usize = 1024;

/// How many apps that are not synced the long form names.
const NAMED: usize = 3;

/// One app's last word for `STATUS=`.
pub(super) struct Said {
    line: String,
    at: Timestamp,
    /// The last sync applied the commit (or found nothing to change).
    synced: bool,
}

impl Said {
    /// `line` said now.
    pub(super) fn new(line: String, synced: bool) -> Self {
        Said {
            line,
            at: Timestamp::now(),
            synced,
        }
    }

    /// From a sync's record.
    pub(super) fn of(r: &SyncRecord) -> Self {
        let commit = r.short_commit().to_string();
        let line = match r.outcome {
            Outcome::Succeeded => format!("{}: synced {commit} ({} changed)", r.app, r.changes()),
            Outcome::NoChange => format!("{}: synced {commit} (no change)", r.app),
            Outcome::Held => format!("{}: held at {commit}", r.app),
            Outcome::RolledBack => format!("{}: rolled back, held at {commit}", r.app),
            Outcome::Failed | Outcome::Interrupted => {
                format!("{}: {} at {commit}", r.app, r.outcome.as_str())
            }
        };
        Said::new(
            line,
            matches!(r.outcome, Outcome::Succeeded | Outcome::NoChange),
        )
    }

    fn aged(&self, now: Timestamp) -> String {
        format!(
            "{} {}s ago",
            self.line,
            now.duration_since(self.at).as_secs()
        )
    }
}

/// `guestbook: synced abc1234 (3 changed) 12s ago; …` while every app fits in
/// [`STATUS_MAX`] bytes, else `10000 apps: 9998 synced, 2 not (web: failed at abc1234; …);
/// last: api: synced abc1234 (4 changed) 0s ago`. Nothing before the first word.
pub(super) fn status_text(said: &[&Said], now: Timestamp) -> Option<String> {
    let mut all = String::new();
    for s in said.iter() {
        if !all.is_empty() {
            all.push_str("; ");
        }
        all.push_str(&s.aged(now));
        if all.len() > STATUS_MAX {
            break;
        }
    }
    if all.len() <= STATUS_MAX {
        return (!all.is_empty()).then_some(all);
    }
    let synced = said.iter().filter(|s| s.synced).count();
    let not: Vec<&str> = (said.iter().filter(|s| !s.synced))
        .take(NAMED)
        .map(|s| s.line.as_str())
        .collect();
    let more = if said.len() - synced > NAMED {
        "; …"
    } else {
        ""
    };
    let last = said.iter().max_by_key(|s| s.at).map(|s| s.aged(now));
    let mut text = format!("{} apps: {synced} synced", said.len());
    if !not.is_empty() {
        let _ = write!(
            text,
            ", {} not ({}{more})",
            said.len() - synced,
            not.join("; ")
        );
    }
    let _ = write!(text, "; last: {}", last.unwrap_or_default());
    if text.len() > STATUS_MAX {
        let mut end = STATUS_MAX - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(apps: usize, failed: &[usize]) -> Vec<Said> {
        (0..apps)
            .map(|i| {
                let name = format!("app-{i:05}");
                if failed.contains(&i) {
                    Said::new(format!("{name}: failed at abc1234"), false)
                } else {
                    Said::new(format!("{name}: synced abc1234 (4 changed)"), true)
                }
            })
            .collect()
    }

    fn status_of(said: &[Said], now: Timestamp) -> Option<String> {
        status_text(&said.iter().collect::<Vec<_>>(), now)
    }

    #[test]
    fn a_few_apps_each_have_their_word() {
        let two = said(2, &[1]);
        let now = Timestamp::now();
        assert_eq!(status_of(&[], now), None);
        let text = status_of(&two, now).unwrap();
        assert_eq!(
            text,
            "app-00000: synced abc1234 (4 changed) 0s ago; app-00001: failed at abc1234 0s ago"
        );
    }

    #[test]
    fn many_apps_are_counted_in_a_short_line_that_names_the_ones_not_synced() {
        let (some_failed, all_synced) = (said(10_000, &[7, 4000, 5000, 9000]), said(10_000, &[]));
        let now = Timestamp::now();
        let text = status_of(&some_failed, now).unwrap();
        assert!(text.len() <= STATUS_MAX, "{} bytes", text.len());
        assert!(
            text.starts_with("10000 apps: 9996 synced, 4 not (app-00007: failed at abc1234; app-04000: failed at abc1234; app-05000: failed at abc1234; …); last: "),
            "{text}"
        );
        let all_synced = status_of(&all_synced, now).unwrap();
        assert!(
            all_synced.starts_with("10000 apps: 10000 synced; last: app-"),
            "{all_synced}"
        );
    }
}
