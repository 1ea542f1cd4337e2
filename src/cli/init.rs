//! `berth init`: writes a commented starter configuration for one app — the keys it sets
//! uncommented, the others that most users change commented out at their defaults — and
//! says what to run next. It never overwrites a file, and writes nothing the
//! configuration's own checks refuse.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

/// Arguments of `berth init`; it writes the file `--config` names.
#[derive(clap::Args)]
pub struct Args {
    /// The app's git repository: https://…, ssh://…, git@host:path, file://… or a local path.
    #[arg(long)]
    pub repo: String,
    /// The folder in the repository to render (plain YAML, a kustomization or a chart).
    #[arg(long, default_value = ".")]
    pub path: String,
    /// The namespace of the app's objects that name none; created when missing.
    #[arg(long)]
    pub namespace: String,
    /// The app's name (a DNS label). Default: the repository's name.
    #[arg(long)]
    pub name: Option<String>,
    /// Where berth keeps its caches and history (the systemd unit's is /var/lib/berth).
    #[arg(long, default_value = "/var/lib/berth")]
    pub state_dir: PathBuf,
}

/// Runs `berth init`.
///
/// # Errors
/// The file exists, cannot be written, or the values make a configuration berth refuses.
pub fn run(config_path: &Path, args: Args) -> anyhow::Result<ExitCode> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => name_of(&args.repo).with_context(|| {
            format!(
                "cannot make an app name from {:?}: give one with --name",
                args.repo
            )
        })?,
    };
    let branch = berth::source::git::default_branch(&args.repo);
    let text = starter(&args, &name, branch.as_deref())?;
    // What is written must load and validate: a bad name, namespace or path is refused
    // here, with nothing written.
    berth::config::parse(&text)
        .and_then(|c| c.validate())
        .map_err(|e| {
            anyhow::anyhow!("berth init would write a configuration berth refuses: {e}")
        })?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(config_path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => anyhow::anyhow!(
                "{} exists: berth init does not overwrite a configuration (give another with --config, or edit that one)",
                config_path.display()
            ),
            _ => anyhow::anyhow!("cannot write {}: {e}", config_path.display()),
        })?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", config_path.display()))?;
    let config = if config_path == Path::new(berth::config::DEFAULT_PATH) {
        String::new()
    } else {
        format!(" --config {}", config_path.display())
    };
    println!(
        "wrote {}: app {name} syncs {} of {} into namespace {}\n\nnext:\n  berth validate{config}   fetch and render the commit (no cluster needed)\n  berth plan{config}       what a sync would change in the cluster\n  berth sync{config}       sync once, following the rollouts\n  berth run{config}        keep syncing, on every commit and interval",
        config_path.display(),
        args.path,
        berth::source::git::redact_url(&args.repo),
        args.namespace,
    );
    Ok(ExitCode::SUCCESS)
}

/// The app name a repository suggests: its last path segment without `.git`, lowercased,
/// with what a DNS label cannot hold turned into dashes.
fn name_of(repo: &str) -> Option<String> {
    let last = repo.trim_end_matches('/').rsplit(['/', ':']).next()?;
    let last = last.strip_suffix(".git").unwrap_or(last);
    let name: String = last
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-');
    (!name.is_empty()).then(|| {
        name.chars()
            .take(63)
            .collect::<String>()
            .trim_end_matches('-')
            .to_string()
    })
}

/// A TOML string.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The starter configuration, its values `@NAME@` and the like (TOML strings).
const STARTER: &str = r#"# berth configuration, written by `berth init`. Every key, its default and what it does:
# docs/configuration.md (or berth's config/berth.toml). Keys commented out are at their
# defaults. Check the file with `berth validate`; a running agent reads it again on
# `systemctl reload berth`.

[agent]
# Where repository caches and the sync history are kept (the systemd unit's is
# /var/lib/berth).
state_dir = @STATE_DIR@
# How often each app is synced when no commit or webhook comes first, plus up to
# `jitter` of random delay.
# interval = "1m"
# jitter = "10s"
# The HTTP endpoint (/healthz, /readyz, /metrics, webhooks); "off" disables it.
# listen = "127.0.0.1:9464"
# The read-only status page, served on `listen`.
# status_page = false

[cluster]
# The kubeconfig. Unset: $KUBECONFIG, then ~/.kube/config, then the in-cluster account.
# Under systemd, a credential: put it in /etc/berth/credentials/kubeconfig (root only).
# kubeconfig = "credential:kubeconfig"

[[app]]
# A DNS label: it names the app's inventory and the berth.dev/app label of its objects.
name = @NAME@
# https://…, ssh://…, git@host:path, file://… or a local path. A private repository
# needs [app.auth] (a token or an ssh key, as a credential).
repo = @REPO@
# The branch, tag or commit to follow. Unset: the repository's default branch.
# branch = "main"
# The folders to render: plain YAML, a kustomization or a Helm chart.
path = [@PATH@]
# The namespace of the objects that name none; the app may write there only
# ([app.scope] opens more).
namespace = @NAMESPACE@
# Create that namespace when it is missing.
create_namespace = true
# Delete the objects git no longer holds (only those labelled as this app's).
# prune = false
# When a rollout fails: "rollback", "halt" or "continue".
# [app.rollout]
# on_failure = "rollback"
# timeout = "5m"
"#;

/// The starter configuration for `args`, its app named `name`.
fn starter(args: &Args, name: &str, branch: Option<&str>) -> anyhow::Result<String> {
    // Paths are read from wherever the service runs: made absolute.
    let repo = berth::source::git::remote_url(&args.repo);
    let state_dir = std::path::absolute(&args.state_dir)?.display().to_string();
    let values = [
        ("@STATE_DIR@", state_dir.as_str()),
        ("@NAME@", name),
        ("@REPO@", &repo),
        ("@PATH@", &args.path),
        ("@NAMESPACE@", &args.namespace),
    ];
    // One pass: a value that holds a marker's text is not replaced again.
    let (mut text, mut rest) = (String::new(), STARTER);
    while let Some(at) = rest.find('@') {
        text.push_str(&rest[..at]);
        let tail = &rest[at..];
        match values.iter().find(|(marker, _)| tail.starts_with(marker)) {
            Some((marker, value)) => {
                text.push_str(&quoted(value));
                rest = &tail[marker.len()..];
            }
            None => {
                text.push('@');
                rest = &tail[1..];
            }
        }
    }
    text.push_str(rest);
    // The branch the repository names its default now, written down: never a work tree's
    // HEAD as it moves, nor a remote's default as it changes.
    if let Some(branch) = branch {
        text = text.replacen(
            UNNAMED_BRANCH,
            &format!(
                "# The branch, tag or commit to follow: the repository's default branch when\n# berth init ran.\nbranch = {}\n",
                quoted(branch)
            ),
            1,
        );
    }
    Ok(text)
}

/// The starter's lines for the branch when the repository's default is not known.
const UNNAMED_BRANCH: &str =
    "# The branch, tag or commit to follow. Unset: the repository's default branch.\n# branch = \"main\"\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_app_is_named_after_its_repository() {
        assert_eq!(
            name_of("https://git.example.com/platform/Shop.git").as_deref(),
            Some("shop")
        );
        assert_eq!(
            name_of("git@github.com:acme/web_front.git/").as_deref(),
            Some("web-front")
        );
        assert_eq!(name_of("/srv/git/guestbook").as_deref(), Some("guestbook"));
        assert_eq!(name_of("https://example.com/___.git"), None);
    }

    #[test]
    fn the_starter_loads_with_what_was_given() {
        let args = Args {
            repo: "https://git.example.com/shop.git".into(),
            path: "deploy".into(),
            namespace: "shop".into(),
            name: None,
            state_dir: "/var/lib/berth".into(),
        };
        let config = berth::config::parse(&starter(&args, "shop", None).unwrap()).unwrap();
        let app = &config.apps[0];
        assert_eq!(
            (
                app.name.as_str(),
                app.repo.as_str(),
                app.path.as_slice(),
                app.namespace.as_str()
            ),
            (
                "shop",
                "https://git.example.com/shop.git",
                &["deploy".to_string()][..],
                "shop"
            )
        );
        assert!(app.create_namespace && !app.prune);
        let odd = Args {
            namespace: "@NAME@".into(),
            ..args
        };
        let text = starter(&odd, "shop", None).unwrap();
        assert!(text.contains("namespace = \"@NAME@\"\n"), "{text}");
        assert_eq!(config.agent.state_dir, Path::new("/var/lib/berth"));
    }

    #[test]
    fn the_repositorys_default_branch_is_written_when_known() {
        let args = Args {
            repo: "/srv/git/shop".into(),
            path: ".".into(),
            namespace: "shop".into(),
            name: None,
            state_dir: "/var/lib/berth".into(),
        };
        let text = starter(&args, "shop", Some("trunk")).unwrap();
        let config = berth::config::parse(&text).unwrap();
        assert_eq!(config.apps[0].branch.as_deref(), Some("trunk"));
        assert!(!text.contains("# branch = "), "{text}");
        let unknown = berth::config::parse(&starter(&args, "shop", None).unwrap()).unwrap();
        assert_eq!(unknown.apps[0].branch, None);
    }
}
