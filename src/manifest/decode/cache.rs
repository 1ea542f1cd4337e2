//! Decoded files kept for the next render, keyed by path and git blob id, in two
//! generations bounded by the bytes they hold ([`CACHE_BUDGET`]). A document is kept as
//! its object's compact JSON, read back with serde_json: a tenth of the memory of the
//! decoded map (1000 apps' files took 27 MiB as maps), and still several times faster
//! than decoding the YAML again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::Manifest;
use crate::manifest::object::Origin;

/// Whether decoded files are kept for the next render: only in a process that renders the
/// same files again and again (`berth run`). The one-shot commands render each app once,
/// and hashing and keeping what they decode would be work and memory for nothing (an app
/// of 10,000 ConfigMaps synced once kept them all).
static KEEP: AtomicBool = AtomicBool::new(false);

/// Keeps decoded files from now on: this process renders the same files again.
pub fn keep_decoded() {
    KEEP.store(true, Ordering::Relaxed);
}

/// Whether decoded files are kept ([`keep_decoded`] was called).
pub(super) fn keeping() -> bool {
    KEEP.load(Ordering::Relaxed)
}

/// Bytes of kept documents (their JSON) in each of the two generations.
pub const CACHE_BUDGET: usize = 4 << 20;

/// A file's path and git blob id.
pub(super) type Key = (String, [u8; 20]);

/// One document as kept.
pub(super) struct Kept {
    /// The object, as compact JSON.
    json: Box<[u8]>,
    origin: Origin,
    decrypted: Vec<String>,
}

impl Kept {
    /// `None` for an object that does not serialize (it is then not kept).
    pub(super) fn of(m: &Manifest) -> Option<Kept> {
        Some(Kept {
            json: serde_json::to_vec(&m.object).ok()?.into_boxed_slice(),
            origin: m.origin.clone(),
            decrypted: m.decrypted.clone(),
        })
    }

    fn manifest(&self) -> Option<Manifest> {
        Some(Manifest {
            object: serde_json::from_slice(&self.json).ok()?,
            origin: self.origin.clone(),
            decrypted: self.decrypted.clone(),
        })
    }
}

/// A file's documents, the bytes they hold and their decoded size ([`Budget`](crate::manifest::bounds::Budget) units).
type Entry = (Arc<[Kept]>, usize, u64);

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
pub(super) fn cached(key: &Key) -> Option<(Vec<Manifest>, u64)> {
    let (kept, size) = {
        let mut lock = DECODED.lock().ok()?;
        let cache = lock.get_or_insert_with(Generations::default);
        match cache.current.get(key) {
            Some((kept, _, size)) => (kept.clone(), *size),
            None => {
                let entry = cache.previous.remove(key)?;
                let found = (entry.0.clone(), entry.2);
                cache.insert(key.clone(), entry);
                found
            }
        }
    };
    let documents = kept.iter().map(Kept::manifest).collect::<Option<_>>()?;
    Some((documents, size))
}

/// Keeps a file's documents and their decoded size.
pub(super) fn keep(key: Key, documents: Vec<Kept>, size: u64) {
    let bytes = documents.iter().map(|k| k.json.len()).sum();
    if let Ok(mut lock) = DECODED.lock() {
        let cache = lock.get_or_insert_with(Generations::default);
        cache.insert(key, (documents.into(), bytes, size));
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
