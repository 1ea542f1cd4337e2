//! Typed checks of built-in kinds: each object of a kind the Kubernetes API defines is read
//! into its k8s-openapi type, so a Secret whose `data` is a list or a Deployment whose
//! `replicas` is a string is refused at render time — with its file, document and the
//! field path — instead of by the server's dry run. Custom resources pass through.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ManifestError;
use super::object::Manifest;
use super::visitor::Decorator;

use k8s_openapi::api::{
    apps::v1 as apps, batch::v1 as batch, core::v1 as core, networking::v1 as networking,
    policy::v1 as policy, rbac::v1 as rbac,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;

/// Reads each object of a built-in kind into its type; refuses it when it does not fit.
pub struct TypedCheck;

impl Decorator for TypedCheck {
    fn decorate(&self, m: &mut Manifest) -> Result<(), ManifestError> {
        unwrap_base64(m);
        let check = match (m.api_version(), m.kind()) {
            ("v1", "ConfigMap") => fits::<core::ConfigMap>,
            ("v1", "Secret") => fits::<core::Secret>,
            ("v1", "Service") => fits::<core::Service>,
            ("v1", "ServiceAccount") => fits::<core::ServiceAccount>,
            ("v1", "Namespace") => fits::<core::Namespace>,
            ("v1", "PersistentVolumeClaim") => fits::<core::PersistentVolumeClaim>,
            ("v1", "Pod") => fits::<core::Pod>,
            ("apps/v1", "Deployment") => fits::<apps::Deployment>,
            ("apps/v1", "StatefulSet") => fits::<apps::StatefulSet>,
            ("apps/v1", "DaemonSet") => fits::<apps::DaemonSet>,
            ("apps/v1", "ReplicaSet") => fits::<apps::ReplicaSet>,
            ("batch/v1", "Job") => fits::<batch::Job>,
            ("batch/v1", "CronJob") => fits::<batch::CronJob>,
            ("networking.k8s.io/v1", "Ingress") => fits::<networking::Ingress>,
            ("networking.k8s.io/v1", "NetworkPolicy") => fits::<networking::NetworkPolicy>,
            ("policy/v1", "PodDisruptionBudget") => fits::<policy::PodDisruptionBudget>,
            ("rbac.authorization.k8s.io/v1", "Role") => fits::<rbac::Role>,
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => fits::<rbac::RoleBinding>,
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => fits::<rbac::ClusterRole>,
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                fits::<rbac::ClusterRoleBinding>
            }
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                fits::<apiextensions::CustomResourceDefinition>
            }
            _ => return Ok(()),
        };
        check(&m.object).map_err(|message| ManifestError::Invalid {
            origin: m.origin.clone(),
            message: format!("{} {}: {message}", m.kind(), m.name()),
        })
    }
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
