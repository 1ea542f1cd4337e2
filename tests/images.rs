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
    bare: Repo,
    person: Repo,
    key: PathBuf,
    signers: PathBuf,
}

impl Remote {
    /// A bare remote on `main`, whose first commit holds `files`, signed by a new SSH key
    /// (trusted by `signers`, which berth's key joins when given).
    fn new(files: &[(&str, &str)]) -> Remote {
        let bare = Repo {
            dir: tempfile::tempdir().unwrap(),
        };
        bare.git(&["init", "-q", "--bare", "-b", "main"]);
        let person = Repo::new();
        let key = ssh_key(person.dir.path(), "person");
        let signers = bare.dir.path().join("allowed_signers");
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        std::fs::write(&signers, format!("person@example.com {public}")).unwrap();
        person.git(&[
            "remote",
            "add",
            "origin",
            &bare.dir.path().display().to_string(),
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
        self.bare.dir.path().display().to_string()
    }

    /// Trusts `key` too.
    fn trust(&self, key: &Path) {
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let mut signers = std::fs::read_to_string(&self.signers).unwrap();
        signers += &format!("berth@example.com {public}");
        std::fs::write(&self.signers, signers).unwrap();
    }

    /// The person's commit of what they wrote, signed.
    fn commit(&self, message: &str) {
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
    }

    /// The person's commit of what they wrote, signed and pushed to `main`.
    fn commit_and_push(&self, message: &str) {
        self.commit(message);
        self.person.git(&["push", "-q", "origin", "HEAD:main"]);
    }

    /// The person's clone brought up to date with `main`.
    fn pull(&self) {
        self.person.git(&["fetch", "-q", "origin"]);
        self.person.git(&["reset", "-q", "--hard", "origin/main"]);
    }

    /// `git ARGS` in the bare remote.
    fn git(&self, args: &[&str]) -> String {
        self.bare.git(args)
    }

    /// `path` at `rev` in the remote.
    fn show(&self, rev: &str, path: &str) -> String {
        self.git(&["show", &format!("{rev}:{path}")])
    }
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
            .any(|l| l.starts_with("shop ") && l.ends_with(" 1.5.0 (web)"))
    });

    let (_, status, _) = setup.berth(&["status"]);
    let row = status
        .lines()
        .find(|l| l.starts_with("shop "))
        .unwrap_or_default();
    assert!(
        status.contains("FAILED (SKIPPED)") && row.contains(" 1.5.0 "),
        "{status}"
    );

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

/// `config` (TOML) with the state in `state`, parsed and checked.
fn config_of(state: &Path, body: &str) -> berth::config::Config {
    let text = format!(
        "[agent]\nstate_dir = \"{}\"\n[cluster]\nkubeconfig = \"{}\"\n{body}",
        state.display(),
        state.join("kubeconfig").display()
    );
    let config = berth::config::parse(&text).expect("the configuration");
    config.validate().expect("a valid configuration");
    config
}

/// One scan of every policy, written back.
async fn scan(config: &berth::config::Config) -> berth::images::scan::Report {
    let mut scanner = berth::images::scan::Scanner::default();
    scanner
        .scan(
            config,
            &config.apps,
            berth::images::scan::Listed::Every,
            false,
        )
        .await
}

/// What a scan pushed, or why it did not.
fn pushed(report: &berth::images::scan::Report) -> Vec<String> {
    use berth::images::write::Written;
    (report.branches.iter())
        .map(|b| match &b.result {
            Ok(Written::Pushed { commit, .. }) => commit.clone(),
            Ok(Written::Planned(plan)) => panic!("nothing pushed: {plan:?}"),
            Err(e) => panic!("{}: {e}", b.branch),
        })
        .collect()
}

/// The first branch's error, as a user reads it ("" when it was written).
fn first_error(report: &berth::images::scan::Report) -> String {
    let result = report.branches[0].result.as_ref();
    result.err().map(ToString::to_string).unwrap_or_default()
}

#[tokio::test]
async fn policies_write_kustomizations_and_values_in_one_signed_commit_a_moved_branch_retried_and_a_stale_push_branch_rebased(
) {
    let Some(registry) = Registry::start() else {
        return;
    };
    for tag in [
        "main-aaa-99",
        "main-bbb-100",
        "main-ccc-1000",
        "feature-x-5000",
        "latest",
    ] {
        push_tag(&registry, "team/api", tag);
    }
    for tag in ["1.2.0", "1.3.0"] {
        push_tag(&registry, "team/web", tag);
    }
    let kustomization = "resources: [deploy.yaml]\nimages:\n  - name: api\n    newName: HOST/team/api # {\"$imagepolicy\": \"api:name\"}\n    newTag: main-aaa-99 # {\"$imagepolicy\": \"api:tag\"}\n".replace("HOST", &registry.host);
    let values = "# the web chart's values\nimage:\n  repository: HOST/team/web\n  tag: \"1.2.0\" # {\"$imagepolicy\": \"web:tag\"}\nreplicas: 2\n".replace("HOST", &registry.host);
    let remote = Remote::new(&[
        ("apps/api/kustomization.yaml", &kustomization),
        ("apps/web/values.yaml", &values),
        (
            "elsewhere/x.yaml",
            "image: x:1 # {\"$imagepolicy\": \"web\"}\n",
        ),
    ]);
    // An OpenPGP key signs berth's commits; berth's own verification checks them.
    let gpg = common::gpg::Gpg::new();
    let fingerprint = gpg.key("berth <berth@example.com>", "1y", None);
    let keys = tempfile::tempdir().unwrap();
    let secret = keys.path().join("signing.asc");
    std::fs::write(
        &secret,
        gpg.run(&["--armor", "--export-secret-keys", &fingerprint]),
    )
    .unwrap();
    let public = keys.path().join("berth.asc");
    gpg.export(&fingerprint, &public);
    let state = tempfile::tempdir().unwrap();
    let policies = policy(
        "api",
        &registry,
        "team/api",
        "order = \"numerical\"\nextract = '^main-[a-f0-9]+-(?P<build>[0-9]+)$'\nfilter = '^main-'",
    ) + &policy("web", &registry, "team/web", "semver = \"~1\"");
    let app = |branch_keys: &str| {
        format!(
            "[[app]]\nname = \"apps\"\nrepo = \"{}\"\nbranch = \"main\"\npath = \"apps\"\nnamespace = \"apps\"\n[app.image_updates]\nauthor = \"berth <berth@example.com>\"\nsigning_key = \"{}\"\n{branch_keys}\n{policies}",
            remote.url(),
            secret.display()
        )
    };
    let config = config_of(state.path(), &app(""));

    // Both policies in one commit: the newest build by number among main-…, the newest
    // ~1 version; every other byte as it was; a file outside the app's path untouched.
    let first = pushed(&scan(&config).await);
    assert_eq!(remote.git(&["rev-list", "--count", "main"]), "2");
    assert_eq!(first, [remote.git(&["rev-parse", "main"])]);
    assert_eq!(
        remote.show("main", "apps/api/kustomization.yaml"),
        kustomization
            .replace("newTag: main-aaa-99", "newTag: main-ccc-1000")
            .trim_end()
    );
    assert_eq!(
        remote.show("main", "apps/web/values.yaml"),
        values.replace("\"1.2.0\"", "\"1.3.0\"").trim_end()
    );
    assert_eq!(
        remote.show("main", "elsewhere/x.yaml"),
        "image: x:1 # {\"$imagepolicy\": \"web\"}"
    );
    let verify = berth::config::VerifyConfig {
        mode: berth::config::VerifyMode::Head,
        openpgp_keys: vec![public.display().to_string()],
        ..Default::default()
    };
    let trust = berth::source::verify::Trust::load(&verify)
        .unwrap()
        .unwrap();
    let bare = git2::Repository::open_bare(remote.bare.dir.path()).unwrap();
    let signed = trust.verify(&bare, &first[0], jiff::Timestamp::now());
    assert!(
        signed.is_ok(),
        "berth's verification of its own commit: {signed:?}"
    );
    // Nothing new: no commit.
    let again = scan(&config).await;
    assert!(again.branches.iter().all(|b| b.said().is_none()));
    assert_eq!(remote.git(&["rev-list", "--count", "main"]), "2");

    // The branch moves between berth's fetch and its push: the push is refused by the
    // lease, nothing is lost, and the next attempt lands on the new head.
    let writable = berth::source::git::Writable::open(&config.apps[0], state.path()).unwrap();
    let head = writable.fetch(&["main"]).unwrap()[0].unwrap();
    let author = git2::Signature::now("berth", "berth@example.com").unwrap();
    let stale = writable
        .commit(
            head,
            &[("apps/web/values.yaml", "image: {}\n")],
            &author,
            "stale",
            None,
        )
        .unwrap();
    remote.pull();
    remote.person.write("apps/web/README.md", "the web app\n");
    remote.commit_and_push("a person's change");
    let theirs = remote.git(&["rev-parse", "main"]);
    let refused = writable.push(stale, "main", Some(head), false).unwrap();
    assert_eq!(refused, berth::source::git::Pushed::Moved);
    assert_eq!(
        remote.git(&["rev-parse", "main"]),
        theirs,
        "their commit kept"
    );
    drop(writable);
    push_tag(&registry, "team/web", "1.3.1");
    // A damaged state file (it holds the failed tags) is never written over: nothing is
    // pushed, and the error names the file, until it is put right.
    let file = state.path().join("images/state.json");
    let kept = std::fs::read(&file).unwrap();
    std::fs::write(&file, "{ not berth's").unwrap();
    let error = first_error(&scan(&config).await);
    assert!(
        error.contains("state.json") && error.contains("moved aside"),
        "{error}"
    );
    assert_eq!(remote.git(&["rev-parse", "main"]), theirs);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "{ not berth's");
    std::fs::write(&file, kept).unwrap();
    pushed(&scan(&config).await);
    assert_eq!(remote.git(&["rev-parse", "main^"]), theirs);
    assert_eq!(remote.show("main", "apps/web/README.md"), "the web app");
    assert!(remote
        .show("main", "apps/web/values.yaml")
        .contains("tag: \"1.3.1\""));

    // To a push branch for review: made from main; a person's commit there; merged into
    // main (main moves on, the branch is stale); the next scan rebases the branch onto
    // main — the person's commit replayed, berth's written anew — and main is untouched.
    let config = config_of(state.path(), &app("push_branch = \"images\""));
    push_tag(&registry, "team/web", "1.3.2");
    pushed(&scan(&config).await);
    assert_eq!(
        remote.git(&["rev-parse", "images^"]),
        remote.git(&["rev-parse", "main"])
    );
    remote.person.git(&["fetch", "-q", "origin"]);
    remote
        .person
        .git(&["checkout", "-q", "-b", "images", "origin/images"]);
    remote.person.write("apps/web/NOTES.md", "reviewed\n");
    remote.commit("a note on the review branch");
    remote.person.git(&["push", "-q", "origin", "HEAD:images"]);
    remote.person.git(&["checkout", "-q", "main"]);
    remote.pull();
    let merge = [
        "merge",
        "-q",
        "--no-ff",
        "-m",
        "merge images",
        "origin/images",
    ];
    remote.person.git(&merge);
    remote.person.write("apps/web/CHANGELOG.md", "1.3.2\n");
    remote.commit_and_push("after the merge");
    remote.person.git(&["checkout", "-q", "images"]);
    remote.person.write("apps/web/NOTES.md", "reviewed twice\n");
    remote.commit("a second note, not merged");
    remote.person.git(&["push", "-q", "origin", "HEAD:images"]);
    let main = remote.git(&["rev-parse", "main"]);
    push_tag(&registry, "team/web", "1.3.3");
    pushed(&scan(&config).await);
    assert_eq!(remote.git(&["rev-parse", "main"]), main, "main untouched");
    let on_images = remote.git(&["log", "--format=%s", &format!("{main}..images")]);
    assert_eq!(
        on_images, "Update images: web\na second note, not merged",
        "rebased onto main: {on_images}"
    );
    assert!(remote
        .show("images", "apps/web/values.yaml")
        .contains("tag: \"1.3.3\""));
    assert_eq!(remote.show("images", "apps/web/NOTES.md"), "reviewed twice");
    assert_eq!(remote.show("images", "apps/web/CHANGELOG.md"), "1.3.2");

    // An app follows the push branch: stale again, it is never force-pushed; the error
    // says which app follows it and what to do.
    let review = format!(
        "push_branch = \"images\"\n[[app]]\nname = \"review\"\nrepo = \"{}\"\nbranch = \"images\"\npath = \"apps\"\nnamespace = \"review\"",
        remote.url()
    );
    let config = config_of(state.path(), &app(&review));
    remote.person.git(&["checkout", "-q", "main"]);
    remote.pull();
    remote.person.write("apps/web/CHANGELOG.md", "1.3.3\n");
    remote.commit_and_push("main moves on");
    let images = remote.git(&["rev-parse", "images"]);
    push_tag(&registry, "team/web", "1.3.4");
    let error = first_error(&scan(&config).await);
    assert!(
        error.contains("app review follows it") && error.contains("merge main into it"),
        "{error}"
    );
    assert_eq!(remote.git(&["rev-parse", "images"]), images);
}

/// A registry's push notification (Distribution's envelope, signed with the app's webhook
/// secret) for a policy's repository scans at once: with an interval of an hour, the new
/// tag is committed and deployed within seconds.
#[tokio::test]
async fn a_registry_notification_scans_the_policies_of_what_was_pushed() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let Some(registry) = Registry::start() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "images-hook").await;
    let image = format!("{}/team/hook", registry.host);
    push_tag(&registry, "team/hook", "1.0.0");
    let manifest = common::web_deployment(
        &format!("{image}:1.0.0 # {{\"$imagepolicy\": \"hook\"}}"),
        "",
        "",
    );
    let remote = Remote::new(&[("deploy/web.yaml", &manifest)]);
    let secret = remote.bare.dir.path().join("hook-secret");
    std::fs::write(&secret, "hook-s3cret\n").unwrap();
    let extra = format!(
        "branch = \"main\"\npath = \"deploy\"\nwebhook_secret_file = \"{}\"\n[app.image_updates]\nauthor = \"berth <berth@example.com>\"\n",
        secret.display()
    );
    let setup = Setup::with_source(
        cp,
        "hook",
        &format!("repo = \"{}\"", remote.url()),
        &ns,
        &extra,
    );
    let port = common::free_port();
    let config = std::fs::read_to_string(&setup.config).unwrap();
    let config = config.replace(
        "[cluster]",
        &format!("listen = \"127.0.0.1:{port}\"\n[cluster]"),
    );
    let policy = policy("hook", &registry, "team/hook", "semver = \"^1\"");
    std::fs::write(&setup.config, config + &policy.replace("\"10s\"", "\"1h\"")).unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let _agent = Daemon::start(&setup.config, &[]);
    let runs = |tag: &'static str| {
        let deployments = deployments.clone();
        let want = format!("{image}:{tag}");
        async move {
            for _ in 0..300 {
                if image_of(&deployments).await.as_deref() == Some(want.as_str()) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        }
    };
    assert!(runs("1.0.0").await, "the first sync");

    push_tag(&registry, "team/hook", "1.0.1");
    let envelope = registry.notification("team/hook", "1.0.1");
    let (code, said) = common::signed_hook(port, "hook", b"hook-s3cret", &[], envelope.as_bytes());
    assert_eq!(
        (code, said.as_str()),
        (202, "sync of image policy hook requested\n")
    );
    assert!(
        runs("1.0.1").await,
        "the interval is 1h: the notification scanned it"
    );
    assert!(remote.show("main", "deploy/web.yaml").contains(":1.0.1 #"));
}

/// A repository served by `git daemon` on loopback (git://, push enabled): berth's cache
/// of it starts shallow, as any remote's does, and the write-back's commit is pushed from
/// it all the same.
#[tokio::test]
async fn a_write_back_is_pushed_to_a_remote_over_the_network_from_a_shallow_cache() {
    let Some(registry) = Registry::start() else {
        return;
    };
    push_tag(&registry, "team/net", "1.0.0");
    let values = "tag: \"0.9.0\" # {\"$imagepolicy\": \"net:tag\"}\n";
    let remote = Remote::new(&[("net/values.yaml", values)]);
    for n in 0..3 {
        remote.person.write("net/README.md", &format!("{n}\n"));
        remote.commit_and_push(&format!("history {n}"));
    }
    let served = common::GitDaemon::serve(remote.bare.dir.path());
    let url = &served.url;
    let state = tempfile::tempdir().unwrap();
    let config = config_of(
        state.path(),
        &format!(
            "[[app]]\nname = \"net\"\nrepo = \"{url}\"\nbranch = \"main\"\npath = \"net\"\nnamespace = \"net\"\n[app.image_updates]\nauthor = \"berth <berth@example.com>\"\n{}",
            policy("net", &registry, "team/net", "semver = \"^1\"")
        ),
    );
    // The sync's fetch makes the cache, shallow.
    let sources = berth::source::shared::Sources::of(&config.agent);
    sources
        .fetch(&config.apps[0], std::time::Instant::now())
        .await
        .expect("the first fetch");
    let cache = berth::source::git::source_dir(state.path(), url).join("git");
    assert!(
        git2::Repository::open_bare(&cache).unwrap().is_shallow(),
        "the cache starts shallow"
    );

    pushed(&scan(&config).await);
    assert_eq!(
        remote.show("main", "net/values.yaml"),
        "tag: \"1.0.0\" # {\"$imagepolicy\": \"net:tag\"}"
    );
    assert_eq!(
        remote.git(&["rev-list", "--count", "main"]),
        "5",
        "the history kept whole"
    );
    remote.git(&["fsck", "--strict"]);
}
