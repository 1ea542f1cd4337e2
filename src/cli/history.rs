//! `berth history`: the sync history log as a table, or one record in full.

use std::path::Path;
use std::process::ExitCode;

use berth::history::{short_age, HistoryLog, Outcome, SyncRecord};

use super::sync::{counts, select};

/// Arguments of `berth history`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub show: Option<Show>,
    /// Only this app.
    pub app: Option<String>,
    /// At most this many records (newest first).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Only records younger than this (e.g. 2h, 3d).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<std::time::Duration>,
    /// Only records with this outcome.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(Outcome::ALL.map(Outcome::as_str)))]
    pub outcome: Option<String>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `berth history show ID`.
#[derive(clap::Subcommand)]
pub enum Show {
    /// One record in full.
    Show {
        /// The record's id (first column of `berth history`).
        id: String,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `berth history`.
pub fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let config = super::load_listed(config_path)?;
    let log = HistoryLog::new(&config.agent.state_dir);
    let records = match &args.app {
        Some(app) => log.read(&app_of(&config, &log, app)?)?,
        None => log.read_all()?,
    };
    if let Some(Show::Show { id, json }) = &args.show {
        let r = find_record(&records, id)?;
        if *json {
            println!("{}", serde_json::to_string_pretty(r)?);
        } else {
            print!("{}", show(r));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let now = jiff::Timestamp::now();
    let selected: Vec<&SyncRecord> = records
        .iter()
        .rev()
        .filter(|r| {
            args.outcome
                .as_deref()
                .is_none_or(|o| r.outcome.as_str() == o)
        })
        .filter(|r| {
            args.since
                .is_none_or(|s| age(now, r).as_secs() <= s.as_secs())
        })
        .take(args.limit)
        .collect();
    if args.json {
        for r in selected {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", records_table(&selected, now));
    }
    Ok(ExitCode::SUCCESS)
}

/// The app named `app`: one in the configuration, or one removed from it whose history
/// is kept (said).
fn app_of(config: &berth::config::Config, log: &HistoryLog, app: &str) -> anyhow::Result<String> {
    match select(&config.apps, &[app.to_string()]) {
        Ok(_) => Ok(app.to_string()),
        Err(_) if log.apps().iter().any(|a| a == app) => {
            eprintln!("app {app} is no longer in the configuration: its history as kept");
            Ok(app.to_string())
        }
        Err(e) => Err(e),
    }
}

/// The record with id `id`, or the one record whose id starts with it (as git takes a
/// unique prefix of a commit's SHA).
fn find_record<'r>(records: &'r [SyncRecord], id: &str) -> anyhow::Result<&'r SyncRecord> {
    if let Some(r) = records.iter().find(|r| r.id == id) {
        return Ok(r);
    }
    let matching: Vec<&SyncRecord> = records.iter().filter(|r| r.id.starts_with(id)).collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => anyhow::bail!("no sync record {id:?}; `berth history` lists the ids"),
        many => anyhow::bail!(
            "{id:?} is the start of {} record ids ({}): give more of it",
            many.len(),
            many.iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn age(now: jiff::Timestamp, r: &SyncRecord) -> std::time::Duration {
    now.duration_since(r.started_at)
        .try_into()
        .unwrap_or_default()
}

fn records_table(records: &[&SyncRecord], now: jiff::Timestamp) -> String {
    let mut rows = vec![[
        "ID", "AGE", "APP", "COMMIT", "OUTCOME", "CHANGES", "DURATION",
    ]
    .map(String::from)];
    for r in records {
        rows.push([
            r.id.clone(),
            short_age(age(now, r)),
            r.app.clone(),
            r.short_commit().to_string(),
            r.outcome.as_str().to_string(),
            r.changes().to_string(),
            format!("{:.1}s", r.duration_ms as f64 / 1000.0),
        ]);
    }
    table(&rows)
}

/// Rows as kubectl prints them: left-aligned columns, three spaces apart.
pub fn table<R: AsRef<[String]>>(rows: &[R]) -> String {
    let columns = rows.first().map_or(0, |r| r.as_ref().len());
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            let width = |r: &R| r.as_ref().get(c).map_or(0, |cell| cell.chars().count());
            rows.iter().map(width).max().unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .as_ref()
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

/// The waves and hooks of a sync, a line each.
fn ordering(r: &SyncRecord) -> String {
    let mut out = String::new();
    for w in &r.waves {
        out += &format!(
            "Wave {:<6}{}, {} in {:.1}s\n",
            w.wave,
            w.outcome,
            berth::plural(w.objects, "object"),
            w.ms as f64 / 1000.0
        );
    }
    for h in &r.hooks {
        let message = if h.message.is_empty() {
            String::new()
        } else {
            format!(": {}", h.message)
        };
        out += &format!(
            "Hook:      {} {} {} in {:.1}s{message}\n",
            h.phase,
            h.key.kubectl(),
            h.outcome,
            h.ms as f64 / 1000.0
        );
    }
    out
}

/// One record in full, as `berth history show` prints it.
fn show(r: &SyncRecord) -> String {
    let mut out = header(r);
    let unknown = r.outcome == Outcome::Interrupted && r.objects.is_empty() && r.unchanged == 0;
    if unknown {
        out += "Objects:   none recorded (stopped before it wrote, or killed: the next sync compared the commit with the cluster)\n";
    } else if r.outcome != Outcome::Failed || !r.objects.is_empty() {
        out += &format!("Objects:   {}\n", counts(r));
    }
    for o in &r.objects {
        out += &object_line(o);
    }
    for ro in &r.rollouts {
        out += &rollout_text(ro);
    }
    out += &ordering(r);
    if let Some(note) = &r.note {
        out += &format!("Note:      {note}\n");
    }
    if !r.errors.is_empty() {
        out += "Errors:\n";
        for e in &r.errors {
            out += &format!("  - {}\n", e.message);
        }
    }
    out
}

/// The lines about the sync itself: what ran when, on which commit, signed by whom.
fn header(r: &SyncRecord) -> String {
    let mut out = format!(
        "ID:        {}\nApp:       {}\nTrigger:   {}\nStarted:   {} (took {:.1}s)\nOutcome:   {}\n",
        r.id,
        r.app,
        r.trigger.as_str(),
        r.started_at,
        r.duration_ms as f64 / 1000.0,
        r.outcome.as_str()
    );
    if let Some(host) = &r.host {
        out += &format!("Host:      {host}\n");
    }
    if let Some(ms) = r.waited_ms {
        out += &format!(
            "Waited:    {:.1}s for the apps it depends on\n",
            ms as f64 / 1000.0
        );
    }
    if let Some(c) = &r.commit {
        out += &format!(
            "Commit:    {} {:?}\n           by {} at {}\n",
            c.sha, c.subject, c.author, c.time
        );
    }
    if let Some(s) = &r.signature {
        out += &format!(
            "Signed:    by {} ({} key {})\n",
            s.signer, s.format, s.fingerprint
        );
    }
    if let Some(p) = &r.previous_commit {
        out += &format!("Previous:  {p}\n");
    }
    if let Some(note) = &r.history_rewritten {
        out += &format!("Warning:   {note}\n");
    }
    out
}

/// One object written or pruned: its action, the file it came from, and why.
fn object_line(o: &berth::history::ObjectAction) -> String {
    let note = o
        .note
        .as_ref()
        .map(|n| format!("  ({n})"))
        .unwrap_or_default();
    let source = o
        .source
        .as_ref()
        .map(|s| format!("  from {s}"))
        .unwrap_or_default();
    format!(
        "  {:<11}{}{source}{note}\n",
        o.action.as_str(),
        o.key.kubectl()
    )
}

fn rollout_text(ro: &berth::history::RolloutRecord) -> String {
    let rev = |r: Option<i64>| r.map_or("-".to_string(), |r| r.to_string());
    let mut out = format!(
        "Rollout:   {} ({} engine): revision {} → {}, {}\n           ReplicaSet {} → {}, images {} → {}\n",
        ro.deployment.kubectl(),
        ro.engine,
        rev(ro.revision_from),
        rev(ro.rollout.revision),
        ro.rollout.outcome.as_str(),
        ro.replica_set_from.as_deref().unwrap_or("-"),
        ro.rollout.replica_set.as_deref().unwrap_or("-"),
        list(&ro.images_from),
        list(&ro.images_to),
    );
    out += &timeline(&ro.rollout);
    if let Some(rb) = &ro.rollback {
        out += &format!(
            "Rollback:  {}, {}\n",
            rb.message,
            rb.rollout.outcome.as_str()
        );
        out += &timeline(&rb.rollout);
    }
    out
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

fn timeline(f: &berth::history::FollowedRollout) -> String {
    let mut out = format!(
        "           {}\n           {:<10} {:<12} {:<12} {}\n",
        f.message, "AT", "NEW", "READY/AVAIL", "OLD"
    );
    let start = f.started_at;
    for s in &f.steps {
        let at = format!("+{:.1}s", s.at.duration_since(start).as_secs_f64());
        out += &format!(
            "           {:<10} {:<12} {:<12} {}\n",
            at,
            s.new_replicas,
            format!("{}/{}", s.new_ready, s.new_available),
            s.old_replicas
        );
    }
    out
}
