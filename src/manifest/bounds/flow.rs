//! The flow-nesting scan: how deep a YAML text nests `[` and `{`, measured in one linear
//! pass before libyaml, whose scanner pays that depth for every token, sees the text.

use std::ops::ControlFlow;

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

/// [`flow_depth`]'s scan, its state carried from line to line.
#[derive(Default)]
struct Scan {
    /// How deep in flow collections the scan is.
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
            if let Some(q) = self.quote {
                i = self.quoted(bytes, i, q, &mut token_start);
                continue;
            }
            let after_space = i == 0 || matches!(bytes[i - 1], b' ' | b'\t');
            if bytes[i] == b'#' && after_space {
                return false;
            }
            if self.depth > 0 {
                if self.flow(bytes, i, limit) {
                    return true;
                }
                i += 1;
                continue;
            }
            match self.block(bytes, i, indent, limit, &mut token_start) {
                ControlFlow::Continue(next) => i = next,
                ControlFlow::Break(passed) => return passed,
            }
        }
        false
    }

    /// One byte inside a quoted scalar (`q` its quote): the index of the next byte to
    /// scan, past an escape or a doubled `'`; the closing quote ends the scalar.
    fn quoted(&mut self, bytes: &[u8], i: usize, q: u8, token_start: &mut bool) -> usize {
        let b = bytes[i];
        if q == b'"' && b == b'\\' {
            return i + 2;
        }
        if b == q {
            if q == b'\'' && bytes.get(i + 1) == Some(&b'\'') {
                return i + 2;
            }
            self.quote = None;
            *token_start = false;
            self.flow_token_start = false;
            self.after_quoted = true;
        }
        i + 1
    }

    /// One byte in block context, the line indented by `indent`: the index of the next
    /// byte to scan, or the line's end — true when a flow collection opened past `limit`,
    /// false at a block scalar's header, whose lines hold text.
    fn block(
        &mut self,
        bytes: &[u8],
        mut i: usize,
        indent: usize,
        limit: usize,
        token_start: &mut bool,
    ) -> ControlFlow<bool, usize> {
        match bytes[i] {
            b @ (b'\'' | b'"') if *token_start => self.quote = Some(b),
            b'[' | b'{' if *token_start => {
                self.depth = 1;
                self.flow_token_start = true;
                if self.depth > limit {
                    return ControlFlow::Break(true);
                }
            }
            b'|' | b'>' if *token_start => {
                self.block_scalar = Some(indent);
                return ControlFlow::Break(false);
            }
            b' ' | b'\t' => {}
            b'-' | b'?' | b':' if next_is_space(bytes, i) => *token_start = true,
            b'&' | b'!' | b'*' if *token_start => {
                // An anchor, tag or alias: a token of its own.
                while i + 1 < bytes.len() && !matches!(bytes[i + 1], b' ' | b'\t') {
                    i += 1;
                }
            }
            _ => *token_start = false,
        }
        ControlFlow::Continue(i + 1)
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

/// Whether the byte after `i` is a blank or the line's end.
fn next_is_space(bytes: &[u8], i: usize) -> bool {
    matches!(bytes.get(i + 1), None | Some(b' ' | b'\t'))
}
