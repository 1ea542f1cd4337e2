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
        if m.name().is_empty() {
            return Err(missing_name(m));
        }
        Ok(())
    }
}

fn missing_name(m: &Manifest) -> ManifestError {
    let generated = m
        .metadata()
        .is_some_and(|meta| meta.contains_key("generateName"));
    ManifestError::MissingField {
        origin: m.origin.clone(),
        what: format!("{} ", m.kind()),
        field: if generated {
            "metadata.name (generateName is not enough: berth tracks and prunes objects by name)"
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
    use crate::manifest::object::Origin;
    use crate::manifest::scope::BuiltinScopes;
    use serde_json::json;

    fn m(v: Value) -> Manifest {
        Manifest {
            object: v.as_object().unwrap().clone(),
            origin: Origin::file("f.yaml"),
        }
    }

    #[test]
    fn missing_name_and_generate_name() {
        let mut cm = m(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
        let e = RequireIdentity.decorate(&mut cm).unwrap_err().to_string();
        assert_eq!(e, "f.yaml: ConfigMap missing metadata.name");
        let mut job =
            m(json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "x-"}}));
        let e = RequireIdentity.decorate(&mut job).unwrap_err().to_string();
        assert!(e.contains("generateName is not enough"), "{e}");
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
