//! Tests of the source visitors: folders walked in order, globs, symlinks and `..` kept
//! inside the root, the caps on a file, an app and its objects.
use super::*;
use crate::manifest::visitor::{collect, ContinueOnError};

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: NAME\n";

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn source(root: &Path, paths: &[&str]) -> PathSource {
    PathSource {
        root: root.to_path_buf(),
        prefix: String::new(),
        paths: paths.iter().map(|s| s.to_string()).collect(),
        include: None,
        exclude: None,
        limits: Limits::default(),
        kustomize: None,
        helm: None,
        allow_empty: false,
        decrypt: None,
    }
}

#[test]
fn a_folder_with_a_kustomization_is_rendered_by_kustomize_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "base/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\n",
    );
    write(root, "app/kustomization.yaml", "resources: [../base]\n");
    write(root, "base/kustomization.yaml", "resources: [cm.yaml]\n");
    // What the stand-in "kustomize" prints: one object with kustomize's origin
    // annotation, one without.
    write(
        root,
        "app/built.out",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations:\n    config.kubernetes.io/origin: |\n      path: ../base/cm.yaml\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
    );
    write(
        root,
        "plain/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
    );
    let stand_in = Kustomize {
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "cat \"$0/built.out\"".into(),
        ]),
        ..Kustomize::new(None, std::time::Duration::from_secs(10))
    };
    let mut s = source(root, &["app", "plain"]);
    s.kustomize = Some(stand_in.clone());
    assert_eq!(
        run(s).unwrap(),
        [
            "base/cm.yaml (via app/kustomization.yaml)",
            "app/kustomization.yaml",
            "plain/cm.yaml"
        ]
    );
    // render = "kustomize": a path without a kustomization is an error.
    let mut s = source(root, &["plain"]);
    s.kustomize = Some(Kustomize {
        required: true,
        ..stand_in
    });
    let e = run(s).unwrap_err().to_string();
    assert!(e.starts_with("plain: holds no kustomization.yaml"), "{e}");
    // render = "plain": the kustomization file is read as a manifest (and refused).
    let e = run(source(root, &["app"])).unwrap_err().to_string();
    assert!(e.contains("app/kustomization.yaml"), "{e}");
}

fn run(s: PathSource) -> Result<Vec<String>, ManifestError> {
    collect(&ContinueOnError(s)).map(|v| v.iter().map(|m| m.origin.path.clone()).collect())
}

#[test]
fn a_non_manifest_in_a_sub_folder_says_how_to_leave_it_out() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "app/cm.yaml", &CM.replace("NAME", "a"));
    write(d.path(), "app/ci/pipeline.yaml", "steps: [build, test]\n");
    write(d.path(), "app/odd.yaml", "steps: [build]\n");
    let e = run(source(d.path(), &["app"])).unwrap_err().to_string();
    assert!(
        e.contains("app/ci/pipeline.yaml")
            && e.contains("missing apiVersion")
            && e.contains(r#"exclude = ["app/ci/**"]"#),
        "{e}"
    );
    // A file right in the app's folder is the app's own: no hint.
    let odd = e.lines().find(|l| l.contains("app/odd.yaml")).unwrap();
    assert!(!odd.contains("exclude"), "{odd}");
}

#[test]
fn a_path_that_yields_no_object_is_refused_unless_allowed() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "app/cm.yaml", &CM.replace("NAME", "a"));
    write(d.path(), "docs/README.md", "words");
    write(d.path(), "jsonnet/main.jsonnet", "{}");
    let e = run(source(d.path(), &["app", "docs"]))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("docs: no objects here"), "{e}");
    let e = run(source(d.path(), &["jsonnet"])).unwrap_err().to_string();
    assert!(
        e.contains("holds Jsonnet (1 .jsonnet/.libsonnet file)"),
        "{e}"
    );
    let mut allowed = source(d.path(), &["app", "docs"]);
    allowed.allow_empty = true;
    assert_eq!(run(allowed).unwrap(), ["app/cm.yaml"]);
}

#[test]
fn walks_folders_in_order_with_extension_rule_and_globs() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "b/x.yaml", &CM.replace("NAME", "x"));
    write(d.path(), "a/y.yml", &CM.replace("NAME", "y"));
    write(
        d.path(),
        "a/z.json",
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"z"}}"#,
    );
    write(d.path(), "a/README.md", "not yaml");
    write(d.path(), ".git/config.yaml", "ignored: true");
    write(d.path(), "a/skip.yaml", &CM.replace("NAME", "skip"));
    assert_eq!(
        run(source(d.path(), &["."])).unwrap(),
        ["a/skip.yaml", "a/y.yml", "a/z.json", "b/x.yaml"]
    );
    let mut s = source(d.path(), &["a"]);
    s.exclude = Some(
        globset::GlobSetBuilder::new()
            .add(globset::Glob::new("**/skip.*").unwrap())
            .build()
            .unwrap(),
    );
    s.prefix = "repo".into();
    assert_eq!(run(s).unwrap(), ["repo/a/y.yml", "repo/a/z.json"]);
}

#[test]
fn symlink_out_of_the_root_is_refused_unread() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.yaml", &CM.replace("NAME", "secret"));
    let d = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.yaml"),
        d.path().join("leak.yaml"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("leakdir")).unwrap();
    let e = run(source(d.path(), &["."])).unwrap_err().to_string();
    assert!(
        e.contains("leak.yaml: symbolic link points outside the repository"),
        "{e}"
    );
    assert!(
        e.contains("leakdir: symbolic link points outside the repository"),
        "{e}"
    );
}

#[test]
fn symlink_inside_the_root_is_followed() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "real/x.yaml", &CM.replace("NAME", "x"));
    std::os::unix::fs::symlink(d.path().join("real/x.yaml"), d.path().join("link.yaml")).unwrap();
    assert_eq!(
        run(source(d.path(), &["link.yaml"])).unwrap(),
        ["link.yaml"]
    );
}

#[test]
fn dot_dot_escape_and_missing_paths() {
    let d = tempfile::tempdir().unwrap();
    let e = run(source(d.path(), &["../etc", "nope"]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("../etc: path escapes the repository root"),
        "{e}"
    );
    assert!(e.contains("nope: no such file or directory"), "{e}");
}

#[test]
fn file_over_the_cap_is_not_read() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "big.yaml", &"#".repeat(2000));
    let mut s = source(d.path(), &["."]);
    s.limits.max_file_size = 1000;
    let e = run(s).unwrap_err().to_string();
    assert_eq!(
        e,
        "big.yaml: file is 2000 bytes, over the 1000-byte cap (agent.max_file_size)"
    );
}

#[test]
fn app_over_the_cap_stops_reading() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..5 {
        write(
            d.path(),
            &format!("{i}.yaml"),
            &CM.replace("NAME", &format!("c{i}")),
        );
    }
    let mut s = source(d.path(), &["."]);
    s.limits.max_app_size = 2 * CM.len() as u64 + 10;
    let e = run(s).unwrap_err().to_string();
    assert!(e.starts_with("2.yaml: the app's manifests exceed"), "{e}");
}

#[test]
fn more_objects_than_the_cap_stop_reading() {
    let d = tempfile::tempdir().unwrap();
    let many: Vec<String> = (0..5)
        .map(|i| CM.replace("NAME", &format!("c{i}")))
        .collect();
    write(d.path(), "all.yaml", &many.join("---\n"));
    let mut s = source(d.path(), &["."]);
    s.limits.max_objects = 3;
    let e = run(s).unwrap_err().to_string();
    assert_eq!(
        e,
        "all.yaml:16 (document 4): the app holds more than 3 objects (agent.max_objects); reading stopped here"
    );
}

/// The sops fixtures (tests/fixtures/sops, written by other tools than berth).
fn sops_fixture(name: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sops");
    std::fs::read_to_string(format!("{dir}/{name}")).unwrap()
}

/// A source of `path` under `root` that decrypts with the fixtures' age key.
fn decrypting(root: &Path, path: &str) -> PathSource {
    write(root, "keys/age.key", &sops_fixture("age.key"));
    let mut s = source(root, &[path]);
    s.decrypt = Some(Decryption {
        age_key_files: vec![root.join("keys/age.key")],
        ..Decryption::default()
    });
    s
}

#[test]
fn an_encrypted_file_is_decrypted_whole_and_its_values_marked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "app/a-secret.json", &sops_fixture("secret.enc.json"));
    write(root, "app/b-regex.yaml", &sops_fixture("regex.enc.yaml"));
    write(root, "app/c-plain.yaml", &CM.replace("NAME", "plain"));
    let mut s = decrypting(root, "app");
    let got = collect(&s).unwrap();
    let names: Vec<&str> = got.iter().map(Manifest::name).collect();
    assert_eq!(names, ["db-json", "db-regex", "plain"]);
    assert_eq!(got[0].object["stringData"]["password"], "correct horse");
    assert!(!got[0].object.contains_key("sops"));
    // sops' default encrypts every value: the object's names are not counted as secret.
    assert!(got[0]
        .decrypted
        .contains(&"/stringData/password".to_string()));
    assert!(!got[0].decrypted.contains(&"/metadata/name".to_string()));
    assert_eq!(
        got[1].decrypted,
        ["/stringData/password", "/stringData/port", "/data/token"]
    );
    assert!(got[2].decrypted.is_empty());

    // Without [app.decrypt], the file is refused, saying what to set.
    s.decrypt = None;
    let e = collect(&s).unwrap_err().to_string();
    assert!(
        e.starts_with("app/a-secret.json: encrypted with sops, and the app decrypts nothing"),
        "{e}"
    );
}

#[test]
fn a_tampered_encrypted_file_yields_nothing_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // The password's ciphertext moved under another key.
    let text = sops_fixture("regex.enc.yaml");
    let values: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("ENC["))
        .collect();
    let tampered = text
        .replacen(values[0], "PASSWORD", 1)
        .replacen(values[1], values[0], 1)
        .replacen("PASSWORD", values[1], 1);
    write(root, "app/secret.yaml", &tampered);
    write(root, "age.key", &sops_fixture("age.key"));
    let mut s = source(root, &["app"]);
    s.decrypt = Some(Decryption {
        age_key_files: vec![root.join("age.key")],
        ..Decryption::default()
    });
    let mut seen = Vec::new();
    let walk = ContinueOnError(&s).visit(&mut |item| {
        seen.push(item?);
        Ok(())
    });
    assert!(seen.is_empty(), "{seen:?}");
    let e = walk.unwrap_err().to_string();
    assert!(
        e.starts_with("app/secret.yaml: /stringData/password: does not decrypt with the file's data key at this place"),
        "{e}"
    );
}

#[test]
fn files_that_look_encrypted_keep_their_order_and_decode_past_their_share() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A file that looks encrypted and is not (its second document has a top-level
    // `sops` key, with no MAC), whose aliases decode to far more than four units a byte: handed
    // over, refused by its share, decoded again on the walk's thread within the
    // render's budget.
    let aliases = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: b-aliases}}\ndata: {{}}\nlists: &l [{}]\nmore: [{}]\n---\n{}sops: {{note: not encrypted}}\n",
        vec!["abcdefgh"; 64].join(", "),
        vec!["*l"; 64].join(", "),
        CM.replace("NAME", "b-second")
    );
    write(root, "app/b-aliases.yaml", &aliases);
    write(root, "app/a-secret.json", &sops_fixture("secret.enc.json"));
    write(root, "app/c-regex.yaml", &sops_fixture("regex.enc.yaml"));
    write(root, "app/d-plain.yaml", &CM.replace("NAME", "plain"));
    let s = decrypting(root, "app");
    let got = collect(&s).unwrap();
    let names: Vec<&str> = got.iter().map(Manifest::name).collect();
    assert_eq!(
        names,
        ["db-json", "b-aliases", "b-second", "db-regex", "plain"]
    );
    assert_eq!(got[1].object["more"][63][0], "abcdefgh");
}

#[test]
fn a_share_set_aside_is_granted_and_used_at_once_and_given_back_whole() {
    let budget = Budget::new(100 << 20);
    let (limit, used) = (budget.limit(), budget.used());
    let share = budget.set_aside(1000).unwrap();
    assert_eq!(share, 4000);
    assert_eq!((budget.limit(), budget.used()), (limit + 4000, used + 4000));
    budget.give_back(share);
    assert_eq!((budget.limit(), budget.used()), (limit, used));
    // Near the cap, nothing is set aside: the file is decoded where the budget is.
    let small = Budget::new(10_000);
    assert_eq!(small.set_aside(5000), None);
}
