//! The `berth` command line as a user runs it: exit codes and messages.

use std::process::Command;

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
