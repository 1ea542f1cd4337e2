//! Configuration errors: every one names the key path and, once loaded from a file, the
//! file, line and column (validation problems are located in the text by their key path).

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {}", path.display(), io_message(error))]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said (shown in the message, so not also as its source).
        error: std::io::Error,
    },
    /// The text is not valid TOML or does not fit the schema.
    #[error("{}{line}:{column}: {key}: {message}", file_prefix(file))]
    Parse {
        /// The file, once known.
        file: Option<PathBuf>,
        /// The key path, e.g. `app[0].rollout.timeout`.
        key: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The configuration parses but does not make sense.
    #[error("{}", Problems { file, problems })]
    Invalid {
        /// The file, once known.
        file: Option<PathBuf>,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

/// One problem found by [`Config::validate`](super::Config::validate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key path, e.g. `app[1].name`.
    pub key: String,
    /// What is wrong, and what to do.
    pub message: String,
    /// Line and column of the key's value, once the text is known ([`load`](super::load)).
    pub at: Option<(usize, usize)>,
}

/// One line a problem, as compilers print them: `berth.toml:7:8: app[1].name: …`.
struct Problems<'a> {
    file: &'a Option<PathBuf>,
    problems: &'a [Problem],
}

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match (self.file, p.at) {
                (Some(file), Some((line, column))) => {
                    write!(f, "{}:{line}:{column}: ", file.display())?
                }
                (Some(file), None) => write!(f, "{}: ", file.display())?,
                (None, _) => write!(f, "invalid configuration: ")?,
            }
            write!(f, "{}: {}", p.key, p.message)?;
        }
        Ok(())
    }
}

/// The OS's words without the `(os error 2)` that only programmers read.
pub fn io_message(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

fn file_prefix(file: &Option<PathBuf>) -> String {
    file.as_ref()
        .map(|f| format!("{}:", f.display()))
        .unwrap_or_default()
}

impl ConfigError {
    /// Adds each problem's line and column, found in the text by its key path.
    pub(super) fn located(mut self, text: &str) -> Self {
        if let ConfigError::Invalid { problems, .. } = &mut self {
            if let Ok(doc) = toml::de::DeTable::parse(text) {
                for p in problems.iter_mut() {
                    p.at = locate(doc.get_ref(), &p.key).map(|span| line_column(text, span.start));
                }
            }
        }
        self
    }

    pub(super) fn in_file(mut self, path: &Path) -> Self {
        match &mut self {
            ConfigError::Parse { file, .. } | ConfigError::Invalid { file, .. } => {
                *file = Some(path.to_path_buf())
            }
            ConfigError::Read { .. } => {}
        }
        self
    }
}

pub(super) fn toml_error(text: &str, key: String, e: &toml::de::Error) -> ConfigError {
    let (line, column) = e
        .span()
        .map(|span| line_column(text, span.start))
        .unwrap_or((1, 1));
    ConfigError::Parse {
        file: None,
        message: hint(&key, e.message().trim()),
        key: if key.is_empty() || key == "." {
            "(top level)".to_string()
        } else {
            key
        },
        line,
        column,
    }
}

/// The parser's message, with what to write instead where the mistake is a common one.
fn hint(key: &str, message: &str) -> String {
    let table = ["app", "notify"].into_iter().find(|t| key == *t);
    match table {
        Some(t) if message.contains("expected a sequence") => {
            format!("{message}: write [[{t}]] (an array of tables: one per {t}), not [{t}]")
        }
        _ => match suggestion(message) {
            Some(near) => format!("{message}; did you mean `{near}`?"),
            None => message.to_string(),
        },
    }
}

/// The expected key closest to an unknown one, when it is close enough to be a typo.
fn suggestion(message: &str) -> Option<&str> {
    let unknown = unknown_field(message)?;
    let (_, expected) = message.split_once(", expected ")?;
    let expected = expected.strip_prefix("one of ").unwrap_or(expected);
    expected
        .split(", ")
        .map(|k| k.trim_matches('`'))
        .map(|k| (strsim::jaro_winkler(unknown, k), k))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The span of the value at a key path such as `app[1].rollout.timeout`.
fn locate(doc: &toml::de::DeTable<'_>, key: &str) -> Option<std::ops::Range<usize>> {
    use toml::de::DeValue;
    let mut table = doc;
    let mut span = None;
    for segment in key.split('.') {
        let (name, index) = match segment.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        let (_, mut value) = table.iter().find(|(k, _)| k.get_ref().as_ref() == name)?;
        if let Some(i) = index {
            let DeValue::Array(items) = value.get_ref() else {
                return None;
            };
            value = items.get(i)?;
        }
        span = Some(value.span());
        if let DeValue::Table(inner) = value.get_ref() {
            table = inner;
        }
    }
    span
}

pub(super) fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}
