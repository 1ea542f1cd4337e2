//! A Job check: each measurement runs the Job `[[analysis]] job` names (a manifest file on
//! berth's host, `{version}` in it filled) in the Deployment's namespace, as the app writes
//! (its service account when it has one), and reads how it ended: `complete`, or `failed`
//! with the Job's reason. The Job is deleted, with its pods, once read.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::await_condition;

use crate::history::Value;
use crate::rollout::analysis::measure::{fill, Unmeasured};

/// The largest Job manifest read.
const MAX_MANIFEST: u64 = 64 * 1024;

/// What a Job that completed reads as.
pub(super) const COMPLETE: &str = "complete";

/// Runs the Job of `file` once for `version`, within `within`.
///
/// # Errors
/// The file cannot be read or is no Job, the Job cannot be created, or it did not end in
/// time.
pub(super) async fn run(
    jobs: &Api<Job>,
    file: &Path,
    version: &str,
    within: Duration,
) -> Result<Value, Unmeasured> {
    let job = manifest(file, version)?;
    let made = (jobs.create(&PostParams::default(), &job).await).map_err(|e| {
        Unmeasured::Job(format!("cannot create the Job of {}: {e}", file.display()))
    })?;
    let name = made.metadata.name.unwrap_or_default();
    let ended = tokio::time::timeout(within, await_condition(jobs.clone(), &name, ended)).await;
    let deleted = jobs.delete(&name, &DeleteParams::background()).await;
    if let Err(e) = deleted {
        tracing::warn!(job = %name, error = %e, "cannot delete a Job check's Job");
    }
    let job = match ended {
        Err(_) => return Err(Unmeasured::Slow(within)),
        Ok(Err(e)) => return Err(Unmeasured::Job(format!("watching Job {name}: {e}"))),
        Ok(Ok(job)) => job,
    };
    let failed = conditions(job.as_ref()).find(|c| c.type_ == "Failed" && c.status == "True");
    Ok(Value::Text(match failed {
        Some(c) => format!(
            "failed: {}",
            c.message.clone().or(c.reason.clone()).unwrap_or_default()
        ),
        None => COMPLETE.into(),
    }))
}

/// The Job of `file`, `{version}` filled, named by the server after its own name.
fn manifest(file: &Path, version: &str) -> Result<Job, Unmeasured> {
    let unreadable = |e: String| Unmeasured::Job(format!("{}: {e}", file.display()));
    let mut text = String::new();
    let opened = std::fs::File::open(file).map_err(|e| unreadable(e.to_string()))?;
    let read = opened.take(MAX_MANIFEST).read_to_string(&mut text);
    read.map_err(|e| unreadable(e.to_string()))?;
    let mut job: Job = serde_yaml::from_str(&fill(&text, version))
        .map_err(|e| unreadable(format!("not a Job: {e}")))?;
    let meta = &mut job.metadata;
    let base = meta.name.take().unwrap_or_else(|| "berth-check".into());
    meta.generate_name = Some(format!(
        "{}-{version}-",
        base.chars().take(40).collect::<String>()
    ));
    meta.namespace = None;
    meta.resource_version = None;
    Ok(job)
}

fn conditions(
    job: Option<&Job>,
) -> impl Iterator<Item = &k8s_openapi::api::batch::v1::JobCondition> {
    (job.and_then(|j| j.status.as_ref()))
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
}

/// Whether the Job ended: its `Complete` or `Failed` condition true.
fn ended(job: Option<&Job>) -> bool {
    conditions(job).any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_is_named_by_the_server_and_filled_with_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("smoke.yaml");
        let text = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: smoke\n  namespace: other\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - name: c\n          image: curl\n          args: [\"http://web/health?v={version}\"]\n";
        std::fs::write(&file, text).unwrap();
        let job = manifest(&file, "5f7c9").unwrap();
        assert_eq!(job.metadata.generate_name.as_deref(), Some("smoke-5f7c9-"));
        assert_eq!(job.metadata.name, None);
        assert_eq!(
            job.metadata.namespace, None,
            "the Deployment's namespace, not the file's"
        );
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            pod.containers[0].args.as_ref().unwrap()[0],
            "http://web/health?v=5f7c9"
        );
        std::fs::write(&file, "kind: [").unwrap();
        let said = manifest(&file, "v").unwrap_err().to_string();
        assert!(said.contains("smoke.yaml: not a Job"), "{said}");
        let said = manifest(&dir.path().join("gone.yaml"), "v")
            .unwrap_err()
            .to_string();
        assert!(said.contains("gone.yaml: No such file"), "{said}");
    }
}
