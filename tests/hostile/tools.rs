//! The confined runner: kustomize and helm bombs stopped by their memory limit, a chart's
//! links out of the checkout refused unread. `berth render` runs here under 8 GiB of
//! address space (so that only berth's own limit on the tools can stop them) and 60 s;
//! the peak resident set of berth and everything it ran is read back from the kernel.

use std::path::Path;
use std::time::Duration;

use crate::{bounded, Bounded};

const MEMORY_MIB: u64 = 8192;
const LIMIT: Duration = Duration::from_secs(60);

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn render(dir: &Path, path: &str) -> Bounded {
    bounded(dir, &["render", path], MEMORY_MIB, LIMIT)
}

fn helm_on_path() -> bool {
    berth::manifest::helm::program(None).is_ok()
}

/// A chart made of `templates` (name, text).
fn chart(dir: &Path, name: &str, templates: &[(&str, &str)]) {
    write(
        dir,
        &format!("{name}/Chart.yaml"),
        &format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
    );
    for (file, text) in templates {
        write(dir, &format!("{name}/templates/{file}"), text);
    }
}

const BENIGN_CM: &str =
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: benign\ndata: {k: v}\n";

/// `bomb` (a folder of `dir`) is refused within the time limit, saying `tool` (its
/// command as shown) was stopped at its memory limit, no process of it past 1 GiB
/// resident; `benign` renders.
fn stopped_at_the_limit_and_benign_renders(dir: &Path, tool: &str, bomb: &str, benign: &str) {
    let run = render(dir, bomb);
    assert_eq!(run.code, Some(1), "{}", run.out);
    eprintln!(
        "the largest resident set of berth and its tools: {} MiB",
        run.peak_mib
    );
    assert!(
        run.peak_mib < 1024,
        "a process reached {} MiB",
        run.peak_mib
    );
    let says = format!("{tool} exceeded its memory limit (640MiB) and was stopped");
    assert!(run.out.contains(&says), "missing {says:?} in {}", run.out);
    assert!(run.took < Duration::from_secs(30), "{:?}", run.took);
    let run = render(dir, benign);
    assert_eq!(run.code, Some(0), "{}", run.out);
    assert!(run.out.contains("name: benign"), "{}", run.out);
}

#[test]
fn a_helm_template_bomb_is_stopped_by_its_memory_limit_and_a_benign_chart_renders() {
    if !helm_on_path() {
        eprintln!("skipped: no helm on PATH (scripts/test puts one there)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    chart(
        dir.path(),
        "bomb",
        &[(
            "bomb.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  x: \"{{ range until 400000000 }}lollollollollollollol{{ end }}\"\n",
        )],
    );
    chart(dir.path(), "benign", &[("cm.yaml", BENIGN_CM)]);
    stopped_at_the_limit_and_benign_renders(dir.path(), "helm template", "bomb", "benign");
}

#[test]
fn a_kustomize_alias_bomb_is_stopped_by_its_memory_limit_and_a_benign_one_renders() {
    let dir = tempfile::tempdir().unwrap();
    // 598 bytes: nine levels of nine aliases, 387 million strings once expanded.
    let mut bomb = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\n");
    bomb.push_str(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (level, below) in ["b", "c", "d", "e", "f", "g", "h", "i"]
        .iter()
        .zip("abcdefgh".chars())
    {
        let refs = vec![format!("*{below}"); 9].join(",");
        bomb.push_str(&format!("{level}: &{level} [{refs}]\n"));
    }
    write(dir.path(), "bomb/lol.yaml", &bomb);
    write(
        dir.path(),
        "bomb/kustomization.yaml",
        "resources: [lol.yaml]\n",
    );
    write(dir.path(), "benign/cm.yaml", BENIGN_CM);
    write(
        dir.path(),
        "benign/kustomization.yaml",
        "resources: [cm.yaml]\n",
    );
    // `kubectl kustomize`, or `kustomize build` where kustomize is installed.
    let kustomize = berth::manifest::Kustomize::new(None, LIMIT)
        .command()
        .join(" ");
    stopped_at_the_limit_and_benign_renders(dir.path(), &kustomize, "bomb", "benign");
}

#[test]
fn a_charts_link_to_a_host_file_is_refused_unread() {
    if !helm_on_path() {
        eprintln!("skipped: no helm on PATH (scripts/test puts one there)");
        return;
    }
    let host = tempfile::tempdir().unwrap();
    write(host.path(), "kubeconfig", "token: host-secret-5e2a\n");
    let dir = tempfile::tempdir().unwrap();
    chart(
        dir.path(),
        "leak",
        &[(
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: leak}\ndata:\n  kc: {{ .Files.Get \"files/kc\" | quote }}\n",
        )],
    );
    std::fs::create_dir_all(dir.path().join("leak/files")).unwrap();
    std::os::unix::fs::symlink(
        host.path().join("kubeconfig"),
        dir.path().join("leak/files/kc"),
    )
    .unwrap();
    let run = render(dir.path(), "leak");
    assert_eq!(run.code, Some(1), "{}", run.out);
    assert!(
        run.out
            .contains("leak/files/kc resolves outside the repository; refused unread"),
        "{}",
        run.out
    );
    assert!(!run.out.contains("host-secret-5e2a"), "{}", run.out);
}
