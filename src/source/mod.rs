//! Where manifests come from: [`git`] fetches a repository and writes out a commit's tree;
//! [`shared`] shares those fetches between the apps of one repository;
//! [`known_hosts`] verifies ssh host keys; [`verify`] checks commit signatures; [`watch`]
//! turns commits in a local repository into sync triggers.

pub mod folders;
pub mod git;
pub mod known_hosts;
pub mod shared;
pub mod verify;
pub mod watch;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The commit a sync worked on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    /// Full SHA.
    pub sha: String,
    /// `Name <email>`.
    pub author: String,
    /// Commit time.
    pub time: Timestamp,
    /// First line of the message.
    pub subject: String,
}

impl CommitInfo {
    /// The first 7 characters of the SHA.
    pub fn short(&self) -> &str {
        &self.sha[..self.sha.len().min(7)]
    }
}
