//! How a tool's run goes wrong: the runner's error, held in a render's
//! [`ManifestError::Tool`](crate::manifest::ManifestError::Tool).

use std::time::Duration;

/// How a tool's run went wrong; each message follows the tool's name.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// It could not be started.
    #[error("could not be started: {0}")]
    Spawn(std::io::Error),
    /// The kernel refused the walls it would run in.
    #[error("could not be confined: {0}")]
    Walls(::landlock::RulesetError),
    /// It did not finish in time (and was killed).
    #[error("did not finish within {}s (agent.render_timeout)", .0.as_secs())]
    Timeout(Duration),
    /// It exited unsuccessfully: its status and what it said on stderr.
    #[error("failed ({}): {}", .0, .1.trim())]
    Failed(std::process::ExitStatus, String),
    /// Its output passed the bound (and it was killed).
    #[error("wrote more than it may")]
    TooLarge,
    /// It ran out of the memory it may have (and died of it).
    #[error("exceeded its memory limit ({}) and was stopped (agent.render_memory)", crate::config::show_size(*.0))]
    Memory(u64),
    /// It used up the CPU time it may have (and the kernel killed it).
    #[error("used up its CPU time ({}s) and was stopped (agent.render_timeout)", .0.as_secs())]
    Cpu(Duration),
    /// Something else killed it (the kernel's out-of-memory killer, an operator).
    #[error("was killed (SIGKILL) after {}s of CPU time, neither by berth nor at its limits (the system's out-of-memory killer?)", .0.as_secs())]
    Killed(Duration),
}

impl ToolError {
    /// The same error, what the tool said on stderr passed through `f`.
    pub fn map_stderr(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            ToolError::Failed(status, stderr) => ToolError::Failed(status, f(stderr)),
            e => e,
        }
    }
}
