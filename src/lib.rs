//! berth: a GitOps reconciliation agent. Git drives a Kubernetes cluster from one small
//! binary.
//!
//! ```text
//! trigger    interval · notify · webhook · `berth sync` · a dependency synced   agent, cli
//! depends    each app of depends_on ready at its own commit, else wait  sync/depends
//!    │
//! lock       one writer per app; a killed sync recorded                 sync/lock
//! fetch      the app's commit C, shared by the repository's apps         sync/fetch
//! verify     C signed by a trusted key ([app.verify])                     sync/verify
//! skip       C changes none of the paths the last sync read → no request  sync/skip
//!    │
//! inventory  what the last sync left (the ConfigMap, or its local copy)   sync/inventory
//! rewind     C must descend from the last applied commit                  sync/rewind
//! render     discovery · the Visitor pipeline (sops files decrypted in memory) ·
//!            kustomize · helm → objects                                   sync/render
//! hooks      the hooks apart from the app's objects (their phase, order)  sync/hooks
//! plan       write · keep · prune, against the live objects               sync/plan
//! skip       held at C, or nothing changed or drifted → no write          sync/skip
//!    │
//! validate   server-side dry run of every object and hook; a refusal → no write  sync/validate
//! pre hooks  created, waited on, deleted by their policy                  sync/hooks
//! write ahead  the inventory gains every object this sync may create      sync/inventory
//! waves      lowest first, each: apply by stage, follow its Deployments   sync/waves, apply,
//!            (roll back, halt), wait its health, run its sync hooks      roll_out, health, hooks
//! prune      delete what the last inventory had and C does not            sync/prune
//! post hooks (on a failure after the dry run: the fail hooks)             sync/hooks
//!    │
//! record     inventory · history record · log line                        sync/inventory, record
//! notify     the record's events to the [[notify]] receivers              sync/notify
//! ```
//!
//! Each step is a function of [`sync`] with its inputs and output in its signature; the
//! orchestrator is [`sync::Syncer::sync`] (`docs/architecture.md` has the whole table).
//! Below the steps:
//! - fetch: [`source::shared::Sources::fetch`]; verify: [`source::verify::Trust`];
//! - render: [`manifest::Builder::render`];
//! - plan: [`plan::draft`], the live objects of what git did not change, then
//!   [`plan::Draft::settle`], [`plan::split`] and [`plan::next_inventory`];
//! - validate and apply: [`cluster::apply::apply_all`];
//! - roll out: [`rollout::engine::follow_driving`], revisions by
//!   [`rollout::revisions::owned`]; health: [`health::health`];
//! - prune: [`cluster::prune::prune`];
//! - record: [`cluster::inventory::store`] and [`history::HistoryLog::append`]; notify:
//!   [`notifications::Notifications::observe`].
//!
//! Modules:
//! - [`config`]: the TOML configuration, validated settings and their errors;
//! - [`shutdown`]: the one shutdown signal every task takes;
//! - [`digest`]: SHA-256 and lower-case hex, behind every digest berth writes;
//! - [`blocking`]: CPU work that grows with a commit, run off the async workers;
//! - [`retry`]: the one backoff with jitter, its random source, the transient HTTP statuses;
//! - [`body_hmac`]: the `sha256=<hex>` HMAC of an HTTP body (webhooks in, notifications out);
//! - [`source`]: git fetch and checkout, commit signatures, ssh host keys, repository
//!   watches;
//! - [`manifest`]: the Visitor pipeline that turns a checkout into manifests;
//! - [`cluster`]: client, discovery, apply, inventory, prune, a live object's health;
//! - [`health`]: the health of every kind but Deployments, from its status (pure);
//! - [`rollout`]: template hashes, revisions, step math, status, following, berth's own
//!   engine, rollback;
//! - [`plan`]: what a sync writes, keeps and prunes, and the inventory's data (pure);
//! - [`diff`]: `berth plan`'s per-object diffs, Secret values masked (pure);
//! - [`history`]: the sync record (rollout timelines included) and its JSON Lines log;
//! - [`state`]: the private state folder (0700 folders, 0600 files, atomic durable writes);
//! - [`notifications`]: `[[notify]]` receivers: which events a record makes, their
//!   payloads, delivery with retries;
//! - [`sync`]: one sync of one app, step by step; `berth plan` and `berth rollback`;
//! - [`fleet`]: app sets — listed, their apps made, what a listing changes and its one
//!   executor;
//! - [`live`]: what the cluster says of one app now (`berth status`, the status page);
//! - [`service`]: systemd notify and watchdog, the HTTP endpoint, the leader Lease;
//! - [`page`]: the read-only status page and its JSON, served by the agent's endpoint;
//! - [`agent`]: the daemon's tasks and triggers.
//!
//! The local control plane of the tests, benchmarks and demo is the workspace's
//! `berth-testenv` crate (`testenv/`), not part of this library.

pub mod agent;
pub mod blocking;
pub mod body_hmac;
pub mod cluster;
pub mod config;
pub mod diff;
pub mod digest;
pub mod fleet;
pub mod health;
pub mod history;
pub mod images;
pub mod live;
pub mod manifest;
pub mod notifications;
pub mod page;
pub mod plan;
pub mod retry;
pub mod rollout;
pub mod service;
pub mod shutdown;
pub mod source;
pub mod state;
pub mod suspend;
pub mod sync;
pub mod versions;

/// `1 object`, `2 objects`: counts in messages read as English.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// An error and its causes, each after a colon (`cannot read password file /x: Permission
/// denied (os error 13)`): the whole message of an error whose causes are its
/// `source()`s, where it is said or recorded as one line.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}
