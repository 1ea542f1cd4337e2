//! A step's checks: each `[[analysis]]` it names measured on its interval until its count
//! is taken or its failure limit passed, the checks side by side; every measurement kept.

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;

use super::job;
use crate::config::AnalysisConfig;
use crate::history::{CheckRecord, Measurement};
use crate::notifications::deliver::HttpClient;
use crate::rollout::analysis::measure::{measure, Check, Unmeasured};
use crate::rollout::analysis::{judged, verdict, Condition, Verdict};
use crate::shutdown::{self, Signal};

/// The longest one measurement may take.
const MEASURE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a check says of each measurement: its name, the measurement, and the line.
pub(super) type Seen<'a> = &'a (dyn Fn(&str, &Measurement, &str) + Sync);

/// What a step's checks measure the new version with.
pub(super) struct Probes<'a> {
    /// The new version (`{version}`).
    pub version: &'a str,
    /// Prometheus' and HTTP checks' client.
    pub client: &'a HttpClient,
    /// Job checks' Jobs, in the Deployment's namespace.
    pub jobs: Api<Job>,
    /// How long a Job check's Job may run (the rollout's timeout).
    pub job_within: Duration,
    pub shutdown: &'a Signal,
}

/// Runs the checks `names` with `probes`; their records, in the order named, each
/// measurement given to `seen`. A shutdown ends them early (the unfinished ones not
/// passed).
pub(super) async fn run(
    analyses: &[AnalysisConfig],
    names: &[String],
    probes: &Probes<'_>,
    seen: Seen<'_>,
) -> Vec<CheckRecord> {
    let runs = (names.iter())
        .filter_map(|name| analyses.iter().find(|a| &a.name == name))
        .map(|config| one(config, probes, seen));
    join_all(runs).await
}

async fn one(config: &AnalysisConfig, probes: &Probes<'_>, seen: Seen<'_>) -> CheckRecord {
    let (check, condition) = check_of(config);
    let timeout = config
        .interval
        .clamp(Duration::from_secs(1), MEASURE_TIMEOUT);
    let (version, shutdown) = (probes.version, probes.shutdown);
    let mut measurements = Vec::new();
    loop {
        let read = match (&config.job, authorization(config)) {
            (Some(file), _) => job::run(&probes.jobs, file, version, probes.job_within).await,
            (None, Ok(auth)) => {
                let auth = auth.as_deref();
                measure(probes.client, &check, version, auth, timeout).await
            }
            (None, Err(e)) => Err(e),
        };
        let m = judged(jiff::Timestamp::now(), read, &condition);
        let shown = match (&m.value, &m.why) {
            (_, Some(why)) => format!("failed: {why}"),
            (Some(value), None) => format!("{value}, passed"),
            (None, None) => "passed".into(),
        };
        let line = format!(
            "analysis {}: {shown} ({} of {})",
            config.name,
            measurements.len() + 1,
            config.count
        );
        seen(&config.name, &m, &line);
        measurements.push(m);
        match verdict(&measurements, config.count, config.failure_limit) {
            Verdict::Running => {}
            done => {
                return CheckRecord {
                    name: config.name.clone(),
                    passed: done == Verdict::Passed,
                    measurements,
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(config.interval) => {}
            () = shutdown::asked(shutdown.clone()) => {
                return CheckRecord { name: config.name.clone(), passed: false, measurements };
            }
        }
    }
}

/// What `[[analysis]]` `config` measures, and the condition its measurements must meet.
fn check_of(config: &AnalysisConfig) -> (Check, Condition) {
    let check = match (&config.prometheus, &config.http) {
        (Some(address), _) => Check::Prometheus {
            address: address.clone(),
            query: config.query.clone().unwrap_or_default(),
        },
        (None, url) => Check::Http {
            url: url.clone().unwrap_or_default(),
            json: config.json.clone(),
        },
    };
    let equals = match &config.job {
        Some(_) => Some(job::COMPLETE.to_string()),
        None => config.equals.clone(),
    };
    let condition = Condition {
        max: config.max,
        min: config.min,
        equals,
    };
    (check, condition)
}

/// The `Authorization` header of a check with a `bearer_token_file` (read at each
/// measurement: a rotated token is taken).
fn authorization(config: &AnalysisConfig) -> Result<Option<String>, Unmeasured> {
    let Some(file) = &config.bearer_token_file else {
        return Ok(None);
    };
    let token = std::fs::read_to_string(file)
        .map_err(|e| Unmeasured::Token(format!("{}: {e}", file.display())))?;
    Ok(Some(format!("Bearer {}", token.trim())))
}
