//! `berth images`: each image policy, the newest tag it sees, the tag in git and what the
//! next scan would commit (`--dry-run`: the diff; nothing is pushed); `resume POLICY`,
//! `forget POLICY TAG`, and `history`.

use std::path::Path;
use std::process::ExitCode;

use berth::images::plan::Plan;
use berth::images::scan::{Listed, Report, Scanner};
use berth::images::write::Written;
use berth::images::{log, state};

/// Arguments of `berth images`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// Show the diff the next scan would commit.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Let the policy write the fields a person set back by hand again (its failed tags
    /// stay skipped).
    Resume { policy: String },
    /// Let the policy write a tag whose rollout failed again.
    Forget { policy: String, tag: String },
    /// The write-backs berth pushed, oldest first.
    History,
}

/// Runs `berth images`.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = super::load_listed(config_path)?;
    let state_dir = &config.agent.state_dir;
    match args.action {
        Some(Action::Resume { policy }) => {
            known(&config, &policy)?;
            super::own_state(&config, "images resume")?;
            // Resumed from where git is: berth forgets what it wrote, so the tags in git
            // are where the policy goes on from (a pause the agent has not seen yet too).
            let paused = state::update(state_dir, |s| {
                let p = s.policies.entry(policy.clone()).or_default();
                p.written.clear();
                std::mem::take(&mut p.paused).len()
            })?;
            super::say(format_args!("image policy {policy} resumed ({paused} paused field(s)): it goes on from the tags in git; its failed tags stay skipped"));
        }
        Some(Action::Forget { policy, tag }) => {
            known(&config, &policy)?;
            super::own_state(&config, "images forget")?;
            let forgot = state::update(state_dir, |s| {
                (s.policies.get_mut(&policy)).is_some_and(|p| p.forget(&tag))
            })?;
            let said = if forgot {
                "may be written again"
            } else {
                "was not a failed tag"
            };
            super::say(format_args!("image policy {policy}: tag {tag} {said}"));
        }
        Some(Action::History) => history(state_dir),
        None => {
            if config.image_policies.is_empty() {
                anyhow::bail!(
                    "no [[image_policy]] in {}: see docs/image-updates.md",
                    config_path.display()
                );
            }
            // The scan fetches into the agent's caches of the repositories.
            super::own_state(&config, "images")?;
            let report = Scanner::default()
                .scan(&config, &config.apps, Listed::Every, true)
                .await;
            print(&report, args.dry_run);
            let failed = report.branches.iter().any(|b| b.result.is_err())
                || (report.policies.iter())
                    .any(|p| p.seen.as_ref().is_some_and(|s| s.error.is_some()));
            if failed {
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The write-backs recorded, oldest first.
fn history(state_dir: &Path) {
    println!("{:<25} {:<10} {:<12} CHANGES", "WHEN", "COMMIT", "BRANCH");
    for w in log::read(state_dir) {
        let (at, commit) = (w.at.to_string(), berth::source::short(&w.commit));
        println!("{at:<25} {commit:<10} {:<12} {}", w.branch, w.said());
    }
}

/// `berth status`'s table of image policies (none configured: `None`): the newest tag
/// each saw, the tags it skips because their rollout failed, the fields paused.
pub fn status_rows(config: &berth::config::Config) -> Option<Vec<[String; 4]>> {
    if config.image_policies.is_empty() {
        return None;
    }
    let state = state::read(&config.agent.state_dir);
    let head = [
        "IMAGE POLICY",
        "LATEST",
        "FAILED (SKIPPED)",
        "PAUSED FIELDS",
    ];
    let mut rows = vec![head.map(String::from)];
    for policy in &config.image_policies {
        let kept = state
            .policies
            .get(&policy.name)
            .cloned()
            .unwrap_or_default();
        let (latest, failed) = (kept.latest_said(), kept.failed_said());
        rows.push([
            policy.name.clone(),
            latest,
            failed,
            kept.paused.len().to_string(),
        ]);
    }
    Some(rows)
}

fn known(config: &berth::config::Config, policy: &str) -> anyhow::Result<()> {
    match config.image_policy(policy) {
        Some(_) => Ok(()),
        None => anyhow::bail!("no image policy named {policy:?} in the configuration"),
    }
}

/// The policies, then each field with its tag in git and the next; with `diff`, each
/// branch's diff.
fn print(report: &Report, diff: bool) {
    println!(
        "{:<16} {:<40} {:>6} {:<16} FAILED",
        "POLICY", "IMAGE", "TAGS", "LATEST"
    );
    for p in &report.policies {
        let (tags, latest) = match &p.seen {
            Some(seen) if seen.error.is_none() => (
                seen.tags.to_string(),
                seen.latest.clone().unwrap_or("-".into()),
            ),
            _ => ("?".into(), "-".into()),
        };
        let failed = state::failed_said(&p.failed);
        println!(
            "{:<16} {:<40} {tags:>6} {latest:<16} {failed}",
            p.name, p.image
        );
        if let Some(error) = p.seen.as_ref().and_then(|s| s.error.as_ref()) {
            println!("  error: {error}");
        }
    }
    println!();
    println!("{:<16} {:<44} {:<16} NEXT", "POLICY", "FIELD", "IN GIT");
    for branch in &report.branches {
        let plan = match &branch.result {
            Ok(Written::Planned(plan) | Written::Pushed { plan, .. }) => plan,
            Err(e) => {
                println!("{} ({}): {e}", branch.repo, branch.branch);
                continue;
            }
        };
        for field in &branch.fields {
            let next = match plan.changes.iter().find(|c| c.field == field.field) {
                Some(change) => change.new.clone(),
                None if field.paused => "paused (set back by hand; berth images resume)".into(),
                None => "-".into(),
            };
            println!(
                "{:<16} {:<44} {:<16} {next}",
                field.policy, field.field, field.tag
            );
        }
        if diff {
            print_diff(&branch.branch, plan);
        }
    }
}

fn print_diff(branch: &str, plan: &Plan) {
    if plan.files.is_empty() {
        println!("branch {branch}: the next scan commits nothing");
        return;
    }
    for file in &plan.files {
        let diff = similar::TextDiff::from_lines(&file.old, &file.new);
        let a = format!("a/{}", file.path);
        let b = format!("b/{}", file.path);
        print!("{}", diff.unified_diff().context_radius(2).header(&a, &b));
    }
}
