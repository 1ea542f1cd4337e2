//! Waiting for a hook's run to end: a Job complete, a Pod `Succeeded`, anything else
//! healthy; failed when it fails, timed out after the app's `rollout.timeout`.

use std::time::Instant;

use kube::api::DynamicObject;
use serde_json::Value;

use super::POLL;
use crate::sync::context::Ctx;

/// How a hook's run ended.
pub(super) struct Ended {
    /// `succeeded`, `failed`, `timed-out` or `interrupted`.
    pub outcome: &'static str,
    pub message: String,
}

/// Waits for the hook's object to end: a Job complete, a Pod `Succeeded`, anything else
/// healthy; failed when it fails, timed out after the app's `rollout.timeout`.
pub(super) async fn wait(
    ctx: &Ctx<'_>,
    api: &kube::Api<DynamicObject>,
    name: &str,
    group: &str,
    kind: &str,
) -> Ended {
    let deadline = Instant::now() + ctx.app.rollout.timeout;
    let mut last = String::new();
    loop {
        if ctx.interrupted().is_err() {
            return Ended {
                outcome: "interrupted",
                message: last,
            };
        }
        match api.get_opt(name).await {
            Ok(Some(obj)) => {
                let json = serde_json::to_value(&obj).unwrap_or_default();
                match ended(group, kind, &json) {
                    Ok(()) => {
                        return Ended {
                            outcome: "succeeded",
                            message: String::new(),
                        }
                    }
                    Err(Some(why)) => {
                        return Ended {
                            outcome: "failed",
                            message: why,
                        }
                    }
                    Err(None) => {}
                }
            }
            Ok(None) => {
                return Ended {
                    outcome: "failed",
                    message: "deleted while it ran".into(),
                }
            }
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            return Ended {
                outcome: "timed-out",
                message: format!(
                    "not done within {} (rollout.timeout)",
                    humantime::format_duration(ctx.app.rollout.timeout)
                ),
            };
        }
        tokio::time::sleep(POLL).await;
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
