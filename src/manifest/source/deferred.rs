//! The walk's encrypted files, decrypted together at its end on every core: opening a
//! file's data key (an X25519 agreement) costs more than reading the file, so the files
//! are gathered as the walk finds them and opened on up to four threads, every item after
//! the first of them held back until then so that the objects keep the files' order.

use crate::manifest::decrypt::{self, Decryption};
use crate::manifest::error::ManifestError;
use crate::manifest::object::Manifest;
use crate::manifest::visitor::{Flow, Item};

/// An item of the walk, or an encrypted file whose documents are still to decrypt.
enum Slot {
    Item(Item),
    Encrypted {
        path: String,
        documents: Vec<Manifest>,
    },
}

/// The walk's encrypted files, decrypted together at its end on every core (opening a
/// file's data key costs more than reading it), and every item after the first of them
/// held back until then, so that the order of the objects stays the files'.
#[derive(Default)]
pub(super) struct Deferred {
    slots: std::cell::RefCell<Vec<Slot>>,
}

impl Deferred {
    /// Hands `item` on now, unless an encrypted file before it waits.
    pub(super) fn or_now(&self, item: Item, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let mut slots = self.slots.borrow_mut();
        if slots.is_empty() {
            drop(slots);
            return f(item);
        }
        slots.push(Slot::Item(item));
        Ok(())
    }

    /// An encrypted file's documents, to decrypt at the end.
    pub(super) fn encrypted(&self, path: String, documents: Vec<Manifest>) {
        self.slots
            .borrow_mut()
            .push(Slot::Encrypted { path, documents });
    }

    /// How many encrypted files wait.
    pub(super) fn files(&self) -> usize {
        let slots = self.slots.borrow();
        slots
            .iter()
            .filter(|s| matches!(s, Slot::Encrypted { .. }))
            .count()
    }

    /// Decrypts the waiting files on up to four threads, then hands every held item on
    /// in order.
    pub(super) fn finish(
        self,
        decryption: Option<&Decryption>,
        f: &mut dyn FnMut(Item) -> Flow,
    ) -> Flow {
        let mut held = Vec::new();
        let mut jobs = Vec::new();
        for (i, slot) in self.slots.into_inner().into_iter().enumerate() {
            match slot {
                Slot::Item(item) => held.push(Some(item)),
                Slot::Encrypted { path, documents } => {
                    held.push(None);
                    jobs.push((i, path, documents));
                }
            }
        }
        if jobs.is_empty() {
            return held.into_iter().flatten().try_for_each(f);
        }
        let keys = decrypt::keys(decryption);
        let allow = decryption.map_or(&[][..], |d| &d.allow_in[..]);
        let open = |path: String, documents: Vec<Manifest>| -> Vec<Item> {
            let opened = match &keys {
                Ok(keys) => decrypt::open(keys, allow, &path, documents),
                Err(message) => Err(vec![ManifestError::Encrypted {
                    path,
                    message: message.clone(),
                }]),
            };
            match opened {
                Ok(manifests) => manifests.into_iter().map(Ok).collect(),
                Err(errors) => errors.into_iter().map(Err).collect(),
            }
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 4)
            .min(jobs.len());
        let queue = std::sync::Mutex::new(jobs);
        let next = || queue.lock().ok().and_then(|mut q| q.pop());
        let mut opened: Vec<(usize, Vec<Item>)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        while let Some((i, path, documents)) = next() {
                            done.push((i, open(path, documents)));
                        }
                        done
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        });
        opened.sort_by_key(|(i, _)| *i);
        let mut opened = opened.into_iter().peekable();
        for (i, item) in held.into_iter().enumerate() {
            match item {
                Some(item) => f(item)?,
                None => {
                    if let Some((_, items)) = opened.next_if(|(at, _)| *at == i) {
                        items.into_iter().try_for_each(&mut *f)?;
                    }
                }
            }
        }
        Ok(())
    }
}
