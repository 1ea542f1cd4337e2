//! The waves step: the app's objects written wave by wave, lowest first (`berth.dev/wave`,
//! Argo CD's sync wave; 0 by default). Each wave is applied (stage by stage, as one wave
//! always was), its Deployments followed, its other objects waited healthy and its `sync`
//! hooks run before the next wave is written; a wave that fails stops the rest. An app
//! whose objects are all in one wave syncs as it always did.

use std::collections::BTreeSet;
use std::time::Instant;

use super::context::{Ctx, Journal, Stop};
use super::lock::Locked;
use super::step::Step;
use super::steps::hooks::{self, HookObject};
use super::steps::{apply, health, roll_out};
use super::write::{written, Validated, Write};
use crate::history::WaveRecord;
use crate::manifest::{Manifest, ObjectKey};
use crate::plan::phases::{wave_of, HookPhase};
use crate::plan::{next_inventory, Inventory};

/// What the waves step is given: the commit's writes as the dry run passed them, the
/// objects of kinds its CRDs define, its hooks, and the inventories before (`old`) and
/// as written ahead (`ahead`).
pub(super) struct Waves<'a> {
    pub validated: Validated,
    pub deferred: Vec<Manifest>,
    pub hooks: &'a [HookObject],
    pub old: &'a Inventory,
    pub ahead: &'a Inventory,
    /// The objects that need no write.
    pub same: &'a [ObjectKey],
    pub sha: &'a str,
}

/// Writes the waves in order; `next` becomes the inventory to store: after every wave,
/// the whole commit's; after a failed one, the old entries with what was written so far
/// (and the failure policy's marks), so that nothing written is lost track of.
pub(super) async fn apply_waves(
    ctx: &Ctx<'_>,
    lock: &mut Locked,
    writes: &mut Vec<Write>,
    mut waves: Waves<'_>,
    next: &mut Inventory,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let numbers = waves_of(writes, &waves.deferred, waves.hooks);
    let several = numbers.len() > 1;
    *next = Inventory {
        commit: Some(waves.sha.to_string()),
        objects: waves.old.objects.clone(),
        held: None,
        ready: None,
        failed: false,
        origin: waves.old.origin.clone(),
        pre_hooks_ran: waves.ahead.pre_hooks_ran.clone(),
    };
    let mut numbers = numbers.into_iter();
    while let Some(wave) = numbers.next() {
        let ended = write_wave(ctx, lock, writes, &mut waves, wave, several, next, journal).await;
        if let Err(stop) = ended {
            if several {
                let unreached = numbers.map(|w| record(w, 0, "not-reached", Instant::now()));
                journal.waves.extend(unreached);
            }
            return Err(stop);
        }
    }
    *next = next_inventory(next, Some(waves.same), written(writes.iter()));
    Ok(())
}

/// Writes one wave: its objects applied, then followed; recorded when there are several waves.
#[allow(clippy::too_many_arguments)]
async fn write_wave(
    ctx: &Ctx<'_>,
    lock: &mut Locked,
    writes: &mut Vec<Write>,
    waves: &mut Waves<'_>,
    wave: i32,
    several: bool,
    next: &mut Inventory,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    let clock = Instant::now();
    let (this, rest): (Vec<Manifest>, Vec<Manifest>) = std::mem::take(&mut waves.deferred)
        .into_iter()
        .partition(|m| wave_of(m) == wave);
    waves.deferred = rest;
    lock.enter(ctx, Step::Apply);
    let shown = several.then_some(wave);
    let applied = apply::apply(ctx, writes, &waves.validated, this, shown, journal).await;
    let members: Vec<&Write> = writes
        .iter()
        .filter(|w| wave_of(&w.target.manifest) == wave)
        .collect();
    let ended = match applied {
        Ok(()) => {
            *next = next_inventory(next, None, written(members.iter().copied()));
            let (hooks, old, sha) = (waves.hooks, waves.old, waves.sha);
            follow(ctx, lock, &members, hooks, old, next, sha, wave, journal).await
        }
        Err(stop) => {
            // As a sync that died mid-apply: what was written ahead stays listed.
            *next = next_inventory(waves.ahead, None, written(writes.iter()));
            Err(stop)
        }
    };
    if several {
        let outcome = match ended {
            Ok(()) => "healthy",
            Err(Stop::Failed) => "failed",
            Err(Stop::Interrupted) => "interrupted",
        };
        let objects = members.iter().filter(|w| w.applied.is_some()).count();
        journal.waves.push(record(wave, objects, outcome, clock));
    }
    ended
}

/// The waves with something to do: writes, objects of the commit's CRDs' kinds, `sync`
/// hooks; one (0) when there is nothing, which is said as a sync without waves says it.
fn waves_of(writes: &[Write], deferred: &[Manifest], hooks: &[HookObject]) -> BTreeSet<i32> {
    let mut numbers: BTreeSet<i32> = writes
        .iter()
        .map(|w| wave_of(&w.target.manifest))
        .chain(deferred.iter().map(wave_of))
        .chain(
            hooks
                .iter()
                .filter(|h| h.runs_in(HookPhase::Sync, None))
                .map(|h| h.hook.wave),
        )
        .collect();
    if numbers.is_empty() {
        numbers.insert(0);
    }
    numbers
}

/// A wave's Deployments followed (and the failure policy applied), its other objects
/// waited healthy, then its `sync` hooks run.
#[allow(clippy::too_many_arguments)]
async fn follow(
    ctx: &Ctx<'_>,
    lock: &mut Locked,
    members: &[&Write],
    hooks: &[HookObject],
    old: &Inventory,
    next: &mut Inventory,
    sha: &str,
    wave: i32,
    journal: &mut Journal<'_>,
) -> Result<(), Stop> {
    lock.enter(ctx, Step::RollOut);
    roll_out::roll_out(ctx, members, old, next, sha, journal).await?;
    lock.enter(ctx, Step::Health);
    health::wait_healthy(ctx, members, old, next, journal).await?;
    lock.enter(ctx, Step::Hooks);
    hooks::run(ctx, hooks, HookPhase::Sync, Some(wave), journal).await
}

fn record(wave: i32, objects: usize, outcome: &str, clock: Instant) -> WaveRecord {
    WaveRecord {
        wave,
        objects,
        outcome: outcome.to_string(),
        ms: clock.elapsed().as_millis() as u64,
    }
}
