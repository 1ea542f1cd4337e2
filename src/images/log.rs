//! The write-backs' history, `state_dir/images/writes.jsonl`: one line per pushed commit
//! (when, where, the commit, each field's old and new tag), the newest [`KEEP`] kept;
//! `berth images history` reads it, journald has the same as log lines.
use std::io::Write;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::plan::Plan;
use super::write::Group;

/// Write-backs kept.
const KEEP: usize = 1000;
/// The longest line read.
const MAX_LINE: usize = 64 << 10;

/// One pushed commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteBack {
    pub at: Timestamp,
    pub repo: String,
    pub branch: String,
    pub commit: String,
    pub apps: Vec<String>,
    pub changes: Vec<Changed>,
}

/// One field of a write-back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    pub policy: String,
    pub path: String,
    pub line: usize,
    pub old: String,
    pub new: String,
}

impl WriteBack {
    /// `policy old -> new, …`.
    pub fn said(&self) -> String {
        let said: Vec<String> = (self.changes.iter())
            .map(|c| format!("{} {} -> {}", c.policy, c.old, c.new))
            .collect();
        said.join(", ")
    }
}

fn file(state_dir: &Path) -> PathBuf {
    state_dir.join("images").join("writes.jsonl")
}

/// Appends the write-back of `plan` as `commit` (a warning when it cannot).
pub fn append(state_dir: &Path, group: &Group<'_>, commit: &str, plan: &Plan) {
    let line = WriteBack {
        at: Timestamp::now(),
        repo: group.repo(),
        branch: group.branch.clone(),
        commit: commit.to_string(),
        apps: group.apps.iter().map(|a| a.name.clone()).collect(),
        changes: (plan.changes.iter())
            .map(|c| Changed {
                policy: c.policy.clone(),
                path: c.path.clone(),
                line: c.line,
                old: c.old.clone(),
                new: c.new.clone(),
            })
            .collect(),
    };
    if let Err(e) = write(state_dir, &line) {
        tracing::warn!(error = %e, "cannot record the image write-back");
    }
}

fn write(state_dir: &Path, line: &WriteBack) -> std::io::Result<()> {
    let path = file(state_dir);
    let mut kept = read(state_dir);
    kept.push(line.clone());
    if kept.len() > KEEP + KEEP / 5 {
        let drop = kept.len() - KEEP;
        kept.drain(..drop);
        return crate::state::write_private_with(&path, |out| {
            for line in &kept {
                serde_json::to_writer(&mut *out, line)?;
                out.write_all(b"\n")?;
            }
            Ok(())
        });
    }
    let mut out = crate::state::private_file()
        .create(true)
        .append(true)
        .open(&path)?;
    let mut bytes = serde_json::to_vec(line)?;
    bytes.push(b'\n');
    out.write_all(&bytes)
}

/// The write-backs recorded, oldest first (a line past the bound, or torn, skipped).
pub fn read(state_dir: &Path) -> Vec<WriteBack> {
    let limit = ((KEEP + KEEP / 5 + 1) * MAX_LINE) as u64;
    let Ok(bytes) =
        crate::manifest::read::read_capped(crate::state::open_state(&file(state_dir)), limit)
    else {
        return Vec::new();
    };
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty() && l.len() <= MAX_LINE)
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}
