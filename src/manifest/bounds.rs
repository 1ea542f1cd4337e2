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
//!
//! In files of their own:
//! - `budget.rs`: the [`Budget`] and the value builder that charges it;
//! - `flow.rs`: the flow-nesting scan;
//! - `duplicate_key.rs`: where a repeated key is, for the error that names it.

pub use budget::Budget;
pub use duplicate_key::key_lines;
pub use flow::flow_depth;

mod budget;
mod duplicate_key;
mod flow;

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

#[cfg(test)]
mod tests;
