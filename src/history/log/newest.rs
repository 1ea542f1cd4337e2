//! An app's newest record, read from the end of its log: what `berth status`, the status
//! page and the skip of an unchanged commit ask most.

use std::io::{Read, Seek, SeekFrom};

use super::{cut_record, HistoryError, HistoryLog, MAX_HEAD, MAX_RECORD, MAX_SCAN};
use crate::history::SyncRecord;

impl HistoryLog {
    /// An app's newest readable record, read from the end of its log (at most
    /// [`MAX_RECORD`] bytes of one line).
    ///
    /// # Errors
    /// The file exists but cannot be read.
    pub fn newest(&self, app: &str) -> Result<Option<SyncRecord>, HistoryError> {
        const CHUNK: u64 = 64 << 10;
        let path = self.file(app);
        let io = |cause| HistoryError::Io {
            path: path.clone(),
            cause,
        };
        let mut file = match crate::state::open_state(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(e)),
        };
        let mut start = file.metadata().map_err(io)?.len();
        // The bytes from `start` to the end of the last line not yet found torn.
        let mut tail: Vec<u8> = Vec::new();
        while start > 0 && tail.len() <= MAX_RECORD {
            let size = CHUNK.min(start);
            start -= size;
            let mut chunk = vec![0; size as usize];
            file.seek(SeekFrom::Start(start)).map_err(io)?;
            file.read_exact(&mut chunk).map_err(io)?;
            chunk.extend_from_slice(&tail);
            tail = chunk;
            // Every piece but the first is a whole line; the first is one from the start.
            let mut lines: Vec<&[u8]> = tail.split(|b| *b == b'\n').collect();
            let first = lines[0].len();
            if start > 0 {
                lines.remove(0);
            }
            for line in lines.iter().rev().filter(|l| !l.trim_ascii().is_empty()) {
                if let Ok(record) = serde_json::from_slice(line) {
                    return Ok(Some(record));
                }
            }
            tail.truncate(first);
        }
        if tail.len() <= MAX_RECORD {
            return Ok(None);
        }
        // The last line is over-long: its start, looked for backwards without keeping what
        // is read (as far as MAX_SCAN), then its head.
        let mut line_start = start;
        let mut chunk = vec![0; CHUNK as usize];
        while line_start > 0 {
            if start - line_start >= MAX_SCAN {
                return Ok(None);
            }
            let size = CHUNK.min(line_start);
            let from = line_start - size;
            let chunk = &mut chunk[..size as usize];
            file.seek(SeekFrom::Start(from)).map_err(io)?;
            file.read_exact(chunk).map_err(io)?;
            if let Some(at) = memchr::memrchr(b'\n', chunk) {
                line_start = from + at as u64 + 1;
                break;
            }
            line_start = from;
        }
        let mut head = Vec::with_capacity(MAX_HEAD);
        file.seek(SeekFrom::Start(line_start)).map_err(io)?;
        (&mut file)
            .take(MAX_HEAD as u64)
            .read_to_end(&mut head)
            .map_err(io)?;
        Ok(cut_record(&head))
    }
}
