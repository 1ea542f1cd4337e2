//! Blue-green on the plain Deployment: the new version at full size beside the old one,
//! the active Service pinned to the old version's pods and the preview Service to the new
//! one's (each selector gains `pod-template-hash`, written by a field manager of its own so
//! that git's selector stays berth's apply's); the checks run; then the active Service is
//! switched, and after `scale_down_delay` the Deployment is applied as git has it and its
//! controller scales the old version down. As a canary of two steps: 0 % of the active
//! Service's pods on the new version, then 100 %.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::run::{Driven, Run, Switch};
use super::sets::request;
use crate::config::{BlueGreen, CanaryStep, Pause};
use crate::manifest::LABEL_APP;
use crate::rollout::canary::Split;
use crate::sync::context::Ctx;
use crate::sync::error::SyncError;
use crate::sync::write::Write;

/// The label a pinned Service's selector gains: the ReplicaSets' own.
const PIN: &str = "pod-template-hash";

/// Service `name` of `api`'s namespace when it is one of app `app`'s objects (its
/// `berth.dev/app` label); else why not. A commit's annotation names the Services a
/// blue-green rollout switches, and must not switch another app's.
///
/// # Errors
/// The Service cannot be read.
pub(super) async fn own_service(
    api: &Api<Service>,
    name: &str,
    app: &str,
) -> Result<Result<Service, String>, kube::Error> {
    let Some(service) = api.get_opt(name).await? else {
        return Ok(Err(format!("no Service {name} in its namespace: preview_service and active_service name Services of the app")));
    };
    let labels = service.metadata.labels.as_ref();
    if labels.and_then(|l| l.get(LABEL_APP)).map(String::as_str) != Some(app) {
        return Ok(Err(format!("Service {name} is not one of app {app}'s objects: blue-green switches only the app's own Services")));
    }
    Ok(Ok(service))
}

/// Why blue-green `bg` in namespace `ns` cannot switch its Services for the app of `ctx`,
/// if it cannot: each must be one the commit writes (`written`: namespace and name) or one
/// of the app's objects ([`own_service`]).
///
/// # Errors
/// A Service cannot be read.
pub(super) async fn refused(
    ctx: &Ctx<'_>,
    ns: &str,
    bg: &BlueGreen,
    written: &BTreeSet<(String, String)>,
) -> Result<Option<String>, kube::Error> {
    let api = Api::namespaced(ctx.writer.clone(), ns);
    for name in [&bg.preview_service, &bg.active_service] {
        if written.contains(&(ns.to_string(), name.clone())) {
            continue;
        }
        if let Err(why) = own_service(&api, name, &ctx.app.name).await? {
            return Ok(Some(why));
        }
    }
    Ok(None)
}

impl Switch {
    /// The Services of `bg` for `run`'s Deployment (write `w`), each checked to be there
    /// and the app's own; whether the active one serves the new version already.
    async fn of(run: &Run<'_>, w: &Write, bg: &BlueGreen) -> Result<(Switch, bool), SyncError> {
        let m = &w.target.manifest;
        let ns = m.namespace_or_default();
        let switch = Switch {
            api: Api::namespaced(run.ctx.writer.clone(), ns),
            field_manager: format!("{}-blue-green", run.ctx.syncer.agent.field_manager),
            active: bg.active_service.clone(),
            old: run.sets.old_version(),
        };
        let app = &run.ctx.app.name;
        let refused = |message: String| SyncError::Canary {
            origin: m.origin.clone(),
            key: m.key().qualified_name(),
            message,
        };
        let active = switch.pinned(&bg.active_service, app).await?;
        let active = active.map_err(refused)?;
        switch
            .pinned(&bg.preview_service, app)
            .await?
            .map_err(refused)?;
        let switched = active.as_deref() == Some(run.version.as_str());
        Ok((switch, switched))
    }

    /// Which version Service `name`'s selector is pinned to (`None`: none), once it is
    /// found to be one of app `app`'s objects ([`own_service`]); else why not.
    async fn pinned(
        &self,
        name: &str,
        app: &str,
    ) -> Result<Result<Option<String>, String>, SyncError> {
        let service = own_service(&self.api, name, app).await;
        let service = service.map_err(request("reading a blue-green Service"))?;
        Ok(service.map(|s| {
            let selector = s.spec.and_then(|s| s.selector).unwrap_or_default();
            selector.get(PIN).cloned()
        }))
    }

    /// Pins Service `name` to `version`'s pods.
    pub async fn pin(&self, name: &str, version: &str) -> Result<(), SyncError> {
        let patch = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": {PIN: version}},
        });
        let params = PatchParams::apply(&self.field_manager).force();
        let patched = self.api.patch(name, &params, &Patch::Apply(&patch)).await;
        patched.map_err(request("switching a blue-green Service"))?;
        Ok(())
    }
}

impl Run<'_> {
    /// Drives write `w`'s blue-green rollout `bg` (`moved`: git moved while it was held).
    pub(super) async fn blue_green(
        mut self,
        w: &Write,
        bg: &BlueGreen,
        moved: bool,
    ) -> Result<Driven, SyncError> {
        let (switch, switched) = Switch::of(&self, w, bg).await?;
        let version = self.version.clone();
        if moved && self.sets.running {
            // Back to the version that ran before: it serves again before the other goes.
            switch.pin(&bg.active_service, &version).await?;
            return self.back(w).await;
        }
        let replicas = self.sets.replicas;
        let beside = Split {
            new: replicas,
            old: replicas,
        };
        let checked = CanaryStep {
            weight: 0,
            pause: None,
            analysis: bg.analysis.clone(),
        };
        let delay = CanaryStep {
            weight: 100,
            pause: Some(Pause::For(bg.scale_down_delay)),
            analysis: Vec::new(),
        };
        if !switched {
            if let Some(old) = &switch.old {
                switch.pin(&bg.active_service, old).await?;
            }
            switch.pin(&bg.preview_service, &version).await?;
            self.say(&format!(
                "the new version at {replicas} beside the old, behind Service {}",
                bg.preview_service
            ));
            if let Some(ended) = self.step(0, &checked, 2, beside).await? {
                return Ok(ended);
            }
            switch.pin(&bg.active_service, &version).await?;
            self.say(&format!(
                "Service {} switched to the new version",
                bg.active_service
            ));
        }
        self.switch = Some(switch);
        if let Some(ended) = self.step(1, &delay, 2, beside).await? {
            return Ok(ended);
        }
        self.finish(w).await
    }
}
