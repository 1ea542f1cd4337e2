//! What `berth plan` shows per changed object: a unified diff between the live object and
//! the server's dry-run answer (so defaulted fields are not shown as changes), as YAML,
//! with the fields the server manages left out and Secret values masked (pure).

use serde_json::{Map, Value};

/// Metadata the server writes on every change: noise in a diff.
const SERVER_METADATA: [&str; 6] = [
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
];

/// A unified diff from `live` (`None`: the object is created) to `planned`, or `None`
/// when they do not differ once the server's bookkeeping is left out. Secret values are
/// masked unless `show_secrets`; the values at `decrypted` (JSON pointers of values a
/// sops file held) too, and in any kind but a Secret even with `show_secrets`.
pub fn object_diff(
    live: Option<&Value>,
    planned: &Value,
    name: &str,
    decrypted: &[String],
    show_secrets: bool,
) -> Option<String> {
    let mut before = live.map(comparable).unwrap_or(Value::Null);
    let mut after = comparable(planned);
    if is_secret(planned) && !show_secrets {
        mask_secret(&mut before, &mut after);
    }
    if !is_secret(planned) || !show_secrets {
        mask_pointers(&mut before, &mut after, decrypted);
    }
    if before == after {
        return None;
    }
    let yaml = |v: &Value| match v {
        Value::Null => String::new(),
        v => serde_yaml::to_string(v).unwrap_or_default(),
    };
    let (before, after) = (yaml(&before), yaml(&after));
    let header_before = if live.is_some() {
        format!("live {name}")
    } else {
        "/dev/null".to_string()
    };
    Some(
        similar::TextDiff::from_lines(&before, &after)
            .unified_diff()
            .context_radius(3)
            .header(&header_before, &format!("planned {name}"))
            .to_string(),
    )
}

/// The object without status and without the metadata the server keeps.
fn comparable(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in SERVER_METADATA {
                meta.remove(field);
            }
        }
    }
    object
}

/// A Secret with every `data` and `stringData` value replaced by `***`, for output
/// (`berth render`); other objects unchanged.
pub fn mask_secret_values(object: &mut Value) {
    if !is_secret(object) {
        return;
    }
    for field in ["data", "stringData"] {
        if let Some(values) = object.get_mut(field).and_then(Value::as_object_mut) {
            values
                .values_mut()
                .for_each(|v| *v = Value::String("***".into()));
        }
    }
}

fn is_secret(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Secret")
}

/// Replaces every Secret value by `***`, as `kubectl diff` does: a value that changes is
/// shown as `*** (before)` and `*** (after)`, so the diff says which keys change without
/// saying what they hold.
fn mask_secret(before: &mut Value, after: &mut Value) {
    for field in ["data", "stringData"] {
        let old = before.get(field).and_then(Value::as_object).cloned();
        let new = after.get(field).and_then(Value::as_object).cloned();
        let (old, new) = (old.unwrap_or_default(), new.unwrap_or_default());
        let masked = |values: &Map<String, Value>, other: &Map<String, Value>, suffix: &str| {
            values
                .iter()
                .map(|(k, v)| {
                    let same = other.get(k) == Some(v);
                    let mask = if same {
                        "***".to_string()
                    } else {
                        format!("*** ({suffix})")
                    };
                    (k.clone(), Value::String(mask))
                })
                .collect::<Map<String, Value>>()
        };
        if let Some(map) = before.as_object_mut().filter(|m| m.contains_key(field)) {
            map.insert(field.into(), Value::Object(masked(&old, &new, "before")));
        }
        if let Some(map) = after.as_object_mut().filter(|m| m.contains_key(field)) {
            map.insert(field.into(), Value::Object(masked(&new, &old, "after")));
        }
    }
}

/// Replaces the values at `pointers` by `***` in both, marked `(before)` and `(after)`
/// where they differ.
fn mask_pointers(before: &mut Value, after: &mut Value, pointers: &[String]) {
    for p in pointers {
        // A value only one side holds (created, removed) needs no mark.
        let (old, new) = (before.pointer(p), after.pointer(p));
        let same = old.is_none() || new.is_none() || old == new;
        for (side, suffix) in [(&mut *before, " (before)"), (&mut *after, " (after)")] {
            if let Some(v) = side.pointer_mut(p) {
                let suffix = if same { "" } else { suffix };
                *v = Value::String(format!("***{suffix}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(image: &str, rv: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "resourceVersion": rv, "generation": 3,
                         "managedFields": [{"manager": "berth"}], "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
            "status": {"replicas": 2}
        })
    }

    #[test]
    fn a_changed_field_is_the_only_change_shown() {
        let diff = object_diff(
            Some(&deployment("web:1", "10")),
            &deployment("web:2", "11"),
            "deployment.apps/web",
            &[],
            false,
        )
        .expect("a change");
        assert!(
            diff.starts_with("--- live deployment.apps/web\n+++ planned deployment.apps/web\n"),
            "{diff}"
        );
        let changed: Vec<&str> = diff
            .lines()
            .filter(|l| {
                (l.starts_with('-') || l.starts_with('+'))
                    && !l.starts_with("---")
                    && !l.starts_with("+++")
            })
            .collect();
        assert_eq!(
            changed,
            ["-        image: web:1", "+        image: web:2"],
            "{diff}"
        );
        for noise in ["resourceVersion", "managedFields", "generation", "status"] {
            assert!(!diff.contains(noise), "{noise} in {diff}");
        }
    }

    #[test]
    fn bookkeeping_alone_is_no_change_and_a_new_object_is_all_added() {
        assert_eq!(
            object_diff(
                Some(&deployment("web:1", "10")),
                &deployment("web:1", "12"),
                "d",
                &[],
                false
            ),
            None
        );
        let diff = object_diff(None, &deployment("web:1", "1"), "d", &[], false).unwrap();
        assert!(diff.starts_with("--- /dev/null\n+++ planned d\n"), "{diff}");
        assert!(diff.contains("+kind: Deployment"), "{diff}");
    }

    #[test]
    fn secret_values_are_masked() {
        let secret = |password: &str| {
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                   "data": {"user": "YWRtaW4=", "password": password}})
        };
        let diff = object_diff(
            Some(&secret("czNjcjN0")),
            &secret("bjN3"),
            "secret/db",
            &[],
            false,
        )
        .unwrap();
        assert!(
            !diff.contains("czNjcjN0") && !diff.contains("bjN3") && !diff.contains("YWRtaW4="),
            "{diff}"
        );
        assert!(diff.contains("-  password: '*** (before)'"), "{diff}");
        assert!(diff.contains("+  password: '*** (after)'"), "{diff}");
        assert!(diff.contains("   user: '***'"), "{diff}");
        assert_eq!(
            object_diff(
                Some(&secret("czNjcjN0")),
                &secret("czNjcjN0"),
                "s",
                &[],
                false
            ),
            None
        );
    }

    #[test]
    fn decrypted_values_are_masked_in_any_kind_even_with_show_secrets() {
        let config = |token: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
                   "data": {"token": token, "mode": "fast"}})
        };
        let decrypted = ["/data/token".to_string()];
        let diff = object_diff(
            Some(&config("old-plain")),
            &config("new-plain"),
            "configmap/app",
            &decrypted,
            true,
        )
        .unwrap();
        assert!(!diff.contains("plain"), "{diff}");
        assert!(diff.contains("-  token: '*** (before)'"), "{diff}");
        assert!(diff.contains("+  token: '*** (after)'"), "{diff}");
        let created = object_diff(None, &config("new-plain"), "c", &decrypted, false).unwrap();
        assert!(
            created.contains("+  token: '***'") && created.contains("mode: fast"),
            "{created}"
        );
    }
}
