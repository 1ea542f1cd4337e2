//! The stream visitor: one file's bytes → its YAML or JSON documents → [`Manifest`]s.
//!
//! As kubectl's `StreamVisitor`: a stream whose first non-space character is `{` is read
//! as concatenated JSON values, anything else as multi-document YAML; empty and `null`
//! documents are skipped. What a file may cost is bounded before and while it is decoded
//! ([`super::bounds`]): flow nesting is measured in one pass before libyaml sees the text,
//! every decoded node is charged to the document's and the render's [`Budget`] (which is
//! what stops alias fan-out and "billion laughs"), and a mapping that repeats a key is
//! refused. serde's nesting limit (128) stays on for block nesting.
//!
//! A file decoded once is not decoded again while its bytes stay the same: the documents
//! are kept (as compact JSON), keyed by the file's path and git blob id, in a cache
//! bounded by the bytes it holds ([`CACHE_BUDGET`]; the least recently used half goes
//! first). A commit that changes a few files decodes only those; their decoded size is
//! still charged to the render.
//!
//! In files of their own:
//! - `cache.rs`: the documents kept between renders;
//! - `pieces.rs`: a long YAML stream decoded by two threads;
//! - `text.rs`: the bytes as text, and where each YAML document starts.

use serde_json::{Map, Value};

use super::bounds::{self, Budget, Exceeded, MAX_DOCUMENT_SIZE, MAX_FLOW_DEPTH};
use super::error::ManifestError;
use super::object::{Manifest, Origin};
use super::visitor::{json_type, Flow, Item, Visitor};
use text::{decode_text, document_lines};

pub use cache::{keep_decoded, CACHE_BUDGET};

mod cache;
mod pieces;
mod text;

/// The documents of one file (or stdin).
pub struct Stream<'b> {
    /// The path shown in origins and errors.
    pub path: String,
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// What the render may still decode.
    pub budget: &'b Budget,
}

impl Visitor for Stream<'_> {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        self.budget.read(self.bytes.len());
        if !cache::keeping() {
            return self.decode(f);
        }
        let key = (self.path.clone(), cache::blob_id(&self.bytes));
        if let Some((documents, size)) = cache::cached(&key) {
            if self.budget.charge_decoded(size).is_err() {
                return Err(self.render_exceeded(documents.first().map(|m| m.origin.clone())));
            }
            for m in documents {
                f(Ok(m))?;
            }
            return Ok(());
        }
        let (mut documents, mut clean) = (Vec::new(), true);
        let used = self.budget.used();
        let flow = self.decode(&mut |item| {
            match item.as_ref().map(cache::Kept::of) {
                Ok(Some(kept)) => documents.push(kept),
                _ => clean = false,
            }
            f(item)
        });
        if flow.is_ok() && clean {
            let size = self.budget.used() - used;
            cache::keep(key, documents, size);
        }
        flow
    }
}

impl Stream<'_> {
    /// Decodes the bytes, every time.
    fn decode(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let text = match decode_text(&self.path, &self.bytes) {
            Ok(text) => text,
            Err(e) => return f(Err(e)),
        };
        if text.trim_start().starts_with('{') {
            self.visit_json(&text, f)
        } else {
            self.visit_yaml(&text, f)
        }
    }

    fn visit_yaml(&self, text: &str, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        if let Some(objects) = self.in_pieces(text) {
            return objects.into_iter().try_for_each(|m| f(Ok(m)));
        }
        if let Some(line) = bounds::flow_depth(text, MAX_FLOW_DEPTH) {
            return f(Err(ManifestError::TooDeep {
                path: self.path.clone(),
                line,
                limit: MAX_FLOW_DEPTH,
            }));
        }
        self.in_one_pass(text, &document_lines(text), f)
    }

    /// The documents of a YAML stream, in one pass; `starts` are their lines.
    fn in_one_pass(&self, text: &str, starts: &[usize], f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let mut origin = self.origin(i + 1, starts.get(i).copied().unwrap_or(1));
            match self.budget.decode(doc) {
                Ok(value) => f_document(origin, value, f)?,
                Err(e) => {
                    let at = e.location().map(|l| (l.line(), l.column()));
                    if let Some((line, _)) = at {
                        origin.line = line;
                    }
                    let duplicate_lines = |key: &str| {
                        at.map(|(line, column)| bounds::key_lines(text, line, column, key))
                            .unwrap_or_default()
                    };
                    // libyaml cannot resume after an error: the rest of the file is lost.
                    return self.refused(origin, "YAML", &e.to_string(), duplicate_lines, f);
                }
            }
        }
        Ok(())
    }

    /// Concatenated JSON values: each is found (syntax and nesting checked) as raw text
    /// first, then decoded within the budget.
    fn visit_json(&self, text: &str, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let mut stream =
            serde_json::Deserializer::from_str(text).into_iter::<&serde_json::value::RawValue>();
        for document in 1.. {
            let offset = stream.byte_offset();
            let start = offset + (text[offset..].len() - text[offset..].trim_start().len());
            let first_line = text[..start].matches('\n').count() + 1;
            let mut origin = self.origin(document, first_line);
            let (e, line) = match stream.next() {
                None => break,
                Some(Ok(raw)) => {
                    let mut de = serde_json::Deserializer::from_str(raw.get());
                    match self.budget.decode(&mut de) {
                        Ok(value) => {
                            f_document(origin, value, f)?;
                            continue;
                        }
                        Err(e) => {
                            let line = first_line + e.line() - 1;
                            (e, line)
                        }
                    }
                }
                Some(Err(e)) => {
                    let line = e.line();
                    (e, line)
                }
            };
            origin.line = line;
            return self.refused(origin, "JSON", &e.to_string(), |_| vec![line], f);
        }
        Ok(())
    }

    fn origin(&self, document: usize, line: usize) -> Origin {
        Origin {
            path: self.path.clone(),
            document,
            line,
            item: None,
        }
    }

    /// The error for a document the decoder stopped at: the bound it hit, or the syntax
    /// error. Past the render's budget the walk stops, whatever the error policy.
    fn refused(
        &self,
        origin: Origin,
        format: &'static str,
        message: &str,
        duplicate_lines: impl Fn(&str) -> Vec<usize>,
        f: &mut dyn FnMut(Item) -> Flow,
    ) -> Flow {
        let error = match self.budget.exceeded() {
            Some(Exceeded::DuplicateKey(key)) => ManifestError::DuplicateKey {
                lines: duplicate_lines(&key),
                origin,
                key,
            },
            Some(Exceeded::Document) => ManifestError::DocumentTooLarge {
                origin,
                limit: MAX_DOCUMENT_SIZE,
            },
            Some(Exceeded::Render) => return Err(self.render_exceeded(Some(origin))),
            None => ManifestError::Syntax {
                origin,
                format,
                message: strip_location(message),
            },
        };
        f(Err(error))
    }

    fn render_exceeded(&self, origin: Option<Origin>) -> ManifestError {
        ManifestError::DecodedTooLarge {
            origin: origin.unwrap_or_else(|| self.origin(1, 1)),
            limit: self.budget.limit(),
        }
    }
}
/// Checks one decoded document and hands it on; `null` documents are skipped.
fn f_document(origin: Origin, value: Value, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
    let object = match value {
        Value::Null => return Ok(()),
        Value::Object(object) => object,
        other => {
            return f(Err(ManifestError::NotAnObject {
                origin,
                found: json_type(&other),
            }))
        }
    };
    if let Some(field) = missing_field(&object) {
        return f(Err(ManifestError::MissingField {
            what: String::new(),
            origin,
            field,
        }));
    }
    f(Ok(Manifest {
        object,
        origin,
        decrypted: Vec::new(),
    }))
}

/// The first of `apiVersion` and `kind` that the object lacks (or holds empty).
fn missing_field(object: &Map<String, Value>) -> Option<&'static str> {
    ["apiVersion", "kind"].into_iter().find(|field| {
        object
            .get(*field)
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    })
}

/// Drops the parser's " at line L column C" suffix: the origin already says where.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests;
