//! Version ranges as Helm writes them (Masterminds' semver constraints: `^1.4`, `~1.2`,
//! `>=2 <3`, `1.14.x`, `1.2 - 1.4`, `!=1.3.0`, alternatives joined by `||`), and the
//! newest of a registry's versions inside one. A bare version is that version exactly
//! (Helm's reading, not Cargo's). Pre-releases are picked only when the range names one.

use semver::{Version, VersionReq};

/// A parsed range: any of its alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    alternatives: Vec<Alternative>,
}

#[derive(Debug, Clone, PartialEq)]
struct Alternative {
    /// What every comparator but `!=` asks.
    req: VersionReq,
    /// The versions `!=` excludes.
    not: Vec<Version>,
}

/// Why a range does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{range:?} is not a version or range ({why}); write one such as \"1.4.2\", \"^1.4\", \"~1.4\", \">=1.4 <2\" or \"1.4.x\"")]
pub struct RangeError {
    range: String,
    why: String,
}

impl RangeError {
    fn new(range: &str, why: String) -> Self {
        RangeError {
            range: range.to_string(),
            why,
        }
    }
}

/// Why one comparator is not one.
struct Why(String);

impl From<String> for Why {
    fn from(why: String) -> Self {
        Why(why)
    }
}

impl From<&str> for Why {
    fn from(why: &str) -> Self {
        Why(why.to_string())
    }
}

impl Range {
    /// Parses a Helm-style range.
    ///
    /// # Errors
    /// A comparator that is not one.
    pub fn parse(text: &str) -> Result<Range, RangeError> {
        if text.trim().is_empty() {
            return Err(RangeError::new(text, "it is empty".into()));
        }
        let alternatives = text
            .split("||")
            .map(|alt| alternative(alt).map_err(|why| RangeError::new(text, why.0)))
            .collect::<Result<_, _>>()?;
        Ok(Range { alternatives })
    }

    /// Whether `version` is inside the range.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives
            .iter()
            .any(|a| a.req.matches(version) && !a.not.contains(version))
    }

    /// The newest of `versions` (as written: `v1.2.3`, `1.2.3`, an OCI tag's `1.2.3_build`)
    /// inside the range, and the text it was written as.
    pub fn newest<'v>(
        &self,
        versions: impl IntoIterator<Item = &'v str>,
    ) -> Option<(Version, &'v str)> {
        versions
            .into_iter()
            .filter_map(|text| Some((parse_version(text)?, text)))
            .filter(|(v, _)| self.matches(v))
            .max_by(|a, b| a.0.cmp(&b.0))
    }
}

/// A version as registries write it: an optional `v`, and in OCI tags `_` for `+` (a tag
/// cannot hold a `+`; Helm writes it so).
pub fn parse_version(text: &str) -> Option<Version> {
    let text = text.strip_prefix('v').unwrap_or(text);
    Version::parse(&text.replace('_', "+")).ok()
}

/// One alternative: comparators separated by spaces or commas, all of which must hold.
fn alternative(text: &str) -> Result<Alternative, Why> {
    let tokens = tokens(text)?;
    let mut comparators = Vec::new();
    let mut not = Vec::new();
    for token in tokens {
        if let Some(v) = token.strip_prefix("!=") {
            let version = parse_version(v.trim())
                .ok_or_else(|| format!("{v:?} after != is not a full version"))?;
            not.push(version);
            continue;
        }
        comparators.push(comparator(&token));
    }
    let joined = if comparators.is_empty() {
        "*".to_string()
    } else {
        comparators.join(", ")
    };
    let req = VersionReq::parse(&joined).map_err(|e| e.to_string())?;
    Ok(Alternative { req, not })
}

/// The comparators of one alternative, an operator kept with its version (`>= 1.2` is
/// `>=1.2`), a hyphen range (`1.2 - 1.4`) turned into `>=1.2` and `<=1.4`.
fn tokens(text: &str) -> Result<Vec<String>, Why> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        if words.get(i + 1) == Some(&"-") {
            let high = words
                .get(i + 2)
                .ok_or("a hyphen range needs an upper version")?;
            tokens.push(format!(">={word}"));
            tokens.push(format!("<={high}"));
            i += 3;
        } else if word.chars().all(|c| "<>=!~^".contains(c)) {
            let version = words
                .get(i + 1)
                .ok_or_else(|| format!("{word:?} needs a version after it"))?;
            tokens.push(format!("{word}{version}"));
            i += 2;
        } else {
            tokens.push(word.to_string());
            i += 1;
        }
    }
    Ok(tokens)
}

/// A comparator in the semver crate's words: Helm's `=<` and `~>`, a `v` before the
/// version, and a bare version meaning exactly that one.
fn comparator(token: &str) -> String {
    let split = token
        .find(|c: char| !"<>=~^".contains(c))
        .unwrap_or(token.len());
    let (op, version) = token.split_at(split);
    let version = version.strip_prefix('v').unwrap_or(version);
    let op = match op {
        "=<" => "<=",
        "=>" => ">=",
        "~>" => "~",
        "" if !version.contains(['*', 'x', 'X']) => "=",
        other => other,
    };
    format!("{op}{version}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn newest(range: &str, versions: &[&str]) -> Option<String> {
        let range = Range::parse(range).unwrap();
        range
            .newest(versions.iter().copied())
            .map(|(_, t)| t.to_string())
    }

    const PUBLISHED: &[&str] = &[
        "1.13.6",
        "1.14.0",
        "1.14.5",
        "v1.15.1",
        "1.16.0-rc.1",
        "2.0.0",
        "2.1.0",
        "0.9.0",
    ];

    #[test]
    fn helm_ranges_pick_the_newest_version_inside_them() {
        assert_eq!(newest("^1.14", PUBLISHED).as_deref(), Some("v1.15.1"));
        assert_eq!(newest("~1.14", PUBLISHED).as_deref(), Some("1.14.5"));
        assert_eq!(newest("1.14.x", PUBLISHED).as_deref(), Some("1.14.5"));
        assert_eq!(newest(">=2 <3", PUBLISHED).as_deref(), Some("2.1.0"));
        assert_eq!(
            newest(">= 1.14, < 1.15", PUBLISHED).as_deref(),
            Some("1.14.5")
        );
        assert_eq!(
            newest("1.13 - 1.14.0", PUBLISHED).as_deref(),
            Some("1.14.0")
        );
        assert_eq!(newest("^2 || ~1.13", PUBLISHED).as_deref(), Some("2.1.0"));
        assert_eq!(newest(">=2 !=2.1.0", PUBLISHED).as_deref(), Some("2.0.0"));
        assert_eq!(newest("*", PUBLISHED).as_deref(), Some("2.1.0"));
        assert_eq!(newest("=<1.14.0", PUBLISHED).as_deref(), Some("1.14.0"));
    }

    #[test]
    fn a_bare_version_is_that_version_and_nothing_newer() {
        assert_eq!(newest("1.14.0", PUBLISHED).as_deref(), Some("1.14.0"));
        assert_eq!(newest("v1.15.1", PUBLISHED).as_deref(), Some("v1.15.1"));
        assert_eq!(newest("1.14.1", PUBLISHED), None, "never published");
    }

    #[test]
    fn pre_releases_only_when_the_range_names_one() {
        assert_eq!(newest("^1.15", PUBLISHED).as_deref(), Some("v1.15.1"));
        assert_eq!(newest(">=1.16.0-rc.0", PUBLISHED).as_deref(), Some("2.1.0"));
        assert_eq!(
            newest("~1.16.0-rc.0", PUBLISHED).as_deref(),
            Some("1.16.0-rc.1")
        );
    }

    #[test]
    fn oci_tags_write_build_metadata_with_an_underscore_and_other_tags_are_skipped() {
        let tags = ["latest", "1.2.3_build.7", "main", "1.2.2"];
        assert_eq!(newest("^1", &tags).as_deref(), Some("1.2.3_build.7"));
    }

    #[test]
    fn what_is_no_range_is_refused_with_examples() {
        for bad in ["", "banana", ">=", "1.2 -", "!=1.2"] {
            let e = Range::parse(bad).unwrap_err().to_string();
            assert!(e.contains("\"^1.4\""), "{bad:?}: {e}");
        }
    }
}
