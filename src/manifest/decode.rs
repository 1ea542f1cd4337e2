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
//! are kept, keyed by the file's path and git blob id, in a cache bounded by the bytes of
//! the files it holds ([`CACHE_BUDGET`]; the least recently used half goes first). A
//! commit that changes a few files decodes only those; their decoded size is still
//! charged to the render.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::bounds::{self, Budget, Exceeded, MAX_DOCUMENT_SIZE, MAX_FLOW_DEPTH};
use super::error::ManifestError;
use super::object::{Manifest, Origin};
use super::visitor::{json_type, Flow, Item, Visitor};

/// The documents of one file (or stdin).
pub struct Stream<'b> {
    /// The path shown in origins and errors.
    pub path: String,
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// What the render may still decode.
    pub budget: &'b Budget,
}

/// Whether decoded files are kept for the next render (off for a process that renders
/// once: `berth render`).
static KEEP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Keeps no decoded file from now on: this process renders once, and hashing and copying
/// what it decodes would be work for nothing.
pub fn keep_nothing() {
    KEEP.store(false, std::sync::atomic::Ordering::Relaxed);
}

impl Visitor for Stream<'_> {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        self.budget.read(self.bytes.len());
        if !KEEP.load(std::sync::atomic::Ordering::Relaxed) {
            return self.decode(f);
        }
        let key = (self.path.clone(), blob_id(&self.bytes));
        if let Some((documents, size)) = cached(&key) {
            if self.budget.charge_decoded(size).is_err() {
                return Err(self.render_exceeded(documents.first().map(|m| m.origin.clone())));
            }
            for m in documents.iter() {
                f(Ok(m.clone()))?;
            }
            return Ok(());
        }
        let (mut documents, mut clean) = (Vec::new(), true);
        let used = self.budget.used();
        let flow = self.decode(&mut |item| {
            match &item {
                Ok(m) => documents.push(m.clone()),
                Err(_) => clean = false,
            }
            f(item)
        });
        if flow.is_ok() && clean {
            let size = self.budget.used() - used;
            keep(key, documents, self.bytes.len(), size);
        }
        flow
    }
}

/// Source bytes whose documents the cache keeps (about 4–5 times as much memory).
pub const CACHE_BUDGET: usize = 8 << 20;

/// A file's path and git blob id.
type Key = (String, [u8; 20]);

/// A file's documents, the bytes of the file and their decoded size ([`Budget`] units).
type Entry = (Arc<Vec<Manifest>>, usize, u64);

/// Two generations: hits move to the current one; when it holds more than the budget it
/// becomes the previous one, and the old previous one is dropped.
#[derive(Default)]
struct Generations {
    current: HashMap<Key, Entry>,
    previous: HashMap<Key, Entry>,
    bytes: usize,
}

static DECODED: Mutex<Option<Generations>> = Mutex::new(None);

impl Generations {
    fn insert(&mut self, key: Key, entry: Entry) {
        self.bytes += entry.1;
        self.current.insert(key, entry);
        if self.bytes > CACHE_BUDGET {
            self.previous = std::mem::take(&mut self.current);
            self.bytes = 0;
        }
    }
}

/// A file's documents and their decoded size, when kept.
fn cached(key: &Key) -> Option<(Arc<Vec<Manifest>>, u64)> {
    let mut lock = DECODED.lock().ok()?;
    let cache = lock.get_or_insert_with(Generations::default);
    if let Some((documents, _, size)) = cache.current.get(key) {
        return Some((documents.clone(), *size));
    }
    let entry = cache.previous.remove(key)?;
    let found = (entry.0.clone(), entry.2);
    cache.insert(key.clone(), entry);
    Some(found)
}

fn keep(key: Key, documents: Vec<Manifest>, bytes: usize, size: u64) {
    if let Ok(mut lock) = DECODED.lock() {
        let cache = lock.get_or_insert_with(Generations::default);
        cache.insert(key, (Arc::new(documents), bytes, size));
    }
}

/// Git's blob id of the bytes: SHA-1 of `blob <length>\0<bytes>`.
fn blob_id(bytes: &[u8]) -> [u8; 20] {
    use sha1::{Digest, Sha1};
    let mut hash = Sha1::new();
    hash.update(format!("blob {}\0", bytes.len()).as_bytes());
    hash.update(bytes);
    hash.finalize().into()
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

    /// The objects of a long YAML stream, decoded by this thread and another at once:
    /// cut at `---` lines into [`PIECES`] pieces ([`cuts`]) that the two take in turn, each
    /// decoded within a share of what the render may still decode. `None` — the stream
    /// is then decoded in one pass, for what that pass says — when the stream is short or
    /// holds directives, or when a piece holds anything but objects and empty documents
    /// (an error, a bound reached).
    fn in_pieces(&self, text: &str) -> Option<Vec<Manifest>> {
        if text.len() < PIECES_FROM {
            return None;
        }
        let mut bounds = cuts(text)?;
        bounds.push(text.len());
        let pieces: Vec<&str> = bounds.windows(2).map(|w| &text[w[0]..w[1]]).collect();
        // What is left, shared by the pieces' lengths: together they may decode no more
        // than the stream alone could.
        let left = self.budget.limit().saturating_sub(self.budget.used());
        let share =
            |piece: &str| (u128::from(left) * piece.len() as u128 / text.len() as u128) as u64;
        let (next, failed) = (AtomicUsize::new(0), AtomicBool::new(false));
        let take = || {
            let mut done = Vec::new();
            while !failed.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(piece) = pieces.get(i) else { break };
                let decoded = Piece::decode(piece, share(piece));
                failed.fetch_or(decoded.is_none(), Ordering::Relaxed);
                done.push((i, decoded));
            }
            done
        };
        let (mine, theirs) = std::thread::scope(|s| {
            let other = std::thread::Builder::new()
                .name("berth-decode".into())
                .spawn_scoped(s, take)
                .ok()?;
            let mine = take();
            Some((mine, other.join().ok()?))
        })?;
        let mut decoded: Vec<Option<Piece>> = pieces.iter().map(|_| None).collect();
        for (i, piece) in mine.into_iter().chain(theirs) {
            decoded[i] = Some(piece?);
        }
        let decoded: Vec<Piece> = decoded.into_iter().collect::<Option<_>>()?;
        self.budget
            .charge_decoded(decoded.iter().map(|p| p.used).sum())
            .ok()?;
        // Each piece's documents and lines follow those of the pieces before it.
        let (mut objects, mut starts) = (Vec::new(), Vec::new());
        let (mut documents, mut lines) = (0, 0);
        for piece in decoded {
            objects.extend(piece.objects.into_iter().map(|(i, o)| (documents + i, o)));
            starts.extend(piece.starts.iter().map(|line| line + lines));
            documents += piece.documents;
            lines += piece.lines;
        }
        let objects = objects.into_iter().map(|(i, object)| Manifest {
            object,
            origin: self.origin(i + 1, starts.get(i).copied().unwrap_or(1)),
            decrypted: Vec::new(),
        });
        Some(objects.collect())
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

/// UTF-8 (a byte-order mark is dropped), or UTF-16 when it starts with a byte-order mark.
fn decode_text<'a>(path: &str, bytes: &'a [u8]) -> Result<Cow<'a, str>, ManifestError> {
    let utf16 = |units: Vec<u16>| {
        String::from_utf16(&units).map_err(|_| ManifestError::NotUtf8 {
            path: path.to_string(),
            line: 1,
            byte: 0,
        })
    };
    let pairs = |b: &[u8], le: bool| -> Vec<u16> {
        b.chunks_exact(2)
            .map(|c| {
                if le {
                    u16::from_le_bytes([c[0], c[1]])
                } else {
                    u16::from_be_bytes([c[0], c[1]])
                }
            })
            .collect()
    };
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] => utf8(path, rest),
        [0xFF, 0xFE, rest @ ..] => utf16(pairs(rest, true)).map(Cow::Owned),
        [0xFE, 0xFF, rest @ ..] => utf16(pairs(rest, false)).map(Cow::Owned),
        _ => utf8(path, bytes),
    }
}

fn utf8<'a>(path: &str, bytes: &'a [u8]) -> Result<Cow<'a, str>, ManifestError> {
    std::str::from_utf8(bytes)
        .map(Cow::Borrowed)
        .map_err(|e| ManifestError::NotUtf8 {
            path: path.to_string(),
            line: bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1,
            byte: e.valid_up_to(),
        })
}

/// YAML streams from this size on are decoded by two threads ([`Stream::in_pieces`]):
/// past the cost of a thread.
const PIECES_FROM: usize = 16 << 10;

/// Pieces such a stream is cut into: the two threads take them in turn, so that one
/// that starts late or runs slow takes fewer.
const PIECES: usize = 8;

/// Where `text` is cut into about [`PIECES`] pieces of a length: 0, then the start of the
/// first `---` line from each eighth on. libyaml ends a plain or block scalar at a line
/// that starts with `---` and a blank (a block scalar is indented by one at least) and
/// refuses one inside a quoted scalar or a flow collection, so the documents after it are
/// the same whether the stream is read whole or from there. `None` when there is no cut,
/// or when a directive (`%`) could apply across one.
fn cuts(text: &str) -> Option<Vec<usize>> {
    use memchr::memmem::find;
    let bytes = text.as_bytes();
    if bytes.first() == Some(&b'%') || find(bytes, b"\n%").is_some() {
        return None;
    }
    let mut cuts = vec![0];
    for k in 1..PIECES {
        let mut from = (bytes.len() * k / PIECES).max(cuts[cuts.len() - 1]);
        while let Some(i) = find(&bytes[from..], b"\n---") {
            let at = from + i + 1;
            if let None | Some(b'\n' | b'\r' | b' ' | b'\t') = bytes.get(at + 3) {
                cuts.push(at);
                break;
            }
            from = at;
        }
    }
    (cuts.len() > 1).then_some(cuts)
}

/// A piece of a YAML stream ([`Stream::in_pieces`]) that holds objects and empty
/// documents only, within its share.
struct Piece {
    /// The objects, each with its document's index.
    objects: Vec<(usize, Map<String, Value>)>,
    /// How many documents it holds, empty ones too.
    documents: usize,
    /// The line each document starts on ([`document_lines`]).
    starts: Vec<usize>,
    /// How many lines it holds (its newlines).
    lines: usize,
    /// What its documents cost ([`Budget`] units).
    used: u64,
}

impl Piece {
    /// `text` decoded within a budget of `share`, if it holds nothing else (nor nests
    /// deeper than [`MAX_FLOW_DEPTH`]).
    fn decode(text: &str, share: u64) -> Option<Piece> {
        if bounds::flow_depth(text, MAX_FLOW_DEPTH).is_some() {
            return None;
        }
        let budget = Budget::new(share);
        budget.read(text.len());
        let (mut objects, mut documents) = (Vec::new(), 0);
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            documents = i + 1;
            match budget.decode(doc).ok()? {
                Value::Null => {}
                Value::Object(object) if missing_field(&object).is_none() => {
                    objects.push((i, object));
                }
                _ => return None,
            }
        }
        Some(Piece {
            objects,
            documents,
            starts: document_lines(text),
            lines: memchr::memchr_iter(b'\n', text.as_bytes()).count(),
            used: budget.used(),
        })
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

/// The 1-based line where each YAML document starts (its first content line), in the
/// order libyaml yields them: a `---` marker opens a document, and so does content
/// outside one; `...` closes one.
fn document_lines(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut in_document = false;
    let mut at_marker = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line == "---" || line.starts_with("--- ") || line.starts_with("---\t") {
            starts.push(n);
            in_document = true;
            at_marker = line.trim_end() == "---";
            continue;
        }
        if line.trim_end() == "..." {
            in_document = false;
            continue;
        }
        let trimmed = line.trim();
        let content = !trimmed.is_empty() && !trimmed.starts_with('#') && !line.starts_with('%');
        if !content {
            continue;
        }
        if !in_document {
            starts.push(n);
            in_document = true;
        } else if at_marker {
            if let Some(last) = starts.last_mut() {
                *last = n;
            }
        }
        at_marker = false;
    }
    starts
}

#[cfg(test)]
mod tests;
