//! Bounds on what a file may expand to once decoded, checked while decoding, never after:
//!
//! - [`flow_depth`]: libyaml's scanner pays for every token the depth of the flow
//!   collections it is in (`[[[…]]]`), so a deep file costs the square of its size before
//!   the parser's own nesting limit is reached. The depth is measured first, in one linear
//!   pass over the text, and a file deeper than [`MAX_FLOW_DEPTH`] is refused unparsed.
//! - [`Budget`]: the nodes and bytes the decoded values may take, for one document (a
//!   fixed bound) and for one render (in proportion to what it read). Aliases replay their
//!   anchor, so an 8 KB file of one anchored list referenced 5000 times decodes to
//!   millions of nodes; counting what is built bounds memory whatever the aliases. It also refuses duplicate keys in a mapping, as
//!   kubectl does, instead of keeping the last.

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Size caps that bound the memory one render may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest single file.
    pub max_file_size: u64,
    /// Largest total over all files of one render; what they decode to is bounded in
    /// proportion to what was read (see [`Budget`]).
    pub max_app_size: u64,
    /// Most objects one render may yield.
    pub max_objects: usize,
}

impl Limits {
    /// The caps `[agent]` sets (`max_file_size`, `max_app_size`).
    pub fn of(agent: &crate::config::AgentConfig) -> Limits {
        Limits {
            max_file_size: agent.max_file_size,
            max_app_size: agent.max_app_size,
            max_objects: agent.max_objects,
        }
    }

    /// The render's decode budget: what it reads may decode to
    /// [`DECODED_PER_BYTE`] times its size, up to that
    /// many times the per-app cap.
    pub fn budget(&self) -> Budget {
        Budget::new(self.max_app_size.saturating_mul(DECODED_PER_BYTE))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_size: 4 << 20,
            max_app_size: 64 << 20,
            max_objects: 20_000,
        }
    }
}

/// Deepest flow nesting read: serde's own limit (128) refuses anything deeper anyway.
pub const MAX_FLOW_DEPTH: usize = 128;

/// Largest decoded document, in [`Budget`] units (about bytes of JSON): more than the API
/// server takes in one request (3 MiB), so no object that could be stored is refused.
pub const MAX_DOCUMENT_SIZE: u64 = 8 << 20;

/// What one node costs beyond its text: a decoded value takes several times the bytes of
/// its JSON, and most of it is per node.
const NODE_COST: u64 = 16;

/// How much a byte read may decode to, for a render: honest YAML decodes to one to three
/// units a byte (`replicas: 3` is the dense end), aliases to anything.
pub const DECODED_PER_BYTE: u64 = 4;

/// Which bound a decode went past.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exceeded {
    /// One document expands past [`MAX_DOCUMENT_SIZE`].
    Document,
    /// The render's documents together expand past what it has read allows.
    Render,
    /// A mapping holds the same key twice.
    DuplicateKey(String),
}

/// What one render may decode, and what stopped a decode. A render may build
/// [`DECODED_PER_BYTE`] units for each byte it has read, plus one document's worth, up to
/// a cap: memory stays proportional to what the repository holds, whatever its aliases.
/// Not shared between threads: an encrypted file decoded on another thread gets a
/// budget of its own, set aside from this one ([`Budget::set_aside`]), and so does each
/// piece of a long YAML stream (a share of what is left, `decode::Stream::in_pieces`).
pub struct Budget {
    used: Cell<u64>,
    granted: Cell<u64>,
    cap: u64,
    document_left: Cell<u64>,
    exceeded: RefCell<Option<Exceeded>>,
}

impl Budget {
    /// A render's budget, never more than `cap` units.
    pub fn new(cap: u64) -> Self {
        Budget {
            used: Cell::new(0),
            granted: Cell::new(MAX_DOCUMENT_SIZE.min(cap)),
            cap,
            document_left: Cell::new(MAX_DOCUMENT_SIZE),
            exceeded: RefCell::new(None),
        }
    }

    /// Grants what `bytes` more of input may decode to.
    pub fn read(&self, bytes: usize) {
        let more = (bytes as u64).saturating_mul(DECODED_PER_BYTE);
        self.granted
            .set(self.granted.get().saturating_add(more).min(self.cap));
    }

    /// Decodes one document (a serde_yaml or serde_json document) into a JSON value,
    /// within the budget.
    ///
    /// # Errors
    /// The deserializer's error; when a bound was hit, [`Budget::exceeded`] says which.
    pub fn decode<'de, D: de::Deserializer<'de>>(&self, document: D) -> Result<Value, D::Error> {
        self.document_left.set(MAX_DOCUMENT_SIZE);
        self.exceeded.replace(None);
        Build(self).deserialize(document)
    }

    /// Takes the bound the last [`Budget::decode`] went past, if one stopped it.
    pub fn exceeded(&self) -> Option<Exceeded> {
        self.exceeded.take()
    }

    /// Charges documents decoded earlier (kept in the cache) to the render.
    ///
    /// # Errors
    /// [`Exceeded::Render`] when they do not fit.
    pub fn charge_decoded(&self, size: u64) -> Result<(), Exceeded> {
        let used = self.used.get() + size;
        if used > self.granted.get() {
            return Err(Exceeded::Render);
        }
        self.used.set(used);
        Ok(())
    }

    /// Grants what `bytes` more of input may decode to and sets it aside at once, for
    /// that input to be decoded on another thread within a budget of its own of that
    /// size ([`Budget::new`]); `None` near the render's cap, where it is decoded here.
    pub fn set_aside(&self, bytes: usize) -> Option<u64> {
        let share = (bytes as u64).saturating_mul(DECODED_PER_BYTE);
        let (granted, used) = (self.granted.get().saturating_add(share), self.used.get());
        if granted > self.cap || used.saturating_add(share) > granted {
            return None;
        }
        self.granted.set(granted);
        self.used.set(used + share);
        Some(share)
    }

    /// Undoes [`Budget::set_aside`]: the input is decoded here after all.
    pub fn give_back(&self, share: u64) {
        self.granted.set(self.granted.get() - share);
        self.used.set(self.used.get() - share);
    }

    /// What the render may decode, given what it has read so far.
    pub fn limit(&self) -> u64 {
        self.granted.get()
    }

    /// What the render has built so far.
    pub fn used(&self) -> u64 {
        self.used.get()
    }

    fn charge<E: de::Error>(&self, text: usize) -> Result<(), E> {
        let cost = NODE_COST + text as u64;
        let (doc, used) = (self.document_left.get(), self.used.get());
        let over = if cost > doc {
            Exceeded::Document
        } else if used + cost > self.granted.get() {
            Exceeded::Render
        } else {
            self.document_left.set(doc - cost);
            self.used.set(used + cost);
            return Ok(());
        };
        Err(self.stop(over))
    }

    fn stop<E: de::Error>(&self, why: Exceeded) -> E {
        let message = match &why {
            Exceeded::DuplicateKey(key) => format!("duplicate key {key:?}"),
            _ => "decoded size limit".to_string(),
        };
        self.exceeded.replace(Some(why));
        E::custom(message)
    }
}

/// Builds a [`Value`] as serde_json's own `Deserialize` does, charging every node.
struct Build<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Build<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.charge(v.len())?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.0.charge(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.charge(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Build(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.charge(0)?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.charge(key.len())?;
            match object.entry(key) {
                Entry::Occupied(e) => {
                    return Err(self.0.stop(Exceeded::DuplicateKey(e.key().clone())))
                }
                Entry::Vacant(e) => e.insert(map.next_value_seed(Build(self.0))?),
            };
        }
        Ok(Value::Object(object))
    }
}

/// The deepest flow nesting (`[`, `{`) of a YAML text and the 1-based line where it first
/// passes `limit`, if it does; one pass, no allocation. Quoted scalars, comments, block
/// scalars (`|`, `>`) and plain scalars of block context (`a: b[c`) do not count, as in
/// YAML's grammar; anything this scanner cannot tell is counted, so it errs deep.
pub fn flow_depth(text: &str, limit: usize) -> Option<usize> {
    // Nesting deeper than `limit` takes more than `limit` brackets: most texts hold fewer,
    // and are passed with a count at memchr's speed.
    memchr::memchr2_iter(b'[', b'{', text.as_bytes()).nth(limit)?;
    let mut scan = Scan::default();
    for (i, line) in text.lines().enumerate() {
        if scan.line(line, limit) {
            return Some(i + 1);
        }
    }
    None
}

#[derive(Default)]
struct Scan {
    depth: usize,
    /// Inside a quoted scalar that goes on past the line end (`'` or `"`).
    quote: Option<u8>,
    /// Inside a block scalar whose header line had this indentation.
    block_scalar: Option<usize>,
    /// Inside a flow collection, where a token may start: a quote opens a quoted scalar
    /// only there (in `[it's, [[…` the apostrophe belongs to the plain scalar `it's`, and
    /// taking it for a quote would hide every bracket after it). A plain scalar may go on
    /// past the line end, so this is carried from line to line.
    flow_token_start: bool,
    /// The byte before was the closing quote of a quoted scalar: in flow, a `:` right
    /// after one is a value indicator even without a space (`{"a":"b"}`).
    after_quoted: bool,
}

impl Scan {
    /// Scans one line; true when the depth passed `limit`.
    fn line(&mut self, line: &str, limit: usize) -> bool {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|&&b| b == b' ').count();
        if let Some(header) = self.block_scalar {
            if indent > header || line.trim().is_empty() {
                return false;
            }
            self.block_scalar = None;
        }
        let mut i = if self.depth == 0 && self.quote.is_none() {
            indent
        } else {
            0
        };
        // In block context, where a token may start (a plain scalar runs to `: ` or ` #`).
        let mut token_start = true;
        while i < bytes.len() {
            let b = bytes[i];
            if let Some(q) = self.quote {
                if q == b'"' && b == b'\\' {
                    i += 2;
                    continue;
                }
                if b == q {
                    if q == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    self.quote = None;
                    token_start = false;
                    self.flow_token_start = false;
                    self.after_quoted = true;
                }
                i += 1;
                continue;
            }
            let after_space = i == 0 || matches!(bytes[i - 1], b' ' | b'\t');
            if b == b'#' && after_space {
                return false;
            }
            if self.depth > 0 {
                if self.flow(bytes, i, limit) {
                    return true;
                }
                i += 1;
                continue;
            }
            match b {
                b'\'' | b'"' if token_start => self.quote = Some(b),
                b'[' | b'{' if token_start => {
                    self.depth = 1;
                    self.flow_token_start = true;
                    if self.depth > limit {
                        return true;
                    }
                }
                b'|' | b'>' if token_start => {
                    self.block_scalar = Some(indent);
                    return false;
                }
                b' ' | b'\t' => {}
                b'-' | b'?' | b':' if next_is_space(bytes, i) => token_start = true,
                b'&' | b'!' | b'*' if token_start => {
                    // An anchor, tag or alias: a token of its own.
                    while i + 1 < bytes.len() && !matches!(bytes[i + 1], b' ' | b'\t') {
                        i += 1;
                    }
                }
                _ => token_start = false,
            }
            i += 1;
        }
        false
    }

    /// One byte inside a flow collection; true when the depth passed `limit`. Every
    /// bracket there opens or closes a collection (a plain scalar in flow holds none).
    fn flow(&mut self, bytes: &[u8], i: usize, limit: usize) -> bool {
        let after_quoted = std::mem::take(&mut self.after_quoted);
        match bytes[i] {
            b'\'' | b'"' if self.flow_token_start => self.quote = Some(bytes[i]),
            b'[' | b'{' => {
                self.depth += 1;
                self.flow_token_start = true;
                return self.depth > limit;
            }
            b']' | b'}' => {
                self.depth -= 1;
                self.flow_token_start = false;
            }
            b',' => self.flow_token_start = true,
            b':' | b'?'
                if after_quoted || bytes.get(i + 1).is_none_or(|n| b" \t,[]{}".contains(n)) =>
            {
                self.flow_token_start = true
            }
            b' ' | b'\t' => {}
            _ => self.flow_token_start = false,
        }
        false
    }
}

fn next_is_space(bytes: &[u8], i: usize) -> bool {
    matches!(bytes.get(i + 1), None | Some(b' ' | b'\t'))
}

/// The lines (1-based) where `key` appears as a key of the block mapping whose first key
/// is at `line`, `column` (1-based, as the parser reports a mapping's start): the lines a
/// duplicate-key error names. Flow mappings and keys this cannot find give fewer lines.
pub fn key_lines(text: &str, line: usize, column: usize, key: &str) -> Vec<usize> {
    let indent = column.saturating_sub(1);
    let is_key = |rest: &str| {
        [
            format!("{key}:"),
            format!("\"{key}\":"),
            format!("'{key}':"),
        ]
        .iter()
        .any(|k| {
            rest.strip_prefix(k.as_str())
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        })
    };
    let mut found = Vec::new();
    for (n, l) in text
        .lines()
        .enumerate()
        .skip(line.saturating_sub(1))
        .map(|(i, l)| (i + 1, l))
    {
        let content = l.trim_start();
        let at = l.len() - content.len();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        // The mapping's first line may start mid-line (`- name: a`); the others at its column.
        let rest = match (n == line, at.cmp(&indent)) {
            (true, _) => l.get(indent..).unwrap_or(""),
            (false, std::cmp::Ordering::Less) => break,
            (false, std::cmp::Ordering::Equal) => content,
            (false, std::cmp::Ordering::Greater) => continue,
        };
        if is_key(rest) {
            found.push(n);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_depth_counts_flow_collections_only() {
        assert_eq!(flow_depth("a: [[[1]]]\n", 3), None);
        assert_eq!(flow_depth("a: [[[[1]]]]\n", 3), Some(1));
        assert_eq!(flow_depth("a:\n  b: {c: [\n  [[1]]]}\n", 3), Some(3));
        // Plain scalars, quotes, comments and block scalars hold brackets that are text.
        assert_eq!(flow_depth("a: b[[[[c\nd: '[[[[['\ne: \"{{{{\"\n", 3), None);
        assert_eq!(flow_depth("a: 1 # [[[[[[\n", 3), None);
        assert_eq!(flow_depth("a: |\n  [[[[[[\n  {{{{\nb: [1]\n", 3), None);
        assert_eq!(flow_depth("- [[[[\n", 3), Some(1));
        assert_eq!(flow_depth("a: \"x\\\"[[[[\"\n", 3), None);
        // An apostrophe inside a plain scalar opens no quote, in flow as in block.
        assert_eq!(flow_depth("data: [it's, [[[[\n", 3), Some(1));
        assert_eq!(flow_depth("data: [it\n  's, [[[[\n", 3), Some(2));
        assert_eq!(flow_depth("data: [a 'b, [[[[\n", 3), Some(1));
        assert_eq!(
            flow_depth("data: ['it''s', \"[[[[\", {k: '[[[['}]\n", 3),
            None
        );
        assert_eq!(flow_depth("{\"a\":\"[[[[\",\"b\":[\"{{{{\"]}\n", 3), None);
        assert_eq!(flow_depth("data: [a:\"b, [[[[\n", 3), Some(1));
    }

    #[test]
    fn the_flow_bypass_is_refused_quickly() {
        let bomb = format!("data: [it's, {}\n", "[".repeat(200_000));
        let start = std::time::Instant::now();
        assert_eq!(flow_depth(&bomb, MAX_FLOW_DEPTH), Some(1));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn flow_depth_is_linear() {
        let deep = format!("a: {}{}\n", "[".repeat(1_000_000), "]".repeat(1_000_000));
        let start = std::time::Instant::now();
        assert_eq!(flow_depth(&deep, MAX_FLOW_DEPTH), Some(1));
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn key_lines_find_both_keys_of_a_block_mapping() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {}\n  name: b\ndata: {}\n";
        assert_eq!(key_lines(text, 4, 3, "name"), vec![4, 6]);
        assert_eq!(key_lines(text, 1, 1, "kind"), vec![2]);
    }
}
