//! The OCI distribution API, as far as berth reads it: a repository's tags, a manifest by
//! tag or digest (its digest computed and checked, never taken from the registry's word),
//! and a blob streamed into a file with its digest checked. Every answer is bounded.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use url::Url;

use super::http::{host, Client};
use super::{because, Cause, RegistryError};

/// Media types of the manifests berth reads.
pub const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
/// A Helm chart's config and its archive layer.
pub const HELM_CONFIG: &str = "application/vnd.cncf.helm.config.v1+json";
pub const HELM_CHART: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// Flux's artifact (`flux push artifact`): its config and its one layer.
pub const FLUX_CONFIG: &str = "application/vnd.cncf.flux.config.v1+json";
pub const FLUX_CONTENT: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";

/// The largest manifest or tag list page read.
const MAX_MANIFEST: u64 = 4 << 20;
/// The most tags read of one repository (pages of 1000).
pub const MAX_TAGS: usize = 10_000;

/// `oci://host[:port]/repository`, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The base URL of the registry's API (`https://host:port`).
    pub base: Url,
    /// The repository's path (`charts/web`).
    pub repository: String,
}

impl Reference {
    /// Parses `oci://host/path`; plain HTTP when `insecure`.
    ///
    /// # Errors
    /// Not an `oci://` reference with a host and a repository.
    pub fn parse(text: &str, insecure: bool) -> Result<Reference, RegistryError> {
        let malformed = |cause: Cause| RegistryError::Malformed {
            // Never the text itself: a mistaken one may hold a password.
            registry: "the oci:// reference".into(),
            what: "the reference".into(),
            cause,
        };
        let (host, repository) =
            crate::config::split_oci(text).map_err(|e| malformed(Arc::new(e)))?;
        let scheme = if insecure { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{host}")).map_err(|e| malformed(Arc::new(e)))?;
        Ok(Reference {
            base,
            repository: repository.to_string(),
        })
    }

    /// The registry's host, as errors and `config.json` name it.
    pub fn host(&self) -> String {
        host(&self.base)
    }

    fn url(&self, tail: &str) -> Url {
        let mut url = self.base.clone();
        url.set_path(&format!("/v2/{}/{tail}", self.repository));
        url
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "oci://{}/{}", self.host(), self.repository)
    }
}

/// A manifest's parts that berth reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    #[serde(default)]
    pub media_type: Option<String>,
    pub config: Descriptor,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// The repository's tags, up to [`MAX_TAGS`].
///
/// # Errors
/// The registry's, or more tags than the bound.
pub async fn tags(client: &Client, reference: &Reference) -> Result<Vec<String>, RegistryError> {
    #[derive(Deserialize)]
    struct Page {
        #[serde(default)]
        tags: Option<Vec<String>>,
    }
    let mut tags = Vec::new();
    let mut url = reference.url("tags/list");
    url.set_query(Some("n=1000"));
    let what = format!("the tags of {reference}");
    loop {
        let answer = client
            .get(&url, "application/json", MAX_MANIFEST, &what)
            .await?;
        let page: Page =
            serde_json::from_slice(&answer.body).map_err(|e| malformed(reference, &what, e))?;
        let got = page.tags.unwrap_or_default();
        let last = got.last().cloned();
        tags.extend(got);
        if tags.len() > MAX_TAGS {
            return Err(RegistryError::TooLarge {
                registry: reference.host(),
                what: format!("{what} (more than {MAX_TAGS} tags)"),
                limit: MAX_TAGS as u64,
            });
        }
        // The next page starts after the last tag (Distribution's `last`); a page that
        // is not full is the last.
        match last {
            Some(last) if answer.next => {
                url.set_query(Some(&format!("n=1000&last={last}")));
            }
            _ => return Ok(tags),
        }
    }
}

/// The manifest `reference` names by `tag_or_digest`, and its digest (computed; when asked
/// by digest, checked against it).
///
/// # Errors
/// The registry's; a manifest that does not parse or whose digest is not the one asked.
pub async fn manifest(
    client: &Client,
    reference: &Reference,
    tag_or_digest: &str,
) -> Result<(Manifest, String), RegistryError> {
    let what = format!("the manifest of {reference}:{tag_or_digest}");
    let answer = client
        .get(
            &reference.url(&format!("manifests/{tag_or_digest}")),
            MANIFEST_TYPES,
            MAX_MANIFEST,
            &what,
        )
        .await?;
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&answer.body)));
    if tag_or_digest.starts_with("sha256:") && tag_or_digest != digest {
        return Err(RegistryError::Digest {
            what,
            expected: tag_or_digest.to_string(),
            got: digest,
        });
    }
    let manifest: Manifest =
        serde_json::from_slice(&answer.body).map_err(|e| malformed(reference, &what, e))?;
    Ok((manifest, digest))
}

/// Streams the blob `layer` into `into` (a new file), its size bounded by `limit` and its
/// digest checked.
///
/// # Errors
/// The registry's; past the bound; a digest that is not the layer's.
pub async fn blob(
    client: &Client,
    reference: &Reference,
    layer: &Descriptor,
    limit: u64,
    into: &Path,
) -> Result<(), RegistryError> {
    let what = format!("layer {} of {reference}", layer.digest);
    if !crate::config::is_digest(&layer.digest) {
        return Err(RegistryError::Malformed {
            registry: reference.host(),
            what,
            cause: because("its digest is not sha256: and 64 hex digits"),
        });
    }
    if layer.size > limit {
        return Err(RegistryError::TooLarge {
            registry: reference.host(),
            what: format!("{what} ({} bytes)", layer.size),
            limit,
        });
    }
    let cache = |e| RegistryError::Cache(std::sync::Arc::new(e));
    let mut file = std::fs::File::create(into).map_err(cache)?;
    let mut hash = Sha256::new();
    let url = reference.url(&format!("blobs/{}", layer.digest));
    let mut sink = |part: &[u8]| {
        hash.update(part);
        file.write_all(part)
    };
    client
        .fetch(&url, "*/*", layer.size, &what, &mut sink)
        .await?;
    let got = format!("sha256:{}", hex::encode(hash.finalize()));
    if got != layer.digest {
        return Err(RegistryError::Digest {
            what,
            expected: layer.digest.clone(),
            got,
        });
    }
    Ok(())
}

fn malformed(reference: &Reference, what: &str, e: serde_json::Error) -> RegistryError {
    RegistryError::Malformed {
        registry: reference.host(),
        what: what.to_string(),
        cause: std::sync::Arc::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oci_reference_is_taken_apart_and_a_wrong_one_is_refused() {
        let r = Reference::parse("oci://127.0.0.1:5000/charts/web", false).unwrap();
        assert_eq!(r.base.as_str(), "https://127.0.0.1:5000/");
        assert_eq!(r.repository, "charts/web");
        assert_eq!(
            r.url("tags/list").as_str(),
            "https://127.0.0.1:5000/v2/charts/web/tags/list"
        );
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/charts/web");
        let plain = Reference::parse("oci://registry.local/web", true).unwrap();
        assert_eq!(plain.base.scheme(), "http");
        for bad in [
            "https://r/web",
            "oci://r",
            "oci://r/",
            "oci://r/../x",
            "oci://r/Web",
            "oci://u:p@r/web",
        ] {
            assert!(Reference::parse(bad, false).is_err(), "{bad}");
        }
    }
}
