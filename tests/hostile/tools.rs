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

/// The pids of processes whose command line holds `marker`.
fn running_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat.contains(") Z ");
        if !zombie && String::from_utf8_lossy(&cmdline).contains(marker) {
            found.push(pid);
        }
    }
    found
}

/// Finding 10: a kustomize that starts a `setsid` child holding its stdout. Before, the
/// process-group kill missed the child, the render waited for it (45.6 s against
/// `render_timeout = "10s"`) and took the output. Now the child ends with the tool (a
/// quick tool: its output taken at once), or at the timeout with it (a tool that hangs:
/// refused within render_timeout + 15 s); none outlives the sync.
#[tokio::test]
async fn a_tools_setsid_child_ends_with_it_and_the_timeout_holds() {
    let Some(cp) = crate::common::control_plane() else {
        return;
    };
    let client = crate::common::client(cp).await;
    let ns = crate::common::namespace(&client, "setsid-tool").await;
    for (case, then) in [("quick", ""), ("hangs", "exec sleep 600\n")] {
        let marker = format!("{}.{}", 7000 + std::process::id() % 1000, case.len());
        let scripts = tempfile::tempdir().unwrap();
        let script = scripts.path().join("kustomize");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nsetsid sleep {marker} &\nprintf 'apiVersion: v1\\nkind: ConfigMap\\nmetadata:\\n  name: {case}\\ndata: {{k: v}}\\n'\n{then}"
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let repo = crate::common::Repo::new();
        repo.write("kustomization.yaml", "resources: []\n");
        repo.commit("a kustomization");
        let setup = crate::common::Setup::new(cp, &format!("setsid-{case}"), &repo, &ns, "");
        let text = std::fs::read_to_string(&setup.config).unwrap().replace(
            "[cluster]",
            &format!(
                "kustomize = \"{}\"\nrender_timeout = \"10s\"\n[cluster]",
                script.display()
            ),
        );
        std::fs::write(&setup.config, text).unwrap();
        let config = setup.config.to_string_lossy().into_owned();
        let run = bounded(
            setup.state.path(),
            &["sync", "--config", &config],
            MEMORY_MIB,
            LIMIT,
        );
        eprintln!(
            "measured: a setsid child, the tool {case}: the sync took {:?}",
            run.took
        );
        let left = running_with(&format!("sleep {marker}"));
        assert!(left.is_empty(), "{case}: {left:?} outlived the sync");
        match case {
            "quick" => {
                assert_eq!(run.code, Some(0), "{}", run.out);
                assert!(run.took < Duration::from_secs(10), "{:?}", run.took);
            }
            _ => {
                assert_eq!(run.code, Some(1), "{}", run.out);
                assert!(run.out.contains("did not finish within 10s"), "{}", run.out);
                assert!(run.took < Duration::from_secs(25), "{:?}", run.took);
            }
        }
    }
}
