//! Typed checks of built-in kinds: each object of a kind the Kubernetes API defines is read
//! into its k8s-openapi type, so a Secret whose `data` is a list or a Deployment whose
//! `replicas` is a string is refused at render time — with its file, document and the
//! field path — instead of by the server's dry run. Custom resources pass through.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::error::ManifestError;
use super::object::Manifest;
use super::visitor::Decorator;

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, core::v1 as core, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

/// The Kubernetes version whose types berth reads objects into: k8s-openapi's `earliest`
/// feature (Cargo.toml).
pub const KUBERNETES: &str = "1.33";

/// Reads each object of a built-in kind into its type; refuses it when it does not fit.
pub struct TypedCheck;

impl Decorator for TypedCheck {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        unwrap_base64(m);
        let Some(typed) = of_kind(m.api_version(), m.kind()) else {
            return Ok(());
        };
        (typed.fits)(&m.object).map_err(|message| ManifestError::Invalid {
            origin: m.origin.clone(),
            message: format!("{} {}: {message}", m.kind(), m.name()),
        })
    }
}

/// Whether the type of `m`'s kind (Kubernetes [`KUBERNETES`]) has the field at `path`, as
/// the API server names a field (`.spec.template.spec.containers[name="web"].startupProbe`):
/// `None` when the kind is not one berth reads into a type, or `m` does not hold the path.
pub fn has_field(m: &Manifest, path: &str) -> Option<bool> {
    let typed = of_kind(m.api_version(), m.kind())?;
    at_path(&Value::Object(m.object.clone()), path)?;
    let written = (typed.written)(&m.object)?;
    Some(at_path(&written, path).is_some())
}

/// The value at the API server's field path `path` in `v`, if there is one.
fn at_path<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    let mut here = v;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(field) = rest.strip_prefix('.') {
            let end = field.find(['.', '[']).unwrap_or(field.len());
            here = here.get(&field[..end])?;
            rest = &field[end..];
        } else {
            let inner = rest.strip_prefix('[')?;
            let end = inner.find(']')?;
            here = (here.as_array()?.iter()).find(|item| matches_key(item, &inner[..end]))?;
            rest = &inner[end + 1..];
        }
    }
    Some(here)
}

/// Whether a list's `item` is the one a path's key names: `name="web"`, `port=80,protocol="TCP"`.
fn matches_key(item: &Value, key: &str) -> bool {
    key.split(',').all(|pair| {
        let Some((field, value)) = pair.split_once('=') else {
            return false;
        };
        let Ok(value) = serde_json::from_str::<Value>(value) else {
            return false;
        };
        match field {
            "" => *item == value,
            field => item.get(field) == Some(&value),
        }
    })
}

/// What berth knows of a built-in kind: whether an object fits its type, and the object
/// as its type writes it back (the fields the type does not have left out).
#[derive(Clone, Copy)]
struct Typed {
    fits: fn(&serde_json::Map<String, Value>) -> Result<(), Misfit>,
    written: fn(&serde_json::Map<String, Value>) -> Option<Value>,
}

fn typed<T: DeserializeOwned + Serialize>() -> Typed {
    Typed {
        fits: fits::<T>,
        written: written::<T>,
    }
}

/// The type of a built-in kind; `None` for a kind berth does not read into a type.
fn of_kind(api_version: &str, kind: &str) -> Option<Typed> {
    Some(match (api_version, kind) {
        ("v1", "ConfigMap") => typed::<core::ConfigMap>(),
        ("v1", "Secret") => typed::<core::Secret>(),
        ("v1", "Service") => typed::<core::Service>(),
        ("v1", "ServiceAccount") => typed::<core::ServiceAccount>(),
        ("v1", "Namespace") => typed::<core::Namespace>(),
        ("v1", "PersistentVolumeClaim") => typed::<core::PersistentVolumeClaim>(),
        ("v1", "Pod") => typed::<core::Pod>(),
        ("apps/v1", "Deployment") => typed::<apps::Deployment>(),
        ("apps/v1", "StatefulSet") => typed::<apps::StatefulSet>(),
        ("apps/v1", "DaemonSet") => typed::<apps::DaemonSet>(),
        ("apps/v1", "ReplicaSet") => typed::<apps::ReplicaSet>(),
        ("batch/v1", "Job") => typed::<batch::Job>(),
        ("batch/v1", "CronJob") => typed::<batch::CronJob>(),
        ("networking.k8s.io/v1", "Ingress") => typed::<networking::Ingress>(),
        ("networking.k8s.io/v1", "NetworkPolicy") => typed::<networking::NetworkPolicy>(),
        ("policy/v1", "PodDisruptionBudget") => typed::<policy::PodDisruptionBudget>(),
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<rbac::Role>(),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => typed::<rbac::RoleBinding>(),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => typed::<rbac::ClusterRole>(),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            typed::<rbac::ClusterRoleBinding>()
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            typed::<apiextensions::CustomResourceDefinition>()
        }
        _ => return None,
    })
}

/// `object` read into a `T` and written back.
fn written<T: DeserializeOwned + Serialize>(
    object: &serde_json::Map<String, Value>,
) -> Option<Value> {
    let read: T = serde_json::from_value(Value::Object(object.clone())).ok()?;
    serde_json::to_value(read).ok()
}

/// How the base64 decoder's errors begin (`Invalid symbol 33, offset 7.`).
const BASE64_ERRORS: [&str; 5] = [
    "Invalid symbol",
    "Invalid input length",
    "Invalid byte",
    "Invalid last symbol",
    "Invalid padding",
];

/// Joins the lines of base64 values wrapped over several (kustomize wraps a long file's
/// at 76 characters), as the API server's decoder does when it reads them: a Secret's
/// `data`, a ConfigMap's `binaryData`.
fn unwrap_base64(m: &mut Manifest) {
    let field = match (m.api_version(), m.kind()) {
        ("v1", "Secret") => "data",
        ("v1", "ConfigMap") => "binaryData",
        _ => return,
    };
    let Some(values) = m.object.get_mut(field).and_then(Value::as_object_mut) else {
        return;
    };
    for value in values.values_mut() {
        if let Value::String(s) = value {
            if s.contains(['\n', '\r']) {
                s.retain(|c| c != '\n' && c != '\r');
            }
        }
    }
}

/// Why an object does not read as its kind's type: the field path and what is wrong,
/// never a value (a Secret's would be quoted).
#[derive(Debug, thiserror::Error)]
enum Misfit {
    /// A base64 field that does not decode.
    #[error("{path}: not valid base64 (put plain text under stringData instead)")]
    Base64 {
        /// The field.
        path: String,
    },
    /// A field of the wrong type, or missing.
    #[error("{path}: {message}")]
    Field {
        /// The field.
        path: String,
        /// serde's message without the value.
        message: String,
    },
}

/// Whether `object` reads as a `T`; the error names the field path. Values are never
/// quoted (a Secret's would be), only the type found and the type expected.
fn fits<T: DeserializeOwned>(object: &serde_json::Map<String, Value>) -> Result<(), Misfit> {
    match serde_path_to_error::deserialize::<_, T>(object) {
        Ok(_) => Ok(()),
        Err(e) => {
            let path = e.path().to_string();
            let message = e.inner().to_string();
            // The base64 decoder names a byte of the value and its offset.
            if BASE64_ERRORS.iter().any(|m| message.starts_with(m)) {
                return Err(Misfit::Base64 { path });
            }
            Err(Misfit::Field {
                path,
                message: without_values(&message),
            })
        }
    }
}

/// serde's `invalid type: string "hunter2", expected …` (or `` integer `42` ``) without
/// the value.
fn without_values(message: &str) -> String {
    let mut out = String::new();
    let mut quote = None;
    for c in message.chars() {
        match (quote, c) {
            (None, '"' | '`') => {
                quote = Some(c);
                while out.ends_with(' ') {
                    out.pop();
                }
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::object::test_manifest;
    use serde_json::json;

    /// Why `v` is refused, if it is.
    fn refusal(v: Value) -> Option<String> {
        TypedCheck
            .decorate(&mut test_manifest(v))
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn a_field_the_server_names_is_found_in_the_kinds_type_or_not() {
        let m = test_manifest(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "side", "image": "s"},
                {"name": "web", "image": "w", "startupProbe": {"grpc": {"port": 8080}}, "colour": "red"}
            ]}}}
        }));
        let container = ".spec.template.spec.containers[name=\"web\"]";
        assert_eq!(
            has_field(&m, &format!("{container}.startupProbe.grpc")),
            Some(true)
        );
        assert_eq!(has_field(&m, &format!("{container}.colour")), Some(false));
        assert_eq!(
            has_field(&m, &format!("{container}.nothing")),
            None,
            "not in the object"
        );
        let custom = test_manifest(json!({"apiVersion": "x.io/v1", "kind": "Widget", "spec": {}}));
        assert_eq!(has_field(&custom, ".spec"), None, "a kind with no type");
    }

    #[test]
    fn built_in_kinds_are_read_into_their_types() {
        let e = refusal(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": "three", "selector": {}, "template": {}}
        }))
        .unwrap();
        assert_eq!(
            e,
            "f.yaml: Deployment web: spec.replicas: invalid type: string, expected i32"
        );
        let e = refusal(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
            "data": ["aHVudGVyMg=="]
        }))
        .unwrap();
        assert!(
            e.starts_with("f.yaml: Secret db: data: invalid type: sequence"),
            "{e}"
        );
        let e = refusal(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
            "stringData": {"password": ["hunter2"]}
        }))
        .unwrap();
        assert!(
            e.contains("stringData.password") && !e.contains("hunter2"),
            "{e}"
        );
        let e = refusal(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
            "data": {"password": 12345}
        }))
        .unwrap();
        assert!(e.contains("data.password") && !e.contains("12345"), "{e}");
        // Not base64: neither a byte of the value nor where it is.
        let e = refusal(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
            "data": {"password": "hunter2!"}
        }))
        .unwrap();
        assert_eq!(e, "f.yaml: Secret db: data.password: not valid base64 (put plain text under stringData instead)");
        let mut wrapped = test_manifest(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca"}, "data": {"ca.crt": "aGVsbG8g\nd29ybGQ=\n"}}));
        TypedCheck.decorate(&mut wrapped).unwrap();
        assert_eq!(wrapped.object["data"]["ca.crt"], "aGVsbG8gd29ybGQ=");

        assert_eq!(
            refusal(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}})
            ),
            None
        );
        // Custom resources pass through unchanged.
        assert_eq!(
            refusal(
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"replicas": "any"}})
            ),
            None
        );
    }
}
