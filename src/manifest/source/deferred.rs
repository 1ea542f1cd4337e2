//! The walk's encrypted files, decrypted on other threads while the walk goes on: opening
//! a file's data key (an X25519 agreement) costs more than reading the file. The first
//! encrypted file starts one thread per core (at most four), which take the files as the
//! walk finds them; at the walk's end this thread joins in until none is left. Every item
//! after the first encrypted file is held back until then, so that the objects keep the
//! files' order.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::manifest::decrypt::{self, Decryption};
use crate::manifest::error::ManifestError;
use crate::manifest::object::Manifest;
use crate::manifest::visitor::{Flow, Item};

/// An item of the walk, or the place of an encrypted file's items.
enum Slot {
    Item(Item),
    Encrypted { path: String },
}

/// An encrypted file to open: its place among the slots, its path and its documents.
struct Job {
    at: usize,
    path: String,
    documents: Vec<Manifest>,
}

/// What the threads share: the keys (read once, by the first encrypted file), the files
/// still to open, and what was opened, by place.
struct Shared {
    keys: Result<crate::manifest::sops::Keys, String>,
    allow: Vec<String>,
    jobs: Mutex<Receiver<Job>>,
    opened: Mutex<Vec<(usize, Vec<Item>)>>,
    /// The walk stopped early: what is left is not opened.
    stop: AtomicBool,
}

impl Shared {
    /// Opens files until none is left and the walk has ended (or stopped).
    fn drain(&self) {
        while !self.stop.load(Ordering::Relaxed) {
            let job = self
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv();
            let Ok(Job {
                at,
                path,
                documents,
            }) = job
            else {
                return;
            };
            let opened = match &self.keys {
                Ok(keys) => decrypt::open(keys, &self.allow, &path, documents),
                Err(message) => Err(vec![ManifestError::Encrypted {
                    path,
                    message: message.clone(),
                }]),
            };
            let items = match opened {
                Ok(manifests) => manifests.into_iter().map(Ok).collect(),
                Err(errors) => errors.into_iter().map(Err).collect(),
            };
            self.opened
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((at, items));
        }
    }
}

/// The threads opening the walk's encrypted files.
struct Pool {
    jobs: Sender<Job>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    fn start(decryption: Option<&Decryption>) -> Pool {
        let (jobs, queue) = channel();
        let shared = Arc::new(Shared {
            keys: decrypt::keys(decryption),
            allow: decryption.map(|d| d.allow_in.clone()).unwrap_or_default(),
            jobs: Mutex::new(queue),
            opened: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        // One core stays the walk's, which joins in at its end.
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let threads = (0..cores.saturating_sub(1).clamp(1, 4))
            .filter_map(|_| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name("berth-decrypt".into())
                    .spawn(move || shared.drain())
                    .ok()
            })
            .collect();
        Pool {
            jobs,
            shared,
            threads,
        }
    }

    /// Waits for every file to be opened, helping; what was opened, by place.
    fn finish(self) -> Vec<(usize, Vec<Item>)> {
        let Pool {
            jobs,
            shared,
            threads,
        } = self;
        drop(jobs);
        shared.drain();
        for thread in threads {
            // A thread that panicked leaves its file unopened, reported below.
            let _ = thread.join();
        }
        let mut opened =
            std::mem::take(&mut *shared.opened.lock().unwrap_or_else(PoisonError::into_inner));
        opened.sort_by_key(|(at, _)| *at);
        opened
    }
}

/// The walk's encrypted files, opened on other threads as they are found, and every item
/// after the first of them held back until the walk ends, so that the order of the
/// objects stays the files'.
pub(super) struct Deferred {
    decryption: Option<Decryption>,
    slots: RefCell<Vec<Slot>>,
    pool: RefCell<Option<Pool>>,
}

impl Deferred {
    /// Encrypted files opened with `decryption` (`None`: each is refused).
    pub(super) fn new(decryption: Option<&Decryption>) -> Self {
        Deferred {
            decryption: decryption.cloned(),
            slots: RefCell::default(),
            pool: RefCell::default(),
        }
    }

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

    /// An encrypted file's documents, handed to the threads that open them.
    pub(super) fn encrypted(&self, path: String, documents: Vec<Manifest>) {
        let mut slots = self.slots.borrow_mut();
        let mut pool = self.pool.borrow_mut();
        let pool = pool.get_or_insert_with(|| Pool::start(self.decryption.as_ref()));
        let job = Job {
            at: slots.len(),
            path: path.clone(),
            documents,
        };
        // The pool holds the queue's other end, so this cannot fail; a file never opened
        // would be reported by `finish` anyway.
        let _ = pool.jobs.send(job);
        slots.push(Slot::Encrypted { path });
    }

    /// How many encrypted files the walk has found.
    pub(super) fn files(&self) -> usize {
        let slots = self.slots.borrow();
        slots
            .iter()
            .filter(|s| matches!(s, Slot::Encrypted { .. }))
            .count()
    }

    /// Waits for the encrypted files to be opened, then hands every held item on in
    /// order.
    pub(super) fn finish(self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let opened = self.pool.take().map(Pool::finish).unwrap_or_default();
        let mut opened = opened.into_iter().peekable();
        for (at, slot) in self.slots.take().into_iter().enumerate() {
            match slot {
                Slot::Item(item) => f(item)?,
                Slot::Encrypted { path } => match opened.next_if(|(i, _)| *i == at) {
                    Some((_, items)) => items.into_iter().try_for_each(&mut *f)?,
                    None => f(Err(ManifestError::Encrypted {
                        path,
                        message: "it could not be decrypted: the thread opening it stopped".into(),
                    }))?,
                },
            }
        }
        Ok(())
    }
}

impl Drop for Deferred {
    /// A walk that stopped before its end leaves its files unopened.
    fn drop(&mut self) {
        if let Some(pool) = self.pool.get_mut() {
            pool.shared.stop.store(true, Ordering::Relaxed);
        }
    }
}
