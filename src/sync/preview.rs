//! `berth plan`: a sync that stops after the dry run — what each object would become, and
//! for each Deployment whose template changes, the revision and the predicted steps.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject};
use serde::Serialize;

use super::context::{Ctx, Journal};
use super::lock::Locked;
use super::pipeline::{fetch_verified, prepare, Prepared};
use super::progress::Report;
use super::steps::hooks::{self, HookObject};
use super::steps::{namespace, prune, validate};
use super::syncer::Syncer;
use super::write::{new_namespaces, split_writes, Write};
use crate::cluster::prune::Pruned;
use crate::cluster::Action;
use crate::config::AppConfig;
use crate::history::Trigger;
use crate::manifest::ObjectKey;
use crate::plan::phases::{wave_of, HookPhase};
use crate::rollout::predict::{predict, DeploymentPlan};
use crate::rollout::revisions::{self, Revisions};
use crate::source::CommitInfo;

/// One object in a plan.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedObject {
    /// The object.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// `create`, `configure`, `prune`, `kept` (a prune candidate that stays) or `refused`
    /// (the dry run refused it: the sync would fail).
    pub action: &'static str,
    /// Why, when not obvious.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// A unified diff from the live object to the server's dry-run answer (Secret values
    /// masked); `None` for prunes and objects the dry run could not check yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The wave it is written in (`None` for prunes, which follow the last wave).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<i32>,
}

/// A hook a sync would run.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedHook {
    /// `pre`, `sync`, `post` or `fail`.
    pub phase: HookPhase,
    /// Its object (`migrate-*` when named by `generateName`).
    #[serde(flatten)]
    pub key: ObjectKey,
    /// Its order in its phase (for `sync`: its wave).
    pub wave: i32,
    /// When its object is deleted.
    pub deleted: String,
}

impl PlannedObject {
    /// `deployment.apps/web -n shop configure (drift: …)`.
    pub fn line(&self) -> String {
        let note = self
            .note
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        format!("{} {}{note}", self.key.kubectl(), self.action)
    }
}

/// What a sync of the app would do now.
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    /// The app.
    pub app: String,
    /// The commit it would apply.
    pub commit: Option<CommitInfo>,
    /// The commit applied last.
    pub previous_commit: Option<String>,
    /// Why the app is held, when it is (a sync would apply nothing).
    pub held: Option<String>,
    /// Objects that would change.
    pub objects: Vec<PlannedObject>,
    /// Objects that would not.
    pub unchanged: usize,
    /// The hooks a sync would run, by phase and order.
    pub hooks: Vec<PlannedHook>,
    /// Deployments whose template changes.
    pub deployments: Vec<DeploymentPlan>,
    /// Why it would fail, if it would.
    pub errors: Vec<String>,
    /// What the plan could not look at, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Preview {
    /// The plan of `app` before anything is known.
    pub(super) fn of(app: &str) -> Self {
        Preview {
            app: app.to_string(),
            commit: None,
            previous_commit: None,
            held: None,
            objects: Vec::new(),
            unchanged: 0,
            hooks: Vec::new(),
            deployments: Vec::new(),
            errors: Vec::new(),
            notes: Vec::new(),
        }
    }
}

impl Syncer {
    /// Plans a sync of `app` against the cluster without writing anything; Secret values
    /// in its diffs are masked unless `show_secrets`.
    pub async fn preview(
        &self,
        app: &AppConfig,
        show_secrets: bool,
        report: Report<'_>,
    ) -> Preview {
        let mut ctx = Ctx::for_command(self, app, report);
        ctx.bodies = true; // the diffs and the Deployments' predictions read them
        ctx.partial = true; // every error of the commit at once, render and dry run
        let mut journal = ctx.journal();
        let mut rec = self.new_record(&ctx);
        let mut lock = Locked::none(Trigger::Cli);
        let mut preview = Preview::of(&app.name);
        let prepared = match fetch_verified(&ctx, &mut lock, &mut rec, &mut journal).await {
            Ok(checkout) => prepare(&ctx, checkout, &mut lock, &mut rec, &mut journal).await,
            Err(stop) => Err(stop),
        };
        let prepared = prepared.ok().filter(|p| {
            // A held app applies nothing, as its sync would not.
            preview.held = p
                .inventory
                .held_at(&p.checkout.commit.sha)
                .map(|h| h.reason.clone());
            preview.held.is_none()
        });
        if let Some(prepared) = prepared {
            self.plan_objects(&ctx, prepared, show_secrets, &mut preview, &mut journal)
                .await;
        }
        preview.commit = rec.commit.take();
        preview.previous_commit = rec.previous_commit.take();
        preview.errors = journal.errors.iter().map(|e| e.message.clone()).collect();
        preview
    }

    /// What becomes of each object of the plan: the writes as the dry run answers them,
    /// the objects of kinds the commit defines, and the prune candidates as the sync's
    /// own prune decides them.
    async fn plan_objects(
        &self,
        ctx: &Ctx<'_>,
        prepared: Prepared,
        show_secrets: bool,
        preview: &mut Preview,
        journal: &mut Journal<'_>,
    ) {
        // Errors so far are the render's: an object of a file that did not render is
        // missing from the plan, and would look pruned.
        let rendered_whole = journal.errors.is_empty();
        let plan = prepared.plan;
        let (same, mut writes) = split_writes(plan.planned);
        preview.unchanged = same.len();
        let wanted = namespace::wanted(ctx, &writes, journal)
            .await
            .ok()
            .flatten();
        let created =
            (wanted == Some(namespace::Wanted::Create)).then_some(ctx.app.namespace.as_str());
        let validated = validate::validate(ctx, &mut writes, created, journal)
            .await
            .is_ok();
        let hooks = &prepared.hooks;
        let mut new = new_namespaces(&writes);
        new.extend(created);
        let _ = hooks::validate(ctx, hooks, &new, journal).await;
        if let Some(wanted) = wanted {
            let (action, note) = wanted.planned();
            preview.objects.push(PlannedObject {
                key: namespace::key(&ctx.app.namespace),
                action,
                note: Some(note.into()),
                diff: None,
                wave: None,
            });
        }
        preview.hooks.extend(planned_hooks(hooks));
        for w in &writes {
            preview.objects.push(
                self.planned_write(&ctx.cluster.client, w, validated, show_secrets)
                    .await,
            );
            if let Some(plan) = self.predict_deployment(&ctx.cluster.client, w).await {
                preview.deployments.push(plan);
            }
        }
        preview
            .objects
            .extend(plan.deferred.iter().map(|m| PlannedObject {
                key: m.key(),
                action: "create",
                note: Some("its kind is defined by a CRD of this commit".into()),
                diff: None,
                wave: Some(wave_of(m)),
            }));
        if ctx.app.prune && !plan.prune.is_empty() {
            let decided = prune::decide(ctx, &prepared.kinds, &plan.prune, true, journal).await;
            let prunes = decided.unwrap_or_default().into_iter();
            preview
                .objects
                .extend(prunes.map(|p| planned_prune(p, rendered_whole)));
        }
    }

    /// One write of the plan, as the dry run answered it.
    async fn planned_write(
        &self,
        client: &kube::Client,
        w: &Write,
        validated: bool,
        show_secrets: bool,
    ) -> PlannedObject {
        let action = match (&w.refused, w.existing()) {
            (Some(_), _) => "refused",
            (None, Some(Some(_))) => "configure",
            _ => "create",
        };
        let note = match (&w.change, &w.dry_run) {
            _ if w.refused.is_some() => w.refused.clone(),
            (crate::plan::Change::Drifted(why), _) => Some(format!("drift: {why}")),
            (_, None) if validated => {
                Some("checked once the namespace or CRD it needs exists".into())
            }
            _ => None,
        };
        let diff = match &w.dry_run {
            Some(planned) => self.diff(client, w, planned, show_secrets).await,
            None => None,
        };
        PlannedObject {
            key: w.target.manifest.key(),
            action,
            note,
            diff,
            wave: Some(wave_of(&w.target.manifest)),
        }
    }

    /// The diff of one write: the live object (read now; absent when it is created)
    /// against the dry run's answer. A read that fails shows as a note in the diff.
    async fn diff(
        &self,
        client: &kube::Client,
        w: &Write,
        planned: &DynamicObject,
        show_secrets: bool,
    ) -> Option<String> {
        let m = &w.target.manifest;
        let api = crate::cluster::api_for(client, &w.target.resolved, m.namespace());
        let live = match w.existing() {
            Some(Some(_)) => match api.get_opt(m.name()).await {
                Ok(live) => live,
                Err(e) => return Some(format!("(cannot read the live object to diff: {e})\n")),
            },
            _ => None,
        };
        let as_json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
        crate::diff::object_diff(
            live.as_ref().map(as_json).as_ref(),
            &as_json(planned),
            &m.key().kubectl(),
            &m.decrypted,
            show_secrets,
        )
    }

    async fn predict_deployment(&self, client: &kube::Client, w: &Write) -> Option<DeploymentPlan> {
        let m = &w.target.manifest;
        let planned = w.planned_deployment()?;
        let api: Api<Deployment> = Api::namespaced(client.clone(), m.namespace_or_default());
        let live = match api.get_opt(m.name()).await.ok().flatten() {
            Some(d) => revisions::list(client, &d).await.unwrap_or_default(),
            None => Revisions::default(),
        };
        let plan = predict(m.key(), &planned, &live)?;
        Some(match &w.canary {
            Some(canary) => super::canary::planned(plan, &canary.plan),
            None => plan,
        })
    }
}

/// The hooks a sync would run, phase by phase.
fn planned_hooks(hooks: &[HookObject]) -> Vec<PlannedHook> {
    let phases = [
        HookPhase::Pre,
        HookPhase::Sync,
        HookPhase::Post,
        HookPhase::Fail,
    ];
    phases
        .into_iter()
        .flat_map(|phase| {
            let of_phase = hooks.iter().filter(move |h| h.runs_in(phase, None));
            of_phase.map(move |h| PlannedHook {
                phase,
                key: h.key(),
                wave: h.hook.wave,
                deleted: h.deleted(),
            })
        })
        .collect()
}

/// A prune candidate as the sync's own prune decided it (`rendered_whole`: no object is
/// missing from the plan for a file that did not render).
fn planned_prune(p: Pruned, rendered_whole: bool) -> PlannedObject {
    let action = match p.action {
        Action::Kept => "kept",
        Action::Failed => "refused",
        _ => "prune",
    };
    let unsure = (action == "prune" && !rendered_whole)
        .then(|| "unless it is one of the objects that did not render".to_string());
    PlannedObject {
        key: p.key,
        action,
        note: p.error.map(|e| e.to_string()).or(p.note).or(unsure),
        diff: None,
        wave: None,
    }
}
