//! One scan: each due policy's tags listed through the registry API (paginated and
//! bounded, a client and its token grants kept per policy), the tags whose rollout failed
//! read from the apps' history, and each repository branch's fields written back (or, for
//! `berth images`, planned).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use jiff::Timestamp;

use super::plan::{Choice, FieldNow, Plan};
use super::policy::Policy;
use super::state::{self, Failure, Seen};
use super::write::{groups, write_back, Group, WriteError, Written};
use crate::config::{AppConfig, Config, ImagePolicyConfig, RegistryConfig};
use crate::history::{HistoryLog, Outcome};
use crate::source::registry::http::Client;
use crate::source::registry::oci::{self, Reference};
use crate::source::registry::RegistryError;
use futures::StreamExt;

/// The newest tags kept of each policy's list: the newest not failed is among them unless
/// that many failed.
const KEPT: usize = 128;
/// Repositories listed at once.
const LISTINGS: usize = 8;

/// The registry clients and each policy's newest tags, kept between scans.
#[derive(Default)]
pub struct Scanner {
    clients: Vec<(RegistryConfig, Arc<Client>)>,
    newest: HashMap<String, Vec<String>>,
    scanned: HashMap<String, std::time::Instant>,
}

/// What one scan saw and did.
#[derive(Debug, Default)]
pub struct Report {
    pub policies: Vec<PolicyReport>,
    pub branches: Vec<BranchReport>,
    /// Failed rollouts found by this scan, with their policy.
    pub failed: Vec<(String, Failure)>,
}

/// A policy, as a scan saw it.
#[derive(Debug)]
pub struct PolicyReport {
    pub name: String,
    pub image: String,
    pub seen: Option<Seen>,
    /// The failed tags it skips, each in its app.
    pub failed: Vec<Failure>,
}

/// A repository branch, as a scan left it.
#[derive(Debug)]
pub struct BranchReport {
    pub repo: String,
    pub branch: String,
    pub apps: Vec<String>,
    pub fields: Vec<FieldNow>,
    /// The plan (or the pushed commit), or why neither.
    pub result: Result<Written, WriteError>,
}

impl BranchReport {
    /// A pushed commit in words: its id, and the changes (`policy old -> new, …`).
    pub fn said(&self) -> Option<(String, String)> {
        let Ok(Written::Pushed { commit, plan, .. }) = &self.result else {
            return None;
        };
        Some((commit.clone(), changes(plan)))
    }
}

/// Which policies a scan lists.
pub enum Listed<'a> {
    Every,
    /// Those whose interval has passed, and these (a registry said it pushed to them).
    Due(&'a BTreeSet<String>),
}

impl Scanner {
    /// Lists the tags of the policies `listed` says, then writes back (or, with `dry_run`,
    /// plans) each branch of `apps`' repositories.
    pub async fn scan(
        &mut self,
        config: &Config,
        apps: &[Arc<AppConfig>],
        listed: Listed<'_>,
        dry_run: bool,
    ) -> Report {
        let state_dir = config.agent.state_dir.clone();
        let due: Vec<&ImagePolicyConfig> = (config.image_policies.iter())
            .filter(|p| match &listed {
                Listed::Every => true,
                Listed::Due(pushed) => {
                    pushed.contains(&p.name)
                        || (self.scanned.get(&p.name)).is_none_or(|at| at.elapsed() >= p.interval)
                }
            })
            .collect();
        let seen = self.list(&due).await;
        let policies = config.image_policies.clone();
        let apps = apps.to_vec();
        let newest = self.newest.clone();
        let all = config.apps.clone();
        let work = move || one_scan(&state_dir, &policies, (&apps, &all), &newest, seen, dry_run);
        match tokio::task::spawn_blocking(work).await {
            Ok(report) => report,
            Err(e) => {
                tracing::error!(error = %e, "the image scan stopped");
                Report::default()
            }
        }
    }

    /// Lists the tags of `due` policies — each repository once however many policies read
    /// it, [`LISTINGS`] at once — keeping each policy's newest.
    async fn list(&mut self, due: &[&ImagePolicyConfig]) -> BTreeMap<String, Seen> {
        let mut repositories: Vec<(&str, RegistryConfig)> = Vec::new();
        for policy in due {
            let repository = (policy.image.as_str(), policy.registry());
            if !repositories.contains(&repository) {
                repositories.push(repository);
            }
        }
        let mut listings = Vec::new();
        for (image, registry) in &repositories {
            let (client, reference) = (self.client(registry), reference(image, registry.insecure));
            listings.push(async move { oci::tags(&*client?, &reference?).await });
        }
        let listed: Vec<Result<Vec<String>, RegistryError>> = futures::stream::iter(listings)
            .buffered(LISTINGS)
            .collect()
            .await;
        let at = Timestamp::now();
        let mut seen = BTreeMap::new();
        for policy in due {
            self.scanned
                .insert(policy.name.clone(), std::time::Instant::now());
            let repository = (policy.image.as_str(), policy.registry());
            let index = repositories.iter().position(|r| *r == repository);
            let tags = index.map(|i| &listed[i]);
            let said = match tags {
                Some(Ok(tags)) => {
                    let kept = Policy::of(policy).map(|p| p.newest(tags, KEPT));
                    let kept = kept.unwrap_or_default();
                    let seen = Seen {
                        at,
                        tags: tags.len(),
                        latest: kept.first().cloned(),
                        error: None,
                    };
                    self.newest.insert(policy.name.clone(), kept);
                    seen
                }
                Some(Err(e)) => {
                    tracing::warn!(policy = %policy.name, error = %e, "cannot list the image's tags");
                    Seen {
                        at,
                        tags: 0,
                        latest: None,
                        error: Some(e.to_string()),
                    }
                }
                None => continue,
            };
            seen.insert(policy.name.clone(), said);
        }
        seen
    }

    /// The client of a registry reached as `registry` says (kept: its token grants too).
    fn client(&mut self, registry: &RegistryConfig) -> Result<Arc<Client>, RegistryError> {
        if let Some((_, client)) = self.clients.iter().find(|(r, _)| r == registry) {
            return Ok(client.clone());
        }
        let client = Arc::new(Client::new(registry)?);
        self.clients.push((registry.clone(), client.clone()));
        Ok(client)
    }
}

/// The registry's API for `image` (`host/path`; Docker Hub's `docker.io` is
/// `registry-1.docker.io`).
///
/// # Errors
/// Not an image repository.
pub fn reference(image: &str, insecure: bool) -> Result<Reference, RegistryError> {
    let image = match image.strip_prefix("docker.io/") {
        Some(path) => format!("registry-1.docker.io/{path}"),
        None => image.to_string(),
    };
    Reference::parse(&format!("oci://{image}"), insecure)
}

/// The scan's blocking part: failures read, fields written back, the state kept (`all`:
/// every configured app, `apps` those written back).
fn one_scan(
    state_dir: &Path,
    policies: &[ImagePolicyConfig],
    (apps, all): (&[Arc<AppConfig>], &[Arc<AppConfig>]),
    newest: &HashMap<String, Vec<String>>,
    seen: BTreeMap<String, Seen>,
    dry_run: bool,
) -> Report {
    let compiled: Vec<(&ImagePolicyConfig, Policy)> = (policies.iter())
        .filter_map(|p| Some((p, Policy::of(p).ok()?)))
        .collect();
    let failed = match dry_run {
        true => Vec::new(),
        false => keep(state_dir, policies, apps, &seen),
    };
    let newest_of = |name: &str| newest.get(name).map(Vec::as_slice).unwrap_or_default();
    let choices: BTreeMap<&str, Choice<'_>> = (compiled.iter())
        .map(|(config, policy)| {
            let choice = Choice {
                policy,
                image: &config.image,
                newest: newest_of(&config.name),
            };
            (config.name.as_str(), choice)
        })
        .collect();
    let branches = (groups(apps.iter().map(|a| &**a), all, state_dir).iter())
        .map(|group| branch(group, state_dir, &choices, dry_run))
        .collect();
    let state = state::read(state_dir);
    let policies = (compiled.iter())
        .map(|(config, _)| {
            let policy = state.policies.get(&config.name);
            let seen = (seen.get(&config.name).cloned()).or_else(|| policy?.seen.clone());
            let failed = policy.map(|p| p.failed.clone());
            PolicyReport {
                name: config.name.clone(),
                image: config.image.clone(),
                seen,
                failed: failed.unwrap_or_default(),
            }
        })
        .collect();
    Report {
        policies,
        branches,
        failed,
    }
}

/// Keeps what the scan learnt — the tags found failed, the registries' listings — in the
/// state; the failures new to it, each with its policy.
fn keep(
    state_dir: &Path,
    policies: &[ImagePolicyConfig],
    apps: &[Arc<AppConfig>],
    seen: &BTreeMap<String, Seen>,
) -> Vec<(String, Failure)> {
    let found = failures(state_dir, policies, apps);
    let kept = state::update(state_dir, |s| {
        let mut new = Vec::new();
        for (policy, failure) in found {
            if (s.policies.entry(policy.clone()).or_default()).fail(failure.clone()) {
                new.push((policy, failure));
            }
        }
        for (name, seen) in seen {
            let policy = s.policies.entry(name.clone()).or_default();
            policy.seen = Some(seen.clone());
        }
        new
    });
    kept.unwrap_or_else(|e| {
        tracing::warn!("cannot keep the image updates' state: {e}");
        Vec::new()
    })
}

/// One branch written back (or planned), the state kept unless `dry_run`.
fn branch(
    group: &Group<'_>,
    state_dir: &Path,
    choices: &BTreeMap<&str, Choice<'_>>,
    dry_run: bool,
) -> BranchReport {
    let result = if dry_run {
        (state::load(state_dir).map_err(WriteError::State))
            .and_then(|mut state| write_back(group, state_dir, choices, &mut state, true))
    } else {
        state::update(state_dir, |s| {
            write_back(group, state_dir, choices, s, false)
        })
        .unwrap_or_else(|e| Err(WriteError::State(e)))
    };
    let fields = match &result {
        Ok(Written::Planned(plan) | Written::Pushed { plan, .. }) => plan.fields.clone(),
        Err(_) => Vec::new(),
    };
    match &result {
        Ok(Written::Pushed {
            commit,
            plan,
            attempts,
        }) => {
            tracing::info!(repo = %group.repo(), branch = %group.branch, commit = %commit, attempts, "image updates pushed: {}", changes(plan));
            super::log::append(state_dir, group, commit, plan);
        }
        Err(e) => {
            tracing::warn!(repo = %group.repo(), branch = %group.branch, "image updates not written: {e}")
        }
        Ok(Written::Planned(_)) => {}
    }
    BranchReport {
        repo: group.repo(),
        branch: group.branch.clone(),
        apps: group.apps.iter().map(|a| a.name.clone()).collect(),
        fields,
        result,
    }
}

/// `policy old -> new, …`.
pub fn changes(plan: &Plan) -> String {
    let said: Vec<String> = (plan.changes.iter())
        .map(|c| format!("{} {} -> {}", c.policy, c.old, c.new))
        .collect();
    said.join(", ")
}

/// The tags whose rollout failed and berth rolled back, in each app's last rolled-back
/// sync: each policy's image at a tag the Deployment did not run before.
fn failures(
    state_dir: &Path,
    policies: &[ImagePolicyConfig],
    apps: &[Arc<AppConfig>],
) -> Vec<(String, Failure)> {
    let log = HistoryLog::new(state_dir);
    let mut found = Vec::new();
    for app in apps.iter().filter(|a| a.image_updates.is_some()) {
        let Ok(Some(record)) = log.last(&app.name, &[Outcome::RolledBack]) else {
            continue;
        };
        if record.trigger == crate::history::Trigger::Cli {
            continue; // `berth rollback`: a person's choice, not a failed rollout
        }
        for rollout in record.rollouts.iter().filter(|r| r.rollback.is_some()) {
            for image in rollout
                .images_to
                .iter()
                .filter(|i| !rollout.images_from.contains(i))
            {
                let Some((name, tag)) = super::markers::split_image(image) else {
                    continue;
                };
                for policy in policies.iter().filter(|p| p.image == name) {
                    let failure = Failure {
                        tag: tag.to_string(),
                        app: app.name.clone(),
                        record: record.id.clone(),
                        at: record.finished_at,
                    };
                    found.push((policy.name.clone(), failure));
                }
            }
        }
    }
    found
}
