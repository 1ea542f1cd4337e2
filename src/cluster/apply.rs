//! Server-side apply of resolved manifests: a dry run (`dryRun=All`) and the real apply,
//! with one field manager, a bounded number of requests in flight, results in input order.

use futures::{stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::api::{DynamicObject, ObjectMeta, Patch, PatchParams};

use super::ClusterError;
use crate::plan::Target;

/// How to apply.
#[derive(Debug, Clone)]
pub struct ApplySettings {
    /// The field manager.
    pub field_manager: String,
    /// Take over conflicting fields.
    pub force: bool,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Keep the server's whole answer (`berth plan` diffs it); otherwise only its
    /// metadata, without managedFields, is kept — a sync needs no more, and 1000 full
    /// answers are most of its memory.
    pub bodies: bool,
}

/// The apply order: Namespaces and CRDs, then other cluster-scoped kinds, then the rest.
pub fn stage(t: &Target) -> u8 {
    match (t.manifest.group(), t.manifest.kind()) {
        ("", "Namespace") | ("apiextensions.k8s.io", "CustomResourceDefinition") => 0,
        _ if !t.resolved.namespaced => 1,
        _ => 2,
    }
}

/// The version berth remembers of a live object, which moves when someone changes what
/// berth applied and not when a controller writes its status: the generation where the
/// kind has one; else a digest of the fields each applier owns (`managedFields` entries of
/// operation `Apply`, not of a subresource), which another manager's write of one of
/// berth's fields changes (an update takes the fields it sets) and a Job completing or a
/// claim binding does not; else (no server-side apply yet) the resourceVersion.
pub fn observed(meta: &ObjectMeta) -> String {
    if let Some(g) = meta.generation.filter(|&g| g > 0) {
        return format!("g{g}");
    }
    let entries = meta.managed_fields.iter().flatten();
    if let Some(kept) = entries
        .clone()
        .find(|m| m.operation.as_deref() == Some(OBSERVED))
    {
        return kept.manager.clone().unwrap_or_default();
    }
    let applied: Vec<_> = entries
        .filter(|m| by_an_applier(m))
        .map(|m| {
            (
                &m.manager,
                &m.api_version,
                m.fields_v1.as_ref().map(|f| &f.0),
            )
        })
        .collect();
    if applied.is_empty() {
        return format!("rv{}", meta.resource_version.as_deref().unwrap_or(""));
    }
    let text = serde_json::to_string(&applied).unwrap_or_default();
    format!("a{}", &crate::digest::sha256_hex(text.as_bytes())[..16])
}

/// Applies every target (or dry-runs it), `settings.concurrency` at a time; results come
/// back in the order of `targets`.
pub async fn apply_all(
    client: &kube::Client,
    settings: &ApplySettings,
    targets: &[&Target],
    dry_run: bool,
) -> Vec<Result<DynamicObject, ClusterError>> {
    // The futures are built first: a closure in `.map` trips the compiler's Send check
    // for spawned tasks (rust-lang/rust#102211).
    let requests: Vec<_> = targets
        .iter()
        .map(|t| apply_one(client, settings, t, dry_run))
        .collect();
    stream::iter(requests)
        .buffered(settings.concurrency.max(1))
        .collect()
        .await
}

async fn apply_one(
    client: &kube::Client,
    settings: &ApplySettings,
    t: &Target,
    dry_run: bool,
) -> Result<DynamicObject, ClusterError> {
    let m = &t.manifest;
    let api = super::api_for(client, &t.resolved, m.namespace());
    let params = PatchParams {
        dry_run,
        force: settings.force,
        field_manager: Some(settings.field_manager.clone()),
        field_validation: None,
    };
    // The body, encoded on the blocking pool: a large object's JSON (a 1 MB ConfigMap)
    // would hold an async worker for as long.
    let object = m.object.clone();
    let body = crate::blocking::off_runtime(move || serde_json::value::to_raw_value(&object));
    let body = body.await.map_err(|cause| ClusterError::Encode {
        key: Box::new(m.key()),
        origin: m.origin.to_string(),
        cause,
    })?;
    api.patch(m.name(), &params, &Patch::Apply(&body))
        .await
        .map(|obj| {
            // An object waited for keeps its body: the apply's answer is the first look at
            // its health. A Deployment's dry run keeps it too: its template's hash says
            // whether a canary starts.
            let deployment = m.group() == "apps" && m.kind() == "Deployment";
            let waited = crate::health::waits_for(m.group(), m.kind());
            if settings.bodies || (dry_run && deployment) || (!dry_run && waited) {
                obj
            } else {
                metadata_only(obj)
            }
        })
        .map_err(|e| ClusterError::Object {
            verb: if dry_run {
                "dry run refused"
            } else {
                "failed to apply"
            },
            key: Box::new(m.key()),
            origin: m.origin.to_string(),
            message: api_message(
                &e,
                m.kind() == "Secret" || !m.decrypted.is_empty(),
                &settings.field_manager,
            ),
        })
}

/// A `managedFields` entry of a server-side apply to the object itself.
fn by_an_applier(m: &ManagedFieldsEntry) -> bool {
    m.operation.as_deref() == Some("Apply") && m.subresource.as_deref().is_none_or(str::is_empty)
}

/// The `operation` of the one `managedFields` entry [`metadata_only`] keeps, in berth's
/// memory alone: its `manager` holds what [`observed`] read from the entries it replaces.
const OBSERVED: &str = "berth.dev/observed";

/// The object's metadata alone. Of its managedFields only what [`observed`] reads of them
/// is kept, in one entry: their fields (a tree of JSON for each manager) were most of what
/// an app of 10,000 ConfigMaps held while it synced.
fn metadata_only(obj: DynamicObject) -> DynamicObject {
    let has_generation = obj.metadata.generation.is_some_and(|g| g > 0);
    let managed_fields = (!has_generation).then(|| {
        vec![ManagedFieldsEntry {
            manager: Some(observed(&obj.metadata)),
            operation: Some(OBSERVED.to_string()),
            ..ManagedFieldsEntry::default()
        }]
    });
    DynamicObject {
        types: obj.types,
        metadata: ObjectMeta {
            managed_fields,
            ..obj.metadata
        },
        data: serde_json::Value::Null,
    }
}

/// The fields a conflicting server-side apply names, by manager, from the API server's
/// message: `Apply failed with 2 conflicts: conflicts with "kubectl-patch" using v1:\n-
/// .data.a\n- .data.b` (one conflict: `conflict with "m": .spec.replicas`).
pub fn conflicts(message: &str) -> Vec<(String, Vec<String>)> {
    let mut found: Vec<(String, Vec<String>)> = Vec::new();
    for part in message.split("with \"").skip(1) {
        let Some((manager, rest)) = part.split_once('"') else {
            continue;
        };
        let fields = rest
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| w.starts_with('.') && w.len() > 1)
            .map(|w| w.trim_end_matches(['.', ':']).to_string())
            .collect();
        found.push((manager.to_string(), fields));
    }
    found
}

/// The apiserver's message, with advice for conflicts and Secret values redacted.
pub fn api_message(e: &kube::Error, secret: bool, field_manager: &str) -> String {
    let message = match e {
        kube::Error::Api(status) if status.code == 409 => format!(
            "{}: another field manager owns these fields; change them there, or set force_conflicts = true to let {field_manager:?} take them over",
            status.message
        ),
        other => super::said(other),
    };
    if secret {
        redact_values(&message)
    } else {
        message
    }
}

/// Replaces the quoted value after each `Invalid value: ` with `[redacted]`.
fn redact_values(message: &str) -> String {
    const MARK: &str = "Invalid value: \"";
    let mut out = String::new();
    let mut rest = message;
    while let Some(i) = rest.find(MARK) {
        out.push_str(&rest[..i]);
        out.push_str("Invalid value: [redacted]");
        let value = &rest[i + MARK.len()..];
        let mut end = value.len();
        let mut escaped = false;
        for (j, c) in value.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = j + 1;
                    break;
                }
                _ => escaped = false,
            }
        }
        rest = &value[end.min(value.len())..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_redacted() {
        let m = r#"Secret "db" is invalid: data[pa ss]: Invalid value: "hunter2\"x": a valid config key must consist of alphanumeric characters"#;
        let r = redact_values(m);
        assert!(!r.contains("hunter2"), "{r}");
        assert!(
            r.contains("data[pa ss]: Invalid value: [redacted]: a valid config key"),
            "{r}"
        );
    }

    #[test]
    fn conflicts_name_fields_by_manager() {
        assert_eq!(
            conflicts("Apply failed with 1 conflict: conflict with \"kubectl-patch\" using apps/v1: .spec.replicas"),
            [("kubectl-patch".to_string(), vec![".spec.replicas".to_string()])]
        );
        assert_eq!(
            conflicts("Apply failed with 3 conflicts: conflicts with \"a\" using v1:\n- .data.x\n- .data.y\nconflict with \"b\": .metadata.labels.team"),
            [
                ("a".to_string(), vec![".data.x".to_string(), ".data.y".to_string()]),
                ("b".to_string(), vec![".metadata.labels.team".to_string()])
            ]
        );
    }

    #[test]
    fn observed_prefers_generation() {
        let mut meta = ObjectMeta {
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        };
        assert_eq!(observed(&meta), "rv42");
        let entry = |manager: &str, operation: &str, fields: serde_json::Value| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some(operation.into()),
                api_version: Some("v1".into()),
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                    fields,
                )),
                ..Default::default()
            }
        };
        let berths = entry("berth", "Apply", serde_json::json!({"f:data": {"f:a": {}}}));
        meta.managed_fields = Some(vec![berths.clone()]);
        let applied = observed(&meta);
        assert!(applied.starts_with('a'), "{applied}");
        // A controller's status update moves the resourceVersion, not what berth owns.
        meta.resource_version = Some("43".into());
        let status = entry(
            "job-controller",
            "Update",
            serde_json::json!({"f:status": {}}),
        );
        meta.managed_fields = Some(vec![berths, status.clone()]);
        assert_eq!(observed(&meta), applied);
        // kubectl edit of berth's field takes it: berth's entry no longer holds it.
        let taken = entry(
            "kubectl-edit",
            "Update",
            serde_json::json!({"f:data": {"f:a": {}}}),
        );
        meta.managed_fields = Some(vec![
            entry("berth", "Apply", serde_json::json!({"f:data": {}})),
            status,
            taken,
        ]);
        assert_ne!(observed(&meta), applied);
        meta.generation = Some(3);
        assert_eq!(observed(&meta), "g3");
    }

    #[test]
    fn the_metadata_kept_reads_as_the_object_it_came_from() {
        let fields = serde_json::json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {}}});
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "a", "resourceVersion": "7",
                "managedFields": [
                    {"manager": "berth", "operation": "Apply", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": fields},
                    {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:b": {}}}},
                ],
            },
            "data": {"a": "1"},
        }))
        .unwrap();
        let before = observed(&obj.metadata);
        assert!(before.starts_with('a'), "{before}");
        let kept = metadata_only(obj);
        assert_eq!(observed(&kept.metadata), before);
        let entries = kept.metadata.managed_fields.unwrap();
        assert_eq!(entries.len(), 1);
        assert!(entries[0].fields_v1.is_none());
        // Without an applier's entry it is the resourceVersion, kept as well.
        let bare: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "8"},
        }))
        .unwrap();
        assert_eq!(observed(&metadata_only(bare).metadata), "rv8");
    }
}
