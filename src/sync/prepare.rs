//! The first steps of a sync, before any write: the fetch (shared with the repository's
//! other apps), the last inventory, discovery, the render through the manifest pipeline,
//! the refusal to prune everything, and the plan against the live objects.

use std::sync::Arc;
use std::time::Instant;

use super::{Inputs, Prepared, Run, Stop, SyncError};
use crate::cluster::discovery::ClusterKinds;
use crate::cluster::inventory;
use crate::config::VerifyMode;
use crate::history::Trigger;
use crate::manifest::{kustomize, Builder, Manifest};
use crate::plan::Inventory;
use crate::plan::{self, Plan};
use crate::source::git::{self, Checkout};
use crate::source::shared::INTERVAL_SHARE;
use crate::source::verify::{Trust, VerifyError};

impl Run<'_> {
    /// Everything else before the first write: inventory, discovery, render, plan.
    pub(super) async fn prepare(&mut self, checkout: Checkout) -> Result<Prepared, Stop> {
        let inventory = self.load_inventory().await?;
        if let Some(previous) = &inventory.commit {
            let ancestry = || git::ancestry(&checkout.source, previous, &checkout.commit.sha);
            let mut rewritten = ancestry();
            if rewritten.is_some() && self.deepen().await {
                rewritten = ancestry();
            }
            self.rec.history_rewritten = rewritten.clone();
            if let Some(note) = rewritten {
                self.guard_rewind(note)?;
            }
        }
        let (mut kinds, discovered) = self.discover(None).await?;
        self.mark("render");
        let mut manifests = self.render(&checkout, &kinds)?;
        if discovered < self.begun && manifests.iter().any(|m| kinds.resolve(m).is_none()) {
            // A kind the shared discovery does not know: it may be new since.
            kinds = self.discover(Some(self.begun)).await?.0;
            manifests = self.render(&checkout, &kinds)?;
        }
        self.inputs = self.inputs_of(&checkout);
        self.guard_empty(&manifests, &inventory)?;
        self.mark("plan");
        let plan = self.plan(manifests, &kinds, &inventory).await?;
        Ok(Prepared {
            inventory,
            checkout,
            kinds,
            plan,
        })
    }

    /// The app's inventory: the cluster's ConfigMap, or berth's local copy when the
    /// ConfigMap was deleted or made unreadable by hand (entries the ConfigMap lost at the
    /// same commit are taken from the copy, so they are still pruned when git drops them).
    pub(super) async fn load_inventory(&mut self) -> Result<Inventory, Stop> {
        let agent = &self.syncer.agent;
        let ns = &agent.inventory_namespace;
        let app = &self.app.name;
        let local = inventory::load_local(&agent.state_dir, app);
        let name = format!("{ns}/{}", inventory::name(app));
        let (inv, warning) = match inventory::load(&self.syncer.client, ns, app).await {
            Ok(Some(stored)) => {
                self.inventory_version = Some(stored.version);
                let mut inv = stored.inventory;
                let adopted = local
                    .filter(|l| l.commit == inv.commit)
                    .map_or(0, |l| inv.adopt(l.objects));
                let warning = (adopted > 0).then(|| format!(
                    "inventory {name} lacks {} that berth's local copy holds (edited by hand?): keeping track of them",
                    crate::plural(adopted, "object")
                ));
                (inv, warning)
            }
            Ok(None) => match local {
                Some(l) if !l.objects.is_empty() => {
                    let warning = format!(
                        "inventory {name} is missing (deleted by hand?): carrying on from berth's local copy ({})",
                        crate::plural(l.objects.len(), "object")
                    );
                    (l, Some(warning))
                }
                _ => (Inventory::default(), None),
            },
            Err(e @ crate::cluster::ClusterError::Inventory { .. }) => match local {
                Some(l) => {
                    let warning = format!("{e}: carrying on from berth's local copy");
                    (l, Some(warning))
                }
                None => {
                    self.fail(e);
                    return Err(Stop::Failed);
                }
            },
            Err(e) => {
                self.fail(e);
                return Err(Stop::Failed);
            }
        };
        if let Some(w) = warning {
            tracing::warn!(app = %app, "{w}");
            (self.report)(&format!("warning: {w}"));
        }
        self.rec.previous_commit = inv.commit.clone();
        Ok(inv)
    }

    /// The app's commit, from the fetch it shares with its repository's other apps.
    pub(super) async fn fetch(&mut self) -> Result<Checkout, Stop> {
        (self.report)(&format!(
            "fetching {}",
            git::redact_url(&git::remote_url(&self.app.repo))
        ));
        let since = match self.options.trigger {
            Trigger::Interval => self.options.requested - INTERVAL_SHARE,
            _ => self.options.requested,
        };
        let clock = Instant::now();
        let fetched = self.syncer.sources.fetch(self.app, since).await;
        self.rec.fetch_ms = Some(clock.elapsed().as_millis() as u64);
        match fetched {
            Ok(checkout) => {
                let c = &checkout.commit;
                (self.report)(&format!(
                    "commit {} {:?} by {}",
                    c.short(),
                    c.subject,
                    c.author
                ));
                self.rec.commit = Some(c.clone());
                if let Err(source) = self.verify(&checkout) {
                    self.fail(SyncError::Verify { source });
                    return Err(Stop::Failed);
                }
                Ok(checkout)
            }
            Err(e) => {
                self.fail(SyncError::Fetch { source: e });
                Err(Stop::Failed)
            }
        }
    }

    /// With `[app.verify]`: the commit's signature, checked against the trusted keys
    /// (read again each sync, so a key added or removed counts at once) and recorded.
    fn verify(&mut self, checkout: &Checkout) -> Result<(), VerifyError> {
        let Some(trust) = Trust::load(&self.app.verify)? else {
            return Ok(());
        };
        let repo = git::repository(&checkout.source).map_err(|e| VerifyError::Bad {
            commit: checkout.commit.short().to_string(),
            fingerprint: None,
            why: format!("cannot open berth's repository cache ({})", e.message()),
        })?;
        let now = jiff::Timestamp::now();
        let signature = match (&self.app.verify.mode, &self.app.tag) {
            (VerifyMode::Tag, Some(name)) => {
                let Some(tag) = &checkout.tag else {
                    return Err(VerifyError::UnsignedTag { tag: name.clone() });
                };
                trust.verify_tag(&repo, tag, name, &checkout.commit.sha, now)?
            }
            _ => trust.verify(&repo, &checkout.commit.sha, now)?,
        };
        (self.report)(&format!(
            "signed by {} ({} key {})",
            signature.signer, signature.format, signature.fingerprint
        ));
        self.rec.signature = Some(signature);
        Ok(())
    }

    /// Fetches the history a shallow cache lacks (its first fetch took the newest commit
    /// alone); whether it did. A failure is logged: the caller goes on with what it has.
    pub(super) async fn deepen(&self) -> bool {
        let app = self.app.clone();
        let state_dir = self.syncer.agent.state_dir.clone();
        let deepened = tokio::task::spawn_blocking(move || git::deepen(&app, &state_dir)).await;
        match deepened {
            Ok(Ok(deepened)) => deepened,
            Ok(Err(e)) => {
                tracing::warn!(app = %self.app.name, error = %e, "cannot fetch the repository's history");
                false
            }
            Err(_) => false,
        }
    }

    /// What the render read: the app's paths and what its kustomizations reach.
    fn inputs_of(&self, checkout: &Checkout) -> Option<Inputs> {
        let root = checkout.dir.canonicalize().ok()?;
        let paths: Vec<String> = self
            .app
            .path
            .iter()
            .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_string())
            .map(|p| if p == "." { String::new() } else { p })
            .collect();
        let paths = kustomize::reach(&root, &paths);
        let digest = git::paths_digest(&checkout.source, &checkout.commit.sha, &paths)?;
        Some(Inputs {
            config: self.syncer.inputs.config(self.app),
            paths,
            digest,
            commit: checkout.commit.sha.clone(),
            objects: 0,
        })
    }

    /// The cluster's kinds from the agent's shared discovery, discovered at `newer_than`
    /// or later when given; and when they were discovered.
    pub(super) async fn discover(
        &mut self,
        newer_than: Option<Instant>,
    ) -> Result<(Arc<ClusterKinds>, Instant), Stop> {
        self.syncer.kinds.get(newer_than).await.map_err(|e| {
            self.fail(e);
            Stop::Failed
        })
    }

    pub(super) fn render(
        &mut self,
        checkout: &Checkout,
        kinds: &ClusterKinds,
    ) -> Result<Vec<Manifest>, Stop> {
        let builder = match Builder::for_app(self.app, &self.syncer.agent, &checkout.dir, kinds) {
            Ok(b) => b,
            Err(e) => {
                self.fail(SyncError::Glob {
                    app: self.app.name.clone(),
                    source: e,
                });
                return Err(Stop::Failed);
            }
        };
        match builder.render() {
            Ok(manifests) => {
                (self.report)(&format!(
                    "rendered {}",
                    crate::plural(manifests.len(), "object")
                ));
                Ok(manifests)
            }
            Err(errors) => {
                for e in errors.into_vec() {
                    self.fail(e);
                }
                (self.report)("render failed: nothing was written");
                Err(Stop::Failed)
            }
        }
    }

    /// A branch or tag that moved to a commit not descending from the last applied one:
    /// refused unless the app or this sync accepts it. A pinned commit is the operator's
    /// own choice in the configuration, never a replay.
    fn guard_rewind(&mut self, note: String) -> Result<(), Stop> {
        let pinned = matches!(self.app.git_ref(), crate::config::GitRef::Commit(_));
        if pinned || self.app.allow_rewind || self.options.accept_rewind {
            (self.report)(&format!("warning: {note}"));
            return Ok(());
        }
        self.fail(SyncError::Rewound {
            app: self.app.name.clone(),
            note,
        });
        Err(Stop::Failed)
    }

    pub(super) fn guard_empty(
        &mut self,
        manifests: &[Manifest],
        inventory: &Inventory,
    ) -> Result<(), Stop> {
        if manifests.is_empty()
            && !inventory.objects.is_empty()
            && self.app.prune
            && !self.app.allow_empty
        {
            self.fail(SyncError::EmptyCommit {
                app: self.app.name.clone(),
                objects: inventory.objects.len(),
            });
            return Err(Stop::Failed);
        }
        Ok(())
    }

    pub(super) async fn plan(
        &mut self,
        manifests: Vec<Manifest>,
        kinds: &ClusterKinds,
        inventory: &Inventory,
    ) -> Result<Plan, Stop> {
        let draft = match plan::draft(manifests, |m| kinds.resolve(m), inventory) {
            Ok(draft) => draft,
            Err(errors) => {
                errors.into_iter().for_each(|e| self.fail(kinds.explain(e)));
                return Err(Stop::Failed);
            }
        };
        let resources: Vec<_> = draft
            .unchanged()
            .map(|t| {
                let m = &t.manifest;
                (
                    t.resolved.clone(),
                    m.namespace().map(str::to_string),
                    m.name().to_string(),
                )
            })
            .collect();
        let live =
            match inventory::live_objects(&self.syncer.client, resources, &self.app.name).await {
                Ok(live) => live,
                Err(e) => {
                    self.fail(e);
                    return Err(Stop::Failed);
                }
            };
        Ok(draft.settle(inventory, &live))
    }
}
