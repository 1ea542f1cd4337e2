//! `berth plan`: what a sync would do now, without writing anything.

use std::path::Path;
use std::process::ExitCode;

use berth::config;
use berth::plan::phases::HookPhase;
use berth::sync::{PlannedObject, Preview, Syncer};

use super::sync::select;

mod markdown;

/// Arguments of `berth plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Apps to plan (default: all).
    pub apps: Vec<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Show Secret values in the diffs (masked as `***` otherwise).
    #[arg(long)]
    pub show_secrets: bool,
    /// Exit 2 when a sync would change something (0: nothing, 1: an error), as `terraform
    /// plan -detailed-exitcode` does, for scripts.
    #[arg(long = "exit-code", visible_alias = "detailed-exitcode")]
    pub exit_code: bool,
    /// Plan this revision of each app's repository instead of the ref the app follows:
    /// a full commit SHA, a branch (a pull request's), or tags/NAME; for a chart or an OCI
    /// artifact, a version, range or digest (--version). It is fetched (and verified) as
    /// the app's source is, planned against the live cluster, and nothing moves: no write
    /// to the cluster, the history, the inventory or the lock.
    #[arg(long, visible_alias = "version")]
    pub revision: Option<String>,
    /// With --revision: plan only the apps whose paths (or what their kustomizations
    /// reach) the revision changes, against what each app's last sync on this host read;
    /// an app without such a record is planned.
    #[arg(long, requires = "revision", conflicts_with = "offline")]
    pub all_affected: bool,
    /// With --revision: plan without a cluster — render the revision and compare it with
    /// the commit the app applied last (berth's local copy of its inventory) or with
    /// --against; what needs the API server is said to be skipped.
    #[arg(long, requires = "revision")]
    pub offline: bool,
    /// With --offline: the revision to compare with (default: the commit the app applied
    /// last, as this host knows it).
    #[arg(long, requires = "offline")]
    pub against: Option<String>,
}

/// How the plan is printed.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people.
    Text,
    /// One JSON object per app.
    Json,
    /// One markdown document for a pull request's comment (the same plan, the same bytes).
    Markdown,
}

/// Runs `berth plan`: exit code 1 when a sync would fail.
pub async fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let file = config::load(config_path)?;
    super::own_state(&file, "plan")?;
    let (config, _) = super::with_sets(&file, args.revision.as_deref()).await;
    let selected = select(&config.apps, &args.apps)?;
    let syncer = if args.offline {
        None
    } else {
        super::reach_clusters(&config, &selected).await?;
        Some(Syncer::connect(&config, false).await?)
    };
    let (mut ok, mut changes) = (true, false);
    let (mut previews, mut untouched) = (Vec::new(), Vec::new());
    for configured in selected {
        let app = match &args.revision {
            Some(revision) => configured.at_revision(revision)?,
            None => configured.clone(),
        };
        if let Some(syncer) = syncer.as_ref().filter(|_| args.all_affected) {
            if let Some(note) = syncer.untouched_by(configured, &app).await {
                match args.output {
                    Format::Json => println!(
                        "{}",
                        serde_json::json!({"app": app.name, "affected": false, "note": note})
                    ),
                    Format::Text => println!("{}: {note}", app.name),
                    Format::Markdown => untouched.push((app.name.clone(), note)),
                }
                continue;
            }
        }
        let progress = super::lines(|line| eprintln!("{}: {line}", app.name));
        let preview = match &syncer {
            Some(syncer) => syncer.preview(&app, args.show_secrets, &progress).await,
            None => offline(&config, configured, &app, &args)?,
        };
        ok &= preview.errors.is_empty();
        changes |= preview.objects.iter().any(|o| o.action != "kept");
        match args.output {
            Format::Json => println!("{}", serde_json::to_string(&preview)?),
            Format::Text => print!("{}", text(&preview)),
            Format::Markdown => previews.push(preview),
        }
    }
    if args.output == Format::Markdown {
        print!("{}", markdown::document(&previews, &untouched));
    }
    Ok(match (ok, changes && args.exit_code) {
        (false, _) => ExitCode::FAILURE,
        (true, true) => ExitCode::from(2),
        (true, false) => ExitCode::SUCCESS,
    })
}

/// The plan of `app` (at the revision) without a cluster, against `--against` or the
/// commit `configured` applied last as this host knows it.
fn offline(
    config: &config::Config,
    configured: &config::AppConfig,
    app: &config::AppConfig,
    args: &Args,
) -> anyhow::Result<Preview> {
    let applied = || {
        berth::cluster::inventory::load_local(&config.agent.state_dir, &configured.name)
            .and_then(|inventory| inventory.commit)
    };
    let base = match args.against.clone().or_else(applied) {
        Some(revision) => Some(configured.at_revision(&revision)?),
        None => None,
    };
    let agent = &config.agent;
    let kube_version = config.cluster_of(app).kube_version.as_deref();
    Ok(berth::sync::preview_offline(
        agent,
        kube_version,
        app,
        base.as_ref(),
        args.show_secrets,
    ))
}

/// One object of the plan, and its diff, at `indent`.
fn object(o: &PlannedObject, indent: &str) -> String {
    let mut out = format!("{indent}{}\n", o.line());
    for line in o.diff.iter().flat_map(|d| d.lines()) {
        out += &format!("{indent}  {line}\n");
    }
    out
}

/// The plan of an app with hooks or waves, in the order a sync takes it: `pre` hooks,
/// each wave (its objects, then its `sync` hooks), the prune, `post` hooks, and the `fail`
/// hooks a failure would run.
fn phases(p: &Preview) -> String {
    let hooks = |phase: HookPhase, wave: Option<i32>| -> String {
        p.hooks
            .iter()
            .filter(|h| h.phase == phase && wave.is_none_or(|w| w == h.wave))
            .map(|h| {
                format!(
                    "    {} ({} hook; {})\n",
                    h.key.kubectl(),
                    phase.as_str(),
                    h.deleted
                )
            })
            .collect()
    };
    let mut out = String::new();
    let mut group = |title: String, body: String| {
        if !body.is_empty() {
            out += &format!("  {title}:\n{body}");
        }
    };
    group("pre hooks".into(), hooks(HookPhase::Pre, None));
    let waves: std::collections::BTreeSet<i32> = p
        .objects
        .iter()
        .filter_map(|o| o.wave)
        .chain(
            p.hooks
                .iter()
                .filter(|h| h.phase == HookPhase::Sync)
                .map(|h| h.wave),
        )
        .collect();
    for wave in waves {
        let objects: String = p
            .objects
            .iter()
            .filter(|o| o.wave == Some(wave))
            .map(|o| object(o, "    "))
            .collect();
        group(
            format!("wave {wave}"),
            objects + &hooks(HookPhase::Sync, Some(wave)),
        );
    }
    let pruned: String = p
        .objects
        .iter()
        .filter(|o| o.wave.is_none())
        .map(|o| object(o, "    "))
        .collect();
    group("prune".into(), pruned);
    group("post hooks".into(), hooks(HookPhase::Post, None));
    group(
        "if the sync fails, fail hooks".into(),
        hooks(HookPhase::Fail, None),
    );
    out
}

fn text(p: &Preview) -> String {
    let commit = p
        .commit
        .as_ref()
        .map(|c| format!("{} {} {:?}", c.noun(), c.short(), c.subject))
        .unwrap_or_else(|| "commit -".into());
    let mut out = format!("{}: {commit}\n", p.app);
    if let Some(held) = &p.held {
        out += &format!("  held: {held} (berth sync --force applies it anyway)\n");
    }
    let ordered = !p.hooks.is_empty() || p.objects.iter().any(|o| o.wave.unwrap_or(0) != 0);
    if ordered {
        out += &phases(p);
    } else {
        for o in &p.objects {
            out += &object(o, "  ");
        }
    }
    out += &format!("  {} unchanged\n", p.unchanged);
    for d in &p.deployments {
        out += &rollout(d);
    }
    for e in &p.errors {
        out += &format!("  error: {e}\n");
    }
    for n in &p.notes {
        out += &format!("  note: {n}\n");
    }
    out
}

/// One predicted rollout, as `berth plan` prints it: the revision it makes, how, and its
/// steps.
fn rollout(d: &berth::rollout::predict::DeploymentPlan) -> String {
    let from = (d.revision_from)
        .map(|r| format!("revision {r} → "))
        .unwrap_or_default();
    let reuse = (d.reuses.as_ref())
        .map(|rs| format!(", back to ReplicaSet {rs}"))
        .unwrap_or_default();
    let (how, head, rows): (String, &str, Vec<String>) = match d.canary.is_empty() {
        true => {
            let how = format!(
                "{} replicas {}, maxSurge {}, maxUnavailable {}",
                d.strategy, d.replicas, d.max_surge, d.max_unavailable
            );
            let rows = d.steps.iter().enumerate();
            let rows = rows.map(|(i, s)| format!("{:<6} {:<5} {}", i + 1, s.new, s.old));
            (how, "STEP   NEW   OLD", rows.collect())
        }
        false => {
            let rows = d.canary.iter().enumerate().map(|(i, s)| {
                let weight = format!("{} %", s.weight);
                let (new, old, then) = (s.new, s.old, s.hold());
                format!("{:<6} {weight:<8} {new:<5} {old:<5} {then}", i + 1)
            });
            let how = format!("canary, {} replicas", d.replicas);
            (how, "STEP   WEIGHT   NEW   OLD   THEN", rows.collect())
        }
    };
    let (ns, name) = (d.deployment.namespace_or_default(), &d.deployment.name);
    let mut out = format!(
        "  {ns}/{name}: {from}revision {}{reuse}; {how}\n",
        d.revision_to
    );
    for line in std::iter::once(head).chain(rows.iter().map(String::as_str)) {
        out += &format!("    {line}\n");
    }
    out
}
