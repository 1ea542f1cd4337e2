//! The pod-template hash: SHA-256 over a canonical JSON form of a pod template (object
//! keys sorted, the `pod-template-hash` label removed, optionally the collision count),
//! shown as 10 characters of Kubernetes' safe name alphabet.
//!
//! Kubernetes' own hash is FNV over Go's spew dump of its structs, which cannot be
//! reproduced outside Go; berth never needs it: it hashes the server's (defaulted)
//! template of the Deployment and of each ReplicaSet the same way, and compares those.

use serde_json::Value;

/// The label Kubernetes adds to ReplicaSets and pods.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Kubernetes' alphabet for generated names (`rand.SafeEncodeString`): no vowels, no
/// look-alikes.
const ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";

/// The hash of a pod template (a JSON value, as the API returns it).
pub fn template_hash(template: &Value, collision_count: Option<i32>) -> String {
    let template = canonical(&without_hash_label(template));
    let collision = collision_count.map(|n| (n as u32).to_le_bytes());
    let parts = [
        template.as_bytes(),
        collision.as_ref().map_or(&[][..], |c| &c[..]),
    ];
    crate::digest::sha256_parts(parts)
        .iter()
        .take(10)
        .map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char)
        .collect()
}

/// The template without the `pod-template-hash` label (what a Deployment's template is).
pub fn without_hash_label(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH);
    }
    t
}

/// JSON with every object's keys sorted and no insignificant white space.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = r#"
metadata:
  labels: {app: web, tier: front}
spec:
  containers:
    - name: web
      image: nginx:1.25
      ports: [{containerPort: 80, protocol: TCP}]
"#;

    const A_REORDERED: &str = r#"
spec:
  containers:
    - image: "nginx:1.25"
      ports:
        - protocol: TCP
          containerPort: 80
      name: web
metadata:
  labels:
    tier: front
    app: web
    pod-template-hash: 5d8f7c9b4
"#;

    fn yaml(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn same_template_same_hash_whatever_the_order_formatting_or_hash_label() {
        let h = template_hash(&yaml(A), None);
        assert_eq!(h.len(), 10);
        assert!(h.bytes().all(|c| ALPHABET.contains(&c)), "{h}");
        assert_eq!(template_hash(&yaml(A_REORDERED), None), h);
    }

    #[test]
    fn any_change_or_a_collision_count_changes_it() {
        let h = template_hash(&yaml(A), None);
        assert_ne!(template_hash(&yaml(&A.replace("1.25", "1.26")), None), h);
        assert_ne!(template_hash(&yaml(A), Some(1)), h);
        assert_ne!(
            template_hash(&yaml(A), Some(1)),
            template_hash(&yaml(A), Some(2))
        );
    }

    #[test]
    fn the_hash_is_stable_across_releases() {
        // A golden value: if it changes, every ReplicaSet berth's engine named changes.
        assert_eq!(template_hash(&yaml(A), None), "dlb9d89fjt");
        assert_eq!(
            canonical(&yaml("{b: 1, a: [2, {d: x, c: y}]}")),
            r#"{"a":[2,{"c":"y","d":"x"}],"b":1}"#
        );
    }
}
