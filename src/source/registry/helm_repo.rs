//! A Helm chart repository (`helm repo index`'s `index.yaml` beside the archives): the
//! chart's published versions, and the archive of one, checked against the index's
//! SHA-256 before it is unpacked. The index is bounded by size (`max_app_size`) and by
//! the versions it lists; only each version's number, addresses and digest are kept.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use url::Url;

use super::http::{host, redacted, Client};
use super::{because, Cause, RegistryError};

/// The most chart versions an index may list (all charts together).
const MAX_VERSIONS: usize = 200_000;

/// One published version of a chart.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Published {
    pub version: String,
    #[serde(default)]
    pub urls: Vec<String>,
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Deserialize)]
struct Index {
    #[serde(default)]
    entries: BTreeMap<String, Vec<Published>>,
}

/// The repository's base URL, always ending in `/` (relative archive addresses join it).
///
/// # Errors
/// Not an http(s) URL, or one holding credentials.
pub fn base(repository: &str) -> Result<Url, RegistryError> {
    let shown = Url::parse(repository).map_or("the chart repository".into(), |u| redacted(&u));
    let malformed = |cause: Cause| RegistryError::Malformed {
        registry: shown.clone(),
        what: "the repository's URL".into(),
        cause,
    };
    let mut url = Url::parse(repository).map_err(|e| malformed(Arc::new(e)))?;
    if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
        return Err(malformed(because("not an http(s) chart repository URL")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(malformed(because(
            "the URL holds credentials: give them in [app.registry] credentials",
        )));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// The versions of `chart` the repository at `base` publishes.
///
/// # Errors
/// The registry's; an index that does not parse or lists more than the bound.
pub async fn versions(
    client: &Client,
    base: &Url,
    chart: &str,
    limit: u64,
) -> Result<Vec<Published>, RegistryError> {
    let url = base
        .join("index.yaml")
        .map_err(|e| RegistryError::Malformed {
            registry: host(base),
            what: "the index".into(),
            cause: Arc::new(e),
        })?;
    let what = format!("the index {}", url.path());
    let answer = client
        .get(&url, "application/x-yaml, text/yaml, */*", limit, &what)
        .await?;
    let malformed = |cause: Cause| RegistryError::Malformed {
        registry: host(base),
        what: what.clone(),
        cause,
    };
    let index: Index = serde_yaml::from_slice(&answer.body).map_err(|e| malformed(Arc::new(e)))?;
    let listed: usize = index.entries.values().map(Vec::len).sum();
    if listed > MAX_VERSIONS {
        return Err(malformed(because(format!(
            "it lists {listed} versions, more than {MAX_VERSIONS}"
        ))));
    }
    let mut entries = index.entries;
    Ok(entries.remove(chart).unwrap_or_default())
}

/// Downloads `published`'s archive into the new file `into`, at most `limit` bytes, and
/// checks it against the index's digest.
///
/// # Errors
/// The registry's; no address or digest in the index; a digest that differs.
pub async fn archive(
    client: &Client,
    base: &Url,
    chart: &str,
    published: &Published,
    limit: u64,
    into: &Path,
) -> Result<String, RegistryError> {
    let what = format!("chart {chart} {}", published.version);
    let malformed = |cause: Cause| RegistryError::Malformed {
        registry: host(base),
        what: what.clone(),
        cause,
    };
    let address = published
        .urls
        .first()
        .ok_or_else(|| malformed(because("the index gives it no address")))?;
    let expected = published.digest.as_deref().ok_or_else(|| {
        malformed(because(
            "the index gives it no digest: berth checks every archive against it",
        ))
    })?;
    let url = base.join(address).map_err(|e| malformed(Arc::new(e)))?;
    let cache = |e| RegistryError::Cache(std::sync::Arc::new(e));
    let mut file = std::fs::File::create(into).map_err(cache)?;
    let mut hash = Sha256::new();
    let mut sink = |part: &[u8]| {
        hash.update(part);
        file.write_all(part)
    };
    client
        .fetch(&url, "application/gzip, */*", limit, &what, &mut sink)
        .await?;
    let got = hex::encode(hash.finalize());
    if !got.eq_ignore_ascii_case(expected.trim_start_matches("sha256:")) {
        return Err(RegistryError::Digest {
            what,
            expected: format!("sha256:{expected}"),
            got: format!("sha256:{got}"),
        });
    }
    Ok(format!("sha256:{got}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_url_is_a_folder_and_holds_no_credentials() {
        let url = base("https://charts.example.com/stable").unwrap();
        assert_eq!(
            url.join("index.yaml").unwrap().as_str(),
            "https://charts.example.com/stable/index.yaml"
        );
        assert_eq!(
            url.join("web-1.0.0.tgz").unwrap().as_str(),
            "https://charts.example.com/stable/web-1.0.0.tgz"
        );
        let e = base("https://u:p@charts.example.com").unwrap_err();
        let e = crate::Chain(&e).to_string();
        assert!(e.contains("credentials") && !e.contains(":p@"), "{e}");
        assert!(base("oci://r/charts").is_err());
    }

    #[test]
    fn an_index_keeps_only_what_berth_reads() {
        let index: Index = serde_yaml::from_str(
            "apiVersion: v1\nentries:\n  web:\n  - name: web\n    version: 1.2.0\n    urls: [web-1.2.0.tgz]\n    digest: ab\n    description: x\n    created: 2024-01-01T00:00:00Z\n  db: []\ngenerated: now\n",
        )
        .unwrap();
        assert_eq!(
            index.entries["web"],
            vec![Published {
                version: "1.2.0".into(),
                urls: vec!["web-1.2.0.tgz".into()],
                digest: Some("ab".into()),
            }]
        );
    }
}
