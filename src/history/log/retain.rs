//! Retention: an app's log keeps its newest records up to a count and an age; it is
//! streamed, and rewritten only when records must go.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use jiff::Timestamp;

use super::{HistoryError, HistoryLog};

impl HistoryLog {
    /// Keeps the newest `keep` records of an app that are younger than `max_age`.
    ///
    /// # Errors
    /// The file cannot be rewritten.
    pub fn retain(&self, app: &str, keep: usize, max_age: Duration) -> Result<(), HistoryError> {
        let path = self.file(app);
        let io = |source| HistoryError::Io {
            path: path.clone(),
            cause: source,
        };
        let cutoff = Timestamp::now()
            .checked_sub(
                jiff::SignedDuration::try_from(max_age).unwrap_or(jiff::SignedDuration::MAX),
            )
            .unwrap_or(Timestamp::MIN);
        // One streaming pass (a record of 1000 objects is ~200 KB: the log is never read
        // whole here): how many records, and how many are older than max_age.
        let lines = || -> std::io::Result<_> {
            Ok(BufReader::new(crate::state::open_state(&path)?)
                .split(b'\n')
                .map(|l| l.map(|l| (started_at(&l), l))))
        };
        let all = match lines() {
            Ok(all) => all,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        let (mut total, mut stale) = (0, 0);
        for line in all {
            if let (Some(at), _) = line.map_err(io)? {
                total += 1;
                stale += usize::from(at < cutoff);
            }
        }
        let dropped = total - (total - stale).min(keep);
        if dropped == 0 {
            return Ok(());
        }
        // The kept records are streamed into a temporary file that replaces the log
        // (fsynced, renamed, the folder fsynced): a crash keeps the old log or the new.
        let kept = lines().map_err(io)?;
        crate::state::write_private_with(&path, |out| {
            let mut seen = 0;
            for line in kept {
                let (at, line) = line?;
                if at.is_none() {
                    continue; // a torn line
                }
                seen += 1;
                if seen > dropped {
                    out.write_all(&line)?;
                    out.write_all(b"\n")?;
                }
            }
            Ok(())
        })
        .map_err(io)
    }
}

/// A record's start, read without decoding the rest of it; `None` for a torn line.
fn started_at(line: &[u8]) -> Option<Timestamp> {
    #[derive(serde::Deserialize)]
    struct Start {
        started_at: Timestamp,
    }
    serde_json::from_slice::<Start>(line)
        .ok()
        .map(|s| s.started_at)
}
