//! The steps of a sync, each a function in a file named for it that takes the read-only
//! `Ctx` and its inputs and returns its output. A step never calls another step: the
//! orchestrator (`pipeline.rs`, `waves.rs`) composes them, and what two steps share lives
//! below them (`context.rs`, `write.rs`, `dry_run.rs`, `ready.rs`, `kinds.rs`).

pub(super) mod apply;
pub(super) mod fetch;
pub(super) mod health;
pub(super) mod hooks;
pub(super) mod inventory;
pub(super) mod namespace;
pub(super) mod notify;
pub(super) mod plan;
pub(super) mod prune;
pub(super) mod record;
pub(super) mod render;
pub(super) mod rewind;
pub(super) mod roll_out;
pub(super) mod skip;
pub(super) mod validate;
pub(super) mod verify;
