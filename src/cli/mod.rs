//! One module per `berth` command.

pub mod history;
pub mod plan;
pub mod render;
pub mod rollback;
pub mod run;
pub mod status;
pub mod sync;
pub mod validate;

/// How long a one-shot command waits for its notifications to be delivered.
pub const NOTIFY_FLUSH: std::time::Duration = std::time::Duration::from_secs(10);

/// Prints one line of a command that writes to the cluster: a closed stdout (`berth sync
/// | head -1`) must not stop a sync half way, so what nobody reads is dropped.
pub fn say(line: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}
