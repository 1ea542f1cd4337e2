//! `[app.rollout]` (how changed Deployments are followed, and the strategy that brings
//! them to their new version) and `[[analysis]]` (the checks a canary's steps run), with
//! the rules a Deployment's `berth.dev/rollout` annotation is held to as well.
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::values::duration;

/// `[app.rollout]`: how changed Deployments are followed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RolloutConfig {
    /// Who runs the rolling steps.
    pub engine: RolloutEngine,
    /// How long a rollout may take before it counts as failed.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// What to do when a rollout fails.
    pub on_failure: OnFailure,
    /// Wait for every Service with a selector to have ready endpoints (otherwise a
    /// Service without any is only reported as a warning).
    pub require_endpoints: bool,
    /// How a changed Deployment reaches its new version.
    pub strategy: Strategy,
    /// A canary's steps, in order; the last at weight 100.
    pub steps: Vec<CanaryStep>,
    /// Blue-green: the Service the new version is tried behind, before the switch.
    pub preview_service: Option<String>,
    /// Blue-green: the Service switched to the new version once its checks passed.
    pub active_service: Option<String>,
    /// Blue-green: the `[[analysis]]` checks run on the new version before the switch.
    pub analysis: Vec<String>,
    /// Blue-green: how long the old version keeps running after the switch.
    #[serde(deserialize_with = "duration")]
    pub scale_down_delay: Duration,
}

impl Default for RolloutConfig {
    fn default() -> Self {
        RolloutConfig {
            engine: RolloutEngine::Cluster,
            timeout: Duration::from_secs(300),
            on_failure: OnFailure::Rollback,
            require_endpoints: false,
            strategy: Strategy::Rolling,
            steps: Vec::new(),
            preview_service: None,
            active_service: None,
            analysis: Vec::new(),
            scale_down_delay: Duration::from_secs(30),
        }
    }
}

impl RolloutConfig {
    /// How a changed Deployment is brought in, its keys checked against the analyses
    /// configured (`known`); `None` for a rolling one.
    ///
    /// # Errors
    /// What keeps the strategy from running: a canary's steps, blue-green's Services or
    /// checks, or keys of another strategy.
    pub fn progressive(&self, known: &BTreeSet<&str>) -> Result<Option<Progressive>, StepsError> {
        let blue_green_keys = self.preview_service.is_some()
            || self.active_service.is_some()
            || !self.analysis.is_empty();
        match self.strategy {
            Strategy::Rolling | Strategy::Canary if blue_green_keys => {
                Err(StepsError::NotBlueGreen)
            }
            Strategy::Rolling if !self.steps.is_empty() => Err(StepsError::NotCanary),
            Strategy::Rolling => Ok(None),
            Strategy::Canary => {
                check_steps(&self.steps, known)?;
                Ok(Some(Progressive::Canary(self.steps.clone())))
            }
            Strategy::BlueGreen => {
                if !self.steps.is_empty() {
                    return Err(StepsError::NotCanary);
                }
                let (Some(preview), Some(active)) = (&self.preview_service, &self.active_service)
                else {
                    return Err(StepsError::NoServices);
                };
                if preview == active {
                    return Err(StepsError::SameService(preview.clone()));
                }
                if let Some(name) = self.analysis.iter().find(|a| !known.contains(a.as_str())) {
                    return Err(StepsError::UnknownCheck {
                        name: name.clone(),
                        known: known.iter().copied().collect::<Vec<_>>().join(", "),
                    });
                }
                Ok(Some(Progressive::BlueGreen(BlueGreen {
                    preview_service: preview.clone(),
                    active_service: active.clone(),
                    analysis: self.analysis.clone(),
                    scale_down_delay: self.scale_down_delay,
                })))
            }
        }
    }
}

/// How a changed Deployment is brought in by berth's steps.
#[derive(Debug, Clone, PartialEq)]
pub enum Progressive {
    /// A canary's steps.
    Canary(Vec<CanaryStep>),
    /// Blue-green.
    BlueGreen(BlueGreen),
}

/// A blue-green rollout: the new version at full size beside the old one, behind the
/// preview Service, checked, then the active Service switched to it.
#[derive(Debug, Clone, PartialEq)]
pub struct BlueGreen {
    /// The Service the new version is tried behind.
    pub preview_service: String,
    /// The Service switched to it once its checks passed.
    pub active_service: String,
    /// The checks run before the switch.
    pub analysis: Vec<String>,
    /// How long the old version keeps running after the switch.
    pub scale_down_delay: Duration,
}

/// Who runs a Deployment's rolling steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RolloutEngine {
    /// The cluster's Deployment controller; berth follows it.
    Cluster,
    /// berth runs the Deployment controller's algorithm itself.
    Agent,
}

/// What happens after a failed rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Restore the previous revision's pod template.
    Rollback,
    /// Leave it as it is and stop syncing the app until a new commit.
    Halt,
    /// Record the failure and go on.
    Continue,
}

/// How a changed Deployment reaches its new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// The Deployment's own rolling update (or Recreate), followed step by step.
    #[default]
    Rolling,
    /// berth's steps: a share of the pods on the new version, held for a pause and an
    /// analysis, step by step to 100 %.
    Canary,
    /// The new version at full size beside the old one behind a preview Service, checked,
    /// then the active Service switched to it.
    #[serde(rename = "blue-green")]
    BlueGreen,
}

/// One canary step.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanaryStep {
    /// The share of the pods running the new version, 1–100 %.
    pub weight: u8,
    /// How long the step is held once its pods are ready.
    #[serde(default, deserialize_with = "some_pause")]
    pub pause: Option<Pause>,
    /// The `[[analysis]]` checks run at the step (after its pause); any failing aborts.
    #[serde(default)]
    pub analysis: Vec<String>,
}

/// A canary step's pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// A while (`pause = "30s"`); `berth promote APP` ends it early.
    For(Duration),
    /// Until `berth promote APP` (`pause = "promote"`).
    UntilPromoted,
}

/// What `pause = "promote"` is written as.
pub const UNTIL_PROMOTED: &str = "promote";

impl std::fmt::Display for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pause::For(d) => write!(f, "{}", humantime::format_duration(*d)),
            Pause::UntilPromoted => f.write_str("until berth promote"),
        }
    }
}

fn some_pause<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Pause>, D::Error> {
    let text = String::deserialize(d)?;
    if text == UNTIL_PROMOTED {
        return Ok(Some(Pause::UntilPromoted));
    }
    let said = humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid pause {text:?} ({e}): write a duration like 30s or 5m, or \"{UNTIL_PROMOTED}\" to hold the step until berth promote APP"
        ))
    });
    said.map(|d| Some(Pause::For(d)))
}

/// A Deployment's `berth.dev/rollout` annotation: its strategy, as `[app.rollout]` writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnotatedRollout {
    /// The strategy.
    pub strategy: Strategy,
    /// A canary's steps.
    #[serde(default)]
    pub steps: Vec<CanaryStep>,
    /// Blue-green's preview Service.
    pub preview_service: Option<String>,
    /// Blue-green's active Service.
    pub active_service: Option<String>,
    /// Blue-green's checks.
    #[serde(default)]
    pub analysis: Vec<String>,
    /// Blue-green's delay before the old version goes (the app's when not given).
    #[serde(default, deserialize_with = "some_duration")]
    pub scale_down_delay: Option<Duration>,
}

impl AnnotatedRollout {
    /// The rollout the annotation says, the rest as the app's `app` says it.
    pub fn over(self, app: &RolloutConfig) -> RolloutConfig {
        RolloutConfig {
            strategy: self.strategy,
            steps: self.steps,
            preview_service: self.preview_service,
            active_service: self.active_service,
            analysis: self.analysis,
            scale_down_delay: self.scale_down_delay.unwrap_or(app.scale_down_delay),
            ..app.clone()
        }
    }
}

fn some_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// The annotation a Deployment carries its strategy in (for charts).
pub const ROLLOUT_ANNOTATION: &str = "berth.dev/rollout";

/// Why a canary's steps cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepsError {
    /// No steps at all.
    #[error("a canary needs steps, the last of weight = 100")]
    None,
    /// A weight not above the one before, or over 100.
    #[error(
        "steps[{step}]: weight {weight} must be over the step before ({below}) and at most 100"
    )]
    NotRising {
        /// The step.
        step: usize,
        /// Its weight.
        weight: u8,
        /// The weight before it.
        below: u8,
    },
    /// A check no `[[analysis]]` names.
    #[error("steps[{step}]: no [[analysis]] named {name:?} (known: {known})")]
    Unknown {
        /// The step.
        step: usize,
        /// The name.
        name: String,
        /// The names there are.
        known: String,
    },
    /// The last step is not 100 %.
    #[error("the last step has weight {0}: a canary ends at weight = 100")]
    Short(u8),
    /// Steps without `strategy = "canary"`.
    #[error("steps are a canary's: set strategy = \"canary\"")]
    NotCanary,
    /// Blue-green's keys without `strategy = "blue-green"`.
    #[error("preview_service, active_service and analysis are blue-green's: set strategy = \"blue-green\" (a canary's checks go in its steps)")]
    NotBlueGreen,
    /// Blue-green without its two Services.
    #[error("blue-green needs preview_service and active_service (the Services of the app's Deployments)")]
    NoServices,
    /// One Service as both.
    #[error("preview_service and active_service are both {0:?}: blue-green needs two Services")]
    SameService(String),
    /// A blue-green check no `[[analysis]]` names.
    #[error("analysis: no [[analysis]] named {name:?} (known: {known})")]
    UnknownCheck {
        /// The name.
        name: String,
        /// The names there are.
        known: String,
    },
}

/// Checks a canary's `steps` against the analyses configured (`known`): weights rising
/// from 1 to a last step of 100, each analysis named known.
///
/// # Errors
/// The first step at fault.
pub fn check_steps(steps: &[CanaryStep], known: &BTreeSet<&str>) -> Result<(), StepsError> {
    let Some(last) = steps.last() else {
        return Err(StepsError::None);
    };
    let mut below = 0;
    for (step, s) in steps.iter().enumerate() {
        if s.weight <= below || s.weight > 100 {
            let weight = s.weight;
            return Err(StepsError::NotRising {
                step,
                weight,
                below,
            });
        }
        below = s.weight;
        if let Some(name) = s.analysis.iter().find(|a| !known.contains(a.as_str())) {
            let known = known.iter().copied().collect::<Vec<_>>().join(", ");
            let name = name.clone();
            return Err(StepsError::Unknown { step, name, known });
        }
    }
    if last.weight != 100 {
        return Err(StepsError::Short(last.weight));
    }
    Ok(())
}

/// `[[analysis]]`: a check a canary's steps run, by name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnalysisConfig {
    /// Its name, as steps give it.
    pub name: String,
    /// A Prometheus server's address; `query` is asked of it.
    pub prometheus: Option<String>,
    /// The PromQL query (`{version}`: the new version's pod-template hash); its result
    /// must be one number.
    pub query: Option<String>,
    /// An address GET: it must answer 2xx (`{version}` as in `query`).
    pub http: Option<String>,
    /// The field of the HTTP answer's JSON body measured (`.status`).
    pub json: Option<String>,
    /// A file holding a Job manifest (`{version}` as in `query`): each measurement runs it
    /// in the Deployment's namespace, and passes when it completes.
    pub job: Option<PathBuf>,
    /// The measurement must be at or under this.
    pub max: Option<f64>,
    /// The measurement must be at or over this.
    pub min: Option<f64>,
    /// The measurement (a JSON field's text) must equal this.
    pub equals: Option<String>,
    /// The time between measurements.
    #[serde(default = "ten_seconds", deserialize_with = "duration")]
    pub interval: Duration,
    /// Measurements taken; the check passes once they are all taken.
    #[serde(default = "one")]
    pub count: u32,
    /// Failed measurements allowed; one more aborts the rollout at once.
    #[serde(default)]
    pub failure_limit: u32,
    /// A file holding the bearer token sent with each request.
    pub bearer_token_file: Option<PathBuf>,
}

fn ten_seconds() -> Duration {
    Duration::from_secs(10)
}

fn one() -> u32 {
    1
}

impl AnalysisConfig {
    /// What is wrong with the check, if anything (one line each: the key, what).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let mut say = |key, what: &str| problems.push((key, what.to_string()));
        let kinds = [
            self.prometheus.is_some(),
            self.http.is_some(),
            self.job.is_some(),
        ];
        match kinds.iter().filter(|k| **k).count() {
            0 => say("prometheus", "give prometheus (and query), http or job"),
            1 => {}
            _ => say("http", "a check is one of prometheus, http or job"),
        }
        let bounded = [
            self.max.is_some(),
            self.min.is_some(),
            self.equals.is_some(),
        ];
        if self.job.is_some() && (self.query.is_some() || bounded.contains(&true)) {
            say(
                "job",
                "a Job check passes when its Job completes: it has no query, max, min or equals",
            );
        }
        match (&self.prometheus, &self.http) {
            (Some(_), None) if self.query.is_none() => say("query", "prometheus needs a query"),
            (None, Some(_)) if self.query.is_some() => say(
                "query",
                "a query is asked of prometheus; an http check has none",
            ),
            _ => {}
        }
        if self.http.is_none() && self.json.is_some() {
            say("json", "only an http check reads a JSON field");
        }
        if self.prometheus.is_some() && self.max.is_none() && self.min.is_none() {
            say("max", "a query's result needs a bound: max or min");
        }
        if self.count == 0 {
            say("count", "must be 1 or more");
        }
        if self.interval.is_zero() {
            say("interval", "must be more than 0s");
        }
        problems
    }
}
