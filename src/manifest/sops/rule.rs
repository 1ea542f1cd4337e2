//! Which values of a file are encrypted: the one rule its `sops:` block names
//! (`unencrypted_suffix` by default, `encrypted_suffix`, `unencrypted_regex` or
//! `encrypted_regex`), matched against every key on a value's path.

use super::metadata::Metadata;
use super::SopsError;

/// Which values of the file are encrypted.
pub(super) enum Rule {
    /// Every value but those under a key with this suffix.
    UnencryptedSuffix(String),
    /// The values under a key with this suffix.
    EncryptedSuffix(String),
    /// Every value but those under a key this matches.
    UnencryptedRegex(regex::Regex),
    /// The values under a key this matches.
    EncryptedRegex(regex::Regex),
}

impl Rule {
    /// The rule of a file's metadata.
    ///
    /// # Errors
    /// [`SopsError::Metadata`]: comment rules, more than one rule, or a regex that does
    /// not compile within its bound.
    pub(super) fn of(m: &Metadata) -> Result<Rule, SopsError> {
        if m.unencrypted_comment_regex.is_some() || m.encrypted_comment_regex.is_some() {
            return Err(SopsError::Metadata(
                "comment rules (unencrypted_comment_regex, encrypted_comment_regex) are not supported"
                    .into(),
            ));
        }
        let regex =
            |r: &str| compiled(r).map_err(|e| SopsError::Metadata(format!("invalid regex: {e}")));
        let rules = [
            m.unencrypted_suffix
                .as_deref()
                .map(|s| Ok(Rule::UnencryptedSuffix(s.into()))),
            m.encrypted_suffix
                .as_deref()
                .map(|s| Ok(Rule::EncryptedSuffix(s.into()))),
            m.unencrypted_regex
                .as_deref()
                .map(|r| regex(r).map(Rule::UnencryptedRegex)),
            m.encrypted_regex
                .as_deref()
                .map(|r| regex(r).map(Rule::EncryptedRegex)),
        ];
        let mut set = rules.into_iter().flatten();
        let rule = set
            .next()
            .unwrap_or_else(|| Ok(Rule::UnencryptedSuffix("_unencrypted".into())))?;
        if set.next().is_some() {
            return Err(SopsError::Metadata(
                "more than one of unencrypted_suffix, encrypted_suffix, unencrypted_regex and encrypted_regex".into(),
            ));
        }
        Ok(rule)
    }

    /// Whether the value under `key` is encrypted, `parent` being whether a key above it
    /// decided so (for the rules that encrypt by default: whether one above left it clear).
    pub(super) fn encrypts(&self, key: &str, parent: bool) -> bool {
        match self {
            Rule::UnencryptedSuffix(s) => parent && !key.ends_with(s.as_str()),
            Rule::EncryptedSuffix(s) => parent || key.ends_with(s.as_str()),
            Rule::UnencryptedRegex(r) => parent && !r.is_match(key),
            Rule::EncryptedRegex(r) => parent || r.is_match(key),
        }
    }

    /// Whether a value at the root (no key yet) is encrypted.
    pub(super) fn at_root(&self) -> bool {
        matches!(self, Rule::UnencryptedSuffix(_) | Rule::UnencryptedRegex(_))
    }
}

/// `pattern` compiled, once for every file that names it (a repository's files share one
/// or two rules; compiling costs more than decrypting a Secret). At most 64 are kept.
pub(super) fn compiled(pattern: &str) -> Result<regex::Regex, regex::Error> {
    static CACHE: std::sync::Mutex<Vec<(String, regex::Regex)>> = std::sync::Mutex::new(Vec::new());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, r)) = cache.iter().find(|(p, _)| p == pattern) {
        return Ok(r.clone());
    }
    let r = regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()?;
    if cache.len() >= 64 {
        cache.remove(0);
    }
    cache.push((pattern.to_string(), r.clone()));
    Ok(r)
}
