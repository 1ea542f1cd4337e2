//! An app's source when it is not git: `chart = { repository, name, version }` (a Helm
//! repository or an OCI registry) or `oci = { url, version | tag | digest }` (an artifact
//! of manifests), with `[app.registry]` (credentials, CA, plain HTTP) for either.
use std::path::PathBuf;

use serde::Deserialize;

use super::credentials;

/// `chart = { … }`: a chart from a Helm repository (`https://…`) or an OCI registry
/// (`oci://…`, the chart being `<repository>/<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChartSource {
    /// `https://charts.example.com/stable` or `oci://registry.example.com/charts`.
    pub repository: String,
    /// The chart's name.
    pub name: String,
    /// A version or a range (`1.4.2`, `^1.4`, `>=2 <3`, `1.4.x`).
    pub version: String,
}

impl ChartSource {
    /// Whether the repository is an OCI registry.
    pub fn is_oci(&self) -> bool {
        self.repository.starts_with("oci://")
    }
}

/// `oci = { … }`: an OCI artifact of manifests, a kustomization or a chart.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OciSource {
    /// `oci://registry.example.com/manifests/shop`.
    pub url: String,
    /// A range of the tags read as versions (the newest inside it).
    pub version: Option<String>,
    /// One tag.
    pub tag: Option<String>,
    /// One digest (`sha256:…`): pinned.
    pub digest: Option<String>,
}

/// What an OCI source asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OciPick<'a> {
    /// The newest tag inside a range.
    Range(&'a str),
    Tag(&'a str),
    Digest(&'a str),
}

impl OciSource {
    /// What it asks for: the first of digest, tag and version given (validation allows
    /// one), every tag (`*`) when none is.
    pub fn pick(&self) -> OciPick<'_> {
        match (&self.digest, &self.tag, &self.version) {
            (Some(d), _, _) => OciPick::Digest(d),
            (None, Some(t), _) => OciPick::Tag(t),
            (None, None, Some(v)) => OciPick::Range(v),
            (None, None, None) => OciPick::Range("*"),
        }
    }
}

/// `[app.registry]`: how a chart's or an artifact's registry is reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// A Docker `config.json` with the registry's login, or `credential:NAME`.
    #[serde(deserialize_with = "credentials::file")]
    pub credentials: Option<PathBuf>,
    /// PEM certificates trusted beside the system's roots.
    #[serde(deserialize_with = "credentials::file")]
    pub ca_file: Option<PathBuf>,
    /// Allow plain HTTP for this source.
    pub insecure: bool,
}

/// Where an app's manifests come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceRef<'a> {
    /// A git repository.
    Git(&'a str),
    /// A chart from a Helm repository or an OCI registry.
    Chart(&'a ChartSource),
    /// An OCI artifact.
    Oci(&'a OciSource),
}

impl SourceRef<'_> {
    /// The source as people read it: the repository's URL, `oci://…`, or a Helm
    /// repository's URL and the chart's name.
    pub fn origin(&self) -> String {
        match self {
            SourceRef::Git(repo) => repo.to_string(),
            SourceRef::Chart(c) if c.is_oci() => {
                format!("{}/{}", c.repository.trim_end_matches('/'), c.name)
            }
            SourceRef::Chart(c) => format!("{} {}", c.repository.trim_end_matches('/'), c.name),
            SourceRef::Oci(o) => o.url.clone(),
        }
    }
}

/// Why a text is not an `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotOci(String);

/// `oci://host[:port]/repository` taken apart: the host and the repository's path.
///
/// # Errors
/// Not an `oci://` reference with a host and a repository path.
pub fn split_oci(text: &str) -> Result<(&str, &str), NotOci> {
    let fail = |why: String| NotOci(why);
    let rest = text
        .strip_prefix("oci://")
        .ok_or_else(|| fail(format!("{text:?} does not start with oci://")))?;
    let (host, repository) = rest
        .split_once('/')
        .ok_or_else(|| fail(format!("{text:?} names no repository after the host")))?;
    let repository = repository.trim_end_matches('/');
    if host.contains('@') {
        return Err(fail("the reference holds credentials: give them in [app.registry] credentials (a Docker config.json)".into()));
    }
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
    if !host_ok {
        return Err(fail(format!("{host:?} is not a registry host (and port)")));
    }
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(c);
    let parts_ok = repository
        .split('/')
        .all(|p| !p.is_empty() && p != "." && p != "..");
    if repository.is_empty() || !repository.chars().all(valid) || !parts_ok {
        return Err(fail(format!(
            "{repository:?} is not a repository path (lowercase letters, digits, '.', '_', '-' and '/')"
        )));
    }
    Ok((host, repository))
}

/// Whether `text` is a `sha256:` digest of 64 lowercase hex digits.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, AppConfig};

    fn invalid(text: &str) -> String {
        let config = parse(text).expect("parses");
        config
            .validate()
            .expect_err("should not validate")
            .to_string()
    }

    #[test]
    fn an_app_without_a_source_is_told_its_three_kinds() {
        let e = invalid("[[app]]\nname = \"x\"\n");
        assert!(
            e.contains("app[0].repo: give the app's source: repo (git), chart or oci"),
            "{e}"
        );
    }

    #[test]
    fn registry_sources_are_read_as_written() {
        let config = parse(concat!(
            "[[app]]\nname = \"certs\"\n",
            "chart = { repository = \"https://charts.jetstack.io\", name = \"cert-manager\", version = \"^1.14\" }\n",
            "[[app]]\nname = \"shop\"\npath = [\"deploy\"]\n",
            "oci = { url = \"oci://registry.example.com/manifests/shop\", version = \"^1\" }\n",
            "[app.registry]\ncredentials = \"credential:registry\"\nca_file = \"/etc/berth/ca.pem\"\n",
            "[app.verify]\ncosign_keys = [\"/etc/berth/cosign.pub\"]\n",
        ))
        .unwrap();
        config.validate().unwrap();
        let SourceRef::Chart(chart) = config.apps[0].source() else {
            panic!("a chart");
        };
        assert_eq!(
            (chart.name.as_str(), chart.version.as_str()),
            ("cert-manager", "^1.14")
        );
        let shop = &config.apps[1];
        assert!(matches!(shop.source(), SourceRef::Oci(o) if o.pick() == OciPick::Range("^1")));
        assert_eq!(
            shop.registry.credentials.as_deref(),
            Some(std::path::Path::new("/etc/berth/credentials/registry"))
        );
        assert_eq!(shop.verify.cosign_keys.len(), 1);
    }

    #[test]
    fn a_registry_source_is_planned_at_a_version_a_digest_or_a_recorded_revision() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let config = parse(concat!(
            "[[app]]\nname = \"web\"\nchart = { repository = \"https://charts.example\", name = \"web\", version = \"^1\" }\n",
            "[[app]]\nname = \"db\"\nchart = { repository = \"oci://r.example/charts\", name = \"db\", version = \"^1\" }\n",
            "[[app]]\nname = \"shop\"\noci = { url = \"oci://r.example/shop\", tag = \"main\" }\n",
        ))
        .unwrap();
        let (web, db, shop) = (&config.apps[0], &config.apps[1], &config.apps[2]);
        let chart_version =
            |app: &AppConfig, at: &str| app.at_revision(at).unwrap().chart.unwrap().version;
        assert_eq!(chart_version(web, ">=1.2 <2"), ">=1.2 <2");
        assert_eq!(
            chart_version(web, &format!("1.2.0@{digest}")),
            "=1.2.0",
            "recorded: that version exactly"
        );
        assert_eq!(
            chart_version(db, &format!("1.2.0@{digest}")),
            digest,
            "an OCI chart: its digest"
        );
        assert!(web
            .at_revision("main")
            .unwrap_err()
            .to_string()
            .contains("not a version, range or digest"));
        let oci = |at: &str| shop.at_revision(at).unwrap().oci.unwrap();
        assert_eq!(oci("^2").pick(), OciPick::Range("^2"));
        assert_eq!(oci("feature-x").pick(), OciPick::Tag("feature-x"));
        assert_eq!(
            oci(&format!("1.0.0@{digest}")).pick(),
            OciPick::Digest(&digest)
        );
    }

    #[test]
    fn a_registry_source_says_what_git_alone_takes_and_picks_one_version() {
        let oci = |rest: &str| {
            invalid(&format!(
                "[[app]]\nname = \"shop\"\noci = {{ url = \"oci://r.example/shop\"{rest} }}\n"
            ))
        };
        let e = oci(", tag = \"1\", digest = \"sha256:ab\"");
        assert!(
            e.contains("give at most one of version, tag and digest"),
            "{e}"
        );
        assert!(e.contains("oci.digest: write the digest as sha256:"), "{e}");
        assert!(oci(", version = \"banana\"").contains("\"banana\" is not a version or range"));
        let e = invalid("[[app]]\nname = \"a\"\nrepo = \"/r\"\noci = { url = \"oci://r.example/a\" }\nbranch = \"main\"\n");
        assert!(
            e.contains("give one of repo, chart and oci, not more"),
            "{e}"
        );
        assert!(e.contains("branch is a git ref"), "{e}");
        let e = invalid("[[app]]\nname = \"a\"\nchart = { repository = \"http://charts.local\", name = \"web\", version = \"1.0.0\" }\n[app.verify]\ncosign_keys = [\"/k.pub\"]\n");
        assert!(e.contains("is plain HTTP: write insecure = true"), "{e}");
        assert!(
            e.contains("cosign signatures live in OCI registries"),
            "{e}"
        );
        // A git app's [app.registry] reaches its charts' downloaded dependencies.
        let git = parse("[[app]]\nname = \"a\"\nrepo = \"/r\"\n[app.registry]\ninsecure = true\n");
        git.unwrap().validate().unwrap();
        let e = invalid("[[app]]\nname = \"a\"\nchart = { repository = \"oci://r.example/Charts\", name = \"web\", version = \"1\" }\n");
        assert!(e.contains("is not a repository path"), "{e}");
    }
}
