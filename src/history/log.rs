//! The JSON Lines log of [`SyncRecord`]s, one file per app.
//!
//! Each record is appended with a single `write` and an `fsync`, so a crash leaves at most
//! a torn last line; readers skip it, and the next append starts on a fresh line.
//! Retention (by count and by age) streams the file, and only when records must go
//! rewrites it through [`crate::state::write_private_with`] (a temporary file, fsynced,
//! renamed over the log, the folder fsynced).

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use jiff::Timestamp;

use super::{Action, CommitInfo, Outcome, SyncRecord, Trigger};

/// The longest record line read whole by [`HistoryLog::page`], [`HistoryLog::find`] and
/// [`HistoryLog::newest`] (no sync writes one: 20 000 objects make about 4 MiB, and its
/// errors are at most 100 of 8 KiB). Of a longer one — written by an older berth, or
/// planted — only its head is read: the record is shown without its objects and errors
/// ([`from_head`]), never hidden.
pub const MAX_RECORD: usize = 16 << 20;

/// How much of a record's line its head may take: everything before its objects.
const MAX_HEAD: usize = 64 << 10;

/// How far [`HistoryLog::newest`] looks back for the start of an over-long last line.
const MAX_SCAN: u64 = 1 << 30;

/// What the note of a record read from its head says.
const CUT_NOTE: &str =
    "this record is too large to read whole (over 16 MiB): its objects and errors are left out";

/// A record (or summary) from the head of its line: the fields before `"objects"`, which
/// are all but its lists.
fn from_head<T: serde::de::DeserializeOwned>(line: &[u8]) -> Option<T> {
    let head = &line[..line.len().min(MAX_HEAD)];
    let at = memchr::memmem::find(head, b",\"objects\":")?;
    let mut text = head[..at].to_vec();
    text.push(b'}');
    serde_json::from_slice(&text).ok()
}

/// A record from the head of its over-long line, noted so.
fn cut_record(line: &[u8]) -> Option<SyncRecord> {
    from_head::<SyncRecord>(line).map(|r| SyncRecord {
        note: Some(CUT_NOTE.into()),
        ..r
    })
}

/// A record as a list shows it: its line in `/apps/NAME`, without its objects.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// The record's id.
    pub id: String,
    /// What started it.
    pub trigger: Trigger,
    /// When it started.
    pub started_at: Timestamp,
    /// How long it took.
    pub duration_ms: u64,
    /// The commit, once resolved.
    pub commit: Option<CommitInfo>,
    /// How it ended.
    pub outcome: Outcome,
    /// Objects created, configured or pruned.
    #[serde(default, deserialize_with = "changes")]
    #[serde(rename(deserialize = "objects"))]
    pub changes: usize,
    /// Errors.
    #[serde(default, deserialize_with = "count")]
    #[serde(rename(deserialize = "errors"))]
    pub errors: usize,
    /// A remark for people.
    #[serde(default)]
    pub note: Option<String>,
}

/// The changes among a record's objects, read without keeping them.
fn changes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    #[derive(serde::Deserialize)]
    struct Line {
        action: Action,
    }
    let lines: Vec<Line> = serde::Deserialize::deserialize(d)?;
    Ok(lines.iter().filter(|l| l.action.is_change()).count())
}

/// How many items a list holds, read without keeping them.
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let items: Vec<serde::de::IgnoredAny> = serde::Deserialize::deserialize(d)?;
    Ok(items.len())
}

/// A page of an app's records, newest first.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Page {
    /// The records.
    pub records: Vec<Summary>,
    /// Older records exist: the next page starts before the last one here.
    pub more: bool,
}

/// History errors.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file could not be read or written.
    #[error("history file {}: {cause}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said (part of the message).
        cause: std::io::Error,
    },
    /// A record could not be encoded.
    #[error("cannot encode a history record: {0}")]
    Encode(serde_json::Error),
}

impl From<serde_json::Error> for HistoryError {
    fn from(e: serde_json::Error) -> Self {
        HistoryError::Encode(e)
    }
}

/// The history folder of an agent.
#[derive(Debug, Clone)]
pub struct HistoryLog {
    dir: PathBuf,
}

impl HistoryLog {
    /// The log in `state_dir/history`.
    pub fn new(state_dir: &Path) -> Self {
        HistoryLog {
            dir: state_dir.join("history"),
        }
    }

    /// The file of `app`'s records.
    pub fn file(&self, app: &str) -> PathBuf {
        self.dir.join(format!("{app}.jsonl"))
    }

    /// Appends one record with a single write and an fsync.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn append(&self, record: &SyncRecord) -> Result<(), HistoryError> {
        let path = self.file(&record.app);
        let io = |source| HistoryError::Io {
            path: path.clone(),
            cause: source,
        };
        crate::state::private_dir(&self.dir).map_err(io)?;
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        let mut file = crate::state::private_file()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)
            .map_err(io)?;
        if !ends_with_newline(&mut file).map_err(io)? {
            line.insert(0, b'\n'); // after a torn line, start afresh
        }
        file.write_all(&line).map_err(io)?;
        file.sync_data().map_err(io)
    }

    /// The records of one app, oldest first; a torn or unreadable line is skipped.
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn read(&self, app: &str) -> Result<Vec<SyncRecord>, HistoryError> {
        let path = self.file(app);
        // Bytes, not a string: a line torn inside a multi-byte character is skipped like
        // any other torn line instead of failing the whole read.
        let text = match fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(cause) => return Err(HistoryError::Io { path, cause }),
        };
        Ok(parse_lines(&text))
    }

    /// The apps with a history, as its file names say (an app removed from the
    /// configuration keeps its history until `history_max_age`).
    pub fn apps(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut apps: Vec<String> = (entries.flatten())
            .filter_map(|e| Some(e.file_name().to_str()?.strip_suffix(".jsonl")?.to_string()))
            .collect();
        apps.sort();
        apps
    }

    /// The records of every app, oldest first.
    ///
    /// # Errors
    /// The folder or a file cannot be read.
    pub fn read_all(&self) -> Result<Vec<SyncRecord>, HistoryError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(HistoryError::Io {
                    path: self.dir.clone(),
                    cause: source,
                })
            }
        };
        let mut all = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(app) = name.strip_suffix(".jsonl") {
                all.extend(self.read(app)?);
            }
        }
        all.sort_by_key(|r| r.started_at);
        Ok(all)
    }

    /// The last record of an app whose outcome is one of `outcomes`.
    ///
    /// # Errors
    /// The file cannot be read.
    pub fn last(
        &self,
        app: &str,
        outcomes: &[Outcome],
    ) -> Result<Option<SyncRecord>, HistoryError> {
        Ok(self
            .read(app)?
            .into_iter()
            .rev()
            .find(|r| outcomes.contains(&r.outcome)))
    }

    /// Up to `limit` records of an app, newest first, older than the record `before` when
    /// given; one streaming pass, each line at most [`MAX_RECORD`].
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn page(
        &self,
        app: &str,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Page, HistoryError> {
        let mut kept = std::collections::VecDeque::with_capacity(limit + 1);
        let mut reached = before.is_none();
        self.each_line(app, |line, whole| {
            let summary = if whole {
                serde_json::from_slice::<Summary>(line).ok()
            } else {
                from_head::<Summary>(line).map(|s| Summary {
                    note: Some(CUT_NOTE.into()),
                    ..s
                })
            };
            let Some(summary) = summary else {
                return true; // a torn line
            };
            if before == Some(summary.id.as_str()) {
                reached = true;
                return false;
            }
            kept.push_back(summary);
            if kept.len() > limit + 1 {
                kept.pop_front();
            }
            true
        })?;
        if !reached {
            kept.clear(); // `before` is not (or no longer) in the log
        }
        let more = kept.len() > limit;
        let records = kept.into_iter().rev().take(limit).collect();
        Ok(Page { records, more })
    }

    /// The record `id` of an app, if the log holds it.
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn find(&self, app: &str, id: &str) -> Result<Option<SyncRecord>, HistoryError> {
        #[derive(serde::Deserialize)]
        struct Id<'a> {
            #[serde(borrow)]
            id: std::borrow::Cow<'a, str>,
        }
        let mut found = None;
        self.each_line(app, |line, whole| {
            if !whole {
                found = cut_record(line).filter(|r| r.id == id);
                return found.is_none();
            }
            if serde_json::from_slice::<Id>(line).is_ok_and(|l| l.id == id) {
                found = serde_json::from_slice(line).ok();
                return false;
            }
            true
        })?;
        Ok(found)
    }

    /// Calls `visit` with each line of an app's log and whether it is whole (of a line over
    /// [`MAX_RECORD`], its first [`MAX_RECORD`] bytes; the rest is skipped unread) until it
    /// returns false.
    fn each_line(
        &self,
        app: &str,
        mut visit: impl FnMut(&[u8], bool) -> bool,
    ) -> Result<(), HistoryError> {
        let path = self.file(app);
        let io = |cause| HistoryError::Io {
            path: path.clone(),
            cause,
        };
        let mut reader = match crate::state::open_state(&path) {
            Ok(f) => BufReader::new(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut reader)
                .take(MAX_RECORD as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(io)?;
            if read == 0 {
                return Ok(());
            }
            if line.len() > MAX_RECORD {
                skip_line(&mut reader).map_err(io)?;
                if !visit(&line, false) {
                    return Ok(());
                }
                continue;
            }
            if !line.trim_ascii().is_empty() && !visit(&line, true) {
                return Ok(());
            }
        }
    }
}

/// Reads past the rest of a line, holding none of it.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

fn ends_with_newline(file: &mut File) -> std::io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

fn parse_lines(text: &[u8]) -> Vec<SyncRecord> {
    text.split(|b| *b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .filter_map(|l| match serde_json::from_slice(l) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(error = %e, "skipping an unreadable history line (torn by a crash?)");
                None
            }
        })
        .collect()
}

mod newest;
mod retain;
