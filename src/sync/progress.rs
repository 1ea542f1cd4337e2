//! What a sync says while it runs: the step it enters and its progress lines, each with
//! its level. `berth sync` prints the lines; the agent logs them at their level and shows
//! the step on the status page.

use super::step::Step;

/// How much a progress line matters: the agent logs it at this level (journald's
/// priority follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// What the sync does.
    Info,
    /// What a user should look at, though the sync goes on.
    Warn,
    /// What failed.
    Error,
}

/// One thing a sync says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress<'a> {
    /// It entered a step.
    Step(Step),
    /// A line, as the terminal shows it (`error: …`, `warning: …`).
    Line {
        /// How much it matters.
        level: Level,
        /// What it says.
        text: &'a str,
    },
}

/// Where progress goes: the terminal for `berth sync`, the log for the daemon.
pub type Report<'a> = &'a (dyn Fn(Progress<'_>) + Send + Sync);
