//! Tests of the stream visitor: YAML and JSON streams, errors with file and line, the
//! bounds on what decoding may cost.
use super::cache::{blob_id, cached};
use super::pieces::{cuts, PIECES, PIECES_FROM};
use super::*;
use crate::manifest::visitor::{collect, ContinueOnError};

fn decode(text: &[u8]) -> Result<Vec<Manifest>, ManifestError> {
    collect(&ContinueOnError(Stream {
        path: "app.yaml".into(),
        bytes: text.to_vec(),
        budget: &Budget::new(128 << 20),
    }))
}

fn error(text: &[u8]) -> String {
    decode(text).expect_err("should fail").to_string()
}

#[test]
fn a_file_is_decoded_once_per_blob_and_errors_are_not_kept() {
    // `printf 'hello\n' | git hash-object --stdin`
    keep_decoded();
    let id = crate::digest::hex(&blob_id(b"hello\n"));
    assert_eq!(id, "ce013625030ba8dba906f756967f9e9ca394464a");
    let text = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cached-once}\n";
    let first = decode(text).unwrap();
    let key = ("app.yaml".to_string(), blob_id(text));
    assert!(cached(&key).is_some(), "kept after the first decode");
    assert_eq!(
        decode(text).unwrap(),
        first,
        "the same documents from the cache"
    );
    let broken = b"apiVersion: v1\nkind: [unclosed\n";
    assert!(decode(broken).is_err());
    assert!(cached(&("app.yaml".to_string(), blob_id(broken))).is_none());
    assert!(decode(broken).is_err(), "and reported again");
}

const TWO_DOCS: &str = r#"# leading comment
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: one
---
---
null
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: two
"#;

#[test]
fn multi_document_yaml_skips_empty_and_null_and_knows_lines() {
    let got = decode(TWO_DOCS.as_bytes()).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].name(), got[0].origin.line, got[0].origin.document),
        ("one", 3, 1)
    );
    assert_eq!(
        (got[1].name(), got[1].origin.line, got[1].origin.document),
        ("two", 11, 4)
    );
}

#[test]
fn json_stream() {
    let text = b"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"}}\n\n{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"b\"}}";
    let got = decode(text).unwrap();
    assert_eq!(got[1].kind(), "Secret");
    assert_eq!(got[1].origin.line, 3);
}

#[test]
fn invalid_yaml_names_file_and_line() {
    let e = error(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: [a\n");
    assert!(e.starts_with("app.yaml:"), "{e}");
    assert!(e.contains("invalid YAML"), "{e}");
    let e = error(b"apiVersion: v1\nkind: ConfigMap\n  bad: indent\n");
    assert!(
        e.starts_with("app.yaml:3 (document 1): invalid YAML"),
        "{e}"
    );
}

#[test]
fn invalid_json_names_line() {
    let e = error(b"{\"apiVersion\": \"v1\",\n \"kind\": }");
    assert!(
        e.starts_with("app.yaml:2 (document 1): invalid JSON"),
        "{e}"
    );
}

#[test]
fn missing_api_version_and_kind() {
    let e = error(b"kind: ConfigMap\nmetadata: {name: a}\n");
    assert_eq!(e, "app.yaml:1 (document 1): missing apiVersion");
    let e = error(b"apiVersion: v1\nmetadata: {name: a}\n");
    assert_eq!(e, "app.yaml:1 (document 1): missing kind");
}

#[test]
fn a_scalar_document_is_not_a_manifest() {
    let e = error(b"just a string\n");
    assert!(
        e.contains("must be a mapping") && e.contains("found a string"),
        "{e}"
    );
}

#[test]
fn non_utf8_names_line_and_byte() {
    let e = error(b"apiVersion: v1\nkind: \xff\xfe\xfd\n");
    assert_eq!(
        e,
        "app.yaml:2: not valid UTF-8 (byte 21): manifests must be UTF-8 text"
    );
}

#[test]
fn utf16_with_bom_is_read() {
    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: u16}\n";
    let mut bytes = vec![0xFF, 0xFE];
    bytes.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    assert_eq!(decode(&bytes).unwrap()[0].name(), "u16");
}

#[test]
fn billion_laughs_is_refused_in_bounded_memory() {
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let mut prev = 'a';
    for name in 'b'..='i' {
        bomb.push_str(&format!(
            "{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
        prev = name;
    }
    let e = error(bomb.as_bytes());
    assert!(
        e.contains("expands past 8388608 bytes once decoded") || e.contains("repetition limit"),
        "{e}"
    );
}

/// One anchored list of 1000 items referenced 5000 times: 8 KB of YAML, millions of
/// nodes once expanded. serde_yaml's own repetition limit lets it through.
fn fan_out(references: usize) -> String {
    let items = vec!["x"; 1000].join(", ");
    let aliases = vec!["*a"; references].join(", ");
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: fan}}\nanchor: &a [{items}]\nrefs: [{aliases}]\n")
}

#[test]
fn alias_fan_out_is_refused_within_the_document_budget() {
    let text = fan_out(5000);
    assert!(text.len() < 32 << 10, "{}", text.len());
    let start = std::time::Instant::now();
    let e = error(text.as_bytes());
    assert_eq!(
        e,
        "app.yaml:4 (document 1): the document expands past 8388608 bytes once decoded (its YAML aliases resolved); refused"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    // A few references are fine.
    assert_eq!(decode(fan_out(3).as_bytes()).unwrap().len(), 1);
}

#[test]
fn the_render_budget_grows_with_what_is_read_and_counts_the_cache() {
    let budget = Budget::new(u64::MAX);
    let file = |name: &str, text: &str| Stream {
        path: name.into(),
        bytes: text.as_bytes().to_vec(),
        budget: &budget,
    };
    let text = fan_out(400); // about 5 KB decoding to 6.8 MB: under one document's bound
    collect(&file("a.yaml", &text)).unwrap();
    assert!(budget.used() > 6_000_000, "{}", budget.used());
    // The same bytes again come from the cache, and are charged all the same: twice
    // 6.8 MB is more than 8 MiB and four units for each byte read.
    let e = collect(&file("a.yaml", &text)).unwrap_err();
    let limit = MAX_DOCUMENT_SIZE + 2 * 4 * text.len() as u64;
    assert_eq!(
        e.to_string(),
        format!("a.yaml:1 (document 1): the app's manifests expand past {limit} bytes once decoded (4 bytes for each byte read, plus 8 MiB); reading stopped here")
    );
}

#[test]
fn deep_flow_nesting_is_refused_in_linear_time() {
    for depth in [50_000, 200_000] {
        let yaml = format!(
            "apiVersion: v1\nkind: ConfigMap\ndata: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let start = std::time::Instant::now();
        let e = error(yaml.as_bytes());
        assert_eq!(
            e,
            "app.yaml:3: flow collections ([ or {) nested deeper than 128; refused unparsed"
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(1),
            "{depth}"
        );
    }
}

#[test]
fn duplicate_keys_are_refused_naming_the_key_and_both_lines() {
    let e = error(
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: x\n  name: b\n",
    );
    assert_eq!(
        e,
        "app.yaml:4 (document 1): key \"name\" appears twice in one mapping (lines 4 and 6)"
    );
    let e = error(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nkind: Secret\n");
    assert!(
        e.contains("key \"kind\" appears twice in one mapping (lines 2 and 4)"),
        "{e}"
    );
    let e = error(b"{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\",\n \"kind\": \"Secret\"}");
    assert!(
        e.contains("key \"kind\" appears twice in one mapping (line 2)"),
        "{e}"
    );
}

#[test]
fn deep_json_nesting_is_refused() {
    let json = format!("{{\"a\": {}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    let e = error(json.as_bytes());
    assert!(
        e.contains("invalid JSON") && e.contains("recursion limit"),
        "{e}"
    );
}

#[test]
fn document_lines_follow_markers_and_content() {
    assert_eq!(document_lines("a: 1\n---\nb: 2\n"), vec![1, 3]);
    assert_eq!(document_lines("# c\n---\n\n---\nb: 2\n"), vec![2, 5]);
    assert_eq!(document_lines("--- {a: 1}\n...\nb: 1\n"), vec![1, 3]);
}

/// A YAML stream of `n` ConfigMaps past [`PIECES_FROM`], in the shapes a cut must
/// not change: no marker before the first document, markers with comments, empty and
/// `null` documents, block scalars holding `---` lines, quoted text across lines.
fn long_stream(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        match i % 4 {
            0 if i > 0 => text.push_str("--- # the next one\n"),
            1 => text.push_str("---\n---\nnull\n---\n\n# a comment\n"),
            _ if i > 0 => text.push_str("---\n"),
            _ => {}
        }
        text.push_str(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  script: |\n    echo start\n    ---\n    echo {i}\n  quoted: \"a\n    b\"\n"
        ));
    }
    assert!(text.len() > PIECES_FROM);
    text
}

/// A render's budget of at most `cap` once `text` is read.
fn budget_for(text: &str, cap: u64) -> Budget {
    let budget = Budget::new(cap);
    budget.read(text.len());
    budget
}

/// A stream of `app.yaml` whose text the test passes in.
fn stream_in(budget: &Budget) -> Stream<'_> {
    Stream {
        path: "app.yaml".into(),
        bytes: Vec::new(),
        budget,
    }
}

/// A decoded item as the tests compare it: the object, or the error's message.
#[derive(Debug, PartialEq)]
enum Decoded {
    Object(Manifest),
    Refused(String),
}

impl Decoded {
    fn of(item: Result<Manifest, ManifestError>) -> Self {
        item.map_or_else(|e| Decoded::Refused(e.to_string()), Decoded::Object)
    }

    fn refused(self) -> Option<String> {
        match self {
            Decoded::Refused(message) => Some(message),
            Decoded::Object(_) => None,
        }
    }
}

/// The items of `text` decoded in one pass, and what they cost.
fn in_one_pass(text: &str) -> (Vec<Decoded>, u64) {
    let budget = budget_for(text, 128 << 20);
    let mut items = Vec::new();
    let _ = stream_in(&budget).in_one_pass(text, &document_lines(text), &mut |item| {
        items.push(Decoded::of(item));
        Ok(())
    });
    (items, budget.used())
}

/// The items of `text` as berth decodes it.
fn items(text: &str) -> Vec<Decoded> {
    let mut items = Vec::new();
    let stream = Stream {
        path: "app.yaml".into(),
        bytes: text.as_bytes().to_vec(),
        budget: &Budget::new(128 << 20),
    };
    let _ = stream.decode(&mut |item| {
        items.push(Decoded::of(item));
        Ok(())
    });
    items
}

#[test]
fn a_long_stream_decoded_in_pieces_gives_what_one_pass_gives() {
    let text = long_stream(200);
    let (expected, cost) = in_one_pass(&text);
    let expected: Vec<Manifest> = expected
        .into_iter()
        .map(|d| match d {
            Decoded::Object(m) => m,
            Decoded::Refused(e) => panic!("{e}"),
        })
        .collect();
    let budget = budget_for(&text, 128 << 20);
    assert!(cuts(&text).unwrap().len() == PIECES);
    let pieces = stream_in(&budget)
        .in_pieces(&text)
        .expect("decoded in pieces");
    assert_eq!(pieces, expected, "the same objects, documents and lines");
    assert_eq!(budget.used(), cost, "and the same cost to the render");
    let last = &pieces[199];
    assert_eq!((last.name(), last.origin.document), ("cm-199", 300));
}

#[test]
fn a_long_stream_with_an_error_in_a_piece_says_what_one_pass_says() {
    let text = long_stream(200);
    let at = cuts(&text).unwrap()[4];
    let broken = [
        // In the last piece: the objects before it, then the error.
        format!("{text}---\napiVersion: v1\nkind: [unclosed\n"),
        // A quoted scalar across a cut.
        format!("{}other: \"open\n{}", &text[..at], &text[at..]),
        // A document that is not an object.
        format!("{}--- just text\n{}", &text[..at], &text[at..]),
    ];
    for text in &broken {
        let got = items(text);
        assert_eq!(got, in_one_pass(text).0);
        assert!(got.iter().any(|d| matches!(d, Decoded::Refused(_))));
    }
    // The first error, as one pass meets it.
    let e = items(&broken[1])
        .into_iter()
        .find_map(Decoded::refused)
        .unwrap();
    assert!(e.contains("found unexpected document indicator"), "{e}");
    // Past a piece's share (aliases that decode to 6.8 MB, where the stream may decode
    // to 8.6 MB): decoded again in one pass, within what the whole stream may use.
    let text = format!("{text}---\n{}", fan_out(400));
    let budget = budget_for(&text, u64::MAX);
    assert!(stream_in(&budget).in_pieces(&text).is_none());
    assert_eq!(budget.used(), 0, "nothing charged for the pieces");
    let (expected, cost) = in_one_pass(&text);
    assert!(cost > 6_000_000 && expected.iter().all(|d| matches!(d, Decoded::Object(_))));
    assert_eq!(items(&text), expected);
}

#[test]
fn a_stream_is_cut_at_document_markers_from_each_eighth_on() {
    let text = format!("{}\n---x: 1\n--- # c\nb: 1\n", "a".repeat(80));
    assert_eq!(cuts(&text), Some(vec![0, text.find("--- # c").unwrap()]));
    assert_eq!(cuts("a: 1\nb: 2\n"), None, "no marker, no cut");
    let directive = format!("{text}%YAML 1.1\n---\nc: 1\n");
    assert_eq!(cuts(&directive), None, "a directive ends the cuts");
}
