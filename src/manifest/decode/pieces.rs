//! A long YAML stream decoded by two threads at once: cut at `---` lines into pieces
//! that the threads take in turn, each piece within a share of what the render may still
//! decode, and put back together in order.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Map, Value};

use super::text::document_lines;
use super::{missing_field, Manifest, Stream};
use crate::manifest::bounds::{self, Budget, MAX_FLOW_DEPTH};

/// YAML streams from this size on are decoded by two threads ([`Stream::in_pieces`]):
/// past the cost of a thread.
pub(super) const PIECES_FROM: usize = 16 << 10;

/// Pieces such a stream is cut into: the two threads take them in turn, so that one
/// that starts late or runs slow takes fewer.
pub(super) const PIECES: usize = 8;

/// Where `text` is cut into about [`PIECES`] pieces of a length: 0, then the start of the
/// first `---` line from each eighth on. libyaml ends a plain or block scalar at a line
/// that starts with `---` and a blank (a block scalar is indented by one at least) and
/// refuses one inside a quoted scalar or a flow collection, so the documents after it are
/// the same whether the stream is read whole or from there. `None` when there is no cut,
/// or when a directive (`%`) could apply across one.
pub(super) fn cuts(text: &str) -> Option<Vec<usize>> {
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

impl Stream<'_> {
    /// The objects of a long YAML stream, decoded by this thread and another at once:
    /// cut at `---` lines into [`PIECES`] pieces ([`cuts`]) that the two take in turn, each
    /// decoded within a share of what the render may still decode. `None` — the stream
    /// is then decoded in one pass, for what that pass says — when the stream is short or
    /// holds directives, or when a piece holds anything but objects and empty documents
    /// (an error, a bound reached).
    pub(super) fn in_pieces(&self, text: &str) -> Option<Vec<Manifest>> {
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
}
