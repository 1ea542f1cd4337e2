//! Glob settings (`include`, `exclude`, `include_objects`, `exclude_objects`), compiled
//! once per configuration.

use std::sync::OnceLock;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Deserializer};

/// Glob patterns as written, compiled once on first use (by validation, at the latest)
/// and kept: every sync of the app shares the compiled set.
#[derive(Debug, Clone, Default)]
pub struct Globs {
    patterns: Vec<String>,
    compiled: OnceLock<Result<Option<GlobSet>, globset::Error>>,
}

impl Globs {
    /// Patterns to compile.
    pub fn new(patterns: Vec<String>) -> Self {
        Globs {
            patterns,
            compiled: OnceLock::new(),
        }
    }

    /// The compiled set (a copy of the one compiled); `None` when there are no patterns.
    ///
    /// # Errors
    /// The first pattern that is not a valid glob.
    pub fn set(&self) -> Result<Option<GlobSet>, globset::Error> {
        self.compiled
            .get_or_init(|| compile_globs(&self.patterns))
            .clone()
    }
}

impl PartialEq for Globs {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

impl<'de> Deserialize<'de> for Globs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(d).map(Globs::new)
    }
}

/// Compiles globs; `None` for an empty list.
///
/// # Errors
/// The first invalid glob.
pub fn compile_globs(patterns: &[String]) -> Result<Option<GlobSet>, globset::Error> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        set.add(Glob::new(p)?);
    }
    set.build().map(Some)
}
