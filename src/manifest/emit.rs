//! The YAML berth prints (`berth render`): block style as kubectl writes it, with every
//! string that a YAML 1.1 or 1.2 parser would read as something else quoted — `off`,
//! `yes`, `y`, `~`, `0755`, `1e3`, `.inf` — so the output goes through `kubectl apply -f -`
//! (whose parser is YAML 1.1's) with its strings still strings. Pure.

use std::fmt::Write;

use serde_json::{Map, Value};

/// One value as a YAML document's body (no `---`), ending in a newline.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => write_map(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => write_seq(&mut out, items, 0),
        v => {
            write_scalar(&mut out, v, 0);
            out.push('\n');
        }
    }
    out
}

/// An object as a YAML document's body (no `---`), ending in a newline.
pub fn object_to_yaml(map: &Map<String, Value>) -> String {
    if map.is_empty() {
        return "{}\n".into();
    }
    let mut out = String::new();
    write_map(&mut out, map, 0);
    out
}

fn write_map(out: &mut String, map: &Map<String, Value>, indent: usize) {
    for (key, value) in map {
        push_indent(out, indent);
        write_string(out, key);
        out.push(':');
        match value {
            Value::Object(inner) if !inner.is_empty() => {
                out.push('\n');
                write_map(out, inner, indent + 2);
            }
            Value::Array(items) if !items.is_empty() => {
                out.push('\n');
                write_seq(out, items, indent);
            }
            v => {
                out.push(' ');
                write_scalar(out, v, indent + 2);
                out.push('\n');
            }
        }
    }
}

fn write_seq(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        let start = out.len();
        match item {
            // The nested block's first line starts at indent + 2: "- " takes the place
            // of its last two spaces.
            Value::Object(inner) if !inner.is_empty() => write_map(out, inner, indent + 2),
            Value::Array(inner) if !inner.is_empty() => write_seq(out, inner, indent + 2),
            _ => {
                push_indent(out, indent + 2);
                write_scalar(out, item, indent + 2);
                out.push('\n');
            }
        }
        out.replace_range(start + indent..start + indent + 2, "- ");
    }
}

/// A scalar (or an empty collection) after `key: ` or `- `; a block scalar's lines at
/// `indent`.
fn write_scalar(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) if literal_block(s) => write_literal(out, s, indent),
        Value::String(s) => write_string(out, s),
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
    }
}

/// A multi-line text reads best as a literal block, when it can be one exactly.
fn literal_block(s: &str) -> bool {
    s.contains('\n')
        && !s.starts_with([' ', '\t', '\n'])
        && s.chars().all(|c| c == '\n' || c == '\t' || printable(c))
}

fn write_literal(out: &mut String, s: &str, indent: usize) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    out.push_str(match trailing {
        0 => "|-",
        1 => "|",
        _ => "|+",
    });
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            push_indent(out, indent);
            out.push_str(line);
        }
    }
    // Kept (`|+`) trailing line breaks beyond the last line's own.
    for _ in 1..trailing {
        out.push('\n');
    }
}

/// A string, plain when no YAML 1.1 or 1.2 parser could read it as anything but that
/// string, else double-quoted.
fn write_string(out: &mut String, s: &str) {
    if plain_is_string(s) {
        out.push_str(s);
        return;
    }
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if printable(c) => out.push(c),
            c => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
        }
    }
    out.push('"');
}

fn printable(c: char) -> bool {
    !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

/// YAML 1.1's booleans and the nulls of both versions (compared in lower case: quoting
/// `yEs` too costs nothing).
const RESERVED: [&str; 9] = ["y", "yes", "n", "no", "true", "false", "on", "off", "null"];

/// Whether `s` written plain reads back as the string `s`. Deliberately narrow: a letter
/// or `/` first (no number, `.inf`, `~`, indicator or merge key starts with one), then
/// letters, digits and `-_./:@+=,()` or inner spaces, never `: ` or ` #`; or a number
/// with a unit (`500m`, `128Mi`, `30s`), which neither version reads as a number.
fn plain_is_string(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let simple = s.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                '-' | '_' | '.' | '/' | ':' | '@' | '+' | '=' | ',' | '(' | ')' | ' '
            )
    }) && !s.contains(": ")
        && !s.ends_with([':', ' '])
        && !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(s));
    if first.is_ascii_alphabetic() || first == '/' {
        return simple;
    }
    number_with_unit(s)
}

/// Digits (with at most one inner `.`) then letters only, the letters not opening a hex
/// number (`0xff`).
fn number_with_unit(s: &str) -> bool {
    let unit_at = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (number, unit) = s.split_at(unit_at);
    let mut parts = number.split('.');
    let digits =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let whole = digits(parts.next());
    let fraction = match parts.next() {
        None => true,
        p => digits(p) && parts.next().is_none(),
    };
    whole
        && fraction
        && !unit.is_empty()
        && unit.bytes().all(|b| b.is_ascii_alphabetic())
        && !unit.starts_with(['x', 'X'])
}

fn push_indent(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Strings a YAML 1.1 or 1.2 parser reads as booleans, nulls or numbers.
    const NOT_STRINGS_WHEN_PLAIN: &[&str] = &[
        "off",
        "Off",
        "OFF",
        "on",
        "ON",
        "yes",
        "Yes",
        "y",
        "Y",
        "no",
        "NO",
        "n",
        "N",
        "true",
        "False",
        "~",
        "null",
        "Null",
        "",
        "0755",
        "0",
        "80",
        "-1",
        "+1",
        "1e3",
        "1E3",
        "1.5",
        ".5",
        ".inf",
        "-.inf",
        ".NaN",
        "0x1F",
        "0o17",
        "0b101",
        "1_000",
        "1:20",
        "2001-12-14",
        "<<",
        "=",
        "- x",
        "a: b",
        "a #b",
        "#c",
        "*ref",
        "&anchor",
        "!tag",
        "@x",
        "`x",
        "%x",
        "[x]",
        "{x}",
        "|x",
        ">x",
        "'x'",
        "\"x\"",
        "x ",
        " x",
        "x:",
    ];

    #[test]
    fn strings_that_would_read_as_something_else_are_quoted() {
        for s in NOT_STRINGS_WHEN_PLAIN {
            assert!(!plain_is_string(s), "{s:?} must be quoted");
            let yaml = to_yaml(&json!({ "k": s, *s: "v" }));
            let back: Value = serde_yaml::from_str(&yaml).unwrap();
            assert_eq!(back, json!({ "k": s, *s: "v" }), "{yaml}");
        }
    }

    #[test]
    fn ordinary_strings_stay_plain() {
        for s in [
            "nginx:1.25",
            "web",
            "app.kubernetes.io/name",
            "TCP",
            "500m",
            "128Mi",
            "30s",
            "1.5Gi",
            "/healthz",
            "hello world",
            "Offline",
            "node",
        ] {
            assert!(plain_is_string(s), "{s:?} needs no quotes");
        }
        assert!(!number_with_unit("0xff"));
    }

    #[test]
    fn objects_lists_and_texts_read_back_the_same() {
        let value = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "labels": {}},
            "data": {
                "script": "#!/bin/sh\necho hi\n",
                "kept": "a\n\n",
                "stripped": "a\n  b",
                "indented": "  a\nb\n",
                "control": "bell\u{7}\u{2028}",
            },
            "spec": {
                "list": [1, 2.5, true, null, "off", [], {}],
                "nested": [[1, 2], [{"a": 1, "b": [3]}]],
                "containers": [{"name": "web", "ports": [{"containerPort": 80}]}],
            },
        });
        let yaml = to_yaml(&value);
        let back: Value = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(back, value, "{yaml}");
        assert!(
            yaml.contains("  script: |\n    #!/bin/sh\n    echo hi\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("  containers:\n  - name: web\n    ports:\n    - containerPort: 80\n"),
            "{yaml}"
        );
    }
}
