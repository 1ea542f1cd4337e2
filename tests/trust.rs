//! Trust and notifications against the real control plane: `[app.verify]` applies only
//! commits signed by a trusted key (keys and signed commits are made here, at test time,
//! with gpg and ssh-keygen), and `[[notify]]` receivers — real HTTP servers on loopback —
//! are told what happened, once, without holding up a sync.

mod common;

use std::process::Command;
use std::time::Duration;

use berth::history::Outcome;
use common::gpg::Gpg;
use common::receiver::{Answer, Receiver};
use common::{eventually, Daemon, Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

fn config_map(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  value: \"{value}\"\n")
}

async fn value(client: &kube::Client, ns: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt("settings")
        .await
        .unwrap()?;
    cm.data?.get("value").cloned()
}

/// Commits everything with `git commit -S` and the given signing settings.
fn signed_commit(repo: &Repo, message: &str, settings: &[(&str, String)]) -> String {
    repo.git(&["add", "-A"]);
    let mut args: Vec<String> = settings
        .iter()
        .flat_map(|(k, v)| ["-c".to_string(), format!("{k}={v}")])
        .collect();
    args.extend(["commit", "-q", "-S", "-m", message].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    repo.git(&args);
    repo.git(&["rev-parse", "HEAD"])
}

#[tokio::test]
async fn only_commits_signed_by_a_trusted_key_are_applied() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "verify").await;
    let keys = tempfile::tempdir().unwrap();
    let gpg = Gpg::new();
    let trusted = gpg.key("Trusted Dev <dev@example.com>", "1y", None);
    let stranger = gpg.key("Stranger <stranger@example.com>", "1y", None);
    let old = gpg.key("Old Dev <old@example.com>", "1d", Some("20200101T000000"));
    gpg.export(&trusted, &keys.path().join("dev.asc"));
    gpg.export(&old, &keys.path().join("old.asc"));
    let ssh_key = keys.path().join("id_ed25519");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "ops", "-f"])
        .arg(&ssh_key)
        .status()
        .expect("run ssh-keygen (apt install openssh-client)");
    assert!(made.success());
    let public = std::fs::read_to_string(ssh_key.with_extension("pub")).unwrap();
    let signers = keys.path().join("allowed_signers");
    std::fs::write(
        &signers,
        format!("ops@example.com namespaces=\"git\" {public}"),
    )
    .unwrap();

    let repo = Repo::new();
    let now_program = gpg.program(None);
    let gnupg = |key: &str| {
        vec![
            ("gpg.program", now_program.to_str().unwrap().to_string()),
            ("user.signingkey", key.to_string()),
        ]
    };
    let commit_with =
        |message: &str, settings: Vec<(&str, String)>| signed_commit(&repo, message, &settings);
    let extra = format!(
        "[app.verify]\nmode = \"head\"\nopenpgp_keys = [\"{}/*.asc\"]\nssh_allowed_signers = \"{}\"\n",
        keys.path().display(),
        signers.display()
    );
    let setup = Setup::new(cp, "verify", &repo, &ns, &extra);
    // A good GnuPG signature: applied, and the signer recorded.
    repo.write("settings.yaml", &config_map("1"));
    commit_with("one", gnupg(&trusted));
    // validate renders the commit a sync would: there is one now.
    let (code, out, _) = setup.berth(&["validate"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "app verify: commits must be signed by one of 2 OpenPGP keys and 1 SSH signer"
        ),
        "{out}"
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("1"));
    let record = setup.history().pop().unwrap();
    let signature = record.signature.clone().expect("the signature is recorded");
    assert_eq!(signature.format, "openpgp");
    assert_eq!(signature.fingerprint, trusted);
    assert_eq!(signature.signer, "Trusted Dev <dev@example.com>");
    let (_, shown, _) = setup.berth(&["history", "show", &record.id]);
    assert!(
        shown.contains(&format!(
            "Signed:    by Trusted Dev <dev@example.com> (openpgp key {trusted})"
        )),
        "{shown}"
    );

    // Refused commits: nothing rendered or written, the reason (and the key) recorded.
    let refused = |what: &str, expect: &[&str]| {
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 1, "{what}: {out}{err}");
        let record = setup.history().pop().unwrap();
        assert_eq!(record.outcome, Outcome::Failed, "{what}");
        assert!(record.objects.is_empty(), "{what}: nothing written");
        let message = &record.errors[0].message;
        for e in expect {
            assert!(message.contains(e), "{what}: {message}");
            assert!(out.contains(e), "{what}: {out}");
        }
        let (code, plan, _) = setup.berth(&["plan"]);
        assert_eq!(code, 1, "{what}: plan says the same");
        assert!(plan.contains(expect[0]), "{what}: {plan}");
    };
    repo.write("settings.yaml", &config_map("2"));
    repo.commit("unsigned");
    refused("unsigned", &["is not signed"]);

    repo.write("settings.yaml", &config_map("3"));
    commit_with("by a stranger", gnupg(&stranger));
    refused("untrusted", &["not trusted", &stranger]);

    repo.write("settings.yaml", &config_map("4"));
    let past = gpg.program(Some("20200101T120000"));
    commit_with(
        "by an expired key",
        vec![
            ("gpg.program", past.to_str().unwrap().to_string()),
            ("user.signingkey", old.clone()),
        ],
    );
    refused("expired", &["expired at 2020-01-02", &old]);

    let gone = gpg.key("Gone Dev <gone@example.com>", "1y", None);
    repo.write("settings.yaml", &config_map("4b"));
    commit_with("by a key revoked since", gnupg(&gone));
    gpg.revoke(&gone);
    gpg.export(&gone, &keys.path().join("gone.asc"));
    refused("revoked", &["is revoked", &gone]);
    assert_eq!(
        value(&client, &ns).await.as_deref(),
        Some("1"),
        "still the last good commit"
    );

    // A good SSH signature (gpg.format = ssh).
    repo.write("settings.yaml", &config_map("5"));
    let ssh_settings = vec![
        ("gpg.format", "ssh".to_string()),
        (
            "user.signingkey",
            ssh_key.with_extension("pub").display().to_string(),
        ),
    ];
    commit_with("by ssh", ssh_settings);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("5"));
    let signature = setup.history().pop().unwrap().signature.unwrap();
    assert_eq!(
        (signature.format.as_str(), signature.signer.as_str()),
        ("ssh", "ops@example.com")
    );
    assert!(
        signature.fingerprint.starts_with("SHA256:"),
        "{signature:?}"
    );

    // Tampered: the signed commit object edited afterwards (its signature kept).
    let object = repo.git(&["cat-file", "commit", "HEAD"]);
    let edited = object.replace("by ssh", "by ssh, edited");
    let file = repo.dir.path().join(".git/edited-commit");
    std::fs::write(&file, format!("{edited}\n")).unwrap();
    let forged = repo.git(&["hash-object", "-t", "commit", "-w", file.to_str().unwrap()]);
    repo.git(&["update-ref", "refs/heads/main", &forged]);
    refused("tampered", &["bad signature", &signature.fingerprint]);
    assert_eq!(value(&client, &ns).await.as_deref(), Some("5"));
}

/// A `berth` configuration with `[[notify]]` receivers, written beside the app's.
fn with_receivers(setup: &Setup, receivers: &str) {
    let mut text = std::fs::read_to_string(&setup.config).unwrap();
    text.push_str(receivers);
    std::fs::write(&setup.config, text).unwrap();
}

fn deployment(image: &str, ready: bool) -> String {
    let annotations = if ready {
        ""
    } else {
        "testenv.berth.dev/ready: \"false\""
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  progressDeadlineSeconds: 4\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n      annotations: {{{annotations}}}\n    spec:\n      containers:\n        - name: web\n          image: {image}\n"
    )
}

#[tokio::test]
async fn each_event_is_sent_once_in_each_format() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "notify-events").await;
    let json = Receiver::start(Answer::Script(Vec::new()));
    let alerts = Receiver::start(Answer::Script(Vec::new()));
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web:1", true));
    let first = repo.commit("web 1");
    let setup = Setup::new(cp, "shop", &repo, &ns, "");
    let secret = setup.state.path().join("hook-secret");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let url_file = setup.state.path().join("alertmanager-url");
    std::fs::write(&url_file, alerts.url.replace("/hook", "")).unwrap();
    with_receivers(
        &setup,
        &format!(
            "[[notify]]\nname = \"audit\"\nurl = \"{}\"\nevents = [\"sync_failed\", \"rollout_failed\", \"rolled_back\", \"recovered\", \"synced\", \"held\"]\nsecret_file = \"{}\"\nlink = \"https://git.example/shop/commit/{{commit}}\"\n[[notify]]\nname = \"am\"\nurl_file = \"{}\"\nformat = \"alertmanager\"\n",
            json.url,
            secret.display(),
            url_file.display()
        ),
    );
    let (code, out, _) = setup.berth(&["validate"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("audit: Json receiver, events sync_failed, rollout_failed, rolled_back, recovered, synced, held, signed"), "{out}");
    assert!(
        !out.contains(&alerts.url),
        "the address from a file is a secret: {out}"
    );

    let sync = |expect: i32| {
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, expect, "{out}{err}");
    };
    let events = || -> Vec<String> {
        json.accepted()
            .iter()
            .map(|v| v["event"].as_str().unwrap().to_string())
            .collect()
    };

    sync(0);
    assert_eq!(events(), ["synced"]);
    let synced = &json.received()[0];
    let v = synced.json();
    assert_eq!(
        (v["version"].as_u64(), v["app"].as_str()),
        (Some(1), Some("shop"))
    );
    assert_eq!(v["commit"]["sha"], first.as_str());
    assert_eq!(
        v["link"],
        format!("https://git.example/shop/commit/{first}").as_str()
    );
    assert_eq!(synced.header("x-berth-event"), Some("synced"));
    let expected = {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(synced.body.as_bytes());
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("sha256={hex}")
    };
    assert_eq!(
        synced.header("x-berth-signature-256"),
        Some(expected.as_str())
    );
    assert!(
        alerts.received().is_empty(),
        "Alertmanager hears of problems only"
    );

    repo.write("web.yaml", "kind: [broken");
    repo.commit("broken yaml");
    sync(1);
    sync(1);
    assert_eq!(
        events(),
        ["synced", "sync_failed"],
        "the same failure twice: sent once"
    );
    let failed = json.accepted().pop().unwrap();
    assert!(
        failed["errors"][0].as_str().unwrap().contains("web.yaml"),
        "{failed}"
    );
    let fired = alerts.accepted();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0][0]["labels"]["alertname"], "BerthSyncFailed");
    assert_eq!(alerts.received()[0].path, "/api/v2/alerts");

    repo.write("web.yaml", &deployment("web:2", true));
    repo.commit("web 2");
    sync(0);
    assert_eq!(events()[2..], ["recovered", "synced"]);
    let resolved = alerts.accepted().pop().unwrap();
    assert_eq!(resolved[0]["labels"]["alertname"], "BerthSyncFailed");
    assert_eq!(
        resolved[0]["endsAt"], resolved[0]["startsAt"],
        "resolved now"
    );

    repo.write("web.yaml", &deployment("web:never", false));
    repo.commit("web never ready");
    sync(1);
    assert_eq!(events()[4..], ["rolled_back"]);
    let rolled = json.accepted().pop().unwrap();
    assert_eq!(rolled["rollouts"][0]["rolled_back_to"], 2);
    sync(0);
    assert_eq!(events()[5..], ["held"]);
    let held = json.accepted().pop().unwrap();
    assert_eq!(
        (held["outcome"].as_str(), held["resolves"].as_str()),
        (Some("held"), Some("rolled_back")),
        "{held}"
    );
    sync(0);
    assert_eq!(events().len(), 6, "held once");

    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        "namespace = ",
        "rollout = { on_failure = \"halt\" }\nnamespace = ",
    );
    std::fs::write(&setup.config, text).unwrap();
    repo.write("web.yaml", &deployment("web:never-again", false));
    repo.commit("web never ready again");
    sync(1);
    assert_eq!(events()[6..], ["rollout_failed"]);
    repo.write("web.yaml", &deployment("web:3", true));
    repo.commit("web 3");
    sync(0);
    assert_eq!(events()[7..], ["recovered", "synced"]);
    let recovered = &json.accepted()[7];
    assert_eq!(recovered["resolves"], "rollout_failed");
    // Every message names a record that `berth history show` opens.
    for message in json.accepted() {
        let record = message["record"].as_str().unwrap();
        let (code, shown, err) = setup.berth(&["history", "show", record]);
        assert_eq!(code, 0, "{} names {record}: {err}", message["event"]);
        assert!(shown.contains(record), "{shown}");
    }
}

#[tokio::test]
async fn slow_failing_and_dead_receivers_never_hold_up_a_sync() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "notify-faults").await;
    let flaky = Receiver::start(Answer::Script(vec![500, 500]));
    let hanging = Receiver::start(Answer::Hang);
    let dead = format!("http://127.0.0.1:{}/hook", common::free_port());
    let repo = Repo::new();
    repo.write("settings.yaml", &config_map("1"));
    let first = repo.commit("one");
    let setup = Setup::new(cp, "faults", &repo, &ns, "");
    let port = common::free_port();
    let text = std::fs::read_to_string(&setup.config).unwrap().replace(
        "[cluster]",
        &format!("listen = \"127.0.0.1:{port}\"\n[cluster]"),
    );
    std::fs::write(&setup.config, text).unwrap();
    with_receivers(
        &setup,
        &format!(
            "[[notify]]\nname = \"flaky\"\nurl = \"{}\"\nevents = [\"synced\"]\n[[notify]]\nname = \"hanging\"\nurl = \"{}\"\nevents = [\"synced\"]\ntimeout = \"30s\"\nretries = 0\n[[notify]]\nname = \"dead\"\nurl = \"{dead}\"\nevents = [\"synced\"]\nretries = 1\n",
            flaky.url, hanging.url
        ),
    );
    let _daemon = Daemon::start(&setup.config, &[]);
    let record_of = |sha: &str| {
        setup
            .history()
            .into_iter()
            .find(|r| r.commit.as_ref().is_some_and(|c| c.sha == sha))
    };
    eventually(
        "the first commit is synced",
        Duration::from_secs(30),
        || record_of(&first).is_some(),
    );
    repo.write("settings.yaml", &config_map("2"));
    let second = repo.commit("two");
    // The hanging receiver holds its request for 30 s; the next sync does not wait for it.
    eventually(
        "the second commit is synced while a receiver hangs",
        Duration::from_secs(10),
        || record_of(&second).is_some(),
    );
    for sha in [&first, &second] {
        let r = record_of(sha).unwrap();
        assert_eq!(r.outcome, Outcome::Succeeded, "{:?}", r.errors);
        assert!(r.duration_ms < 5000, "{} ms", r.duration_ms);
    }
    assert_eq!(value(&client, &ns).await.as_deref(), Some("2"));

    eventually(
        "the flaky receiver has both messages",
        Duration::from_secs(20),
        || flaky.accepted().len() == 2,
    );
    let statuses: Vec<u16> = flaky.received().iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [500, 500, 200, 200],
        "retried after each 500, then once each"
    );
    let commits: Vec<String> = flaky
        .accepted()
        .iter()
        .map(|v| v["commit"]["sha"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(commits, [first.clone(), second.clone()]);
    assert_eq!(hanging.received().len(), 1, "one request, still unanswered");

    let metrics = || {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        use std::io::{Read, Write};
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    eventually(
        "the dead receiver's messages are counted as failed",
        Duration::from_secs(20),
        || metrics().contains("berth_notifications_failed_total{receiver=\"dead\"} 2"),
    );
    let text = metrics();
    assert!(
        text.contains("berth_notifications_sent_total{receiver=\"flaky\"} 2"),
        "{text}"
    );
    assert!(!text.contains(&dead), "no address in the metrics");
}
