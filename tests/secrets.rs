//! Secrets in git, encrypted with sops, against the real control plane: files written by
//! other tools than berth (tests/fixtures/sops, made by scripts/sops-fixtures: PyPI's
//! sops 1.18, Debian's age, and the Go tool's formats built from its source), decrypted
//! in memory with an age identity and an OpenPGP secret key.

mod common;

use std::path::{Path, PathBuf};

use common::{Repo, Setup};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sops");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
}

/// A JSON fixture with the recipients of `drop` (`age`, `pgp`) taken out, as
/// `sops --rm-age` / `--rm-pgp` leaves a file (recipients are outside the MAC).
fn without(name: &str, drop: &str) -> String {
    let mut doc: Value = serde_json::from_str(&fixture(name)).unwrap();
    doc["sops"].as_object_mut().unwrap().remove(drop);
    serde_json::to_string_pretty(&doc).unwrap()
}

/// The keys, outside the repository: the fixtures' age identity and OpenPGP secret key.
fn keys(state: &Path) -> (PathBuf, PathBuf) {
    let (age, pgp) = (state.join("age.key"), state.join("pgp-secret.asc"));
    std::fs::write(&age, fixture("age.key")).unwrap();
    std::fs::write(&pgp, fixture("pgp-secret.asc")).unwrap();
    (age, pgp)
}

/// `[app.decrypt]` with these key files.
fn decrypt(age: Option<&Path>, pgp: Option<&Path>) -> String {
    let list = |p: Option<&Path>| {
        p.map(|p| format!("\"{}\"", p.display()))
            .unwrap_or_default()
    };
    format!(
        "[app.decrypt]\nprovider = \"sops\"\nage_key_files = [{}]\nopenpgp_key_files = [{}]\n",
        list(age),
        list(pgp)
    )
}

/// Every file under `dir` whose bytes hold one of `needles`.
fn files_holding(dir: &Path, needles: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_holding(&path, needles));
        } else if let Ok(bytes) = std::fs::read(&path) {
            let text = String::from_utf8_lossy(&bytes);
            if needles.iter().any(|n| text.contains(n)) {
                found.push(path);
            }
        }
    }
    found
}

/// The plain values of the two Secrets, and their base64 (as `data` holds them).
const PLAIN: [&str; 4] = [
    "s3cr3t-regex",
    "correct horse",
    "dG9rZW4tdmFsdWU=",
    "Y29ycmVjdCBob3JzZQ==",
];

async fn secret_value(client: &kube::Client, ns: &str, name: &str, key: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let data = secrets.get(name).await.unwrap().data.unwrap();
    String::from_utf8(data[key].0.clone()).unwrap()
}

/// An age-encrypted Secret and an OpenPGP-encrypted one sync with their plain values;
/// the plain text shows in no output, history, log or state file; a tampered value, a
/// value moved under another key and a file for another recipient are each refused with
/// nothing of the commit written.
#[tokio::test]
async fn encrypted_secrets_sync_and_their_values_show_nowhere() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "sops-sync").await;
    let repo = Repo::new();
    // age alone opens the first, OpenPGP alone the second.
    repo.write("app/db-regex.yaml", &fixture("regex.enc.yaml"));
    repo.write("app/db-json.json", &without("secret.enc.json", "age"));
    repo.write(
        "app/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: fast\n",
    );
    repo.commit("encrypted secrets");
    let state = tempfile::tempdir().unwrap();
    let (age, pgp) = keys(state.path());
    let setup = Setup::new(
        cp,
        "sops-sync",
        &repo,
        &ns,
        &format!(
            "path = \"app\"\nprune = true\n{}",
            decrypt(Some(&age), Some(&pgp))
        ),
    );

    let (code, plan, err) = setup.berth(&["plan"]);
    assert_eq!(code, 0, "{plan}{err}");
    assert!(plan.contains("secret/db-regex"), "{plan}");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        secret_value(&client, &ns, "db-regex", "password").await,
        "s3cr3t-regex"
    );
    assert_eq!(
        secret_value(&client, &ns, "db-regex", "token").await,
        "token-value"
    );
    assert_eq!(
        secret_value(&client, &ns, "db-json", "password").await,
        "correct horse"
    );
    let (code, render, err) = render(&repo, &age, &pgp);
    assert_eq!(code, 0, "{err}");
    assert!(render.contains("name: db-json"), "{render}");
    let id = setup.history().pop().unwrap().id;
    let (_, history, _) = setup.berth(&["history", "show", &id]);
    for (what, text) in [
        ("plan", &plan),
        ("sync", &format!("{out}{err}")),
        ("render", &render),
        ("history", &history),
    ] {
        for p in PLAIN {
            assert!(!text.contains(p), "{what} shows {p}: {text}");
        }
    }
    let leaked = files_holding(setup.state.path(), &PLAIN);
    assert!(leaked.is_empty(), "state files hold plain text: {leaked:?}");

    // Each refused, nothing of the commit written: the new ConfigMap is not created and
    // the Secret keeps its value.
    let text = fixture("regex.enc.yaml");
    let values: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("ENC["))
        .collect();
    let moved = text
        .replacen(values[0], "FIRST", 1)
        .replacen(values[1], values[0], 1)
        .replacen("FIRST", values[1], 1);
    let pgp_only = without("secret.enc.json", "age");
    let doc: Value = serde_json::from_str(&pgp_only).unwrap();
    let stamp = doc["sops"]["lastmodified"].as_str().unwrap().to_string();
    let edited = pgp_only.replace(&stamp, "2020-01-01T00:00:00Z");
    let foreign = without("secret.enc.json", "pgp");
    let cases = [
        (
            "app/db-regex.yaml",
            moved,
            "app/db-regex.yaml: /stringData/password: does not decrypt with the file's data key at this place",
        ),
        (
            "app/db-json.json",
            edited,
            "app/db-json.json: its MAC does not match its values",
        ),
        (
            "app/db-json.json",
            foreign,
            "app/db-json.json: none of berth's keys opens its data key: it is encrypted for age age1",
        ),
    ];
    let config = setup.config.clone();
    let both_keys = std::fs::read_to_string(&config).unwrap();
    let only_pgp = std::fs::read_to_string(&config)
        .unwrap()
        .replace(&format!("\"{}\"", age.display()), "");
    for (i, (file, text, said)) in cases.into_iter().enumerate() {
        if i == 2 {
            // The file for an age recipient alone, and berth holds the OpenPGP key alone.
            std::fs::write(&config, &only_pgp).unwrap();
        }
        repo.write(file, &text);
        repo.write(
            "app/new.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: new\n",
        );
        repo.commit("broken");
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 1, "{out}{err}");
        assert!(out.contains(said), "{said} not in: {out}");
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        assert!(maps.get_opt("new").await.unwrap().is_none(), "{out}");
        assert_eq!(
            secret_value(&client, &ns, "db-json", "password").await,
            "correct horse"
        );
        repo.git(&["reset", "-q", "--hard", "HEAD~1"]);
    }

    // A decrypted value in a ConfigMap: refused, then allowed, and masked all the same.
    std::fs::write(&config, &both_keys).unwrap();
    repo.write("app/settings.yaml", &fixture("config.enc.yaml"));
    repo.commit("an encrypted ConfigMap");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("ConfigMap app-settings holds values decrypted by sops (/data/api-token, /data/mode): whoever can read a ConfigMap reads them"),
        "{out}"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(maps.get_opt("app-settings").await.unwrap().is_none());
    std::fs::write(
        &config,
        both_keys.replace(
            "[app.decrypt]\n",
            "[app.decrypt]\nallow_decrypted_in = [\"ConfigMap\"]\n",
        ),
    )
    .unwrap();
    let (code, plan, err) = setup.berth(&["plan", "--show-secrets"]);
    assert_eq!(code, 0, "{plan}{err}");
    assert!(plan.contains("api-token: '***'"), "{plan}");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let data = maps.get("app-settings").await.unwrap().data.unwrap();
    assert_eq!(data["api-token"], "cm-token-plain-9f3a");
    for text in [&plan, &out, &err] {
        assert!(!text.contains("cm-token-plain-9f3a"), "{text}");
    }
}

/// `berth render app` in the repository, with the key files.
fn render(repo: &Repo, age: &Path, pgp: &Path) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["render", "app", "--age-key-file"])
        .arg(age)
        .arg("--openpgp-key-file")
        .arg(pgp)
        .current_dir(repo.dir.path())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Key rotation: a second recipient (age) added to a file of the OpenPGP key, the agent
/// moved to the age key, then the data key rotated and the old recipient removed: each
/// step syncs; the old key alone opens the rotated file no more.
#[tokio::test]
async fn a_key_is_rotated_without_a_failed_sync() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "sops-rotate").await;
    let repo = Repo::new();
    repo.write("app/db.json", &without("secret.enc.json", "age"));
    repo.commit("for the OpenPGP key");
    let state = tempfile::tempdir().unwrap();
    let (age, pgp) = keys(state.path());
    let setup = Setup::new(cp, "sops-rotate", &repo, &ns, &decrypt(None, Some(&pgp)));
    let sync = |step: &str| {
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 0, "{step}: {out}{err}");
    };
    sync("the OpenPGP key");
    // `sops updatekeys`: the same data key wrapped for a second recipient as well.
    repo.write("app/db.json", &fixture("secret.enc.json"));
    repo.commit("age recipient added");
    sync("a second recipient, the agent still on the OpenPGP key");
    let config = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(
        &setup.config,
        config.replace(&decrypt(None, Some(&pgp)), &decrypt(Some(&age), None)),
    )
    .unwrap();
    sync("the agent moved to the age key");
    // `sops rotate` (a new data key) and `--rm-pgp`: the old key is out.
    repo.write("app/db.json", &without("secret.rotated.enc.json", "pgp"));
    repo.commit("data key rotated, OpenPGP recipient removed");
    sync("the rotated file");
    assert_eq!(
        secret_value(&client, &ns, "db-json", "password").await,
        "correct horse"
    );
    std::fs::write(&setup.config, config).unwrap();
    let (code, out, err) = setup.berth(&["plan"]);
    assert_eq!(code, 1, "the old key opens the rotated file: {out}{err}");
    assert!(
        out.contains("none of berth's keys opens its data key"),
        "{out}{err}"
    );
}

/// A kustomize overlay whose secretGenerator reads an encrypted .env file (the Go tool's
/// dotenv format) and whose resources hold an encrypted binary file's generator: synced;
/// while kustomize runs no plain text is in the state folder or the temporary folder
/// (the stand-in kustomize looks before it renders), and none is left anywhere after.
#[tokio::test]
async fn a_kustomization_with_an_encrypted_env_file_syncs_with_no_plain_text_on_disk() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "sops-kustomize").await;
    let repo = Repo::new();
    repo.write("base/db.env", &fixture("db.enc.env"));
    repo.write("base/ca.crt", &fixture("ca.enc.txt"));
    repo.write("base/db-regex.yaml", &fixture("regex.enc.yaml"));
    repo.write(
        "base/kustomization.yaml",
        "resources: [db-regex.yaml]\nsecretGenerator:\n- name: db\n  envs: [db.env]\n- name: ca\n  files: [ca.crt]\ngeneratorOptions:\n  disableNameSuffixHash: true\n",
    );
    repo.write(
        "overlay/kustomization.yaml",
        "resources: [../base]\nlabels:\n- pairs: {tier: db}\n",
    );
    repo.commit("an overlay with encrypted generator files");
    let state = tempfile::tempdir().unwrap();
    let (age, _) = keys(state.path());
    let plain = ["s3cr3t-dotenv", "app-user", "ca-plain-MIIBszCCAVmgAwIBAgIU"];
    let setup = Setup::new(
        cp,
        "sops-kustomize",
        &repo,
        &ns,
        &format!("path = \"overlay\"\n{}", decrypt(Some(&age), None)),
    );
    // berth's temporary folder, for this test alone.
    let tmp = tempfile::tempdir().unwrap();
    // kustomize, after looking for plain text where none may be: the state folder, the
    // temporary folder, and anywhere but memory for the folder it renders.
    let wrapper = state.path().join("kustomize.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nset -e\ncase \"$1\" in /dev/shm/*|/run/*) ;; *) echo \"not on a tmpfs: $1\" >&2; exit 3;; esac\nif grep -rlF -e {} -e {} -e {} {} {} 2>/dev/null; then echo 'plain text on disk' >&2; exit 4; fi\nexec kubectl kustomize \"$1\"\n",
            plain[0],
            plain[1],
            plain[2],
            setup.state.path().display(),
            tmp.path().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[agent]\n",
        &format!("[agent]\nkustomize = \"{}\"\n", wrapper.display()),
    );
    std::fs::write(&setup.config, config).unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["sync", "--config"])
        .arg(&setup.config)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "{out}{err}");
    assert_eq!(
        secret_value(&client, &ns, "db", "DB_PASSWORD").await,
        "s3cr3t-dotenv"
    );
    assert_eq!(
        secret_value(&client, &ns, "ca", "ca.crt").await,
        fixture("plain/ca.txt")
    );
    // An encrypted resource, through the overlay's labels.
    assert_eq!(
        secret_value(&client, &ns, "db-regex", "password").await,
        "s3cr3t-regex"
    );
    for p in plain {
        assert!(!format!("{out}{err}").contains(p), "{p} in {out}{err}");
    }
    let leaked: Vec<PathBuf> = [setup.state.path(), tmp.path(), Path::new("/dev/shm")]
        .iter()
        .flat_map(|d| files_holding(d, &plain))
        .collect();
    assert!(leaked.is_empty(), "plain text left: {leaked:?}");

    // Without [app.decrypt] the overlay is refused, naming the file.
    let config = std::fs::read_to_string(&setup.config).unwrap();
    let cut = config.find("[app.decrypt]").unwrap();
    std::fs::write(&setup.config, &config[..cut]).unwrap();
    let (code, out, err) = setup.berth(&["plan"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(
            "resources: \"db-regex.yaml\" is encrypted with sops, and the app decrypts nothing"
        ),
        "{out}{err}"
    );
}

/// `berth render -` decrypts what it reads on stdin with the keys given; a Secret's
/// values show with --show-secrets alone.
#[test]
fn render_decrypts_stdin_and_shows_a_secret_only_when_asked() {
    let state = tempfile::tempdir().unwrap();
    let (age, _) = keys(state.path());
    let render = |extra: &[&str]| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["render", "-", "--age-key-file"])
            .arg(&age)
            .args(extra)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(fixture("regex.enc.yaml").as_bytes())
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let masked = render(&[]);
    assert!(
        masked.contains("name: db-regex") && masked.contains("password: \"***\""),
        "{masked}"
    );
    assert!(
        !masked.contains("s3cr3t-regex") && !masked.contains("sops"),
        "{masked}"
    );
    let shown = render(&["--show-secrets"]);
    assert!(shown.contains("password: s3cr3t-regex"), "{shown}");
}

/// The text of the first block fenced as `lang` in `text`.
fn fenced(text: &str, lang: &str) -> String {
    let open = format!("```{lang}\n");
    let start = text.find(&open).expect("a fenced block") + open.len();
    text[start..start + text[start..].find("```").unwrap()].to_string()
}

/// docs/sops.md's "Encrypting for age", word for word: its Secret is written where it
/// says, its commands run in the repository with the sops it tells people to install
/// (scripts/sops 3) and a home of their own; the commit holds no plain value, and berth
/// syncs it into the cluster with the key those commands made.
#[tokio::test]
async fn the_docs_age_commands_encrypt_a_secret_that_berth_syncs() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sops.md")).unwrap();
    let section = &doc[doc.find("## Encrypting for age").unwrap()..];
    let (secret, commands) = (fenced(section, "yaml"), fenced(section, "sh"));
    let repo = Repo::new();
    repo.write("deploy/db.enc.yaml", &secret);
    let home = tempfile::tempdir().unwrap();
    let sops = std::env::var("BERTH_TEST_SOPS").expect(
        "BERTH_TEST_SOPS names the folder of sops 3 (scripts/test sets it from scripts/sops 3)",
    );
    let berth = Path::new(env!("CARGO_BIN_EXE_berth")).parent().unwrap();
    let path = format!(
        "{sops}:{}:{}",
        berth.display(),
        std::env::var("PATH").unwrap()
    );
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &commands])
        .current_dir(repo.dir.path())
        .env("HOME", home.path())
        .env("PATH", path)
        .env_remove("SOPS_AGE_KEY_FILE")
        .envs([
            ("GIT_AUTHOR_NAME", "Dev"),
            ("GIT_AUTHOR_EMAIL", "dev@example.com"),
            ("GIT_COMMITTER_NAME", "Dev"),
            ("GIT_COMMITTER_EMAIL", "dev@example.com"),
        ])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{commands}\n{said}");
    assert!(said.contains("password: \"***\""), "{said}");
    let committed = repo.git(&["show", "HEAD:deploy/db.enc.yaml"]);
    assert!(
        committed.contains("password: ENC[AES256_GCM,") && !committed.contains("correct-horse"),
        "{committed}"
    );

    let client = common::client(cp).await;
    let ns = common::namespace(&client, "sops-doc").await;
    let key = home.path().join(".config/berth/age.key");
    let extra = format!("path = \"deploy\"\n{}", decrypt(Some(&key), None));
    let setup = Setup::new(cp, "sops-doc", &repo, &ns, &extra);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        secret_value(&client, &ns, "db", "password").await,
        "correct-horse-battery"
    );
}
