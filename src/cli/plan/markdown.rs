//! `berth plan -o markdown`: one document for a pull request's comment — a summary line
//! per app, then per app its errors, the objects it would create, change (each diff
//! folded), prune and keep, the Deployments that would roll with their predicted steps,
//! and its hooks. Deterministic: the same plan gives the same bytes (objects in a fixed
//! order, no time), so a bot can update its comment only when the plan changes.

use berth::rollout::predict::DeploymentPlan;
use berth::sync::{PlannedHook, PlannedObject, Preview};

/// The whole document for `previews`, and the apps the revision does not touch with
/// why (`--all-affected`).
pub fn document(previews: &[Preview], untouched: &[(String, String)]) -> String {
    let mut out = String::from("## berth plan\n\n| app | commit | plan |\n| --- | --- | --- |\n");
    for p in previews {
        out += &format!("| `{}` | {} | {} |\n", p.app, commit(p), summary(p));
    }
    for (app, note) in untouched {
        out += &format!("| `{app}` | - | {} |\n", escape(note));
    }
    for p in previews {
        out += &app(p);
    }
    out
}

/// `` `abc1234` subject ``, or `-` when no commit was fetched.
fn commit(p: &Preview) -> String {
    p.commit.as_ref().map_or_else(
        || "-".into(),
        |c| format!("`{}` {}", c.short(), escape(&c.subject)),
    )
}

/// `+3 ~2 -1, 1 rollout, 0 errors`.
fn summary(p: &Preview) -> String {
    let count = |action: &str| p.objects.iter().filter(|o| o.action == action).count();
    let plural = |n: usize, one: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    format!(
        "+{} ~{} -{}, {}, {}",
        count("create"),
        count("configure"),
        count("prune"),
        plural(p.deployments.len(), "rollout"),
        plural(p.errors.len(), "error")
    )
}

/// One app's section.
fn app(p: &Preview) -> String {
    let mut out = format!("\n### `{}` at {}\n\n", p.app, commit(p));
    if let Some(previous) = &p.previous_commit {
        out += &format!("Applied now: `{}`.\n\n", short(previous));
    }
    for note in &p.notes {
        out += &format!("> {}\n\n", escape(note));
    }
    if let Some(held) = &p.held {
        out += &format!("**Held**: {} — a sync applies nothing.\n\n", escape(held));
    }
    if !p.errors.is_empty() {
        out += "**Errors**\n\n";
        let mut errors = p.errors.clone();
        errors.sort();
        for e in errors {
            out += &format!("- {}\n", escape(&e));
        }
        out += "\n";
    }
    out += &objects(&p.objects);
    out += &rollouts(&p.deployments);
    out += &hooks(&p.hooks);
    out += &format!("{} unchanged.\n", p.unchanged);
    out
}

/// The objects, by what becomes of them.
fn objects(planned: &[PlannedObject]) -> String {
    let mut objects: Vec<&PlannedObject> = planned.iter().collect();
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    let mut out = String::new();
    for (action, title) in [
        ("create", "Create"),
        ("configure", "Change"),
        ("prune", "Prune"),
        ("kept", "Keep (not pruned)"),
        ("refused", "Refused by the API server"),
    ] {
        let of: Vec<&&PlannedObject> = objects.iter().filter(|o| o.action == action).collect();
        if of.is_empty() {
            continue;
        }
        out += &format!("**{title}**\n\n");
        for o in of {
            out += &object(o);
        }
        out += "\n";
    }
    out
}

/// The rollouts the plan predicts, step by step.
fn rollouts(deployments: &[DeploymentPlan]) -> String {
    if deployments.is_empty() {
        return String::new();
    }
    let mut out = "**Rollouts**\n\n".to_string();
    for d in deployments {
        let from = d
            .revision_from
            .map(|r| format!("revision {r} → "))
            .unwrap_or_default();
        let steps: Vec<String> = d
            .steps
            .iter()
            .map(|s| format!("{}/{}", s.new, s.old))
            .collect();
        if !d.canary.is_empty() {
            let steps: Vec<String> = (d.canary.iter())
                .map(|s| format!("{} % ({}/{}, then {})", s.weight, s.new, s.old, s.hold()))
                .collect();
            out += &format!(
                "- `{}`: {from}revision {}, {} replicas, canary: {}\n",
                d.deployment.kubectl(),
                d.revision_to,
                d.replicas,
                steps.join("; ")
            );
            continue;
        }
        out += &format!(
            "- `{}`: {from}revision {}, {} replicas, {} (maxSurge {}, maxUnavailable {}): {} steps, new/old replicas {}\n",
            d.deployment.kubectl(),
            d.revision_to,
            d.replicas,
            d.strategy,
            d.max_surge,
            d.max_unavailable,
            d.steps.len(),
            steps.join(", ")
        );
    }
    out + "\n"
}

/// The hooks a sync would run.
fn hooks(hooks: &[PlannedHook]) -> String {
    if hooks.is_empty() {
        return String::new();
    }
    let mut out = "**Hooks**\n\n".to_string();
    for h in hooks {
        out += &format!(
            "- {} (order {}): `{}`, {}\n",
            h.phase.as_str(),
            h.wave,
            h.key.kubectl(),
            h.deleted
        );
    }
    out + "\n"
}

/// One object: its name and note (a refusal's is among the errors), and its diff folded
/// under it.
fn object(o: &PlannedObject) -> String {
    let note = o
        .note
        .as_ref()
        .filter(|_| o.action != "refused")
        .map(|n| format!(" — {}", escape(n)))
        .unwrap_or_default();
    match &o.diff {
        Some(diff) if o.action == "configure" => format!(
            "<details><summary><code>{}</code>{note}</summary>\n\n````diff\n{}````\n\n</details>\n\n",
            html(&o.key.kubectl()),
            diff
        ),
        _ => format!("- `{}`{note}\n", o.key.kubectl()),
    }
}

/// A 7-character commit id.
fn short(sha: &str) -> &str {
    sha.get(..7).unwrap_or(sha)
}

/// Text on one line of markdown: no line break, no table bar, no HTML.
fn escape(text: &str) -> String {
    html(&text.replace(['\n', '\r'], " ").replace('|', "\\|"))
}

fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_a_commit_stays_on_its_line_and_in_its_cell() {
        // A commit subject or an error is the author's text: no table cell broken, no
        // HTML, no line break.
        assert_eq!(
            escape("fix | <script>x</script>\n# title"),
            "fix \\| &lt;script&gt;x&lt;/script&gt; # title"
        );
    }
}
