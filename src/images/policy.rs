//! An image policy's choice among a repository's tags: the newest inside a semver range,
//! or the greatest by the numerical or alphabetical order of a part a regular expression
//! extracts — among the tags its filter keeps, never one the caller rules out (a tag whose
//! rollout failed).

use std::cmp::Ordering;

use regex::Regex;
use semver::Version;

use crate::config::{ImagePolicyConfig, TagOrder};
use crate::versions::{parse_version, Range};

/// How tags are ordered.
#[derive(Debug, Clone)]
pub enum Order {
    /// By semantic version, inside the range (`v` and OCI's `_` for `+` read).
    Semver(Range),
    /// By the number the tag (or its extracted part) is: a non-negative integer or
    /// decimal, compared exactly whatever its length.
    Numerical,
    /// By the text, byte by byte.
    Alphabetical,
}

/// A policy: which tags count, and which of them is newest.
#[derive(Debug, Clone)]
pub struct Policy {
    pub order: Order,
    /// Tags it considers at all (all, when none).
    pub filter: Option<Regex>,
    /// The part of a tag it orders by: the first named group, else the first group, else
    /// the whole match; a tag it does not match is not considered.
    pub extract: Option<Regex>,
}

/// What a tag is ordered by.
#[derive(Debug, PartialEq, Eq)]
enum Key<'t> {
    Version(Version),
    Number(Decimal<'t>),
    Text(&'t str),
}

impl PartialOrd for Key<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Key::Version(a), Key::Version(b)) => a.cmp(b),
            (Key::Number(a), Key::Number(b)) => a.cmp(b),
            (Key::Text(a), Key::Text(b)) => a.cmp(b),
            // One policy makes one kind of key.
            _ => Ordering::Equal,
        }
    }
}

/// A non-negative decimal as written: its integer digits without leading zeros, and its
/// fraction's digits without trailing ones.
#[derive(Debug, PartialEq, Eq)]
struct Decimal<'t> {
    whole: &'t str,
    fraction: &'t str,
}

impl<'t> Decimal<'t> {
    fn parse(text: &'t str) -> Option<Decimal<'t>> {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) {
            return None;
        }
        Some(Decimal {
            whole: whole.trim_start_matches('0'),
            fraction: fraction.trim_end_matches('0'),
        })
    }
}

impl PartialOrd for Decimal<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.whole.len().cmp(&other.whole.len()))
            .then_with(|| self.whole.cmp(other.whole))
            .then_with(|| self.fraction.cmp(other.fraction))
    }
}

/// Why a configured policy does not compile (validation says it first).
#[derive(Debug, thiserror::Error)]
#[error("image policy {name}: {why}")]
pub struct PolicyError {
    name: String,
    why: String,
}

impl Policy {
    /// The policy `[[image_policy]]` `config` describes.
    ///
    /// # Errors
    /// A range or a regular expression that does not compile, or no order given.
    pub fn of(config: &ImagePolicyConfig) -> Result<Policy, PolicyError> {
        let fail = |why: String| PolicyError {
            name: config.name.clone(),
            why,
        };
        let order = match (&config.semver, config.order) {
            (Some(range), _) => {
                Order::Semver(Range::parse(range).map_err(|e| fail(e.to_string()))?)
            }
            (None, Some(TagOrder::Numerical)) => Order::Numerical,
            (None, Some(TagOrder::Alphabetical)) => Order::Alphabetical,
            (None, None) => return Err(fail("no order: give semver or order".into())),
        };
        let compile = |text: &Option<String>| {
            text.as_deref()
                .map(Regex::new)
                .transpose()
                .map_err(|e| fail(e.to_string()))
        };
        Ok(Policy {
            order,
            filter: compile(&config.filter)?,
            extract: compile(&config.extract)?,
        })
    }

    /// Whether `tag` is newer than `than` by this policy: it considers `tag`, and either
    /// not `than` (a tag outside the range, or of another scheme) or it ranks it lower.
    pub fn newer(&self, tag: &str, than: &str) -> bool {
        match (self.key(tag), self.key(than)) {
            (Some(a), Some(b)) => a.cmp(&b).then_with(|| tag.cmp(than)) == Ordering::Greater,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// The `k` newest of `tags` this policy considers, newest first: what a scan keeps of
    /// a registry's list (the newest not ruled out is among them unless `k` are).
    pub fn newest(&self, tags: &[String], k: usize) -> Vec<String> {
        let mut keyed: Vec<(Key<'_>, &str)> = (tags.iter())
            .filter_map(|tag| Some((self.key(tag)?, tag.as_str())))
            .collect();
        keyed.sort_by(|(a, ta), (b, tb)| b.cmp(a).then_with(|| tb.cmp(ta)));
        keyed.truncate(k);
        keyed.into_iter().map(|(_, tag)| tag.to_string()).collect()
    }

    fn key<'t>(&self, tag: &'t str) -> Option<Key<'t>> {
        if !is_tag(tag) {
            return None; // a registry's answer is not trusted to be a tag
        }
        if self.filter.as_ref().is_some_and(|f| !f.is_match(tag)) {
            return None;
        }
        let part = match &self.extract {
            None => tag,
            Some(extract) => part_of(extract, tag)?,
        };
        match &self.order {
            Order::Semver(range) => {
                let version = parse_version(part)?;
                range.matches(&version).then_some(Key::Version(version))
            }
            Order::Numerical => Decimal::parse(part).map(Key::Number),
            Order::Alphabetical => Some(Key::Text(part)),
        }
    }
}

/// The part of `tag` `extract` picks: its first named group, else its first group, else
/// the whole match.
fn part_of<'t>(extract: &Regex, tag: &'t str) -> Option<&'t str> {
    let captures = extract.captures(tag)?;
    let named = extract.capture_names().flatten().next();
    let part = match named {
        Some(name) => captures.name(name),
        None => captures.get(1).or_else(|| captures.get(0)),
    };
    part.map(|m| m.as_str())
}

/// Whether `tag` is a tag as the OCI distribution spec has them
/// (`[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`): nothing else is ever written into a file.
fn is_tag(tag: &str) -> bool {
    let word = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    match tag.as_bytes() {
        [first, rest @ ..] if rest.len() < 128 => {
            word(first) && rest.iter().all(|b| word(b) || *b == b'.' || *b == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn semver(range: &str) -> Policy {
        Policy {
            order: Order::Semver(Range::parse(range).unwrap()),
            filter: None,
            extract: None,
        }
    }

    const TAGS: &[&str] = &[
        "1.3.9",
        "1.4.0",
        "v1.4.2",
        "1.4.10",
        "1.5.0-rc.1",
        "2.0.0",
        "latest",
        "main-abc",
    ];

    impl Policy {
        fn latest<'t>(&self, tags: impl IntoIterator<Item = &'t str>) -> Option<String> {
            let tags: Vec<String> = tags.into_iter().map(String::from).collect();
            self.newest(&tags, 1).pop()
        }

        fn considers(&self, tag: &str) -> bool {
            self.key(tag).is_some()
        }
    }

    #[test]
    fn newer_ranks_by_the_policy_and_anything_beats_a_tag_it_does_not_consider() {
        let policy = semver("^1.4");
        assert!(policy.newer("1.4.10", "1.4.2"));
        assert!(!policy.newer("1.4.2", "1.4.10"));
        assert!(!policy.newer("1.4.2", "1.4.2"));
        assert!(policy.newer("1.4.0", "latest"));
        assert!(!policy.newer("2.0.0", "1.4.0"));
    }

    #[test]
    fn semver_picks_the_newest_inside_the_range_newest_first() {
        let tags = TAGS.iter().copied();
        assert_eq!(
            semver("^1.4").latest(tags.clone()).as_deref(),
            Some("1.4.10")
        );
        assert_eq!(semver(">=1").latest(tags.clone()).as_deref(), Some("2.0.0"));
        let all: Vec<String> = TAGS.iter().map(|t| t.to_string()).collect();
        assert_eq!(semver("~1.4").newest(&all, 2), ["1.4.10", "v1.4.2"]);
        // Pre-releases only when the range names one.
        assert_eq!(
            semver("^1.4").latest(tags.clone()).as_deref(),
            Some("1.4.10")
        );
        assert_eq!(
            semver(">=1.5.0-rc.0 <2").latest(tags.clone()).as_deref(),
            Some("1.5.0-rc.1")
        );
        assert_eq!(semver("^3").latest(tags).as_deref(), None);
    }

    #[test]
    fn numerical_orders_an_extracted_build_number_exactly() {
        let policy = Policy {
            order: Order::Numerical,
            filter: Some(Regex::new("^main-").unwrap()),
            extract: Some(Regex::new(r"^main-[a-f0-9]+-(?P<ts>[0-9]+)$").unwrap()),
        };
        let tags = [
            "main-abc123-99",
            "main-def456-100",
            "main-0a0a0a-0101",
            "feature-aaa-999",
            "main-bad",
            // Past u64: still ordered exactly.
            "main-fff-99999999999999999999",
            "main-eee-100000000000000000000",
        ];
        assert_eq!(
            policy.latest(tags).as_deref(),
            Some("main-eee-100000000000000000000")
        );
        assert_eq!(
            policy.latest(tags[..4].iter().copied()).as_deref(),
            Some("main-0a0a0a-0101"),
            "101 is more than 100"
        );
        assert!(!policy.considers("feature-aaa-999"));
        let decimals = Policy {
            order: Order::Numerical,
            filter: None,
            extract: None,
        };
        assert_eq!(
            decimals.latest(["1.5", "1.25", "1.50", "x"]).as_deref(),
            Some("1.50")
        );
    }

    #[test]
    fn alphabetical_orders_the_text_and_ties_never_depend_on_the_listing() {
        let policy = Policy {
            order: Order::Alphabetical,
            filter: None,
            extract: Some(Regex::new(r"^build-(\d{8})").unwrap()),
        };
        let tags = [
            "build-20260101-a",
            "build-20261127-b",
            "build-20261127-a",
            "other",
        ];
        assert_eq!(policy.latest(tags).as_deref(), Some("build-20261127-b"));
        let reversed = tags.iter().rev().copied();
        assert_eq!(policy.latest(reversed).as_deref(), Some("build-20261127-b"));
    }

    #[test]
    fn only_a_tag_is_ever_chosen_whatever_the_registry_lists() {
        let policy = Policy {
            order: Order::Alphabetical,
            filter: None,
            extract: None,
        };
        let long = "z".repeat(129);
        let tags = ["a", "zz\nevil: x", "zz #", "-z", ".z", long.as_str(), ""];
        assert_eq!(policy.latest(tags).as_deref(), Some("a"));
        assert!(policy.considers(&"z".repeat(128)) && policy.considers("_a.B-9"));
    }
}
