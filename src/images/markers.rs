//! The fields an image policy owns, as Flux's setters mark them: a YAML value followed on
//! its line by `# {"$imagepolicy": "NAME"}` (the whole reference), `"NAME:tag"` (the tag
//! alone) or `"NAME:name"` (the image's name alone) — in a manifest, a kustomization's
//! `images:` entry or a chart's values file alike. [`rewrite`] changes those values alone:
//! every other byte of the file (comments, order, quoting) stays as it was.

use std::ops::Range;

/// Which part of an image reference a marked value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `registry.example.com/team/shop:1.4.1`.
    Whole,
    /// `1.4.1`.
    Tag,
    /// `registry.example.com/team/shop`.
    Name,
}

/// A marked value in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker<'t> {
    /// The policy it names.
    pub policy: &'t str,
    pub form: Form,
    /// Its line, from 1.
    pub line: usize,
    /// The value as written, without its quotes.
    pub value: &'t str,
    /// Where the value lies in the file (inside its quotes).
    span: Range<usize>,
}

/// A value changed by [`rewrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub policy: String,
    pub line: usize,
    pub old: String,
    pub new: String,
}

const SETTER: &str = "{\"$imagepolicy\":";

/// The marked values of `text`, in order. A marker comment on a line without a value
/// before it (a comment line, a block scalar) marks nothing.
pub fn markers(text: &str) -> Vec<Marker<'_>> {
    let mut found = Vec::new();
    let mut start = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        if let Some(marker) = marker(line, start, index + 1) {
            found.push(marker);
        }
        start += line.len();
    }
    found
}

/// The marker on `line` (which starts at byte `start` of the file), if any.
fn marker(line: &str, start: usize, number: usize) -> Option<Marker<'_>> {
    let hash = line.find('#')?;
    let comment = line[hash + 1..].trim();
    let named = comment.strip_prefix(SETTER)?.trim_start();
    let named = named.strip_prefix('"')?;
    let (setter, rest) = named.split_once('"')?;
    if rest.trim() != "}" {
        return None;
    }
    let (policy, form) = match setter.rsplit_once(':') {
        Some((policy, "tag")) => (policy, Form::Tag),
        Some((policy, "name")) => (policy, Form::Name),
        _ => (setter, Form::Whole),
    };
    let before = &line[..hash];
    // The value: after the mapping's `key: ` or the sequence's `- `.
    let value_at = match before.rfind(": ") {
        Some(colon) => colon + 2,
        None => {
            let dash = before.trim_start().strip_prefix("- ")?;
            before.len() - dash.len()
        }
    };
    let raw = &before[value_at..];
    let lead = raw.len() - raw.trim_start().len();
    let raw = raw.trim();
    let quoted = raw.len() >= 2
        && ((raw.starts_with('"') && raw.ends_with('"'))
            || (raw.starts_with('\'') && raw.ends_with('\'')));
    let (value, offset) = if quoted {
        (&raw[1..raw.len() - 1], value_at + lead + 1)
    } else {
        (raw, value_at + lead)
    };
    if value.is_empty() || value.contains(['"', '\'', '#', ' ']) || policy.is_empty() {
        return None;
    }
    Some(Marker {
        policy,
        form,
        line: number,
        value,
        span: start + offset..start + offset + value.len(),
    })
}

/// `text` with each marked value `new` gives a new value for replaced by it, and the
/// edits made (none when every value is already what `new` says).
pub fn rewrite(text: &str, mut new: impl FnMut(&Marker) -> Option<String>) -> (String, Vec<Edit>) {
    let mut out = String::with_capacity(text.len());
    let mut edits = Vec::new();
    let mut copied = 0;
    for marker in markers(text) {
        let Some(value) = new(&marker).filter(|v| v != marker.value) else {
            continue;
        };
        out.push_str(&text[copied..marker.span.start]);
        out.push_str(&value);
        copied = marker.span.end;
        edits.push(Edit {
            policy: marker.policy.to_string(),
            line: marker.line,
            old: marker.value.to_string(),
            new: value,
        });
    }
    out.push_str(&text[copied..]);
    (out, edits)
}

/// The value of a `form` field for `image` at `tag`.
pub fn value(form: Form, image: &str, tag: &str) -> String {
    match form {
        Form::Whole => format!("{image}:{tag}"),
        Form::Tag => tag.to_string(),
        Form::Name => image.to_string(),
    }
}

/// The tag a marked value holds, when it holds one: the tag form's value, or the whole
/// reference's part after its last `:` (past the last `/`, so a registry's port is not
/// taken for a tag).
pub fn tag_of(marker: &Marker) -> Option<String> {
    match marker.form {
        Form::Tag => Some(marker.value.to_string()),
        Form::Name => None,
        Form::Whole => split_image(marker.value).map(|(_, tag)| tag.to_string()),
    }
}

/// An image reference's repository and tag (`None` without a tag; a digest left out).
pub fn split_image(image: &str) -> Option<(&str, &str)> {
    let name = image.split('@').next()?;
    let last = name.rfind('/').map_or(0, |slash| slash + 1);
    let colon = name[last..].find(':')? + last;
    Some((&name[..colon], &name[colon + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"# the shop
apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: shop
          image: registry.example.com:5000/team/shop:1.4.1 # {"$imagepolicy": "shop"}
        - name: side
          image: "registry.example.com/team/side:0.9"   # {"$imagepolicy": "side"}
---
images:
  - name: registry.example.com/team/shop # {"$imagepolicy": "shop:name"}
    newTag: '1.4.1' # {"$imagepolicy": "shop:tag"}
# image: not/a:value # {"$imagepolicy": "shop"}
tag: 1.4.1 #{"$imagepolicy": "shop:tag"} trailing
"#;

    #[test]
    fn every_setter_form_is_found_and_nothing_else() {
        let found: Vec<(&str, Form, usize, &str)> = markers(FILE)
            .iter()
            .map(|m| (m.policy, m.form, m.line, m.value))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "shop",
                    Form::Whole,
                    9,
                    "registry.example.com:5000/team/shop:1.4.1"
                ),
                (
                    "side",
                    Form::Whole,
                    11,
                    "registry.example.com/team/side:0.9"
                ),
                ("shop", Form::Name, 14, "registry.example.com/team/shop"),
                ("shop", Form::Tag, 15, "1.4.1"),
            ]
        );
        let tags: Vec<Option<String>> = markers(FILE).iter().map(tag_of).collect();
        assert_eq!(
            tags,
            [
                Some("1.4.1".into()),
                Some("0.9".into()),
                None,
                Some("1.4.1".into())
            ]
        );
    }

    #[test]
    fn a_rewrite_changes_the_marked_values_and_keeps_every_other_byte() {
        let image = "registry.example.com:5000/team/shop";
        let (out, edits) = rewrite(FILE, |m| {
            (m.policy == "shop").then(|| value(m.form, image, "1.4.2"))
        });
        let expected = FILE
            .replace("shop:1.4.1 #", "shop:1.4.2 #")
            .replace(
                "name: registry.example.com/team/shop #",
                &format!("name: {image} #"),
            )
            .replace("newTag: '1.4.1'", "newTag: '1.4.2'");
        assert_eq!(out, expected);
        let lines: Vec<usize> = edits.iter().map(|e| e.line).collect();
        assert_eq!(lines, [9, 14, 15]);
        assert_eq!(edits[2].old, "1.4.1");
        assert_eq!(edits[2].new, "1.4.2");
        // Already there: nothing to edit, the file as it was.
        let (same, none) = rewrite(&out, |m| {
            (m.policy == "shop").then(|| value(m.form, image, "1.4.2"))
        });
        assert_eq!((same.as_str(), none.len()), (out.as_str(), 0));
    }
}
