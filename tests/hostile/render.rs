//! Bounded inputs: files that would cost far more to decode than their size, and
//! kustomizations that reach outside the checkout. Each is rendered by `berth render`
//! under 1 GiB of address space and a 20 s limit.

use std::path::Path;
use std::time::Duration;

use crate::{bounded, Bounded};

const MEMORY_MIB: u64 = 1024;
const LIMIT: Duration = Duration::from_secs(20);

fn render(dir: &Path, path: &str) -> Bounded {
    bounded(dir, &["render", path], MEMORY_MIB, LIMIT)
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Fails within the bounds, with `says` in its output.
fn refused(run: &Bounded, says: &str) {
    assert_eq!(run.code, Some(1), "took {:?}: {}", run.took, run.out);
    assert!(run.out.contains(says), "missing {says:?} in {}", run.out);
}

/// One anchor of a 1000-item list referenced `n` times.
fn fan_out(n: usize) -> String {
    let items = vec!["lol"; 1000].join(", ");
    let refs = vec!["*a"; n].join(", ");
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: fan}}\nx: &a [{items}]\ndata: [{refs}]\n")
}

#[test]
fn alias_fan_out_is_refused_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    // 8 KB, 24 KB and 404 KB of YAML: 324 MB, 1.58 GB and over 23.7 GB before the bound.
    for n in [1_700, 5_000, 100_000] {
        write(dir.path(), "fan.yaml", &fan_out(n));
        let run = render(dir.path(), "fan.yaml");
        refused(
            &run,
            "fan.yaml:4 (document 1): the document expands past 8388608 bytes once decoded",
        );
        assert!(run.took < Duration::from_secs(5), "{n}: {:?}", run.took);
    }
}

#[test]
fn many_documents_each_under_the_document_bound_stop_at_the_render_bound() {
    // 40 documents of 400 aliases each (6.8 MB decoded, under the 8 MiB document bound),
    // 267 KB in all: 1.5 GB and 22 s before the render's bound grew with what it read.
    let items = vec!["lol"; 1000].join(", ");
    let refs = vec!["*a"; 400].join(", ");
    let docs: Vec<String> = (0..40)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: fan{i}}}\nx: &a [{items}]\nd: [{refs}]\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "docs.yaml", &docs.join("---\n"));
    let run = render(dir.path(), "docs.yaml");
    refused(
        &run,
        "the app's manifests expand past 9455752 bytes once decoded (4 bytes for each byte read, plus 8 MiB); reading stopped here",
    );
    assert!(run.took < Duration::from_secs(5), "{:?}", run.took);
}

#[test]
fn deep_flow_nesting_is_refused_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    for depth in [50_000, 100_000, 200_000] {
        let text = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        write(dir.path(), "deep.yaml", &text);
        let run = render(dir.path(), "deep.yaml");
        refused(
            &run,
            "deep.yaml:4: flow collections ([ or {) nested deeper than 128; refused unparsed",
        );
        // Was 5 s, 22 s and 86 s, paid on every sync.
        assert!(run.took < Duration::from_secs(2), "{depth}: {:?}", run.took);
    }
}

#[test]
fn many_tiny_objects_stop_at_the_object_cap() {
    let dir = tempfile::tempdir().unwrap();
    // 59 MiB of tiny objects (under the 64 MiB app cap), in files under the 4 MiB file cap:
    // was 3.4 GB and 37 s.
    let object = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
    let file = object.repeat((3 << 20) / object.len());
    for i in 0..(59 / 3) {
        write(dir.path(), &format!("many/{i:02}.yaml"), &file);
    }
    let run = render(dir.path(), "many");
    refused(
        &run,
        "the app holds more than 20000 objects (agent.max_objects); reading stopped here",
    );
    assert!(run.took < Duration::from_secs(10), "{:?}", run.took);
}

#[test]
fn duplicate_keys_are_refused_as_kubectl_does() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "dup.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  mode: safe\n  other: x\n  mode: unsafe\n",
    );
    let run = render(dir.path(), "dup.yaml");
    refused(
        &run,
        "dup.yaml:6 (document 1): key \"mode\" appears twice in one mapping (lines 6 and 8)",
    );
}

#[test]
fn names_that_would_change_a_request_path_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "path.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ../../etc/passwd\n",
    );
    let run = render(dir.path(), "path.yaml");
    refused(&run, "metadata.name may not be \".\" or \"..\", hold \"/\"");
    // Markup in a name: refused at render, naming the file, not first by the API server.
    write(
        dir.path(),
        "path.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x<img src=x>\n",
    );
    let run = render(dir.path(), "path.yaml");
    refused(
        &run,
        "path.yaml:1 (document 1): ConfigMap \"x<img src=x>\": metadata.name must be a DNS subdomain",
    );
}

/// A git repository at `dir` (kustomize's root is the repository it is in).
fn repository(dir: &Path) {
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn a_kustomization_linked_out_of_the_checkout_is_refused_unread() {
    let outside = tempfile::tempdir().unwrap();
    write(
        outside.path(),
        "kustomization.yaml",
        "resources: [host-secret-9f1c]\n",
    );
    let dir = tempfile::tempdir().unwrap();
    repository(dir.path());
    for (app, target) in [
        ("host", outside.path().join("kustomization.yaml")),
        ("pagemap", "/proc/self/pagemap".into()),
    ] {
        std::fs::create_dir_all(dir.path().join(app)).unwrap();
        std::os::unix::fs::symlink(target, dir.path().join(app).join("kustomization.yaml"))
            .unwrap();
        let run = render(dir.path(), app);
        refused(
            &run,
            "kustomization.yaml resolves outside the repository; refused unread",
        );
        assert!(!run.out.contains("host-secret-9f1c"), "{}", run.out);
        assert!(run.took < Duration::from_secs(5), "{:?}", run.took);
    }
    // In the checkout but over the per-file cap: not read whole.
    write(
        dir.path(),
        "big/kustomization.yaml",
        &format!("resources: []\n#{}\n", "x".repeat(200 << 20)),
    );
    let run = render(dir.path(), "big");
    refused(
        &run,
        "over the 4194304-byte cap (agent.max_file_size); refused unread",
    );
}

#[test]
fn folders_named_like_remote_bases_are_refused_as_remote() {
    let dir = tempfile::tempdir().unwrap();
    repository(dir.path());
    for lookalike in ["x@127.0.0.1:repo.git", "github.com:org/repo"] {
        write(
            dir.path(),
            &format!("app/{lookalike}/kustomization.yaml"),
            "resources: []\n",
        );
        write(
            dir.path(),
            "app/kustomization.yaml",
            &format!("resources: [\"{lookalike}\"]\n"),
        );
        let run = render(dir.path(), "app");
        refused(
            &run,
            &format!("resources: remote resource \"{lookalike}\" refused (set allow_remote_bases = true in the app to allow it)"),
        );
    }
}

#[test]
fn sixteen_thousand_bad_documents_give_a_bounded_output() {
    // 192 KB: 16,000 errors before they were capped (175 MB of output, 604 MB of memory).
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "x.yaml", &"kind: X\n---\n".repeat(16_000));
    let run = render(dir.path(), "x.yaml");
    refused(&run, "16000 errors:");
    assert!(
        run.out
            .contains("… and 15900 more errors (the first 100 are shown)"),
        "{}",
        &run.out[run.out.len().saturating_sub(500)..]
    );
    assert!(run.out.len() < 1 << 20, "{} bytes of output", run.out.len());
    assert!(run.peak_mib < 300, "{} MiB", run.peak_mib);
    assert!(run.took < Duration::from_secs(10), "{:?}", run.took);
}

#[test]
fn an_apostrophe_in_a_plain_scalar_does_not_hide_deep_nesting() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: [it's, {}\n",
        "[".repeat(200_000)
    );
    write(dir.path(), "deep.yaml", &text);
    let run = render(dir.path(), "deep.yaml");
    refused(
        &run,
        "deep.yaml:4: flow collections ([ or {) nested deeper than 128; refused unparsed",
    );
    assert!(run.took < Duration::from_secs(5), "{:?}", run.took);
}

/// A sops fixture (tests/fixtures/sops/config.enc.yaml, a ConfigMap of sops 1.18) with its metadata
/// changed by `edit`, rendered with both of the fixture's keys.
fn render_sops(edit: impl FnOnce(&mut serde_yaml::Mapping)) -> Bounded {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sops");
    let text = std::fs::read_to_string(format!("{fixtures}/config.enc.yaml")).unwrap();
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    edit(doc["sops"].as_mapping_mut().unwrap());
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "config.enc.yaml",
        &serde_yaml::to_string(&doc).unwrap(),
    );
    let age = format!("--age-key-file={fixtures}/age.key");
    let pgp = format!("--openpgp-key-file={fixtures}/pgp-secret.asc");
    bounded(
        dir.path(),
        &["render", "config.enc.yaml", &age, &pgp],
        MEMORY_MIB,
        LIMIT,
    )
}

#[test]
fn sops_metadata_that_would_cost_or_mislead_is_refused() {
    // An OpenPGP data key of 3.4 MB (the zlib bomb's size): refused by its length, unread.
    let run = render_sops(|sops| {
        let mut entry = serde_yaml::Mapping::new();
        entry.insert("fp".into(), "B0A1C2D3E4F5".into());
        entry.insert("enc".into(), "A".repeat(3_400_000).into());
        sops["pgp"] = serde_yaml::Value::Sequence(vec![entry.into()]);
    });
    refused(
        &run,
        "bytes armored, more than a data key's 16384; refused unread",
    );
    assert!(run.took < Duration::from_secs(10), "{:?}", run.took);
    assert!(run.peak_mib < 300, "{} MiB", run.peak_mib);
    // 6,000 age stanzas (0.9 MB): refused by their length before age parses them.
    let run = render_sops(|sops| {
        let age = sops["age"].as_sequence_mut().unwrap();
        let stanza = "-> X25519 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n";
        age[0]["enc"] = format!(
            "-----BEGIN AGE ENCRYPTED FILE-----\n{}\n-----END AGE ENCRYPTED FILE-----\n",
            stanza.repeat(6000)
        )
        .into();
    });
    refused(&run, "more than a data key's 16384; refused unread");
    assert!(run.took < Duration::from_secs(3), "{:?}", run.took);
    // Its MAC removed: refused as sops refuses it, never applied with ENC[…] as values.
    let run = render_sops(|sops| {
        sops.remove("mac");
    });
    refused(&run, "it has no mac, so its values cannot be checked");
    assert!(!run.out.contains("ENC["), "{}", run.out);
}
