//! The walk's encrypted files, decoded and decrypted on other threads while the walk
//! goes on: an encrypted file is several times the bytes of its plain text, and opening
//! its data key (an X25519 agreement) costs more than reading it. A file that looks
//! encrypted (a top-level `sops` key in its text) is handed over unread, with a share of
//! the render's decode budget set aside for it; one whose first document turns out to
//! hold a `sops:` block once decoded here is handed over for decryption alone.
//!
//! The first such file starts one thread per core but one (at most four), which take the
//! files in the walk's order. The walk's own thread joins in whenever more than one file
//! waits, and at the walk's end hands every held item on in order, opening what is left
//! and waiting for what the threads hold. Every item after the first encrypted file is
//! held back until then, so that the objects keep the files' order.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::thread::JoinHandle;

use crate::manifest::bounds::Budget;
use crate::manifest::decode::Stream;
use crate::manifest::decrypt::{self, Decryption};
use crate::manifest::error::ManifestError;
use crate::manifest::object::Manifest;
use crate::manifest::sops;
use crate::manifest::visitor::{Flow, Item, Visitor};

/// Files waiting for the threads past which the walk's thread opens one itself: about
/// what the threads open while the walk's thread hands a thousand objects on at its end.
const BACKLOG: usize = 64;

/// Hands the items of `stream` to `f`, except when its first document holds a `sops:`
/// block: then its documents are gathered and returned, to be decrypted together (its
/// errors still go to `f`).
pub(super) fn visit_file(
    stream: &Stream,
    f: &mut dyn FnMut(Item) -> Flow,
) -> Result<Option<Vec<Manifest>>, ManifestError> {
    let mut encrypted: Option<Vec<Manifest>> = None;
    let mut first = true;
    stream.visit(&mut |item| {
        if let (true, Ok(m)) = (first, &item) {
            first = false;
            if sops::is_encrypted_object(&m.object) {
                encrypted = Some(Vec::new());
            }
        }
        match (&mut encrypted, item) {
            (Some(documents), Ok(m)) => {
                documents.push(m);
                Ok(())
            }
            (_, item) => f(item),
        }
    })?;
    Ok(encrypted)
}

/// An item of the walk, or the place of an encrypted file's items.
enum Slot {
    Item(Item),
    Encrypted { path: String },
}

/// What is to be done with an encrypted file.
enum Work {
    /// Decode its text within a budget of `share`, then decrypt it.
    Decode { bytes: Vec<u8>, share: u64 },
    /// Decrypt its documents, decoded by the walk.
    Open(Vec<Manifest>),
}

/// An encrypted file to handle, and its place among the slots.
struct Job {
    at: usize,
    path: String,
    work: Work,
}

/// What came of a job.
enum Done {
    Items(Vec<Item>),
    /// Its text did not decode within its share (or not at all): the walk's thread
    /// decodes it again, in order, within the render's budget, for the error it would
    /// have met there (or the objects the render's slack allows).
    Again {
        bytes: Vec<u8>,
        share: u64,
    },
}

/// What the threads share: the keys (read once, by the first encrypted file) and the
/// files still to handle.
struct Shared {
    keys: Result<sops::Keys, decrypt::KeyFileError>,
    allow: Vec<String>,
    jobs: Mutex<Receiver<Job>>,
    /// Jobs sent and not yet taken.
    waiting: AtomicUsize,
    /// The walk stopped early: what is left is not handled.
    stop: AtomicBool,
}

impl Shared {
    /// Takes the next job, waiting for one while the walk goes on (`wait`).
    fn take(&self, wait: bool) -> Option<Job> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        // A thread waits for a job holding the queue; the walk's thread never waits on
        // it, so that it can always send the job that thread waits for.
        let job = if wait {
            let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
            jobs.recv().ok()
        } else {
            let jobs = match self.jobs.try_lock() {
                Ok(jobs) => jobs,
                Err(TryLockError::Poisoned(e)) => e.into_inner(),
                Err(TryLockError::WouldBlock) => return None,
            };
            jobs.try_recv().ok()
        };
        if job.is_some() {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        job
    }

    fn run(&self, job: Job) -> (usize, Done) {
        let Job { at, path, work } = job;
        let done = match work {
            Work::Open(documents) => Done::Items(self.open(path, documents)),
            Work::Decode { bytes, share } => {
                let budget = Budget::new(share);
                let stream = Stream {
                    path: path.clone(),
                    bytes,
                    budget: &budget,
                };
                let mut items = Vec::new();
                match visit_file(&stream, &mut |item| {
                    items.push(item);
                    Ok(())
                }) {
                    Ok(Some(documents)) => {
                        items.extend(self.open(path, documents));
                        Done::Items(items)
                    }
                    Ok(None) => Done::Items(items),
                    Err(_) => Done::Again {
                        bytes: stream.bytes,
                        share,
                    },
                }
            }
        };
        (at, done)
    }

    /// An encrypted file's documents decrypted, or why not.
    fn open(&self, path: String, documents: Vec<Manifest>) -> Vec<Item> {
        let opened = match &self.keys {
            Ok(keys) => decrypt::open(keys, &self.allow, &path, documents),
            Err(message) => Err(vec![ManifestError::Encrypted {
                path,
                message: message.to_string(),
            }]),
        };
        match opened {
            Ok(manifests) => manifests.into_iter().map(Ok).collect(),
            Err(errors) => errors.into_iter().map(Err).collect(),
        }
    }
}

/// The threads handling the walk's encrypted files.
struct Pool {
    jobs: Option<Sender<Job>>,
    done: Receiver<(usize, Done)>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    fn start(decryption: Option<&Decryption>) -> Pool {
        let (jobs, queue) = channel();
        let (finished, done) = channel();
        let shared = Arc::new(Shared {
            keys: decrypt::keys(decryption),
            allow: decryption.map(|d| d.allow_in.clone()).unwrap_or_default(),
            jobs: Mutex::new(queue),
            waiting: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        // One core stays the walk's, which joins in.
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let threads = (0..cores.saturating_sub(1).clamp(1, 4))
            .filter_map(|_| {
                let (shared, finished) = (Arc::clone(&shared), finished.clone());
                std::thread::Builder::new()
                    .name("berth-decrypt".into())
                    .spawn(move || {
                        while let Some(job) = shared.take(true) {
                            if finished.send(shared.run(job)).is_err() {
                                return;
                            }
                        }
                    })
                    .ok()
            })
            .collect();
        Pool {
            jobs: Some(jobs),
            done,
            shared,
            threads,
        }
    }
}

/// The walk's encrypted files, handled on other threads as they are found, and every
/// item after the first of them held back until the walk ends, so that the order of the
/// objects stays the files'.
pub(super) struct Deferred {
    decryption: Option<Decryption>,
    slots: RefCell<Vec<Slot>>,
    files: Cell<usize>,
    pool: RefCell<Option<Pool>>,
    /// What the walk's thread handled itself, by place.
    done: RefCell<HashMap<usize, Done>>,
}

impl Deferred {
    /// Encrypted files opened with `decryption` (`None`: each is refused).
    pub(super) fn new(decryption: Option<&Decryption>) -> Self {
        Deferred {
            decryption: decryption.cloned(),
            slots: RefCell::default(),
            files: Cell::new(0),
            pool: RefCell::default(),
            done: RefCell::default(),
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

    /// Hands a file on unread when its text looks encrypted and `budget` can set a share
    /// aside for it; gives it back otherwise.
    pub(super) fn hand_over(
        &self,
        path: String,
        bytes: Vec<u8>,
        budget: &Budget,
    ) -> Option<(String, Vec<u8>)> {
        if self.decryption.is_none() || !sops::looks_encrypted(&bytes) {
            return Some((path, bytes));
        }
        let Some(share) = budget.set_aside(bytes.len()) else {
            return Some((path, bytes));
        };
        self.send(path, Work::Decode { bytes, share });
        None
    }

    /// An encrypted file's documents, decoded by the walk, to decrypt.
    pub(super) fn encrypted(&self, path: String, documents: Vec<Manifest>) {
        self.send(path, Work::Open(documents));
    }

    fn send(&self, path: String, work: Work) {
        let mut slots = self.slots.borrow_mut();
        let mut pool = self.pool.borrow_mut();
        let pool = pool.get_or_insert_with(|| Pool::start(self.decryption.as_ref()));
        let job = Job {
            at: slots.len(),
            path: path.clone(),
            work,
        };
        slots.push(Slot::Encrypted { path });
        self.files.set(self.files.get() + 1);
        pool.shared.waiting.fetch_add(1, Ordering::Relaxed);
        // The pool holds the queue's other end, so this cannot fail; a file never
        // handled would be reported by `finish` anyway.
        if let Some(jobs) = &pool.jobs {
            let _ = jobs.send(job);
        }
        // The threads are far behind: the walk takes a turn. Far, so that some files are
        // left to them while the walk's thread hands the held items on at its end.
        if pool.shared.waiting.load(Ordering::Relaxed) > BACKLOG {
            if let Some(job) = pool.shared.take(false) {
                let (at, done) = pool.shared.run(job);
                self.done.borrow_mut().insert(at, done);
            }
        }
    }

    /// How many encrypted files the walk has found.
    pub(super) fn files(&self) -> usize {
        self.files.get()
    }

    /// Hands every held item on in order, handling what is left of the encrypted files
    /// and waiting for what the threads hold; a file handed over whose text did not
    /// decode within its share is decoded here, within `budget`.
    pub(super) fn finish(&self, budget: &Budget, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let mut pool = self.pool.take();
        if let Some(pool) = &mut pool {
            pool.jobs = None;
        }
        let mut done = self.done.take();
        for (at, slot) in self.slots.take().into_iter().enumerate() {
            let path = match slot {
                Slot::Item(item) => {
                    f(item)?;
                    continue;
                }
                Slot::Encrypted { path } => path,
            };
            let finished = loop {
                if let Some(finished) = done.remove(&at) {
                    break Some(finished);
                }
                let Some(pool) = &pool else { break None };
                if let Some(job) = pool.shared.take(false) {
                    let (i, finished) = pool.shared.run(job);
                    done.insert(i, finished);
                    continue;
                }
                match pool.done.recv() {
                    Ok((i, finished)) => {
                        done.insert(i, finished);
                    }
                    Err(_) => break None,
                }
            };
            match finished {
                Some(Done::Items(items)) => items.into_iter().try_for_each(&mut *f)?,
                Some(Done::Again { bytes, share }) => {
                    budget.give_back(share);
                    let stream = Stream {
                        path: path.clone(),
                        bytes,
                        budget,
                    };
                    if let (Some(documents), Some(pool)) = (visit_file(&stream, f)?, &pool) {
                        let items = pool.shared.open(path, documents);
                        items.into_iter().try_for_each(&mut *f)?;
                    }
                }
                None => f(Err(ManifestError::Encrypted {
                    path,
                    message: "it could not be decrypted: the thread opening it stopped".into(),
                }))?,
            }
        }
        if let Some(mut pool) = pool {
            for thread in std::mem::take(&mut pool.threads) {
                // A thread that panicked left its file unhandled, reported above.
                let _ = thread.join();
            }
        }
        Ok(())
    }
}

impl Drop for Pool {
    /// A walk that stopped before its end (or a render that did) leaves what is left of
    /// its files unhandled.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}
