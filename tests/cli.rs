//! The `berth` command line as a user runs it: exit codes and messages.

use std::process::Command;

mod common;

fn berth(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run berth");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn render_prints_the_guestbook() {
    let (code, out, err) = berth(&[
        "render",
        "examples/guestbook",
        "-n",
        "guestbook",
        "--app",
        "guestbook",
    ]);
    assert_eq!(code, 0, "{err}");
    for kind in ["Namespace", "ConfigMap", "Deployment", "Service"] {
        assert!(
            out.contains(&format!("\nkind: {kind}\n")),
            "{kind} missing:\n{out}"
        );
    }
    assert!(
        out.contains("# Source: examples/guestbook/frontend.yaml:53 (document 2)"),
        "{out}"
    );
    assert!(out.contains("berth.dev/app: guestbook"), "{out}");
    assert!(out.contains("protocol: TCP"), "{out}");
}

#[test]
fn render_of_broken_input_names_every_file_and_line_and_fails() {
    let (code, out, err) = berth(&["render", "examples/broken"]);
    assert_eq!(code, 1);
    assert!(
        out.is_empty(),
        "nothing is printed when anything is broken: {out}"
    );
    for expected in [
        "examples/broken/billion-laughs.yaml:1 (document 1): invalid YAML: repetition limit exceeded",
        "examples/broken/deep-nesting.json:1 (document 1): invalid JSON: recursion limit exceeded",
        "examples/broken/invalid-yaml.yaml:5 (document 1): invalid YAML",
        "examples/broken/missing-kind.yaml:1 (document 1): missing kind",
        "examples/broken/missing-name.yaml:1 (document 1): ConfigMap missing metadata.name",
        "examples/broken/not-a-mapping.json:2 (document 2): a manifest must be a mapping",
        "examples/broken/not-utf8.yaml:6: not valid UTF-8",
        "examples/broken/outside-link.yaml: symbolic link points outside the repository",
        "at examples/broken/duplicate.yaml:1 (document 1) and at examples/broken/duplicate.yaml:6 (document 2)",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
}

#[test]
fn validate_reports_config_errors_with_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.toml");
    std::fs::write(
        &path,
        "[[app]]\nname = \"a\"\nrepo = \"x\"\n[app.rollout]\ntimeout = \"soon\"\n",
    )
    .unwrap();
    let (code, _, err) = berth(&["validate", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("{}:5:", path.display())), "{err}");
    assert!(
        err.contains("app[0].rollout.timeout: invalid duration \"soon\""),
        "{err}"
    );
}

#[test]
fn validate_renders_each_app_from_dir() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.toml");
    std::fs::write(&path, "[[app]]\nname = \"guestbook\"\nrepo = \"https://example.com/g.git\"\nnamespace = \"guestbook\"\n").unwrap();
    let (code, out, err) = berth(&[
        "validate",
        "--config",
        path.to_str().unwrap(),
        "--dir",
        "examples/guestbook",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("app guestbook: 4 objects from examples/guestbook (1 ConfigMap, 1 Deployment, 1 Namespace, 1 Service)"), "{out}");
}

/// Writes `text` as `name` in a fresh folder; returns the folder and the file's path.
fn config_file(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(
        &path,
        text.replace("STATE", &dir.path().display().to_string()),
    )
    .unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[test]
fn config_errors_name_file_line_and_key_once() {
    let (_dir, path) = config_file(
        "bad.toml",
        "[[app]]\nname = \"a\"\nrepo = \"x\"\n[[app]]\nname = \"a\"\nrepo = \"y\"\n",
    );
    let (code, _, err) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        format!(
            "error: {path}:5:8: app[1].name: duplicate app name \"a\": app names must be unique"
        )
    );

    let (_dir, path) = config_file(
        "typo.toml",
        "[[app]]\nname = \"a\"\nrepo = \"x\"\nprnue = true\n",
    );
    let (code, _, err) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("{path}:4:1: app[0].prnue: unknown field `prnue`"))
            && err.contains("did you mean `prune`?"),
        "{err}"
    );

    // [app] for [[app]]: the message says what to write.
    let (_dir, path) = config_file("table.toml", "[app]\nname = \"a\"\nrepo = \"x\"\n");
    let (code, _, err) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        err.contains("write [[app]] (an array of tables: one per app), not [app]"),
        "{err}"
    );

    let (code, _, err) = berth(&["validate", "--config", "/nonexistent/berth.toml"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "error: cannot read config file /nonexistent/berth.toml: No such file or directory"
    );

    let (_dir, path) = config_file(
        "kube.toml",
        "[agent]\nstate_dir = \"STATE\"\n[cluster]\nkubeconfig = \"/nonexistent/kubeconfig\"\n[[app]]\nname = \"a\"\nrepo = \"x\"\n",
    );
    let (code, _, err) = berth(&["sync", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        err.contains("cannot read kubeconfig /nonexistent/kubeconfig: No such file or directory (check [cluster] kubeconfig)"),
        "{err}"
    );
    assert!(!err.contains("'\""), "a path quoted twice: {err}");
}

#[test]
fn validate_says_a_local_repository_path_does_not_exist() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[[app]]\nname = \"a\"\nrepo = \"/nonexistent/repo\"\n",
    );
    // A stale cached checkout is not rendered in its place.
    std::fs::create_dir_all(dir.path().join("repos/a")).unwrap();
    std::fs::write(
        dir.path().join("repos/a/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stale\n",
    )
    .unwrap();
    let (code, out, _) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("config") && out.contains("ok (1 app)"),
        "{out}"
    );
    assert!(
        out.contains("app a: repository path /nonexistent/repo does not exist"),
        "{out}"
    );
}

#[test]
fn history_refuses_an_unknown_app_and_takes_an_id_prefix() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    let (code, out, err) = berth(&["history", "nosuch", "--config", &path]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out, "");
    assert!(
        err.contains("no app named \"nosuch\" in the configuration (apps: web)"),
        "{err}"
    );

    write_history(dir.path(), "web", &["m0a1", "m0a2", "m0b1"]);
    let (code, out, err) = berth(&["history", "show", "m0b", "--config", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ID:        m0b1\n"), "{out}");
    let (code, _, err) = berth(&["history", "show", "m0a", "--config", &path]);
    assert_eq!(code, 1);
    assert!(
        err.contains("\"m0a\" is the start of 2 record ids (m0a1, m0a2)"),
        "{err}"
    );
    let (code, _, err) = berth(&["history", "show", "zz", "--config", &path]);
    assert_eq!(code, 1);
    assert!(err.contains("no sync record \"zz\""), "{err}");
}

#[test]
fn history_and_status_skip_a_line_torn_inside_an_emoji() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[cluster]\nkubeconfig = \"STATE/kubeconfig\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    // A crash while writing "🚀" (F0 9F 9A 80) leaves a line that is not UTF-8: once
    // between two records (the next append starts a fresh line), once at the end.
    let torn = b"{\"id\":\"torn\",\"commit\":{\"subject\":\"ship \xF0\x9F";
    let log = dir.path().join("history/web.jsonl");
    let tear = || {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(torn).unwrap();
    };
    write_down_kubeconfig(dir.path());
    write_history(dir.path(), "web", &["m0a1"]);
    tear();
    write_history(dir.path(), "web", &["m0a2"]);
    tear();
    let (code, out, err) = berth(&["history", "--config", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("m0a1") && out.contains("m0a2"), "{out}");
    assert!(!err.contains("UTF-8"), "{err}");
    // status falls back to the local history (no cluster here): the newest record shows.
    let (_, out, err) = berth(&["status", "--config", &path]);
    assert!(!err.contains("UTF-8"), "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("web"))
        .unwrap_or_else(|| panic!("{out}{err}"));
    assert_eq!(row.split_whitespace().nth(2), Some("no-change"), "{out}");
}

/// Records of `app` with these ids, a second apart.
fn write_history(state: &std::path::Path, app: &str, ids: &[&str]) {
    let log = berth::history::HistoryLog::new(state);
    for (i, id) in ids.iter().enumerate() {
        let at = jiff::Timestamp::from_second(1_700_000_000 + i as i64).unwrap();
        let record: berth::history::SyncRecord = serde_json::from_value(serde_json::json!({
            "id": id, "app": app, "trigger": "cli", "started_at": at, "finished_at": at,
            "duration_ms": 1200, "commit": null, "previous_commit": null,
            "outcome": "no-change", "unchanged": 3,
        }))
        .unwrap();
        log.append(&record).unwrap();
    }
}

#[test]
fn a_closed_pipe_ends_commands_quietly() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    // More than a pipe's buffer, so the writer meets the closed pipe.
    let ids: Vec<String> = (0..2000).map(|i| format!("id{i:05}")).collect();
    write_history(
        dir.path(),
        "web",
        &ids.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    for args in ["history --json --limit 5000", "history --limit 5000"] {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "\"$BERTH\" {args} --config \"$CONFIG\" | head -1 >/dev/null; echo \"exit ${{PIPESTATUS[0]}}\""
            ))
            .env("BERTH", env!("CARGO_BIN_EXE_berth"))
            .env("CONFIG", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr, "", "berth {args}: nothing on stderr");
        // Ended by SIGPIPE (128 + 13), as git and kubectl are; never a panic (101).
        assert!(
            stdout.trim() == "exit 141" || stdout.trim() == "exit 0",
            "berth {args}: {stdout}"
        );
    }
}

#[test]
fn status_shows_the_local_history_when_the_cluster_is_down() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[cluster]\nkubeconfig = \"STATE/kubeconfig\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    write_down_kubeconfig(dir.path());
    write_history(dir.path(), "web", &["m0a1"]);
    let (code, out, err) = berth(&["status", "--config", &path]);
    assert_eq!(code, 1, "{out}{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("web"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(row.split_whitespace().nth(2), Some("no-change"), "{out}");
    assert!(err.contains("the cluster is unavailable"), "{err}");
    assert!(
        err.contains("the table above is the local history"),
        "{err}"
    );

    // -o json names the host that syncs the app: this machine, when not sharded.
    let (_, out, _) = berth(&["status", "-o", "json", "--config", &path]);
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(status["host"], host.trim(), "{out}");
    assert_eq!(status["last"]["outcome"], "no-change", "{out}");

    // The reason is cut in the table (the row stays readable), whole in -o wide and json.
    let reason = status["reason"].as_str().unwrap();
    assert!(reason.chars().count() > 80, "{reason}");
    let (_, table, _) = berth(&["status", "--config", &path]);
    let row = table.lines().find(|l| l.starts_with("web")).unwrap();
    assert!(
        row.ends_with("… (-o wide)") && !row.contains(reason),
        "{table}"
    );
    let (_, wide, _) = berth(&["status", "-o", "wide", "--config", &path]);
    let row = wide.lines().find(|l| l.starts_with("web")).unwrap();
    assert!(row.ends_with(reason), "{wide}");
}

/// `state/kubeconfig` naming a cluster that is down: port 1 on loopback, where nothing
/// listens, so the connection is refused at once.
fn write_down_kubeconfig(state: &std::path::Path) {
    std::fs::write(
        state.join("kubeconfig"),
        "apiVersion: v1\nkind: Config\nclusters:\n- name: down\n  cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: down\n  context: {cluster: down, user: u}\ncurrent-context: down\n",
    )
    .unwrap();
}

#[test]
fn render_checks_built_in_kinds_and_masks_secret_values() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: \"three\"\n",
    )
    .unwrap();
    let bad = dir.path().join("bad.yaml").display().to_string();
    let (code, out, err) = berth(&["render", &bad]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("bad.yaml:5 (document 2): Deployment web: spec.replicas: invalid type: string, expected i32"),
        "{err}"
    );

    let secret = dir.path().join("secret.yaml");
    std::fs::write(
        &secret,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: hunter2}\n",
    )
    .unwrap();
    let secret = secret.display().to_string();
    let (code, out, _) = berth(&["render", &secret]);
    assert_eq!(code, 0);
    assert!(
        out.contains("password: \"***\"") && !out.contains("hunter2"),
        "{out}"
    );
    let (code, out, _) = berth(&["render", &secret, "--show-secrets"]);
    assert_eq!(code, 0);
    assert!(out.contains("password: hunter2"), "{out}");
}

#[test]
fn validate_reads_trusted_keys_and_notify_secrets_and_names_what_is_wrong() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[[app]]\nname = \"a\"\nrepo = \"STATE\"\n[app.verify]\nmode = \"head\"\nopenpgp_keys = [\"STATE/keys/*.asc\"]\nssh_allowed_signers = \"STATE/allowed_signers\"\n[[notify]]\nname = \"chat\"\nurl_file = \"STATE/chat-url\"\nformat = \"slack\"\n[[notify]]\nurl_env = \"BERTH_TEST_UNSET_URL\"\n",
    );
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    std::fs::write(dir.path().join("keys/dev.asc"), "not a key").unwrap();
    std::fs::write(
        dir.path().join("allowed_signers"),
        "dev@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMNREh3Sdz7J3PUGyaoqXnpq469dm0vnVE9+5woaA/U7\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("chat-url"),
        "https://hooks.example/T0/B0/SECRET\n",
    )
    .unwrap();
    let (code, out, _) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("app a: [app.verify]")
            && out.contains("keys/dev.asc: not an OpenPGP public key"),
        "{out}"
    );
    assert!(
        out.contains("chat: Slack receiver, events sync_failed"),
        "{out}"
    );
    assert!(
        !out.contains("SECRET"),
        "the address is never printed: {out}"
    );
    assert!(
        out.contains("notify[1]: url_env: environment variable BERTH_TEST_UNSET_URL is not set"),
        "{out}"
    );

    let (_dir, path) = config_file(
        "berth.toml",
        "[[app]]\nname = \"a\"\nrepo = \"/r\"\n[app.verify]\nmode = \"head\"\n[[notify]]\nurl = \"ftp://x\"\nurl_env = \"X\"\n",
    );
    let (code, _, err) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 1, "{err}");
    for expected in [
        "app[0].verify.mode: \"head\" needs trusted keys",
        "notify[0].url: give exactly one of url, url_file and url_env",
        "notify[0].url: must be an http:// or https:// URL with a host",
    ] {
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

#[test]
fn validate_renders_the_commit_the_ref_names_not_the_working_tree() {
    let repo = common::Repo::new();
    repo.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  value: \"1\"\n",
    );
    let first = repo.commit("one");
    let (_dir, path) = config_file(
        "berth.toml",
        &format!(
            "[agent]\nstate_dir = \"STATE\"\n[[app]]\nname = \"a\"\nrepo = \"{}\"\nbranch = \"mian\"\n",
            repo.dir.path().display()
        ),
    );
    // A misspelt branch: sync would fail, so validate does, naming it.
    let (code, out, _) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("app a: branch mian not found in"), "{out}");

    std::fs::write(
        &path,
        std::fs::read_to_string(&path)
            .unwrap()
            .replace("mian", "main"),
    )
    .unwrap();
    // An uncommitted broken file, and another branch checked out with more objects: sync
    // sees neither, and neither does validate.
    repo.git(&["checkout", "-q", "-b", "other"]);
    repo.write(
        "more.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: more\n",
    );
    repo.commit("more");
    repo.write("broken.yaml", "kind: [\n");
    let (code, out, _) = berth(&["validate", "--config", &path]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "app a: 1 object from branch main at {} (1 ConfigMap)",
            &first[..7]
        )),
        "{out}"
    );

    // `--dir` still renders a working tree as it is.
    let dir = repo.dir.path().display().to_string();
    let (code, out, _) = berth(&["validate", "--config", &path, "--dir", &dir]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("broken.yaml"), "{out}");
}

#[test]
fn rendered_strings_stay_strings_through_kubectl() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let values = [
        "off",
        "on",
        "yes",
        "y",
        "no",
        "n",
        "true",
        "false",
        "~",
        "null",
        "80",
        "0755",
        "1e3",
        ".inf",
        "-1",
        "0x1F",
        "1:20",
        "2001-12-14",
        "",
    ];
    let dir = tempfile::tempdir().unwrap();
    let data: String = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("  K{i}: {}\n", serde_json::to_string(v).unwrap()))
        .collect();
    let file = dir.path().join("cm.yaml");
    std::fs::write(
        &file,
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: flags\ndata:\n  FEATURE_X: \"off\"\n{data}"),
    )
    .unwrap();
    let ns = format!("render-kubectl-{}", std::process::id() % 100_000);
    let (code, rendered, err) = berth(&["render", file.to_str().unwrap(), "-n", &ns]);
    assert_eq!(code, 0, "{err}");

    let kubectl = |args: &[&str], input: &str| {
        use std::io::Write;
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "kubectl {args:?}: {stderr}\n{input}");
        stdout
    };
    kubectl(&["create", "namespace", &ns], "");
    kubectl(&["apply", "--server-side", "-f", "-"], &rendered);
    let live: serde_json::Value = serde_json::from_str(&kubectl(
        &["get", "configmap", "flags", "-n", &ns, "-o", "json"],
        "",
    ))
    .unwrap();
    assert_eq!(live["data"]["FEATURE_X"], "off", "{rendered}");
    for (i, v) in values.iter().enumerate() {
        assert_eq!(live["data"][format!("K{i}")], *v, "{rendered}");
    }
    assert!(rendered.contains("FEATURE_X: \"off\""), "{rendered}");
}

/// A cluster that is down is one clear line within seconds for a one-shot command: the
/// API server's address, the cause and what to check (was 58 s and 19 WARN lines).
#[test]
fn a_cluster_that_is_down_is_one_clear_line_within_seconds() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[cluster]\nkubeconfig = \"STATE/kubeconfig\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    write_down_kubeconfig(dir.path());
    for command in ["sync", "plan", "status"] {
        let start = std::time::Instant::now();
        let (code, out, err) = berth(&[command, "--config", &path]);
        let took = start.elapsed();
        assert_eq!(code, 1, "{out}{err}");
        assert!(
            took < std::time::Duration::from_secs(10),
            "{command}: {took:?}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{command}: {err}");
        assert!(
            err.contains("cannot reach the API server at https://127.0.0.1:1/")
                && err.contains("refused")
                && err.contains("[cluster] kubeconfig"),
            "{command}: {err}"
        );
    }
}

/// Without `[cluster] kubeconfig`, a missing $KUBECONFIG file is said alone, naming it and
/// the key to set, not beside an in-cluster error about environment variables.
#[test]
fn a_missing_kubeconfig_is_said_without_the_in_cluster_error() {
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    let missing = dir.path().join("no-such-kubeconfig");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["sync", "--config", &path])
        .env("KUBECONFIG", &missing)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "no kubeconfig: cannot read {}: No such file or directory",
            missing.display()
        )) && err.contains("set [cluster] kubeconfig"),
        "{err}"
    );
    assert!(!err.contains("in-cluster"), "{err}");
}

/// A kustomization in no git repository may reach what is under the current folder (and
/// says so), or under `--root`; `../base` is no longer "outside the repository".
#[test]
fn render_outside_a_repository_reads_under_the_current_folder_or_root() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("base/kustomization.yaml", "resources: [cm.yaml]\n");
    write(
        "base/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-base}\n",
    );
    write("overlay/kustomization.yaml", "resources: [../base]\n");
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["render", "overlay"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("name: from-base"), "{stdout}");
    assert!(
        stderr.contains("in no git repository") && stderr.contains("--root"),
        "{stderr}"
    );

    let overlay = dir.path().join("overlay").display().to_string();
    let root = dir.path().display().to_string();
    let (code, out, err) = berth(&["render", &overlay, "--root", &root]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("name: from-base"), "{out}");
}

/// `berth render FOLDER` in a repository says how to leave a sub-folder out as an app's
/// `exclude` takes it: relative to the repository, not to the folder.
#[test]
fn render_writes_the_exclude_hint_as_an_apps_exclude_takes_it() {
    let repo = common::Repo::new();
    repo.write(
        "app/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    );
    repo.write("app/ci/pipeline.yaml", "steps: [build, test]\n");
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["render", "app"])
        .current_dir(repo.dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("app/ci/pipeline.yaml") && err.contains(r#"exclude = ["app/ci/**"]"#),
        "{err}"
    );
}

/// A server that answers but is not an API server (a web server, a proxy's error page)
/// is said as such: its URL and what it answered to `GET /version`.
#[test]
fn a_server_that_is_not_an_api_server_is_named_with_its_answer() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found",
            );
        }
    });
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[cluster]\nkubeconfig = \"STATE/kubeconfig\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    std::fs::write(
        dir.path().join("kubeconfig"),
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: web\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: web\n  context: {{cluster: web, user: u}}\ncurrent-context: web\n"),
    )
    .unwrap();
    let (code, out, err) = berth(&["sync", "--config", &path]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!("http://127.0.0.1:{port}/"))
            && err.contains("GET /version with 404 Not Found"),
        "{err}"
    );
    assert!(!err.contains("Failed to parse"), "{err}");
}

/// Issue 61, item 4: a real API server that refuses the token is said as such (before:
/// "not a Kubernetes API server … 401").
#[test]
fn a_token_the_api_server_refuses_is_said_as_refused_credentials() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let (dir, path) = config_file(
        "berth.toml",
        "[agent]\nstate_dir = \"STATE\"\n[cluster]\nkubeconfig = \"STATE/kubeconfig\"\n[[app]]\nname = \"web\"\nrepo = \"x\"\n",
    );
    let kubeconfig = std::fs::read_to_string(&cp.kubeconfig).unwrap();
    let token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .to_string();
    std::fs::write(
        dir.path().join("kubeconfig"),
        kubeconfig.replace(&token, "not-the-token"),
    )
    .unwrap();
    let (code, out, err) = berth(&["sync", "--config", &path]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("refuses the kubeconfig's credentials (401 Unauthorized)")
            && err.contains("its token, client certificate or exec plugin"),
        "{err}"
    );
    assert!(!err.contains("not a Kubernetes API server"), "{err}");
    // An unknown context: the kubeconfig named, its contexts listed.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("[cluster]\n", "[cluster]\ncontext = \"prod\"\n"),
    )
    .unwrap();
    let (code, out, err) = berth(&["sync", "--config", &path]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(
            "has no context \"prod\" (its contexts: berth-testenv): check [cluster] context"
        ),
        "{err}"
    );
}

/// The README's "your own repository in five minutes", as written there: `berth init` on a
/// fresh repository (which, run again, refuses to overwrite what it wrote), `berth
/// validate` without a cluster, then `berth plan`, `berth sync` and `berth run` against
/// the cluster `$KUBECONFIG` names (the starter leaves `[cluster]` to the usual rules).
#[test]
fn your_own_repository_in_five_minutes() {
    let repo = common::Repo::new();
    for file in ["config.yaml", "frontend.yaml"] {
        let text = std::fs::read_to_string(format!(
            "{}/examples/guestbook/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        repo.write(&format!("deploy/{file}"), &text);
    }
    repo.commit("guestbook");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("berth.toml").display().to_string();
    let state = dir.path().join("state").display().to_string();
    let ns = format!("five-minutes-{}", std::process::id() % 100_000);
    let repo_dir = repo.dir.path().display().to_string();
    let init = [
        "init",
        "--repo",
        &repo_dir,
        "--path",
        "deploy",
        "--namespace",
        &ns,
        "--name",
        "shop",
        "--config",
        &config,
        "--state-dir",
        &state,
    ];
    let (code, out, err) = berth(&init);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("next:\n  berth validate --config {config}")),
        "{out}"
    );
    let (code, _, err) = berth(&init);
    assert_eq!(code, 1);
    assert!(
        err.contains("exists: berth init does not overwrite"),
        "{err}"
    );
    let (code, out, err) = berth(&["validate", "--config", &config]);
    assert_eq!(code, 0, "{out}{err}");
    // The repository's branch, as it was at init, is written down (issue 61, item 1).
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(written.contains("\nbranch = \"main\"\n"), "{written}");
    // A namespace berth would refuse: refused by init, nothing written (item 7).
    let refused = dir.path().join("refused.toml").display().to_string();
    let mut bad = init.to_vec();
    bad[6] = "Not_A_Namespace";
    bad[10] = &refused;
    let (code, _, err) = berth(&bad);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("berth init would write a configuration berth refuses"),
        "{err}"
    );
    assert!(!std::path::Path::new(&refused).exists());
    // --config after the command, as everywhere, also before a subcommand (item 7).
    let (code, _, err) = berth(&["history", "--config", &config, "show", "nope"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no sync record \"nope\""), "{err}");

    let Some(cp) = common::control_plane() else {
        return;
    };
    let with_cluster = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .args(["--config", &config])
            .env("KUBECONFIG", &cp.kubeconfig)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, plan) = with_cluster(&["plan"]);
    assert_eq!(code, Some(0), "{plan}");
    assert!(
        plan.contains(&format!("deployment.apps/frontend -n {ns} create")),
        "{plan}"
    );
    let (code, synced) = with_cluster(&["sync"]);
    assert_eq!(code, Some(0), "{synced}");
    let live = Command::new("kubectl")
        .args(["get", "deployment", "frontend", "-n", &ns, "--kubeconfig"])
        .arg(&cp.kubeconfig)
        .output()
        .unwrap();
    assert!(live.status.success(), "{synced}");

    let kubeconfig = cp.kubeconfig.display().to_string();
    let mut daemon =
        common::Daemon::start(std::path::Path::new(&config), &[("KUBECONFIG", kubeconfig)]);
    let frontend = repo.dir.path().join("deploy/frontend.yaml");
    let text = std::fs::read_to_string(&frontend).unwrap();
    std::fs::write(&frontend, text.replace("guestbook:v3", "guestbook:v4")).unwrap();
    let sha = repo.commit("guestbook v4");
    let history = berth::history::HistoryLog::new(std::path::Path::new(&state));
    common::eventually(
        "berth run syncs the next commit",
        std::time::Duration::from_secs(120),
        || {
            history.read("shop").is_ok_and(|records| {
                records.iter().any(|r| {
                    r.commit.as_ref().is_some_and(|c| c.sha == sha)
                        && r.outcome == berth::history::Outcome::Succeeded
                })
            })
        },
    );
    daemon.signal(libc::SIGTERM);
    assert!(daemon.wait(std::time::Duration::from_secs(30)).success());
}
