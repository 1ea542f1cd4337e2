//! Decoded files kept for the next render, keyed by path and git blob id, in two
//! generations bounded by the bytes of the files they hold ([`CACHE_BUDGET`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::Manifest;

/// Whether decoded files are kept for the next render (off for a process that renders
/// once: `berth render`).
static KEEP: AtomicBool = AtomicBool::new(true);

/// Keeps no decoded file from now on: this process renders once, and hashing and copying
/// what it decodes would be work for nothing.
pub fn keep_nothing() {
    KEEP.store(false, Ordering::Relaxed);
}

/// Whether decoded files are kept ([`keep_nothing`] was not called).
pub(super) fn keeping() -> bool {
    KEEP.load(Ordering::Relaxed)
}

/// Source bytes whose documents the cache keeps (about 4–5 times as much memory).
pub const CACHE_BUDGET: usize = 8 << 20;

/// A file's path and git blob id.
pub(super) type Key = (String, [u8; 20]);

/// A file's documents, the bytes of the file and their decoded size ([`Budget`](crate::manifest::bounds::Budget) units).
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
pub(super) fn cached(key: &Key) -> Option<(Arc<Vec<Manifest>>, u64)> {
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

/// Keeps a file's documents, the bytes of the file and their decoded size.
pub(super) fn keep(key: Key, documents: Vec<Manifest>, bytes: usize, size: u64) {
    if let Ok(mut lock) = DECODED.lock() {
        let cache = lock.get_or_insert_with(Generations::default);
        cache.insert(key, (Arc::new(documents), bytes, size));
    }
}

/// Git's blob id of the bytes: SHA-1 of `blob <length>\0<bytes>`.
pub(super) fn blob_id(bytes: &[u8]) -> [u8; 20] {
    use sha1::{Digest, Sha1};
    let mut hash = Sha1::new();
    hash.update(format!("blob {}\0", bytes.len()).as_bytes());
    hash.update(bytes);
    hash.finalize().into()
}
