//! Git: a branch moved back to an older (signed) commit is a replay, refused unless the
//! operator accepts it; annotated tags sync, and with `mode = "tag"` the tag's own
//! signature is what counts.

use berth::history::Outcome;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use crate::common::gpg::Gpg;
use crate::common::{self, Repo, Setup};

fn config_map(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: release\ndata:\n  value: \"{value}\"\n")
}

async fn value(client: &kube::Client, ns: &str) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    maps.get_opt("release").await.ok()??.data?.remove("value")
}

#[tokio::test]
async fn a_branch_moved_back_to_an_older_commit_is_refused() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "rewind").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("v1"));
    let first = repo.commit("v1");
    repo.write("cm.yaml", &config_map("v2"));
    repo.commit("v2");
    let setup = Setup::new(cp, "rewind", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("v2"));

    // The attacker force-pushes the branch back to the older (once good) commit.
    repo.git(&["reset", "-q", "--hard", &first]);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("is not an ancestor of")
            && said.contains("refusing to apply it (a force-push could replay any older commit)")
            && said.contains("berth sync --accept-rewind rewind"),
        "{said}"
    );
    assert_eq!(
        value(&client, &ns).await.as_deref(),
        Some("v2"),
        "nothing written"
    );
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
    assert!(record.history_rewritten.is_some());
    let (_, history, _) = setup.berth(&["history", "rewind"]);
    assert!(history.lines().count() >= 3, "{history}");

    // The operator means it, once.
    let (code, out, err) = setup.berth(&["sync", "--accept-rewind"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("v1"));

    // Or for good: allow_rewind = true.
    repo.write("cm.yaml", &config_map("v3"));
    repo.commit("v3");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    repo.git(&["reset", "-q", "--hard", &first]);
    // The configuration ends in the app's table.
    let text = std::fs::read_to_string(&setup.config).unwrap();
    std::fs::write(&setup.config, format!("{text}allow_rewind = true\n")).unwrap();
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("warning: previous commit"), "{out}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("v1"));
}

#[tokio::test]
async fn annotated_tags_sync_and_a_signed_tag_vouches_for_its_commit() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "tagged").await;
    let keys = tempfile::tempdir().unwrap();
    let gpg = Gpg::new();
    let trusted = gpg.key("Release <release@example.com>", "1y", None);
    let stranger = gpg.key("Stranger <stranger@example.com>", "1y", None);
    gpg.export(&trusted, &keys.path().join("release.asc"));
    let program = gpg.program(None);
    let program = program.to_str().unwrap();

    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("tagged"));
    repo.commit("unsigned commit");
    repo.git(&["tag", "-a", "annotated", "-m", "plain annotated tag"]);
    let tag = |name: &str, key: &str| {
        repo.git(&[
            "-c",
            &format!("gpg.program={program}"),
            "tag",
            "-s",
            "-u",
            key,
            name,
            "-m",
            name,
        ]);
    };
    tag("signed", &trusted);
    tag("by-stranger", &stranger);
    repo.git(&["tag", "lightweight"]);

    // An annotated tag syncs (it named a tag object, not a commit).
    let setup = Setup::new(cp, "tagged", &repo, &ns, "tag = \"annotated\"");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(value(&client, &ns).await.as_deref(), Some("tagged"));

    // mode = "tag": the tag's signature by a trusted key counts for the unsigned commit.
    let verify = |tag: &str| {
        format!(
            "tag = \"{tag}\"\n[app.verify]\nmode = \"tag\"\nopenpgp_keys = [\"{}/release.asc\"]",
            keys.path().display()
        )
    };
    let setup = Setup::new(cp, "tagged", &repo, &ns, &verify("signed"));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("signed by Release <release@example.com>"),
        "{out}"
    );
    for (tag, says) in [
        ("by-stranger", "which is not trusted"),
        (
            "lightweight",
            "tag lightweight is not a signed annotated tag",
        ),
        ("annotated", "tag annotated is not a signed annotated tag"),
    ] {
        let setup = Setup::new(cp, "tagged", &repo, &ns, &verify(tag));
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 1, "{tag}: {out}{err}");
        assert!(format!("{out}{err}").contains(says), "{tag}: {out}{err}");
    }
}

/// The bytes `dir`'s files take on disk (holes take none).
fn disk_mib(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut blocks = 0;
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
            let meta = entry.path().symlink_metadata().unwrap();
            blocks += meta.blocks();
            if meta.is_dir() {
                folders.push(entry.path());
            }
        }
    }
    (blocks * 512) >> 20
}

/// `berth sync` of `setup` under the suite's limits (1 GiB of address space, 60 s).
fn sync(setup: &Setup) -> crate::Bounded {
    let config = setup.config.to_string_lossy().into_owned();
    crate::bounded(
        setup.state.path(),
        &["sync", "--config", &config],
        1024,
        std::time::Duration::from_secs(60),
    )
}

#[tokio::test]
async fn a_gigabyte_blob_is_refused_by_its_size_unread_in_the_first_fetch_and_a_later_one() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "big-blob").await;
    let repo = Repo::new();
    let zeros = |name: &str| {
        let file = std::fs::File::create(repo.dir.path().join(name)).unwrap();
        file.set_len(1 << 30).unwrap();
    };
    repo.write("cm.yaml", &config_map("v1"));
    zeros("big.yaml");
    repo.commit("a gigabyte of zeros, 1 MB packed");
    let setup = Setup::new(cp, "big-blob", &repo, &ns, "");
    let refused = |run: crate::Bounded, file: &str| {
        assert_eq!(run.code, Some(1), "{}", run.out);
        assert!(
            run.out.contains(&format!(
                "{file}: file is 1073741824 bytes, over the 4194304-byte cap (agent.max_file_size)"
            )),
            "{}",
            run.out
        );
        let disk = disk_mib(setup.state.path());
        eprintln!(
            "{file}: {} MiB resident at most, {disk} MiB on disk, {:?}",
            run.peak_mib, run.took
        );
        assert!(run.peak_mib < 300, "{} MiB", run.peak_mib);
        assert!(disk < 200, "{disk} MiB on disk");
        assert!(
            run.took < std::time::Duration::from_secs(20),
            "{:?}",
            run.took
        );
    };
    refused(sync(&setup), "big.yaml");
    assert_eq!(value(&client, &ns).await, None, "nothing written");
    // Gone, then back under another name: the later fetch is bounded the same way.
    std::fs::remove_file(repo.dir.path().join("big.yaml")).unwrap();
    repo.commit("without it");
    let run = sync(&setup);
    assert_eq!(run.code, Some(0), "{}", run.out);
    zeros("again.yaml");
    repo.commit("again");
    refused(sync(&setup), "again.yaml");
}

/// Commits, beside `cm.yaml`, a folder `name` of 10^`levels` files: ten entries of one
/// blob, then levels of ten entries of the level below, from a few kilobytes of objects
/// (made with git's plumbing: an index of them would be the bomb).
fn commit_bomb(repo: &Repo, name: &str, levels: usize) {
    let cm = repo.git(&["rev-parse", "HEAD:cm.yaml"]);
    let mut below = ("100644 blob", cm.clone());
    for _ in 0..levels {
        let entries: String = (0..10)
            .map(|i| format!("{} {}\t{i}\n", below.0, below.1))
            .collect();
        below = ("040000 tree", repo.mktree(&entries));
    }
    let root = repo.mktree(&format!(
        "100644 blob {cm}\tcm.yaml\n040000 tree {}\t{name}\n",
        below.1
    ));
    repo.commit_tree(&root, "a bomb");
}

/// 10^5 files under the app's own path, below the whole tree's bound (2 × 10^5): counted
/// against `max_objects` before anything is written.
#[tokio::test]
async fn a_git_bomb_under_the_apps_path_is_refused_before_a_file_is_written() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "path-bomb").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("v1"));
    repo.commit("v1");
    commit_bomb(&repo, "deploy", 5);
    let setup = Setup::new(cp, "path-bomb", &repo, &ns, "path = \"deploy\"");
    let run = sync(&setup);
    assert_eq!(run.code, Some(1), "{}", run.out);
    assert!(
        run.out.contains(
            "the app's paths (deploy) hold more than 20000 files (agent.max_objects); nothing was written"
        ),
        "{}",
        run.out
    );
    let disk = disk_mib(setup.state.path());
    eprintln!(
        "git bomb under the app's path: {} MiB resident at most, {disk} MiB on disk, {:?}",
        run.peak_mib, run.took
    );
    let trees = std::fs::read_dir(setup.state.path().join("sources"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|r| {
            r.path()
                .join("trees")
                .read_dir()
                .is_ok_and(|mut d| d.next().is_some())
        })
        .count();
    assert_eq!(trees, 0, "no tree written");
    assert!(disk < 20, "{disk} MiB on disk");
    assert!(
        run.took < std::time::Duration::from_secs(20),
        "{:?}",
        run.took
    );
}

#[tokio::test]
async fn a_git_bomb_is_refused_before_a_file_is_written() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "git-bomb").await;
    let repo = Repo::new();
    repo.write("cm.yaml", &config_map("v1"));
    repo.commit("v1");
    commit_bomb(&repo, "bomb", 6);
    let setup = Setup::new(cp, "git-bomb", &repo, &ns, "path = \"cm.yaml\"");
    let run = sync(&setup);
    assert_eq!(run.code, Some(1), "{}", run.out);
    assert!(
        run.out
            .contains("holds more than 200000 files and folders (10 × agent.max_objects); nothing was written"),
        "{}",
        run.out
    );
    let disk = disk_mib(setup.state.path());
    eprintln!(
        "git bomb: {} MiB resident at most, {disk} MiB on disk, {:?}",
        run.peak_mib, run.took
    );
    assert!(run.peak_mib < 300, "{} MiB", run.peak_mib);
    assert!(disk < 200, "{disk} MiB on disk");
    assert!(
        run.took < std::time::Duration::from_secs(20),
        "{:?}",
        run.took
    );
    assert_eq!(value(&client, &ns).await, None, "nothing written");
}
