//! [`ManifestError`]: everything that can be wrong with the manifests of a commit. Every
//! variant names where: the file, and where known the document, line and object.

use std::fmt;
use std::path::PathBuf;

use super::object::{ObjectKey, Origin};

/// An error while reading, decoding or checking manifests.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file or folder could not be read.
    #[error("{path}: cannot read: {cause}")]
    Read {
        /// Repository-relative path.
        path: String,
        /// What the OS said (part of the message).
        cause: std::io::Error,
    },
    /// A configured path does not exist.
    #[error("{path}: no such file or directory in the repository")]
    NotFound {
        /// Repository-relative path.
        path: String,
    },
    /// The file is neither UTF-8 nor UTF-16 with a byte-order mark.
    #[error("{path}:{line}: not valid UTF-8 (byte {byte}): manifests must be UTF-8 text")]
    NotUtf8 {
        /// Repository-relative path.
        path: String,
        /// 1-based line of the first bad byte.
        line: usize,
        /// 0-based offset of the first bad byte.
        byte: usize,
    },
    /// Invalid YAML or JSON, including nesting and alias-expansion limits.
    #[error("{origin}: invalid {format}: {message}")]
    Syntax {
        /// Where.
        origin: Origin,
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message.
        message: String,
    },
    /// A document is not a mapping (an object).
    #[error(
        "{origin}: a manifest must be a mapping with apiVersion, kind and metadata, found {found}"
    )]
    NotAnObject {
        /// Where.
        origin: Origin,
        /// What was found instead (`a list`, `a string`, …).
        found: &'static str,
    },
    /// A file encrypted with sops that cannot be used: no key opens it, its MAC does not
    /// match, the app decrypts nothing (the message never holds a decrypted value).
    #[error("{path}: {message}")]
    Encrypted {
        /// Repository-relative path.
        path: String,
        /// Why.
        message: String,
    },
    /// A required field is missing or empty.
    #[error("{origin}: {what}missing {field}")]
    MissingField {
        /// Where.
        origin: Origin,
        /// `Deployment ` when the kind is known, else empty.
        what: String,
        /// `apiVersion`, `kind` or `metadata.name`.
        field: &'static str,
    },
    /// Some other structural problem with one object.
    #[error("{origin}: {message}")]
    Invalid {
        /// Where.
        origin: Origin,
        /// What is wrong.
        message: String,
    },
    /// The same object is defined twice.
    #[error("{key} is defined twice: at {first} and at {second}")]
    Duplicate {
        /// The object.
        key: Box<ObjectKey>,
        /// The first definition.
        first: Box<Origin>,
        /// The second definition.
        second: Origin,
    },
    /// One file is larger than the per-file cap; it was not read.
    #[error("{path}: file is {size} bytes, over the {limit}-byte cap (agent.max_file_size)")]
    FileTooLarge {
        /// Repository-relative path.
        path: String,
        /// Its size.
        size: u64,
        /// The cap.
        limit: u64,
    },
    /// The app's manifests together are larger than the per-app cap.
    #[error("{path}: the app's manifests exceed the {limit}-byte cap (agent.max_app_size); reading stopped here")]
    AppTooLarge {
        /// The file that went over.
        path: String,
        /// The cap.
        limit: u64,
    },
    /// Flow collections nested too deep: refused before parsing (parsing them costs the
    /// square of their depth).
    #[error(
        "{path}:{line}: flow collections ([ or {{) nested deeper than {limit}; refused unparsed"
    )]
    TooDeep {
        /// Repository-relative path.
        path: String,
        /// Where the depth passed the limit.
        line: usize,
        /// The limit.
        limit: usize,
    },
    /// A mapping holds the same key twice (kubectl refuses the file too).
    #[error(
        "{origin}: key {key:?} appears twice in one mapping{}",
        lines_note(lines)
    )]
    DuplicateKey {
        /// Where (the line of the mapping, or of the second key).
        origin: Origin,
        /// The key.
        key: String,
        /// The lines where it appears, where they could be found.
        lines: Vec<usize>,
    },
    /// One document decodes to more than any object the API server could store.
    #[error("{origin}: the document expands past {limit} bytes once decoded (its YAML aliases resolved); refused")]
    DocumentTooLarge {
        /// Where.
        origin: Origin,
        /// The bound.
        limit: u64,
    },
    /// The app's documents together decode to more than the render's bound.
    #[error("{origin}: the app's manifests expand past {limit} bytes once decoded (4 bytes for each byte read, plus 8 MiB); reading stopped here")]
    DecodedTooLarge {
        /// The document that went over.
        origin: Origin,
        /// The bound.
        limit: u64,
    },
    /// The app renders more objects (good or bad) than the per-app cap.
    #[error("{origin}: the app holds more than {limit} objects (agent.max_objects); reading stopped here")]
    TooManyObjects {
        /// The object past the cap.
        origin: String,
        /// The cap.
        limit: usize,
    },
    /// An object outside the app's scope, or one of berth's own.
    #[error("{origin}: {object} {why}; refused")]
    Refused {
        /// Where.
        origin: Origin,
        /// The object (`ConfigMap kube-system/x`).
        object: String,
        /// Which rule.
        why: String,
    },
    /// A symbolic link resolves outside the repository; it was not read.
    #[error("{path}: symbolic link points outside the repository ({}); refused", target.display())]
    OutsideRoot {
        /// Repository-relative path of the link.
        path: String,
        /// Where it points.
        target: PathBuf,
    },
    /// A configured path climbs out of the repository.
    #[error("{path}: path escapes the repository root; refused")]
    EscapesRoot {
        /// The path as configured.
        path: String,
    },
    /// A configured path holds no object: a typo, a folder of another tool's files, or
    /// everything deleted (which would otherwise prune the whole app).
    #[error("{path}: {}: refused, as an app of it would prune every object it has (set allow_empty = true if the app is meant to hold no objects)", no_objects_why(*jsonnet))]
    NoObjects {
        /// The path as shown.
        path: String,
        /// The `.jsonnet` and `.libsonnet` files it holds.
        jsonnet: usize,
    },
    /// A file found by walking a sub-folder is not a Kubernetes manifest.
    #[error("{cause}. berth reads sub-folders too (as kubectl apply -R does; kubectl apply -f DIR alone would not read {folder}/): if it holds no manifests, leave it out with exclude = [\"{folder}/**\"], or list what to read with include")]
    NotAManifest {
        /// What was wrong with it (part of the message).
        cause: Box<ManifestError>,
        /// Its folder, repository-relative.
        folder: String,
    },
    /// A kustomization was refused before kustomize ran, or kustomize failed.
    #[error("{path}: {message}")]
    Kustomization {
        /// The kustomization file, repository-relative.
        path: String,
        /// What was refused (the field and the reference) or what kustomize said.
        message: String,
    },
    /// A chart was refused before helm ran, or helm failed.
    #[error("{path}: {message}")]
    Chart {
        /// The chart's `Chart.yaml`, repository-relative.
        path: String,
        /// What was refused (a dependency, a values file) or what helm said.
        message: String,
    },
    /// A tool (kustomize, helm) could not run, or failed: its stderr in the cause, with the
    /// checkout's paths made relative (and a decrypted value masked).
    #[error("{path}: {tool} {cause}{}", hint.map(|h| format!("; {h}")).unwrap_or_default())]
    Tool {
        /// The kustomization or chart file rendered, repository-relative.
        path: String,
        /// The command (`helm template`).
        tool: String,
        /// What went wrong (part of the message).
        cause: crate::manifest::tool::error::ToolError,
        /// What to do, when berth knows.
        hint: Option<&'static str>,
    },
    /// A render's own files (its sandbox, a chart's working copy) could not be written.
    #[error("{path}: {what}: {cause}")]
    Scratch {
        /// The kustomization or chart file rendered, repository-relative.
        path: String,
        /// What berth was doing (`cannot make helm's folder`).
        what: String,
        /// What the OS said (part of the message, as [`ManifestError::Read`]'s).
        cause: std::io::Error,
    },
    /// The errors past the first [`MAX_ERRORS`], counted and not kept.
    #[error("… and {count} more errors (the first {MAX_ERRORS} are shown)")]
    More {
        /// How many.
        count: usize,
    },
    /// Several errors.
    #[error("{}", Many(.0))]
    Many(Vec<ManifestError>),
}

/// The most errors one render keeps (a file of 16,000 bad documents would otherwise make
/// 16,000 messages, in memory, in the output and in the history line).
pub const MAX_ERRORS: usize = 100;

/// Errors as they are collected: the first [`MAX_ERRORS`] kept, the rest counted.
#[derive(Default)]
pub struct ErrorList {
    kept: Vec<ManifestError>,
    more: usize,
}

impl ErrorList {
    /// Adds `e` (each error of a [`ManifestError::Many`]).
    pub fn push(&mut self, e: ManifestError) {
        for e in e.into_vec() {
            match e {
                ManifestError::More { count } => self.more += count,
                e if self.kept.len() < MAX_ERRORS => self.kept.push(e),
                _ => self.more += 1,
            }
        }
    }

    /// Whether none was added.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty() && self.more == 0
    }

    /// The errors kept, then one [`ManifestError::More`] for the rest.
    pub fn into_vec(self) -> Vec<ManifestError> {
        let mut all = self.kept;
        if self.more > 0 {
            all.push(ManifestError::More { count: self.more });
        }
        all
    }
}

impl FromIterator<ManifestError> for ErrorList {
    fn from_iter<I: IntoIterator<Item = ManifestError>>(errors: I) -> Self {
        let mut list = ErrorList::default();
        errors.into_iter().for_each(|e| list.push(e));
        list
    }
}

fn no_objects_why(jsonnet: usize) -> String {
    if jsonnet == 0 {
        return "no objects here (no .yaml, .yml or .json file holding one, after include and exclude)".into();
    }
    format!(
        "holds Jsonnet ({}) and no YAML or JSON manifest: berth does not render Jsonnet. Render it where it is written (jsonnet -m, or kubecfg show) and commit the output, then point the app's path at that folder",
        crate::plural(jsonnet, ".jsonnet/.libsonnet file")
    )
}

struct Many<'a>(&'a [ManifestError]);

impl fmt::Display for Many<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count: usize = self
            .0
            .iter()
            .map(|e| match e {
                ManifestError::More { count } => *count,
                _ => 1,
            })
            .sum();
        write!(f, "{count} errors:")?;
        for e in self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

impl ManifestError {
    /// A [`ManifestError::Scratch`] of the render of `path`, doing `what`.
    pub fn scratch(path: &str, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let (path, what) = (path.to_string(), what.into());
        move |cause| ManifestError::Scratch { path, what, cause }
    }

    /// One error, or a [`ManifestError::Many`] of several (flattened, at most
    /// [`MAX_ERRORS`] of them kept).
    pub fn aggregate(errors: Vec<ManifestError>) -> Option<ManifestError> {
        let mut errors = errors.into_iter().collect::<ErrorList>().into_vec();
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ManifestError::Many(errors)),
        }
    }

    /// The file (and document) it belongs to: the first of several.
    pub fn origin(&self) -> Option<String> {
        match self {
            ManifestError::Read { path, .. }
            | ManifestError::NotFound { path }
            | ManifestError::NotUtf8 { path, .. }
            | ManifestError::FileTooLarge { path, .. }
            | ManifestError::AppTooLarge { path, .. }
            | ManifestError::OutsideRoot { path, .. }
            | ManifestError::EscapesRoot { path }
            | ManifestError::TooDeep { path, .. }
            | ManifestError::TooManyObjects { origin: path, .. }
            | ManifestError::Kustomization { path, .. }
            | ManifestError::Chart { path, .. }
            | ManifestError::Scratch { path, .. }
            | ManifestError::Tool { path, .. }
            | ManifestError::Encrypted { path, .. }
            | ManifestError::NoObjects { path, .. } => Some(path.clone()),
            ManifestError::NotAManifest { cause, .. } => cause.origin(),
            ManifestError::Syntax { origin, .. }
            | ManifestError::DuplicateKey { origin, .. }
            | ManifestError::DocumentTooLarge { origin, .. }
            | ManifestError::DecodedTooLarge { origin, .. }
            | ManifestError::Refused { origin, .. }
            | ManifestError::NotAnObject { origin, .. }
            | ManifestError::MissingField { origin, .. }
            | ManifestError::Invalid { origin, .. } => Some(origin.to_string()),
            ManifestError::Duplicate { second, .. } => Some(second.to_string()),
            ManifestError::Many(errors) => errors.first().and_then(ManifestError::origin),
            ManifestError::More { .. } => None,
        }
    }

    /// A resource bound of the whole render (not a bad item): it stops the render under
    /// every error policy, and nothing after it is checked.
    pub fn is_bound(&self) -> bool {
        matches!(
            self,
            ManifestError::AppTooLarge { .. }
                | ManifestError::DecodedTooLarge { .. }
                | ManifestError::TooManyObjects { .. }
        )
    }

    /// This error, told that its file was found in the sub-folder `folder` of an app's
    /// path when it says the file is no Kubernetes manifest.
    pub fn in_subfolder(self, folder: &str) -> Self {
        match self {
            e @ (ManifestError::NotAnObject { .. }
            | ManifestError::MissingField {
                field: "apiVersion" | "kind",
                ..
            }) => ManifestError::NotAManifest {
                cause: Box::new(e),
                folder: folder.to_string(),
            },
            e => e,
        }
    }

    /// The single errors this one holds.
    pub fn into_vec(self) -> Vec<ManifestError> {
        match self {
            ManifestError::Many(v) => v,
            e => vec![e],
        }
    }
}

/// ` (lines 4 and 9)` for a duplicate key's lines, when known.
fn lines_note(lines: &[usize]) -> String {
    match lines {
        [] => String::new(),
        [one] => format!(" (line {one})"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(usize::to_string).collect();
            format!(" (lines {} and {last})", init.join(", "))
        }
    }
}
