//! What every step of a sync reads ([`Ctx`]: the agent, the app, its cluster, the client
//! that writes its objects, the options, shutdown and where progress goes) and what a step says it did
//! ([`Journal`]: errors, object actions, rollouts, health, requests; folded into the record by the
//! orchestrator). Steps take the one by shared reference and the other, when they report
//! object actions or errors that do not stop the sync, by `&mut`.

use std::sync::Arc;
use std::time::Instant;

use super::error::SyncError;
use super::progress::{Level, Progress, Report};
use super::syncer::{SyncOptions, Syncer};
use crate::cluster::apply::ApplySettings;
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::Cluster;
use crate::config::AppConfig;
use crate::history::{
    HookRecord, ObjectAction, ObjectHealth, RecordError, RolloutRecord, SyncRecord, Trigger,
    WaveRecord,
};
use crate::shutdown::{self, Signal};

/// The read-only context of one sync's steps.
pub(super) struct Ctx<'a> {
    /// What every sync of the agent shares: the agent's settings, the clusters, the
    /// repositories' fetches, the history.
    pub syncer: &'a Syncer,
    /// The app.
    pub app: &'a AppConfig,
    /// The app's cluster: berth's client there (its own state and reads), whether it
    /// answers, its kinds.
    pub cluster: &'a Cluster,
    /// What writes the app's objects (dry run, apply, prune, restore): berth's client in
    /// the app's cluster, or one impersonating the app's account there.
    pub writer: kube::Client,
    /// How this sync runs.
    pub options: SyncOptions,
    /// The shutdown signal.
    pub shutdown: &'a Signal,
    /// Where progress lines go.
    pub report: Report<'a>,
    /// Keep the server's whole answers to the dry run and the apply (`berth plan`).
    pub bodies: bool,
    /// Go on with the objects that render when others do not (`berth plan`: every error
    /// of a revision at once); a sync never does.
    pub partial: bool,
    /// When the sync began (a discovery older than this may miss a new kind).
    pub begun: Instant,
}

/// The most errors a sync keeps (and says).
pub(super) const MAX_ERRORS: usize = crate::manifest::error::MAX_ERRORS;

/// The longest error message kept (a tool's stderr is read to 64 KiB).
pub(super) const MAX_ERROR_BYTES: usize = 8 << 10;

/// Why the steps stopped early; the errors are already in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// A step failed.
    Failed,
    /// Shutdown came.
    Interrupted,
}

/// What the steps of a sync say they did, in the order they did it. Steps append; only
/// the orchestrator reads it, to fold it into the record.
pub(super) struct Journal<'a> {
    report: Report<'a>,
    /// Errors, each said when it happened (the first [`MAX_ERRORS`]).
    pub errors: Vec<RecordError>,
    /// The errors past the first [`MAX_ERRORS`], counted and neither said nor kept.
    more_errors: usize,
    /// Objects written or pruned.
    pub objects: Vec<ObjectAction>,
    /// Rollouts followed (and rollbacks).
    pub rollouts: Vec<RolloutRecord>,
    /// Objects waited for, and how each ended.
    pub health: Vec<ObjectHealth>,
    /// Hooks run.
    pub hooks: Vec<HookRecord>,
    /// Waves applied (or not reached).
    pub waves: Vec<WaveRecord>,
    /// Write requests sent.
    pub requests: u64,
    /// Objects found needing no write.
    pub unchanged: usize,
}

impl<'a> Ctx<'a> {
    /// The context of one sync of `app`.
    pub fn new(
        syncer: &'a Syncer,
        app: &'a AppConfig,
        options: SyncOptions,
        shutdown: &'a Signal,
        report: Report<'a>,
    ) -> Self {
        let cluster = syncer.cluster(app);
        let writer = match crate::cluster::client::Identity::of(app) {
            Some(identity) => crate::cluster::client::impersonating(&cluster.client, &identity),
            None => cluster.client.clone(),
        };
        Ctx {
            syncer,
            app,
            cluster,
            writer,
            options,
            shutdown,
            report,
            bodies: false,
            partial: false,
            begun: Instant::now(),
        }
    }

    /// Where the app comes from: what its inventory must say.
    pub fn origin(&self) -> crate::plan::AppOrigin {
        self.origin_of(self.app)
    }

    /// Where `app`, of this sync's cluster, comes from.
    pub fn origin_of(&self, app: &AppConfig) -> crate::plan::AppOrigin {
        crate::plan::AppOrigin {
            set: app.set.clone(),
            folder: app.folder.clone(),
            git_ref: app.preview.clone(),
            cluster: self.cluster.name.clone(),
            repo: app.origin(),
        }
    }

    /// The context of a one-shot command (`berth plan`, `berth rollback`): started from
    /// the command line, never interrupted.
    pub fn for_command(syncer: &'a Syncer, app: &'a AppConfig, report: Report<'a>) -> Self {
        Ctx::new(
            syncer,
            app,
            SyncOptions::new(Trigger::Cli),
            shutdown::never(),
            report,
        )
    }

    /// Says one progress line.
    pub fn say(&self, line: &str) {
        self.tell(Level::Info, line);
    }

    /// Says a warning (`warning: …`): the sync goes on.
    pub fn warn(&self, warning: &str) {
        self.tell(Level::Warn, &format!("warning: {warning}"));
    }

    /// Says one line at `level`.
    pub fn tell(&self, level: Level, text: &str) {
        (self.report)(Progress::Line { level, text });
    }

    /// `Err(Stop::Interrupted)` once shutdown came.
    pub fn interrupted(&self) -> Result<(), Stop> {
        if shutdown::is_stopped(self.shutdown) {
            Err(Stop::Interrupted)
        } else {
            Ok(())
        }
    }

    /// How the app's objects are applied.
    pub fn settings(&self) -> ApplySettings {
        ApplySettings {
            field_manager: self.syncer.agent.field_manager.clone(),
            force: self.app.force_conflicts,
            concurrency: self.syncer.agent.concurrency,
            bodies: self.bodies,
        }
    }

    /// Other apps depend on this one: a commit that changes nothing of it still moves
    /// where it is ready (their gate, `depends.rs`).
    pub fn depended_on(&self) -> bool {
        !crate::config::order::dependents(&self.syncer.config().apps, &self.app.name).is_empty()
    }

    /// The cluster's kinds, discovered at `newer_than` or later (`None`: any discovery
    /// will do), and when; a discovery that fails stops the sync.
    pub async fn discover(
        &self,
        newer_than: Option<Instant>,
        journal: &mut Journal<'_>,
    ) -> Result<(Arc<ClusterKinds>, Instant), Stop> {
        self.cluster
            .kinds
            .get(newer_than)
            .await
            .map_err(|e| journal.stop(e))
    }

    /// An empty journal for this sync.
    pub fn journal(&self) -> Journal<'a> {
        Journal {
            report: self.report,
            errors: Vec::new(),
            more_errors: 0,
            objects: Vec::new(),
            rollouts: Vec::new(),
            health: Vec::new(),
            hooks: Vec::new(),
            waves: Vec::new(),
            requests: 0,
            unchanged: 0,
        }
    }
}

impl Journal<'_> {
    /// Records an error (and says it).
    /// The first [`MAX_ERRORS`] are kept, each at most [`MAX_ERROR_BYTES`]: a history line
    /// and a burst of log lines stay bounded whatever a commit holds.
    pub fn fail(&mut self, e: impl Into<SyncError>) {
        let e = e.into();
        if let SyncError::Render(crate::manifest::ManifestError::More { count }) = e {
            self.more_errors += count;
            return;
        }
        if self.errors.len() >= MAX_ERRORS {
            self.more_errors += 1;
            return;
        }
        let mut message = crate::Chain(&e).to_string();
        if message.len() > MAX_ERROR_BYTES {
            let mut end = MAX_ERROR_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push_str(" … (cut)");
        }
        (self.report)(Progress::Line {
            level: Level::Error,
            text: &format!("error: {message}"),
        });
        self.errors.push(RecordError {
            message,
            source: e.origin(),
        });
    }

    /// Records an error that stops the sync.
    pub fn stop(&mut self, e: impl Into<SyncError>) -> Stop {
        self.fail(e);
        Stop::Failed
    }

    /// Moves what the journal holds into `rec`.
    pub fn fold_into(self, rec: &mut SyncRecord) {
        rec.errors.extend(self.errors);
        if self.more_errors > 0 {
            rec.errors.push(RecordError {
                message: format!(
                    "… and {} more errors (the first {MAX_ERRORS} are kept)",
                    self.more_errors
                ),
                source: None,
            });
        }
        rec.objects.extend(self.objects);
        rec.rollouts.extend(self.rollouts);
        rec.health.extend(self.health);
        rec.hooks.extend(self.hooks);
        rec.waves.extend(self.waves);
        rec.requests += self.requests;
        rec.unchanged += self.unchanged;
    }
}
