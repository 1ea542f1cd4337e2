//! An app's registry source resolved and written out: the version its range picks (or its
//! tag or digest), the content's digest, its signature checked when keys are given, and
//! its archive unpacked once per digest into `trees/<hex>/` of the source's cache, where
//! every later sync of the same digest finds it (nothing downloaded again).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use url::Url;

use super::archive::{self, ArchiveLimits};
use super::http::Client;
use super::oci::{self, Descriptor, Reference};
use super::{cosign, helm_repo, RegistryError};
use crate::config::{AppConfig, ChartSource, OciPick, OciSource, RegistryConfig, SourceRef};
use crate::source::cache::{remove_abandoned, remove_old_trees, source_dir, unique, Checkout};
use crate::source::CommitInfo;
use crate::versions::{parse_version, Range};

/// What a source resolved to, before its content is written out.
struct Resolved {
    /// The source as shown (`oci://host/charts/web`, `https://host/charts web`).
    shown: String,
    /// The version (tag) picked; empty when pinned by digest alone.
    version: String,
    /// The content's digest (`sha256:…`): the OCI manifest's, or the chart archive's.
    digest: String,
    /// Where the content is.
    content: Content,
    /// When the registry says it was made.
    created: Option<jiff::Timestamp>,
}

enum Content {
    /// A Helm repository's archive.
    Archive {
        base: Url,
        published: helm_repo::Published,
        chart: String,
    },
    /// An OCI layer; with `top`, the chart folder every entry lies in.
    Layer {
        reference: Reference,
        layer: Descriptor,
        top: Option<String>,
    },
}

/// The most verdicts a session remembers.
const MAX_VERIFIED: usize = 64;

/// What a registry source keeps between its fetches: its client (its connections, roots
/// and granted tokens), and the digests whose signature its keys verified (a digest
/// signed once is signed: it is not asked again while those keys are trusted).
pub struct Session {
    pub client: Client,
    verified: Mutex<HashSet<String>>,
}

impl Session {
    /// A session for sources reached as `registry` says.
    ///
    /// # Errors
    /// The CA file cannot be used.
    pub fn new(registry: &RegistryConfig) -> Result<Session, RegistryError> {
        Ok(Session {
            client: Client::new(registry)?,
            verified: Mutex::default(),
        })
    }

    /// Checks the signature of `digest` by one of `keys`, unless these keys verified it
    /// already.
    async fn verify(
        &self,
        reference: &Reference,
        digest: &str,
        keys: &[p256::ecdsa::VerifyingKey],
        scratch: &Path,
    ) -> Result<(), RegistryError> {
        let mut verdict = digest.to_string();
        for key in keys {
            verdict.push('\n');
            verdict += &hex::encode(key.to_sec1_bytes());
        }
        let seen = |v: &String| self.verified.lock().is_ok_and(|set| set.contains(v));
        if seen(&verdict) {
            return Ok(());
        }
        cosign::verify(&self.client, reference, digest, keys, scratch).await?;
        if let Ok(mut set) = self.verified.lock() {
            // Bounded: a registry that publishes a digest a minute costs no memory.
            if set.len() >= MAX_VERIFIED {
                set.clear();
            }
            set.insert(verdict);
        }
        Ok(())
    }
}

/// What is fetched: a registry source, how its registry is reached, the keys its
/// signatures must be made by (none: not checked).
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub source: SourceRef<'a>,
    pub registry: &'a RegistryConfig,
    pub cosign_keys: &'a [PathBuf],
}

impl<'a> Wanted<'a> {
    /// The app's.
    pub fn of(app: &'a AppConfig) -> Self {
        Wanted {
            source: app.source(),
            registry: &app.registry,
            cosign_keys: &app.verify.cosign_keys,
        }
    }
}

/// The app's source at the version it picks, written out, asked in `session` (made for
/// `wanted.registry`).
///
/// # Errors
/// [`RegistryError`]: the registry's, no version inside the range, a refused signature or
/// archive.
pub async fn fetch(
    session: &Session,
    wanted: Wanted<'_>,
    state_dir: &Path,
    limits: ArchiveLimits,
) -> Result<Checkout, RegistryError> {
    let (registry, client) = (wanted.registry, &session.client);
    let resolved = match wanted.source {
        SourceRef::Chart(chart) if chart.is_oci() => {
            oci_chart(client, chart, registry.insecure).await?
        }
        SourceRef::Chart(chart) => helm_chart(client, chart, limits).await?,
        SourceRef::Oci(source) => artifact(client, source, registry.insecure).await?,
        SourceRef::Git(_) => unreachable!("a git source is fetched by git"),
    };
    let source = source_dir(state_dir, &wanted.source.origin());
    let trees = source.join("trees");
    if let Content::Layer { reference, .. } = &resolved.content {
        if !wanted.cosign_keys.is_empty() {
            let keys = cosign::keys(wanted.cosign_keys)?;
            let scratch = source.join("downloads");
            make_dir(&scratch)?;
            session
                .verify(reference, &resolved.digest, &keys, &scratch)
                .await?;
        }
    }
    let dir = write_out(client, &resolved, &source, limits).await?;
    remove_old_trees(&trees);
    remove_abandoned(&source.join("downloads"), |_| true);
    Ok(Checkout {
        dir,
        source,
        commit: CommitInfo {
            sha: revision(&resolved.version, &resolved.digest),
            author: resolved.shown.clone(),
            time: resolved.created.unwrap_or_else(jiff::Timestamp::now),
            subject: match resolved.version.as_str() {
                "" => resolved.shown.clone(),
                v => format!("{} {v}", resolved.shown),
            },
        },
        tag: None,
    })
}

/// [`fetch`] for a caller that is not async (a command, `berth validate`): on a runtime of
/// its own, in a thread of its own, so that it may be called from inside a runtime too.
///
/// # Errors
/// As [`fetch`].
pub fn fetch_blocking(
    wanted: Wanted<'_>,
    state_dir: &Path,
    limits: ArchiveLimits,
) -> Result<Checkout, RegistryError> {
    let fetch = || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| RegistryError::Cache(std::sync::Arc::new(e)))?;
        let session = Session::new(wanted.registry)?;
        runtime.block_on(fetch(&session, wanted, state_dir, limits))
    };
    let fetched = std::thread::scope(|s| s.spawn(fetch).join());
    fetched.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A registry source's revision, as a commit's SHA is git's: `<version>@<digest>`, or the
/// digest alone when pinned by it.
pub fn revision(version: &str, digest: &str) -> String {
    match version {
        "" => digest.to_string(),
        v => format!("{v}@{digest}"),
    }
}

/// The version (empty when pinned by digest) and digest of a revision [`revision`] wrote;
/// `None` for a git SHA.
pub fn parse_revision(revision: &str) -> Option<(&str, &str)> {
    match revision.split_once('@') {
        Some((v, d)) if d.starts_with("sha256:") => Some((v, d)),
        None if revision.starts_with("sha256:") => Some(("", revision)),
        _ => None,
    }
}

/// A chart from a Helm repository: the newest published version inside the range.
async fn helm_chart(
    client: &Client,
    chart: &ChartSource,
    limits: ArchiveLimits,
) -> Result<Resolved, RegistryError> {
    let base = helm_repo::base(&chart.repository)?;
    let shown = format!("{} {}", base.as_str().trim_end_matches('/'), chart.name);
    let published = helm_repo::versions(client, &base, &chart.name, limits.bytes).await?;
    let range = range(&chart.version, &shown)?;
    let (_, text) = range
        .newest(published.iter().map(|p| p.version.as_str()))
        .ok_or_else(|| {
            no_version(
                &shown,
                &chart.version,
                published.iter().map(|p| p.version.as_str()),
            )
        })?;
    let picked = published
        .iter()
        .find(|p| p.version == text)
        .cloned()
        .expect("picked from these");
    let digest = match &picked.digest {
        Some(d)
            if crate::config::is_digest(&format!("sha256:{}", d.trim_start_matches("sha256:"))) =>
        {
            format!("sha256:{}", d.trim_start_matches("sha256:"))
        }
        _ => return Err(RegistryError::Malformed {
            registry: shown,
            what: format!("version {text}"),
            cause: super::because(
                "the index gives no SHA-256 digest for it: berth checks every archive against it",
            ),
        }),
    };
    Ok(Resolved {
        shown,
        version: picked.version.clone(),
        digest,
        content: Content::Archive {
            base,
            published: picked,
            chart: chart.name.clone(),
        },
        created: None,
    })
}

/// A chart from an OCI registry: `<repository>/<name>` at the newest tag inside the range,
/// or at a digest.
async fn oci_chart(
    client: &Client,
    chart: &ChartSource,
    insecure: bool,
) -> Result<Resolved, RegistryError> {
    let pinned = crate::config::is_digest(&chart.version);
    let source = OciSource {
        url: format!("{}/{}", chart.repository.trim_end_matches('/'), chart.name),
        version: (!pinned).then(|| chart.version.clone()),
        tag: None,
        digest: pinned.then(|| chart.version.clone()),
    };
    let mut resolved = artifact(client, &source, insecure).await?;
    if let Content::Layer { top, .. } = &mut resolved.content {
        *top = Some(chart.name.clone());
    }
    Ok(resolved)
}

/// An OCI artifact by digest, tag or the newest tag inside a range; its layer Flux's
/// content or a Helm chart.
async fn artifact(
    client: &Client,
    source: &OciSource,
    insecure: bool,
) -> Result<Resolved, RegistryError> {
    let reference = Reference::parse(&source.url, insecure)?;
    let shown = reference.to_string();
    let (version, asked) = match source.pick() {
        OciPick::Digest(d) => (String::new(), d.to_string()),
        OciPick::Tag(t) => (t.to_string(), t.to_string()),
        OciPick::Range(r) => {
            let tags = oci::tags(client, &reference).await?;
            let range = range(r, &shown)?;
            let (_, tag) = range
                .newest(tags.iter().map(String::as_str))
                .ok_or_else(|| no_version(&shown, r, tags.iter().map(String::as_str)))?;
            (tag.to_string(), tag.to_string())
        }
    };
    let (manifest, digest) = oci::manifest(client, &reference, &asked).await?;
    let layer = manifest
        .layers
        .iter()
        .find(|l| l.media_type == oci::FLUX_CONTENT || l.media_type == oci::HELM_CHART)
        .cloned()
        .ok_or_else(|| RegistryError::Malformed {
            registry: reference.host(),
            what: format!("{shown}:{asked}"),
            cause: super::because(format!(
                "no layer of {} or {}: berth reads Flux's artifacts and Helm's charts",
                oci::FLUX_CONTENT,
                oci::HELM_CHART
            )),
        })?;
    let created = manifest
        .annotations
        .get("org.opencontainers.image.created")
        .and_then(|t| t.parse().ok());
    Ok(Resolved {
        shown,
        version,
        digest,
        content: Content::Layer {
            reference,
            layer,
            top: None,
        },
        created,
    })
}

/// The content written out to `trees/<hex>/`, unless it is there (then marked used).
async fn write_out(
    client: &Client,
    resolved: &Resolved,
    source: &Path,
    limits: ArchiveLimits,
) -> Result<PathBuf, RegistryError> {
    let trees = source.join("trees");
    let hex = resolved.digest.trim_start_matches("sha256:");
    let dir = trees.join(hex);
    if !hex.is_empty() && dir.is_dir() {
        let touched =
            std::fs::File::open(&dir).and_then(|d| d.set_modified(std::time::SystemTime::now()));
        return touched.map(|()| dir).map_err(cache);
    }
    let downloads = source.join("downloads");
    make_dir(&downloads)?;
    make_dir(&trees)?;
    let file = downloads.join(format!("{hex}.{}", unique()));
    let downloaded = match &resolved.content {
        Content::Archive {
            base,
            published,
            chart,
        } => helm_repo::archive(client, base, chart, published, limits.bytes, &file)
            .await
            .map(drop),
        Content::Layer {
            reference, layer, ..
        } => oci::blob(client, reference, layer, limits.bytes, &file).await,
    };
    let top = match &resolved.content {
        Content::Archive { chart, .. } => Some(chart.clone()),
        Content::Layer { top, .. } => top.clone(),
    };
    let unpacked = match downloaded {
        // Inflating and writing the files is a batch job, as a commit's tree is.
        Ok(()) => {
            let (file, hex, shown) = (file.clone(), hex.to_string(), resolved.shown.clone());
            let unpack = move || unpack(&file, &trees, &hex, top.as_deref(), limits, &shown);
            crate::blocking::in_background("berth-unpack", unpack).await
        }
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_file(&file);
    unpacked
}

/// Unpacks the downloaded `file` into `trees/<hex>`, through a temporary folder.
fn unpack(
    file: &Path,
    trees: &Path,
    hex: &str,
    top: Option<&str>,
    limits: ArchiveLimits,
    shown: &str,
) -> Result<PathBuf, RegistryError> {
    let dir = trees.join(hex);
    let tmp = trees.join(format!(".{hex}.{}", unique()));
    let _ = std::fs::remove_dir_all(&tmp);
    make_dir(&tmp)?;
    let archive = std::fs::File::open(file).map_err(cache)?;
    let unpacked = archive::unpack(std::io::BufReader::new(archive), &tmp, top, limits);
    if let Err(cause) = unpacked {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(RegistryError::Archive {
            what: shown.to_string(),
            cause: std::sync::Arc::new(cause),
        });
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process wrote the same digest meanwhile: theirs is as good.
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(cache(e)),
    }
}

fn range(text: &str, shown: &str) -> Result<Range, RegistryError> {
    Range::parse(text).map_err(|e| RegistryError::Malformed {
        registry: shown.to_string(),
        what: "the version".into(),
        cause: std::sync::Arc::new(e),
    })
}

/// No published version inside the range: the newest few that are, to choose from.
fn no_version<'v>(
    shown: &str,
    range: &str,
    published: impl Iterator<Item = &'v str>,
) -> RegistryError {
    let mut versions: Vec<_> = published
        .filter_map(|t| Some((parse_version(t)?, t)))
        .collect();
    versions.sort();
    let newest: Vec<&str> = versions.iter().rev().take(5).map(|(_, t)| *t).collect();
    RegistryError::NoVersion {
        artifact: shown.to_string(),
        range: range.to_string(),
        newest: newest.join(", "),
    }
}

fn make_dir(dir: &Path) -> Result<(), RegistryError> {
    crate::state::private_dir(dir).map_err(cache)
}

fn cache(e: std::io::Error) -> RegistryError {
    RegistryError::Cache(std::sync::Arc::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revision_holds_the_version_and_the_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let written = revision("1.2.0", &digest);
        assert_eq!(parse_revision(&written), Some(("1.2.0", digest.as_str())));
        assert_eq!(
            parse_revision(&revision("", &digest)),
            Some(("", digest.as_str()))
        );
        assert_eq!(parse_revision(&"b".repeat(40)), None, "a commit");
    }
}
