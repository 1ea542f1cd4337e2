//! Image updates written back to git, against a real registry (Debian's docker-registry on
//! loopback, tags pushed by the test) and a bare git remote on disk: `berth run` commits
//! the tags policies choose, signed, pushes them and deploys them — and never a tag whose
//! rollout failed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use berth::history::Outcome;
use common::registry::Registry;
use common::{eventually, Daemon, Repo, Setup};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

/// A bare remote and a clone of it that plays the person.
struct Remote {
    bare: tempfile::TempDir,
    person: Repo,
    key: PathBuf,
    signers: PathBuf,
}

impl Remote {
    /// A bare remote on `main`, whose first commit holds `files`, signed by a new SSH key
    /// (trusted by `signers`, which berth's key joins when given).
    fn new(files: &[(&str, &str)]) -> Remote {
        let bare = tempfile::tempdir().unwrap();
        git_in(bare.path(), &["init", "-q", "--bare", "-b", "main"]);
        let person = Repo::new();
        let key = ssh_key(person.dir.path(), "person");
        let signers = bare.path().join("allowed_signers");
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        std::fs::write(&signers, format!("person@example.com {public}")).unwrap();
        person.git(&[
            "remote",
            "add",
            "origin",
            &bare.path().display().to_string(),
        ]);
        let remote = Remote {
            bare,
            person,
            key,
            signers,
        };
        for (path, text) in files {
            remote.person.write(path, text);
        }
        remote.commit_and_push("the shop");
        remote
    }

    fn url(&self) -> String {
        self.bare.path().display().to_string()
    }

    /// Trusts `key` too.
    fn trust(&self, key: &Path) {
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let mut signers = std::fs::read_to_string(&self.signers).unwrap();
        signers += &format!("berth@example.com {public}");
        std::fs::write(&self.signers, signers).unwrap();
    }

    /// The person's commit of what they wrote, signed and pushed to `main`.
    fn commit_and_push(&self, message: &str) {
        self.person.git(&["add", "-A"]);
        let key = format!("user.signingkey={}", self.key.display());
        self.person.git(&[
            "-c",
            "gpg.format=ssh",
            "-c",
            &key,
            "commit",
            "-q",
            "-S",
            "-m",
            message,
        ]);
        self.person.git(&["push", "-q", "origin", "HEAD:main"]);
    }

    /// The person's clone brought up to date with `main`.
    fn pull(&self) {
        self.person.git(&["fetch", "-q", "origin"]);
        self.person.git(&["reset", "-q", "--hard", "origin/main"]);
    }

    /// `git ARGS` in the bare remote.
    fn git(&self, args: &[&str]) -> String {
        git_in(self.bare.path(), args)
    }

    /// `path` at `rev` in the remote.
    fn show(&self, rev: &str, path: &str) -> String {
        self.git(&["show", &format!("{rev}:{path}")])
    }
}

fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A new ed25519 key `name` in `dir`, without a passphrase.
fn ssh_key(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(format!("{name}-key"));
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .status()
        .expect("run ssh-keygen (apt install openssh-client)");
    assert!(made.success());
    key
}

/// The `[[image_policy]]` of `image` at `registry`, `rule` its order.
fn policy(name: &str, registry: &Registry, image: &str, rule: &str) -> String {
    format!(
        "[[image_policy]]\nname = \"{name}\"\nimage = \"{}/{image}\"\n{rule}\ninterval = \"10s\"\ncredentials = \"{}\"\nca_file = \"{}\"\n",
        registry.host,
        registry.login.display(),
        registry.tls.ca.display()
    )
}

/// Pushes an image tag (a one-layer artifact: the registry lists its tag as any image's).
fn push_tag(registry: &Registry, image: &str, tag: &str) {
    let layer = format!("{image}:{tag}").into_bytes();
    registry.push(image, tag, &layer, "application/vnd.oci.image.layer.v1.tar");
}

async fn image_of(api: &Api<Deployment>) -> Option<String> {
    let d = api.get_opt("web").await.ok()??;
    d.spec?.template.spec?.containers.first()?.image.clone()
}

#[tokio::test]
async fn new_tags_are_committed_signed_and_deployed_and_a_failed_one_never_again() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let Some(registry) = Registry::start() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "images").await;
    let image = format!("{}/team/shop", registry.host);
    let manifest = |tag: &str| {
        common::web_deployment(
            &format!("{image}:{tag} # {{\"$imagepolicy\": \"shop\"}}"),
            &format!("testenv.berth.dev/broken-images: \"{image}:1.5.0\""),
            "",
        )
    };
    for tag in ["1.4.1", "2.0.0"] {
        push_tag(&registry, "team/shop", tag);
    }
    let remote = Remote::new(&[("deploy/web.yaml", &manifest("1.4.1"))]);
    let keys = tempfile::tempdir().unwrap();
    let berth_key = ssh_key(keys.path(), "berth");
    remote.trust(&berth_key);
    let extra = format!(
        "branch = \"main\"\npath = \"deploy\"\n[app.rollout]\ntimeout = \"20s\"\n[app.verify]\nmode = \"head\"\nssh_allowed_signers = \"{}\"\n[app.image_updates]\nauthor = \"berth <berth@example.com>\"\nsigning_key = \"{}\"\n",
        remote.signers.display(),
        berth_key.display()
    );
    let setup = Setup::with_source(
        cp,
        "web",
        &format!("repo = \"{}\"", remote.url()),
        &ns,
        &extra,
    );
    let config = std::fs::read_to_string(&setup.config).unwrap();
    let config = config.replace("interval = \"1h\"", "interval = \"5s\"");
    let config = config + &policy("shop", &registry, "team/shop", "semver = \"^1\"");
    std::fs::write(&setup.config, config).unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let images = |args: &[&str]| {
        let (code, out, err) = setup.berth(&[&["images"], args].concat());
        (code, format!("{out}{err}"))
    };

    // What a scan would commit, before the agent runs: the newest inside ^1, not 2.0.0.
    push_tag(&registry, "team/shop", "1.4.2");
    let (code, out) = images(&["--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("-          image: ") && out.contains(":1.4.2 # {\"$imagepolicy\": \"shop\"}"),
        "{out}"
    );
    assert!(!out.contains("2.0.0 #"), "2.0.0 is outside ^1: {out}");
    assert_eq!(
        remote.git(&["rev-list", "--count", "main"]),
        "1",
        "a dry run pushes nothing"
    );

    let _agent = Daemon::start(&setup.config, &[]);
    let tagged = |tag: String| {
        let deployments = deployments.clone();
        async move {
            for _ in 0..600 {
                if image_of(&deployments).await.as_deref() == Some(tag.as_str()) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!(
                "the Deployment never ran {tag}: {:?}",
                image_of(&deployments).await
            );
        }
    };
    // 1.4.2 committed by berth, signed (the app verifies every commit it applies), pushed
    // and deployed; the file's other bytes as they were.
    tagged(format!("{image}:1.4.2")).await;
    assert_eq!(
        remote.show("main", "deploy/web.yaml"),
        manifest("1.4.2").trim_end()
    );
    let author = remote.git(&["log", "-1", "--format=%an <%ae>|%s", "main"]);
    assert_eq!(author, "berth <berth@example.com>|Update images: shop");
    assert!(remote
        .git(&["log", "-1", "--format=%B", "main"])
        .contains("- shop: 1.4.1 -> 1.4.2 (deploy/web.yaml:"));
    let signed = remote.git(&["cat-file", "commit", "main"]);
    assert!(signed.contains("-----BEGIN SSH SIGNATURE-----"), "{signed}");

    // A broken build: committed, its pods never ready, rolled back and held; the policy
    // skips it from now on.
    push_tag(&registry, "team/shop", "1.5.0");
    eventually(
        "the rollout of 1.5.0 rolled back",
        Duration::from_secs(120),
        || {
            setup
                .history()
                .iter()
                .any(|r| r.outcome == Outcome::RolledBack)
        },
    );
    tagged(format!("{image}:1.4.2")).await;
    eventually("1.5.0 recorded as failed", Duration::from_secs(60), || {
        let (_, out) = images(&[]);
        out.lines()
            .any(|l| l.starts_with("shop ") && l.ends_with(" 1.5.0"))
    });

    // A person sets 1.4.2 again in git: the field is paused there.
    remote.pull();
    remote.person.write("deploy/web.yaml", &manifest("1.4.2"));
    remote.commit_and_push("back to 1.4.2");
    let by_hand = remote.git(&["rev-parse", "main"]);
    eventually("the field paused", Duration::from_secs(60), || {
        images(&[]).1.contains("paused (set back by hand")
    });
    // Resumed: the failed tag is still not proposed.
    let (code, out) = images(&["resume", "shop"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("image policy shop resumed ("), "{out}");
    let (code, out) = images(&["--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("branch main: the next scan commits nothing"),
        "{out}"
    );

    // The next newer tag is committed and deployed; nothing else was committed since.
    push_tag(&registry, "team/shop", "1.5.1");
    tagged(format!("{image}:1.5.1")).await;
    let since = remote.git(&["log", "--format=%H", &format!("{by_hand}..main")]);
    assert_eq!(since.lines().count(), 1, "{since}");
    let diff = remote.git(&["diff", &by_hand, "main"]);
    assert!(
        diff.contains("+") && diff.contains(":1.5.1 #") && !diff.contains("1.5.0 #"),
        "{diff}"
    );
    let history = images(&["history"]).1;
    assert!(
        history.contains("shop 1.4.1 -> 1.4.2") && history.contains("shop 1.4.2 -> 1.5.1"),
        "{history}"
    );
}
