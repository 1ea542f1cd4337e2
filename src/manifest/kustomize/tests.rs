//! Tests of kustomize, each refusal against a real folder: what a kustomization may
//! reference and reach, the tool run with a timeout and its stderr shown.
use std::process::Command;

use super::references::is_remote;
use super::*;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Why the kustomization in `dir` is refused, if it is.
fn checked(root: &Path, dir: &str, allow_remote: bool) -> Option<String> {
    let root = root.canonicalize().unwrap();
    let k = Kustomize {
        allow_remote,
        ..Kustomize::new(Some("true"), Duration::from_secs(5))
    };
    k.check(
        &root,
        &root.join(dir),
        &format!("{dir}/kustomization.yaml"),
        &mut HashSet::new(),
        &mut Vec::new(),
    )
    .err()
    .map(|e| e.to_string())
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// Past the reference check (as a reference kustomize reads differently from berth
/// would be), the tool itself cannot fetch. The tool here is a stand-in that does what
/// kustomize does with a remote base (`git clone`, from whichever kustomize version is
/// installed): a repository on this machine, cloned when remote bases are allowed, is
/// refused at git's transport when not.
#[test]
fn kustomize_cannot_fetch_when_remote_bases_are_not_allowed() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    // Inside the checkout, which the tool may read (Landlock would refuse a folder
    // elsewhere on this machine before git's transport rule did).
    let src = root.join("remote/src");
    write(
        &src,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fetched}\n",
    );
    git(&src, &["init", "-q"]);
    git(&src, &["add", "-A"]);
    git(&src, &["commit", "-qm", "base"]);
    write(&root, "app/kustomization.yaml", "resources: []\n");
    let clone = format!(
        "git clone -q file://{} \"$TMPDIR/clone\" && cat \"$TMPDIR/clone/cm.yaml\"",
        src.display()
    );
    let run = |allow_remote: bool| {
        let k = Kustomize {
            command: Some(vec!["sh".into(), "-c".into(), clone.clone()]),
            allow_remote,
            ..Kustomize::new(None, Duration::from_secs(30))
        };
        k.run(
            &root,
            &root.join("app"),
            "app/kustomization.yaml",
            1 << 20,
            false,
        )
    };
    let fetched = run(true).expect("fetched when allowed");
    assert!(String::from_utf8_lossy(&fetched).contains("name: fetched"));
    let e = run(false).unwrap_err().to_string();
    assert!(e.contains("transport 'file' not allowed"), "{e}");
}

#[test]
fn the_kustomization_and_its_files_are_read_as_manifests_are() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    let outside = tempfile::tempdir().unwrap();
    write(
        outside.path(),
        "kustomization.yaml",
        "resources: [secret-host-file]\n",
    );
    // A kustomization that is a link out of the checkout: refused unread, so nothing
    // of the host file reaches the error, the history or the log.
    std::fs::create_dir_all(root.join("linked")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("kustomization.yaml"),
        root.join("linked/kustomization.yaml"),
    )
    .unwrap();
    let e = checked(root, "linked", false).unwrap();
    assert_eq!(
        e,
        "linked/kustomization.yaml: kustomization.yaml resolves outside the repository; refused unread"
    );
    // A link to a file that never ends, and one to a device: refused unread.
    for (dir, target) in [("pagemap", "/proc/self/pagemap"), ("zero", "/dev/zero")] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::os::unix::fs::symlink(target, root.join(dir).join("kustomization.yaml")).unwrap();
        let e = checked(root, dir, false).unwrap();
        assert!(
            e.ends_with("resolves outside the repository; refused unread"),
            "{e}"
        );
    }
    // Over the per-file cap: the kustomization, and a file it names.
    let big = format!("resources: []\n#{}\n", "x".repeat(5 << 20));
    write(root, "big/kustomization.yaml", &big);
    let e = checked(root, "big", false).unwrap();
    assert!(
        e.contains("kustomization.yaml is 5242896 bytes, over the 4194304-byte cap"),
        "{e}"
    );
    write(
        root,
        "gen/kustomization.yaml",
        "configMapGenerator:\n- name: c\n  files: [big.txt]\n",
    );
    write(root, "gen/big.txt", &"x".repeat(5 << 20));
    let e = checked(root, "gen", false).unwrap();
    assert!(
        e.contains(
            "configMapGenerator.files: \"big.txt\" is 5242880 bytes, over the 4194304-byte cap"
        ),
        "{e}"
    );
}

#[test]
fn every_reference_of_every_kustomization_is_checked() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    write(
        root,
        "base/kustomization.yaml",
        "resources: [deploy.yaml]\n",
    );
    write(root, "base/deploy.yaml", "kind: Deployment\n");
    write(
        root,
        "overlay/kustomization.yaml",
        "resources: [../base]\npatches:\n- path: patch.yaml\nconfigMapGenerator:\n- name: c\n  files: [app.conf=files/app.conf]\n",
    );
    write(root, "overlay/patch.yaml", "kind: Deployment\n");
    write(root, "overlay/files/app.conf", "x=1\n");
    assert_eq!(checked(root, "overlay", false), None);

    // Refused, naming the kustomization and the field: a base that is not there, a
    // generator file outside the repository through an absolute path or a symbolic
    // link, and a kustomization that reaches such a one (the inner one is named).
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "passwd", "root:x:0:0\n");
    std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
    let absolute = format!(
        "secretGenerator:\n- name: s\n  files: [{}/passwd]\n",
        outside.path().display()
    );
    for (dir, text, says) in [
        (
            "missing",
            "resources: [../nosuch]\n",
            "missing/kustomization.yaml: resources: \"../nosuch\" does not exist",
        ),
        (
            "escape",
            absolute.as_str(),
            "escape/kustomization.yaml: secretGenerator.files: ",
        ),
        (
            "linked",
            "resources: [../link/passwd]\n",
            "linked/kustomization.yaml: resources: \"../link/passwd\" resolves outside the repository",
        ),
        (
            "nested",
            "resources: [../linked]\n",
            "linked/kustomization.yaml: resources: \"../link/passwd\" resolves outside the repository",
        ),
    ] {
        write(root, &format!("{dir}/kustomization.yaml"), text);
        let e = checked(root, dir, false).unwrap();
        assert!(e.starts_with(says), "{dir}: {e}");
    }
}

#[test]
fn reach_follows_kustomizations_out_of_the_app_paths() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    write(&root, "base/kustomization.yaml", "resources: [cm.yaml]\n");
    write(&root, "base/cm.yaml", "kind: ConfigMap\n");
    write(&root, "patches/p.yaml", "kind: ConfigMap\n");
    write(&root, "unrelated/x.yaml", "kind: ConfigMap\n");
    write(
        &root,
        "apps/prod/kustomization.yaml",
        "resources: [../../base, svc.yaml]\npatches: [{path: ../../patches/p.yaml}]\n",
    );
    write(&root, "apps/prod/svc.yaml", "kind: Service\n");
    write(&root, "apps/plain/nested/cm.yaml", "kind: ConfigMap\n");
    let paths = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        reach(&root, &paths(&["apps/prod"])),
        ["apps/prod", "base", "patches/p.yaml"]
    );
    assert_eq!(
        reach(&root, &paths(&["apps/plain", "apps/plain/nested"])),
        ["apps/plain"]
    );
    assert_eq!(reach(&root, &paths(&["", "base"])), [""]);
}

#[test]
fn remote_bases_helm_and_plugins_are_refused() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    write(
        root,
        "remote/kustomization.yaml",
        "resources: [\"github.com/org/repo//deploy?ref=v1\"]\n",
    );
    let e = checked(root, "remote", false).unwrap();
    assert!(
        e.contains("remote resource") && e.contains("allow_remote_bases"),
        "{e}"
    );
    assert_eq!(checked(root, "remote", true), None);

    // What kustomize could fetch, even where a folder of that name exists.
    for remote in [
        "x@127.0.0.1:repo.git",
        "github.com:org/repo",
        "gh:org/repo",
        "git::base",
        "ssh://git@example.com/org/repo",
        "file:///srv/repo.git//base",
        "https://example.com/manifests/all.yaml",
        "org/repo.git//base",
        "base?ref=v1",
        "base?version=v1",
        "dev.azure.com/org/_git/repo",
        "GitHub.com/org/repo",
    ] {
        assert!(is_remote(remote), "{remote}");
    }
    std::fs::create_dir_all(root.join("lookalike/x@127.0.0.1:repo.git")).unwrap();
    write(
        root,
        "lookalike/x@127.0.0.1:repo.git/kustomization.yaml",
        "resources: []\n",
    );
    write(
        root,
        "lookalike/kustomization.yaml",
        "resources: [\"x@127.0.0.1:repo.git\"]\n",
    );
    let e = checked(root, "lookalike", false).unwrap();
    assert!(
        e.contains("remote resource \"x@127.0.0.1:repo.git\" refused"),
        "{e}"
    );
    for local in [
        "../base",
        "overlays/prod",
        "./deploy.yaml",
        "base",
        "my.app/base",
        "v1.2",
    ] {
        assert!(!is_remote(local), "{local}");
    }

    write(root, "fn/kustomization.yaml", "transformers: [fn.yaml]\n");
    write(
        root,
        "fn/fn.yaml",
        "kind: X\nmetadata:\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: ./run.sh\n",
    );
    let e = checked(root, "fn", false).unwrap();
    assert!(e.contains("KRM function or exec plugin"), "{e}");
}

/// `helmCharts` inflate a chart of the repository only: one to download, outside it,
/// missing, with a dependency to download or a values file that is a URL is refused, as
/// is the deprecated generator and a config folder of the kustomization's own.
#[test]
fn helm_charts_are_inflated_only_from_the_repository() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    write(
        root,
        "k/charts/web/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\n",
    );
    write(root, "k/values-prod.yaml", "replicaCount: 2\n");
    let refused = |kustomization: &str| {
        write(root, "k/kustomization.yaml", kustomization);
        checked(root, "k", false).unwrap()
    };
    write(
        root,
        "k/kustomization.yaml",
        "helmCharts:\n- name: web\n  valuesFile: values-prod.yaml\n",
    );
    assert_eq!(checked(root, "k", false), None);
    for (kustomization, said) in [
        (
            "helmCharts:\n- name: redis\n  repo: https://charts.example.com\n",
            "helmCharts: redis from https://charts.example.com: berth downloads no chart; vendor it in charts/redis",
        ),
        ("helmCharts:\n- name: db\n", "helmCharts: \"charts/db\""),
        (
            "helmGlobals:\n  chartHome: ../../..\nhelmCharts:\n- name: etc\n",
            "helmCharts: \"../../../etc\"",
        ),
        (
            "helmCharts:\n- name: web\n  valuesFile: https://example.com/v.yaml\n",
            "values file \"https://example.com/v.yaml\" is not a path in the repository",
        ),
        (
            "helmCharts:\n- name: web\n  additionalValuesFiles: [../../../etc/passwd]\n",
            "helmCharts.valuesFile: \"../../../etc/passwd\"",
        ),
        (
            "helmGlobals:\n  configHome: /root/.config/helm\nhelmCharts:\n- name: web\n",
            "helmGlobals.configHome: berth gives helm a private folder",
        ),
        (
            "helmChartInflationGenerator:\n- chartName: web\n",
            "the deprecated Helm generator is not supported",
        ),
    ] {
        let e = refused(kustomization);
        assert!(e.contains(said), "{kustomization}: {e}");
    }
    write(
        root,
        "k/charts/web/Chart.yaml",
        "apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: pg\n  version: 1.0.0\n  repository: https://charts.example.com\n",
    );
    let e = refused("helmCharts:\n- name: web\n");
    assert!(
        e.contains("its dependencies pg (https://charts.example.com) are not in charts/"),
        "{e}"
    );
}

#[test]
fn the_tool_runs_with_a_timeout_and_its_stderr_is_shown() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    write(&root, "k/kustomization.yaml", "resources: []\n");
    let slow = Kustomize {
        command: Some(vec!["sh".into(), "-c".into(), "sleep 5".into()]),
        ..Kustomize::new(None, Duration::from_millis(200))
    };
    let e = slow
        .run(
            &root,
            &root.join("k"),
            "k/kustomization.yaml",
            1 << 20,
            false,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("did not finish within 0s (agent.render_timeout)"),
        "{e}"
    );
    let failing = Kustomize::new(Some("ls /nonexistent-berth"), Duration::from_secs(5));
    let e = failing
        .run(
            &root,
            &root.join("k"),
            "k/kustomization.yaml",
            1 << 20,
            false,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("k/kustomization.yaml: ls /nonexistent-berth failed"),
        "{e}"
    );
    assert!(e.contains("No such file or directory"), "{e}");
}

/// kustomize before 5.8.1 asks helm `version -c`, which helm 4 has not: the error says
/// what to change.
#[test]
fn an_old_kustomize_with_helm_4_says_what_to_change() {
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    write(&root, "k/kustomization.yaml", "helmCharts: []\n");
    let old = Kustomize {
        command: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo 'unable to run: helm version -c --short' >&2; exit 1".into(),
        ]),
        helm: Some("true".into()),
        ..Kustomize::new(None, Duration::from_secs(5))
    };
    let e = old
        .run(
            &root,
            &root.join("k"),
            "k/kustomization.yaml",
            1 << 20,
            true,
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kustomize before 5.8.1 inflates charts with helm 3 only: set [agent] kustomize to a newer kustomize, or [agent] helm to a helm 3"),
        "{e}"
    );
}
