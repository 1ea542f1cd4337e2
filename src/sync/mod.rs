//! One sync of one app, as a list of steps, each a function in a file of `steps/` named
//! for it that takes the read-only `Ctx` (`context.rs`) and its inputs and returns its
//! output; the orchestrator ([`Syncer::sync`] in `pipeline.rs`, the waves in `waves.rs`)
//! alone composes them and folds what they return into the record — a step never calls
//! another:
//!
//! ```text
//! lock.rs            take the app's lock (one writer per app; a killed sync recorded)
//! steps/fetch.rs     fetch(ctx)                          → Checkout
//! steps/verify.rs    verify(ctx, checkout)               → Option<Signature>
//! steps/skip.rs      untouched(ctx, checkout)            → Option<(Skip, Inputs)>
//! steps/inventory.rs load(ctx)                           → (Inventory, InventoryStore)
//! steps/rewind.rs    rewritten(ctx, checkout, previous)  → Option<note>; guard_rewind
//! steps/render.rs    render(ctx, checkout)               → Rendered; refuse_empty
//! steps/hooks.rs     split(ctx, manifests, kinds, upgrade) → (objects, hooks)
//! steps/plan.rs      plan(ctx, manifests, kinds, inv)    → Plan
//! steps/skip.rs      held_or_unchanged(ctx, …, plan)     → Option<Skip>
//! steps/namespace.rs wanted(ctx, writes)                 → Option<Wanted>
//! steps/validate.rs  validate(ctx, &mut writes, created) → Validated; hooks::validate
//! steps/inventory.rs InventoryStore::write_ahead(…)      → Inventory
//! steps/namespace.rs ensure(ctx, wanted); apply::namespaces_first
//! steps/hooks.rs     run(ctx, hooks, Pre, None)
//! waves.rs           apply_waves(ctx, …, &mut next), per wave:
//!   steps/apply.rs     apply(ctx, &mut writes, &validated, deferred, wave)
//!   steps/roll_out.rs  roll_out(ctx, wave's writes, old, &mut next, sha)
//!   steps/health.rs    wait_healthy(ctx, wave's writes, old, &mut next)
//!   steps/hooks.rs     run(ctx, hooks, Sync, Some(wave))
//! steps/prune.rs     prune(ctx, kinds, candidates, old, &mut next)
//! steps/hooks.rs     run(ctx, hooks, Post, None) (Fail when the sync failed after the dry run)
//! steps/inventory.rs InventoryStore::store(ctx, old, next)
//! steps/record.rs    append(syncer, &mut record)
//! steps/notify.rs    notify(syncer, &record)
//! ```
//!
//! Steps say their errors, object actions and requests in the `Journal` (appended to,
//! read only by the orchestrator) and their progress as typed [`Progress`] events; a
//! failed step stops what follows — a broken commit writes nothing and prunes nothing.
//! What two steps share sits below them: `dry_run.rs`, `ready.rs`, `follow.rs`,
//! `write.rs`, discovery on the `Ctx`. [`Step`] names where a sync is (the lock file's
//! marker). `preview.rs` is `berth plan` (the same steps up to the dry run); `manual.rs`
//! is `berth rollback`; `remove.rs` an app removed; `depends.rs` the gate a caller asks
//! before a sync (`depends_on`).

// The orchestrators: a sync, its waves and its lock; `berth plan` (online and offline),
// `berth rollback`, an app's removal, the dependency gate.
mod affected;
mod canary;
mod depends;
mod lock;
mod manual;
mod offline;
mod pipeline;
mod preview;
mod remove;
mod waves;
// The steps, each in a file of its own.
mod steps;
// What the steps share, below them.
mod context;
mod dry_run;
mod error;
mod follow;
mod inputs;
mod progress;
mod ready;
mod step;
mod syncer;
mod write;

pub use depends::{note_waiting, waiting_note, Waiting};
pub use error::SyncError;
pub use lock::{in_flight, syncing, Marker};
pub use manual::{RollbackRefused, RollbackRequest};
pub use offline::preview_offline;
pub use preview::{PlannedHook, PlannedObject, Preview};
pub use progress::{Level, Progress, Report};
pub use step::Step;
pub use syncer::{SyncOptions, Syncer};
