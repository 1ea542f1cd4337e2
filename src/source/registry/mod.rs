//! Sources beside git: a chart from a Helm repository (`index.yaml`) or an OCI registry,
//! and an OCI artifact of manifests (Flux's `flux push artifact`). Each resolves to a
//! version and a content digest — the revision a sync applies and records, as a commit is
//! for git — and is written out once per digest into the source's cache, bounded and
//! confined as a commit's tree is.
//!
//! `http.rs` talks to registries (TLS, auth, bounds), `credentials.rs` reads Docker's
//! `config.json`, `versions.rs` picks a version in a Helm range, `archive.rs` writes an
//! archive out.

pub mod archive;
pub mod cosign;
pub mod credentials;
mod fetch;
pub mod helm_repo;
pub mod http;
pub mod notification;
pub mod oci;

pub use fetch::{fetch, fetch_blocking, parse_revision, revision, Session, Wanted};

use std::path::PathBuf;
use std::sync::Arc;

/// Errors of a registry source. Each names the registry's host and what was asked, never
/// a credential or a token. Cloneable: every app sharing a fetch gets its error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    /// No answer: the network, TLS, a timeout.
    #[error("cannot reach {registry}")]
    Unreachable {
        registry: String,
        #[source]
        cause: Cause,
    },
    /// A 401 or 403 after the login was offered.
    #[error("{registry} refused {what}: {}", if *logged_in { "check the login for this registry in [app.registry] credentials (a Docker config.json)" } else { "it asks for a login: give [app.registry] credentials (a Docker config.json)" })]
    Unauthorized {
        registry: String,
        what: String,
        /// Whether a login was offered.
        logged_in: bool,
    },
    /// Another error status.
    #[error("{registry} answered {status} for {what}")]
    Status {
        registry: String,
        what: String,
        status: u16,
    },
    /// An answer past its bound.
    #[error("{what} from {registry} is larger than {limit} bytes")]
    TooLarge {
        registry: String,
        what: String,
        limit: u64,
    },
    /// Plain HTTP where the source does not allow it.
    #[error("{url} is plain HTTP: write insecure = true in the app's [app.registry] to allow it for this source")]
    Insecure { url: String },
    /// The `config.json` cannot be read.
    #[error(transparent)]
    Credentials(Arc<credentials::CredentialsError>),
    /// The CA file cannot be used.
    #[error("the registry CA file {}", path.display())]
    CaFile {
        path: PathBuf,
        #[source]
        cause: Cause,
    },
    /// An answer that is not what was asked for.
    #[error("{what} from {registry} does not parse")]
    Malformed {
        registry: String,
        what: String,
        #[source]
        cause: Cause,
    },
    /// Content whose digest is not the one pinned or announced.
    #[error("{what}: its digest is {got}, not {expected}: refused")]
    Digest {
        what: String,
        expected: String,
        got: String,
    },
    /// A cosign public key that cannot be used.
    #[error("cosign key {}: {why}", path.display())]
    Key { path: PathBuf, why: String },
    /// No signature by a trusted key.
    #[error("{artifact} is refused: {why}")]
    Unsigned { artifact: String, why: String },
    /// No published version inside the range.
    #[error("no version of {artifact} is inside {range:?}{}", if newest.is_empty() { " (it publishes none)".to_string() } else { format!(" (the newest published: {newest})") })]
    NoVersion {
        artifact: String,
        range: String,
        newest: String,
    },
    /// An archive refused or unreadable.
    #[error("{what}: the archive is refused, nothing of it written: {cause}")]
    Archive {
        what: String,
        cause: Arc<archive::ArchiveError>,
    },
    /// The cache could not be written.
    #[error("the registry cache cannot be written")]
    Cache(#[source] Arc<std::io::Error>),
}

/// What an error wraps, shared (a [`RegistryError`] is cloneable).
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// A cause that is text alone (a bound passed, a field missing).
pub fn because(text: impl Into<String>) -> Cause {
    Arc::from(Box::<dyn std::error::Error + Send + Sync>::from(
        text.into(),
    ))
}

/// A digest of the files under `dir` (their paths and contents, in order): the same digest,
/// the same files. Written out from an archive, the folder holds no links.
///
/// # Errors
/// A file cannot be read.
pub fn folder_digest(dir: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest as _;
    let mut hash = sha2::Sha256::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&folder)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap_or(&path);
            hash.update(relative.as_os_str().as_encoded_bytes());
            hash.update([0]);
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path)?;
                hash.update((bytes.len() as u64).to_le_bytes());
                hash.update(&bytes);
            }
        }
    }
    Ok(hex::encode(hash.finalize()))
}
