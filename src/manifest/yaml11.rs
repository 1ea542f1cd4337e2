//! Values that YAML 1.2 reads as strings and YAML 1.1 as booleans (`yes`, `no`, `on`,
//! `off`, `y`, `n`, in any of their cases). berth decodes YAML 1.2 (serde_yaml) and applies
//! `DEBUG: yes` in a ConfigMap's data as the string `"yes"`; kubectl decodes YAML 1.1
//! (go-yaml) and refuses the same file (a boolean where a string must be). Such a value,
//! written unquoted, gets a warning: quoted, both read the same.

use super::Manifest;

const WORDS: [&str; 16] = [
    "yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n",
    "N",
];

/// The string values of a ConfigMap's `data` or a Secret's `stringData` that YAML 1.1
/// would read as booleans: `(field, key, value)`. Cheap: no file is read.
pub fn candidates(m: &Manifest) -> Vec<(&'static str, &str, &str)> {
    let field = match (m.group(), m.kind()) {
        ("", "ConfigMap") => "data",
        ("", "Secret") => "stringData",
        _ => return Vec::new(),
    };
    let Some(values) = m.object.get(field).and_then(|d| d.as_object()) else {
        return Vec::new();
    };
    values
        .iter()
        .filter_map(|(k, v)| Some((field, k.as_str(), v.as_str()?)))
        .filter(|(_, _, v)| WORDS.contains(v))
        .collect()
}

/// The warnings for `m`, whose document starts at its origin's line of `text` (the file
/// it came from): one per value of [`candidates`] written unquoted there.
pub fn warnings(m: &Manifest, text: &str) -> Vec<String> {
    let document: Vec<&str> = text
        .lines()
        .skip(m.origin.line.saturating_sub(1))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || !l.starts_with("---"))
        .map(|(_, l)| l)
        .collect();
    candidates(m)
        .into_iter()
        .filter(|(_, key, value)| {
            document.iter().any(|line| {
                let line = line.split(" #").next().unwrap_or(line).trim();
                line == format!("{key}: {value}")
            })
        })
        .map(|(field, key, value)| {
            format!(
                "{}: {} {field}.{key}: {value} unquoted is the string \"{value}\" here but a boolean to kubectl (YAML 1.1), which refuses it: write \"{value}\"",
                m.origin,
                m.key().kubectl()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Origin;

    fn config_map(data: serde_json::Value) -> Manifest {
        Manifest {
            decrypted: Vec::new(),
            object: serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "app"}, "data": data
            }))
            .unwrap(),
            origin: Origin::file("app.yaml"),
        }
    }

    #[test]
    fn an_unquoted_yaml_1_1_boolean_is_warned_about_and_a_quoted_one_is_not() {
        let m = config_map(serde_json::json!({"DEBUG": "yes", "LEVEL": "on", "MODE": "fast"}));
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  DEBUG: yes  # verbose\n  LEVEL: \"on\"\n  MODE: fast\n";
        let said = warnings(&m, text);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("data.DEBUG: yes unquoted"), "{}", said[0]);
        assert!(said[0].contains("write \"yes\""), "{}", said[0]);
    }

    #[test]
    fn only_config_map_and_secret_strings_are_candidates() {
        assert!(candidates(&config_map(serde_json::json!({"A": "maybe"}))).is_empty());
        let mut m = config_map(serde_json::json!({"A": "no"}));
        assert_eq!(candidates(&m), [("data", "A", "no")]);
        m.object.insert("kind".into(), "Other".into());
        assert!(candidates(&m).is_empty());
    }
}
