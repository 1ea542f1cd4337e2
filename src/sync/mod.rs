//! One sync of one app, as a list of steps, each a function in a file named for it that
//! takes the read-only `Ctx` (`context.rs`) and its inputs and returns its output; the
//! orchestrator ([`Syncer::sync`], `steps` below) alone folds what they return into the
//! record:
//!
//! ```text
//! lock.rs      take the app's lock (one writer per app; a killed sync recorded)
//! fetch.rs     fetch(ctx)                          → Checkout
//! verify.rs    verify(ctx, checkout)               → Option<Signature>
//! skip.rs      untouched(ctx, checkout)            → Option<(Skip, Inputs)>
//! inventory.rs load(ctx)                           → (Inventory, InventoryStore)
//! rewind.rs    rewritten(ctx, checkout, previous)  → Option<note>; guard_rewind
//! render.rs    render(ctx, checkout)               → Rendered; refuse_empty
//! hooks.rs     split(ctx, manifests, kinds, upgrade) → (objects, hooks)
//! plan.rs      plan(ctx, manifests, kinds, inv)    → Plan
//! skip.rs      held_or_unchanged(ctx, …, plan)     → Option<Skip>
//! validate.rs  validate(ctx, &mut writes)          → Validated; hooks::validate
//! hooks.rs     run(ctx, hooks, Pre, None)
//! inventory.rs InventoryStore::write_ahead(…)      → Inventory
//! waves.rs     apply_waves(ctx, …, &mut next), per wave:
//!   apply.rs     apply(ctx, &mut writes, &validated, deferred, wave)
//!   roll_out.rs  roll_out(ctx, wave's writes, old, &mut next, sha)
//!   health.rs    wait_healthy(ctx, wave's writes, old, &mut next)
//!   hooks.rs     run(ctx, hooks, Sync, Some(wave))
//! prune.rs     prune(ctx, kinds, candidates, old, &mut next)
//! hooks.rs     run(ctx, hooks, Post, None) (Fail when the sync failed after the dry run)
//! inventory.rs InventoryStore::store(ctx, old, next)
//! record.rs    append(syncer, &mut record)
//! notify.rs    notify(syncer, &record)
//! ```
//!
//! Steps say their errors, object actions and requests in the `Journal`
//! (appended to, read only by the orchestrator); a failed step stops what follows — a
//! broken commit writes nothing and prunes nothing. [`Step`] names where a sync is (the
//! lock file's marker). `preview.rs` is `berth plan` (the same steps up to the dry run);
//! `manual.rs` is `berth rollback`; `depends.rs` is the gate a caller asks before a sync
//! (`depends_on`).

// The orchestrators: a sync, its waves and its lock; `berth plan` (online and offline),
// `berth rollback`, an app's removal, the dependency gate.
mod affected;
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
