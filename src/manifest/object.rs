//! [`Manifest`]: one Kubernetes object as decoded from git, with the [`Origin`] it came
//! from, and [`ObjectKey`], the identity berth tracks it by.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Where a manifest came from: the file, the YAML/JSON document in it, the line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// Repository-relative path with `/` separators (or `STDIN`).
    pub path: String,
    /// 1-based index of the document in the file.
    pub document: usize,
    /// 1-based line where the document starts.
    pub line: usize,
    /// 1-based index in a `kind: List`, when the object came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
}

impl Origin {
    /// The origin of a whole file, before any document is read.
    pub fn file(path: impl Into<String>) -> Self {
        Origin {
            path: path.into(),
            document: 0,
            line: 0,
            item: None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        match (self.document, self.item) {
            (0, None) => Ok(()),
            (0, Some(i)) => write!(f, " (item {i})"),
            (d, None) => write!(f, " (document {d})"),
            (d, Some(i)) => write!(f, " (document {d}, item {i})"),
        }
    }
}

/// The identity of an object in the cluster: (group, kind, namespace, name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectKey {
    /// API group; empty for the core group.
    pub group: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
    /// Namespace; `None` for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// The namespace Kubernetes puts a namespaced object in when it names none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// `namespace`, or [`DEFAULT_NAMESPACE`] when there is none: where the API server puts a
/// namespaced object that names no namespace.
pub fn namespace_or_default(namespace: Option<&str>) -> &str {
    namespace.unwrap_or(DEFAULT_NAMESPACE)
}

impl ObjectKey {
    /// The object's namespace, or `default` when it names none (see
    /// [`namespace_or_default`]).
    pub fn namespace_or_default(&self) -> &str {
        namespace_or_default(self.namespace.as_deref())
    }

    /// kubectl's way of naming it in progress lines: `deployment.apps/web -n shop`.
    pub fn kubectl(&self) -> String {
        let kind = self.kind.to_lowercase();
        let what = if self.group.is_empty() {
            kind
        } else {
            format!("{kind}.{}", self.group)
        };
        match &self.namespace {
            Some(ns) => format!("{what}/{} -n {ns}", self.name),
            None => format!("{what}/{}", self.name),
        }
    }

    /// `shop/web`, or `web` for a cluster-scoped object: after a kind already named.
    pub fn qualified_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The one naming of objects in errors: `Deployment shop/web`.
impl fmt::Display for ObjectKey {
    /// `Deployment default/web`, `Namespace guestbook`, `Certificate.cert-manager.io ns/x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        if !self.group.is_empty() && !is_well_known_group(&self.group) {
            write!(f, ".{}", self.group)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " {ns}/{}", self.name),
            None => write!(f, " {}", self.name),
        }
    }
}

fn is_well_known_group(group: &str) -> bool {
    matches!(
        group,
        "apps"
            | "batch"
            | "rbac.authorization.k8s.io"
            | "networking.k8s.io"
            | "policy"
            | "autoscaling"
            | "apiextensions.k8s.io"
            | "storage.k8s.io"
            | "coordination.k8s.io"
            | "scheduling.k8s.io"
    )
}

/// One Kubernetes object and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The object as a JSON map (always a JSON object).
    pub object: Map<String, Value>,
    /// Where it came from.
    pub origin: Origin,
    /// JSON pointers of the values decrypted from a sops file (masked wherever values
    /// show).
    pub decrypted: Vec<String>,
}

impl Manifest {
    /// `apiVersion`, or "" when missing.
    pub fn api_version(&self) -> &str {
        self.str_field("apiVersion")
    }

    /// `kind`, or "" when missing.
    pub fn kind(&self) -> &str {
        self.str_field("kind")
    }

    /// The API group: the part of `apiVersion` before `/`, or "" for the core group.
    pub fn group(&self) -> &str {
        group_of(self.api_version())
    }

    /// `metadata.name`, or "" when missing.
    pub fn name(&self) -> &str {
        self.metadata()
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `metadata.namespace`, when set and not empty.
    pub fn namespace(&self) -> Option<&str> {
        self.metadata()
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
    }

    /// `metadata.namespace`, or `default` when it names none (see
    /// [`namespace_or_default`]).
    pub fn namespace_or_default(&self) -> &str {
        namespace_or_default(self.namespace())
    }

    /// The object's identity.
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            group: self.group().to_string(),
            kind: self.kind().to_string(),
            namespace: self.namespace().map(str::to_string),
            name: self.name().to_string(),
        }
    }

    /// A hook (one of [`HOOK_ANNOTATIONS`](super::HOOK_ANNOTATIONS) is set).
    pub fn is_hook(&self) -> bool {
        super::HOOK_ANNOTATIONS
            .iter()
            .any(|k| self.annotation(k).is_some())
    }

    /// `metadata.generateName`, when set and not empty.
    pub fn generate_name(&self) -> Option<&str> {
        self.metadata()
            .and_then(|m| m.get("generateName"))
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty())
    }

    /// An annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata()
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    }

    /// The `metadata` map.
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        self.object.get("metadata").and_then(Value::as_object)
    }

    /// The `metadata` map, created when missing.
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let meta = self
            .object
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !meta.is_object() {
            *meta = Value::Object(Map::new());
        }
        meta.as_object_mut()
            .expect("metadata was just made an object")
    }

    /// Sets (or with `None` removes) `metadata.namespace`.
    pub fn set_namespace(&mut self, namespace: Option<&str>) {
        let meta = self.metadata_mut();
        match namespace {
            Some(ns) => meta.insert("namespace".into(), Value::String(ns.into())),
            None => meta.remove("namespace"),
        };
    }

    /// Sets one entry of `metadata.labels` or `metadata.annotations` (`map` names which).
    pub fn set_meta_entry(&mut self, map: &str, key: &str, value: &str) {
        let entries = self
            .metadata_mut()
            .entry(map)
            .or_insert_with(|| Value::Object(Map::new()));
        if !entries.is_object() {
            *entries = Value::Object(Map::new());
        }
        if let Some(entries) = entries.as_object_mut() {
            entries.insert(key.into(), Value::String(value.into()));
        }
    }

    fn str_field(&self, key: &str) -> &str {
        self.object.get(key).and_then(Value::as_str).unwrap_or("")
    }
}

/// The group part of an `apiVersion`: `apps/v1` → `apps`, `v1` → "".
pub fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or("")
}

/// A manifest from JSON, as the pipeline's unit tests make them.
#[cfg(test)]
pub(crate) fn test_manifest(json: Value) -> Manifest {
    Manifest {
        decrypted: Vec::new(),
        object: json.as_object().expect("a JSON object").clone(),
        origin: Origin::file("f.yaml"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(json: Value) -> Manifest {
        test_manifest(json)
    }

    #[test]
    fn key_reads_group_kind_namespace_name() {
        let m = manifest(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop"}
        }));
        assert_eq!(m.key().to_string(), "Deployment shop/web");
        let crd = manifest(serde_json::json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "tls"}
        }));
        assert_eq!(crd.key().to_string(), "Certificate.cert-manager.io tls");
    }

    #[test]
    fn origin_display() {
        let mut o = Origin {
            path: "deploy/web.yaml".into(),
            document: 2,
            line: 14,
            item: None,
        };
        assert_eq!(o.to_string(), "deploy/web.yaml:14 (document 2)");
        o.item = Some(3);
        assert_eq!(o.to_string(), "deploy/web.yaml:14 (document 2, item 3)");
        assert_eq!(Origin::file("a.yaml").to_string(), "a.yaml");
    }

    #[test]
    fn set_meta_entry_replaces_a_non_map() {
        let mut m = manifest(serde_json::json!({"metadata": {"labels": "oops"}}));
        m.set_meta_entry("labels", "berth.dev/app", "shop");
        assert_eq!(m.metadata().unwrap()["labels"]["berth.dev/app"], "shop");
    }
}
