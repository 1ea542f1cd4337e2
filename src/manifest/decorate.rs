//! The decorators and filters of the pipeline: identity checks, the default namespace,
//! the ownership label and source annotations; the `berth.dev/ignore` annotation and
//! the `Kind/name` globs.

use globset::GlobSet;
use serde_json::Value;

use super::error::ManifestError;
use super::object::Manifest;
use super::scope::{Scope, ScopeLookup};
use super::visitor::{Decorator, Filter};
use super::{ANNOTATION_IGNORE, ANNOTATION_SOURCE_COMMIT, ANNOTATION_SOURCE_PATH, LABEL_APP};

/// Refuses objects without a usable `metadata.name`, and metadata that is not a mapping
/// of the right shape.
pub struct RequireIdentity;

impl Decorator for RequireIdentity {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        let invalid = |message: String| ManifestError::Invalid {
            origin: m.origin.clone(),
            message: format!("{} {message}", m.kind()),
        };
        let Some(meta) = m.object.get("metadata") else {
            return Err(missing_name(m));
        };
        let Some(meta) = meta.as_object() else {
            return Err(invalid("metadata must be a mapping".into()));
        };
        for map in ["labels", "annotations"] {
            match meta.get(map) {
                None | Some(Value::Null) => {}
                Some(Value::Object(entries)) => {
                    if let Some((k, _)) = entries.iter().find(|(_, v)| !v.is_string()) {
                        return Err(invalid(format!(
                            "{}: metadata.{map}.{k} must be a string (quote it)",
                            m.name()
                        )));
                    }
                }
                Some(_) => return Err(invalid(format!("metadata.{map} must be a mapping"))),
            }
        }
        if m.name().is_empty() && !(m.is_hook() && m.generate_name().is_some()) {
            return Err(missing_name(m));
        }
        // Names go into request paths: refuse what would change the path (as the API
        // server's own path-segment rule does), before any request is made.
        let name = m
            .generate_name()
            .filter(|_| m.name().is_empty())
            .unwrap_or(m.name());
        if matches!(name, "." | "..") || name.contains(['/', '%']) || name.len() > 253 {
            return Err(invalid(format!(
                "{name:?}: metadata.name may not be \".\" or \"..\", hold \"/\" or \"%\", or pass 253 characters"
            )));
        }
        // Every kind but RBAC's takes a DNS subdomain (RBAC names are path segments, as
        // `system:controller:…`): said here, naming the file, not by the API server.
        if m.group() != "rbac.authorization.k8s.io" && !is_dns_subdomain(name, m.name().is_empty())
        {
            return Err(invalid(format!(
                "{name:?}: metadata.name must be a DNS subdomain: lower-case letters, digits, \"-\" and \".\", starting and ending with a letter or digit"
            )));
        }
        if let Some(ns) = m.namespace() {
            if !crate::config::is_dns_label(ns) {
                return Err(invalid(format!(
                    "{name}: metadata.namespace {ns:?} is not a valid namespace name (a DNS label)"
                )));
            }
        }
        Ok(())
    }
}

/// Whether `name` is an RFC 1123 subdomain (at most 253 characters, each dot-separated
/// label lower-case letters, digits and `-`, not starting or ending with `-`); a
/// `generateName` prefix may end with `-` or `.`.
fn is_dns_subdomain(name: &str, prefix: bool) -> bool {
    let name = if prefix {
        name.trim_end_matches(['-', '.'])
    } else {
        name
    };
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn missing_name(m: &Manifest) -> ManifestError {
    let generated = m
        .metadata()
        .is_some_and(|meta| meta.contains_key("generateName"));
    ManifestError::MissingField {
        origin: m.origin.clone(),
        what: format!("{} ", m.kind()),
        field: if generated {
            "metadata.name (generateName is for hooks alone: berth tracks and prunes objects by name)"
        } else {
            "metadata.name"
        },
    }
}

/// Gives namespaced objects without a namespace the default one, and clears the namespace
/// of cluster-scoped objects (kubectl's `SetNamespace` and `FilterNamespace`). Kinds the
/// lookup does not know are left as they are.
pub struct SetNamespace<'a> {
    /// The default namespace.
    pub namespace: String,
    /// Who knows each kind's scope.
    pub scopes: &'a dyn ScopeLookup,
}

impl Decorator for SetNamespace<'_> {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        match self.scopes.scope(m.group(), m.kind()) {
            Some(Scope::Namespaced) if m.namespace().is_none() => {
                m.set_namespace(Some(&self.namespace))
            }
            Some(Scope::Cluster) if m.namespace().is_some() => m.set_namespace(None),
            _ => {}
        }
        Ok(())
    }
}

/// Adds the ownership label `berth.dev/app=<app>`.
pub struct AppLabel(pub String);

impl Decorator for AppLabel {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        m.set_meta_entry("labels", LABEL_APP, &self.0);
        Ok(())
    }
}

/// Adds `berth.dev/source-path`, and `berth.dev/source-commit` when the commit is known.
pub struct SourceAnnotations {
    /// The commit being rendered, when known.
    pub commit: Option<String>,
}

impl Decorator for SourceAnnotations {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        let path = m.origin.path.clone();
        m.set_meta_entry("annotations", ANNOTATION_SOURCE_PATH, &path);
        if let Some(commit) = &self.commit {
            m.set_meta_entry("annotations", ANNOTATION_SOURCE_COMMIT, commit);
        }
        Ok(())
    }
}

/// Fills in `protocol: TCP`, the API's default, where a container port or a Service port
/// names none. Kubernetes before 1.21 refuses a server-side apply of such a list entry
/// ("associative list with keys has an element that omits key field \"protocol\"");
/// on newer servers the result is the same object.
pub struct DefaultPortProtocol;

impl Decorator for DefaultPortProtocol {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        let pod_spec = match (m.group(), m.kind()) {
            ("", "Service") => {
                fill_protocol(pointer_mut(&mut m.object, "spec/ports"));
                return Ok(());
            }
            ("", "Pod") => "spec",
            ("", "PodTemplate") => "template/spec",
            ("", "ReplicationController") | ("apps", _) | ("batch", "Job") => "spec/template/spec",
            ("batch", "CronJob") => "spec/jobTemplate/spec/template/spec",
            _ => return Ok(()),
        };
        let Some(Value::Object(pod_spec)) = pointer_mut(&mut m.object, pod_spec) else {
            return Ok(());
        };
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            if let Some(Value::Array(containers)) = pod_spec.get_mut(list) {
                for c in containers {
                    fill_protocol(c.get_mut("ports"));
                }
            }
        }
        Ok(())
    }
}

/// The value at `a/b/c` under an object.
fn pointer_mut<'a>(
    object: &'a mut serde_json::Map<String, Value>,
    path: &str,
) -> Option<&'a mut Value> {
    let (first, rest) = path.split_once('/').unwrap_or((path, ""));
    let value = object.get_mut(first)?;
    if rest.is_empty() {
        Some(value)
    } else {
        value.pointer_mut(&format!("/{rest}"))
    }
}

fn fill_protocol(ports: Option<&mut Value>) {
    let Some(Value::Array(ports)) = ports else {
        return;
    };
    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
        port.entry("protocol")
            .or_insert_with(|| Value::String("TCP".into()));
    }
}

/// Drops objects annotated `berth.dev/ignore: "true"`.
pub struct IgnoreAnnotated;

impl Filter for IgnoreAnnotated {
    fn keep(&self, m: &Manifest) -> bool {
        m.annotation(ANNOTATION_IGNORE) != Some("true")
    }
}

/// Keeps objects whose `Kind/name` matches `include` (when set) and not `exclude`.
pub struct ObjectGlobs {
    /// When set, only matching objects pass.
    pub include: Option<GlobSet>,
    /// Matching objects are dropped.
    pub exclude: Option<GlobSet>,
}

impl Filter for ObjectGlobs {
    fn keep(&self, m: &Manifest) -> bool {
        let id = format!("{}/{}", m.kind(), m.name());
        self.include.as_ref().is_none_or(|g| g.is_match(&id))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(&id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::object::test_manifest as m;
    use crate::manifest::scope::BuiltinScopes;
    use serde_json::json;

    #[test]
    fn missing_name_and_generate_name() {
        let mut cm = m(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
        let e = RequireIdentity.decorate(&mut cm).unwrap_err().to_string();
        assert_eq!(e, "f.yaml: ConfigMap missing metadata.name");
        let mut job =
            m(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "x-"}}));
        let e = RequireIdentity.decorate(&mut job).unwrap_err().to_string();
        assert!(e.contains("generateName is for hooks alone"), "{e}");
    }

    #[test]
    fn names_follow_kubernetes_rules_at_render() {
        let named = |kind: &str, api: &str, name: &str| {
            let mut o = m(json!({"apiVersion": api, "kind": kind, "metadata": {"name": name}}));
            RequireIdentity.decorate(&mut o).map_err(|e| e.to_string())
        };
        let e = named("ConfigMap", "v1", "x<img src=x>").unwrap_err();
        assert!(
            e.starts_with(
                "f.yaml: ConfigMap \"x<img src=x>\": metadata.name must be a DNS subdomain"
            ),
            "{e}"
        );
        assert!(named("ConfigMap", "v1", "Web").is_err());
        assert!(named("ConfigMap", "v1", "web-1.example").is_ok());
        // RBAC names are path segments.
        let rbac = "rbac.authorization.k8s.io/v1";
        assert!(named("ClusterRole", rbac, "system:aggregate-to-view").is_ok());
        let mut hook = m(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "migrate-",
                "annotations": {"berth.dev/hook": "pre"}}}));
        RequireIdentity.decorate(&mut hook).unwrap();
    }

    #[test]
    fn non_string_label_value_is_refused() {
        let mut cm = m(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"tier": 3}}}));
        let e = RequireIdentity.decorate(&mut cm).unwrap_err().to_string();
        assert!(e.contains("metadata.labels.tier must be a string"), "{e}");
    }

    #[test]
    fn namespace_defaults_only_where_it_belongs() {
        let set = SetNamespace {
            namespace: "shop".into(),
            scopes: &BuiltinScopes,
        };
        let mut svc = m(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}}));
        set.decorate(&mut svc).unwrap();
        assert_eq!(svc.namespace(), Some("shop"));
        let mut mine = m(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "mine"}}),
        );
        set.decorate(&mut mine).unwrap();
        assert_eq!(mine.namespace(), Some("mine"));
        let mut ns = m(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "namespace": "x"}}),
        );
        set.decorate(&mut ns).unwrap();
        assert_eq!(ns.namespace(), None);
        let mut unknown =
            m(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "a"}}));
        set.decorate(&mut unknown).unwrap();
        assert_eq!(unknown.namespace(), None);
    }

    #[test]
    fn port_protocol_defaults_to_tcp_where_missing() {
        let mut d = m(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"},
            "spec": {"template": {"spec": {
                "containers": [{"name": "c", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}],
                "initContainers": [{"name": "i", "ports": [{"containerPort": 81}]}]}}}}),
        );
        DefaultPortProtocol.decorate(&mut d).unwrap();
        let spec = &d.object["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(spec["containers"][0]["ports"][1]["protocol"], "UDP");
        assert_eq!(spec["initContainers"][0]["ports"][0]["protocol"], "TCP");
        let mut svc = m(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"},
            "spec": {"ports": [{"port": 80}]}}),
        );
        DefaultPortProtocol.decorate(&mut svc).unwrap();
        assert_eq!(svc.object["spec"]["ports"][0]["protocol"], "TCP");
        let mut cron = m(
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "a"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 1}]}]}}}}}}),
        );
        DefaultPortProtocol.decorate(&mut cron).unwrap();
        assert_eq!(
            cron.object["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
                ["ports"][0]["protocol"],
            "TCP"
        );
    }

    #[test]
    fn label_annotations_and_filters() {
        let mut cm =
            m(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "debug-x"}}));
        AppLabel("shop".into()).decorate(&mut cm).unwrap();
        SourceAnnotations {
            commit: Some("abc".into()),
        }
        .decorate(&mut cm)
        .unwrap();
        assert_eq!(cm.metadata().unwrap()["labels"][LABEL_APP], "shop");
        assert_eq!(cm.annotation(ANNOTATION_SOURCE_PATH), Some("f.yaml"));
        assert_eq!(cm.annotation(ANNOTATION_SOURCE_COMMIT), Some("abc"));
        assert!(IgnoreAnnotated.keep(&cm));
        cm.set_meta_entry("annotations", ANNOTATION_IGNORE, "true");
        assert!(!IgnoreAnnotated.keep(&cm));
        let glob = |g: &str| {
            Some(
                globset::GlobSetBuilder::new()
                    .add(globset::Glob::new(g).unwrap())
                    .build()
                    .unwrap(),
            )
        };
        assert!(!ObjectGlobs {
            include: None,
            exclude: glob("ConfigMap/debug-*")
        }
        .keep(&cm));
        assert!(!ObjectGlobs {
            include: glob("Deployment/*"),
            exclude: None
        }
        .keep(&cm));
        assert!(ObjectGlobs {
            include: glob("ConfigMap/*"),
            exclude: None
        }
        .keep(&cm));
    }
}
