//! Waiting for a hook's run to end: a Job complete, a Pod `Succeeded`, anything else
//! healthy; failed when it fails, timed out after the app's `rollout.timeout`.

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::watcher::watch_object;
use kube::runtime::WatchStreamExt;
use serde_json::Value;

use crate::sync::context::Ctx;

/// How a hook's run ended.
pub(super) struct Ended {
    /// `succeeded`, `failed`, `timed-out` or `interrupted`.
    pub outcome: &'static str,
    pub message: String,
}

impl Ended {
    fn new(outcome: &'static str, message: impl Into<String>) -> Ended {
        let message = message.into();
        Ended { outcome, message }
    }
}

/// Waits for the hook's object to end — a Job complete, a Pod `Succeeded`, anything else
/// healthy — as a watch of it tells; failed when it fails, timed out after the app's
/// `rollout.timeout`.
pub(super) async fn wait(
    ctx: &Ctx<'_>,
    api: &kube::Api<DynamicObject>,
    name: &str,
    group: &str,
    kind: &str,
) -> Ended {
    let timeout = ctx.app.rollout.timeout;
    let deadline = tokio::time::sleep(timeout);
    let stop = crate::shutdown::asked(ctx.shutdown.clone());
    let seen = watch_object(api.clone(), name).default_backoff();
    tokio::pin!(deadline, stop, seen);
    let mut last = String::new();
    loop {
        let object = tokio::select! {
            () = &mut stop => return Ended::new("interrupted", last),
            () = &mut deadline => {
                let within = humantime::format_duration(timeout);
                return Ended::new("timed-out", format!("not done within {within} (rollout.timeout)"));
            }
            Some(seen) = seen.next() => seen,
        };
        let json = match object {
            Ok(Some(obj)) => serde_json::to_value(&obj).unwrap_or_default(),
            Ok(None) => return Ended::new("failed", "deleted while it ran"),
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        match ended(group, kind, &json) {
            Ok(()) => return Ended::new("succeeded", ""),
            Err(Some(why)) => return Ended::new("failed", why),
            Err(None) => {}
        }
    }
}

/// `Ok` once the hook's object is done, `Err(Some(why))` when it failed, `Err(None)` while
/// it runs.
fn ended(group: &str, kind: &str, object: &Value) -> Result<(), Option<String>> {
    if (group, kind) == ("", "Pod") {
        let status = &object["status"];
        return match status["phase"].as_str() {
            Some("Succeeded") => Ok(()),
            Some("Failed") => {
                let container = status["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find_map(|c| c["state"]["terminated"].as_object().cloned());
                Err(Some(match container {
                    Some(t) => format!(
                        "exit code {} ({})",
                        t.get("exitCode").and_then(Value::as_i64).unwrap_or(-1),
                        t.get("reason").and_then(Value::as_str).unwrap_or("Error")
                    ),
                    None => status["reason"].as_str().unwrap_or("Failed").to_string(),
                }))
            }
            _ => Err(None),
        };
    }
    match crate::health::health(group, kind, object) {
        crate::health::Health::Current => Ok(()),
        crate::health::Health::Failed(why) => Err(Some(why)),
        crate::health::Health::InProgress(_) => Err(None),
    }
}
