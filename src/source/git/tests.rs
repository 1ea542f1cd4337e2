//! Tests of the git source against real repositories made with the git CLI.
use super::fetch::ssh_port;
use super::*;
use crate::config::AppConfig;

#[test]
fn redaction_hides_user_info_and_query_values() {
    assert_eq!(
        redact_url("https://user:s3cret@git.example.com/a.git"),
        "https://***@git.example.com/a.git"
    );
    assert_eq!(
        redact_url("https://git.example.com/a.git?token=s3cret&ref=main"),
        "https://git.example.com/a.git?token=***&ref=***"
    );
    assert_eq!(
        redact_url("https://git.example.com/a@b.git"),
        "https://git.example.com/a@b.git"
    );
    assert_eq!(
        redact_url("git@github.com:org/repo.git"),
        "git@github.com:org/repo.git"
    );
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn origin() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    git(d.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(d.path().join("a.yaml"), "v: 1\n").unwrap();
    git(d.path(), &["add", "."]);
    git(d.path(), &["commit", "-qm", "one"]);
    git(d.path(), &["tag", "v1"]);
    std::fs::write(d.path().join("a.yaml"), "v: 2\n").unwrap();
    git(d.path(), &["commit", "-qam", "two"]);
    d
}

fn app(repo: &Path, extra: &str) -> AppConfig {
    crate::config::test_app(&format!(
        "name = \"t\"\nrepo = \"{}\"\n{extra}",
        repo.display()
    ))
}

fn content(c: &Checkout) -> String {
    std::fs::read_to_string(c.dir.join("a.yaml")).unwrap()
}

#[test]
fn an_annotated_tag_is_peeled_to_its_commit() {
    let o = origin();
    git(
        o.path(),
        &["tag", "-a", "v1-annotated", "-m", "release", "v1"],
    );
    let state = tempfile::tempdir().unwrap();
    let tag = fetch(
        &app(o.path(), "tag = \"v1-annotated\""),
        state.path(),
        TreeLimits::default(),
    )
    .unwrap();
    assert_eq!(content(&tag), "v: 1\n");
    assert_eq!(tag.commit.sha, git(o.path(), &["rev-parse", "v1"]));
    let object = git(o.path(), &["rev-parse", "v1-annotated"]);
    assert_eq!(tag.tag.as_deref(), Some(object.as_str()));
    let light = fetch(
        &app(o.path(), "tag = \"v1\""),
        state.path(),
        TreeLimits::default(),
    )
    .unwrap();
    assert_eq!(light.tag, None, "a lightweight tag names the commit itself");
}

#[test]
fn a_failed_checkout_leaves_no_folder_behind() {
    let o = origin();
    // A commit whose file name no file system takes (over 255 bytes): git stores it,
    // the checkout fails.
    std::fs::write(o.path().join("blob"), "v: 3\n").unwrap();
    let blob = git(o.path(), &["hash-object", "-w", "blob"]);
    let mut mktree = std::process::Command::new("git")
        .arg("mktree")
        .current_dir(o.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let entry = format!("100644 blob {blob}\t{}.yaml\n", "x".repeat(300));
    mktree
        .stdin
        .take()
        .unwrap()
        .write_all(entry.as_bytes())
        .unwrap();
    let out = mktree.wait_with_output().unwrap();
    let tree = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let commit = git(o.path(), &["commit-tree", &tree, "-m", "long name"]);
    git(o.path(), &["update-ref", "refs/heads/long", &commit]);
    let state = tempfile::tempdir().unwrap();
    let e = fetch(
        &app(o.path(), "branch = \"long\""),
        state.path(),
        TreeLimits::default(),
    )
    .unwrap_err();
    let said = crate::Chain(&e).to_string();
    assert!(
        said.contains("cannot be written: File name too long"),
        "{said}"
    );
    let trees = source_dir(state.path(), &o.path().display().to_string()).join("trees");
    let left: Vec<_> = std::fs::read_dir(&trees)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn branch_tag_and_commit_refs() {
    let o = origin();
    let state = tempfile::tempdir().unwrap();
    let head = fetch(&app(o.path(), ""), state.path(), TreeLimits::default()).unwrap();
    assert_eq!(
        (content(&head).as_str(), head.commit.subject.as_str()),
        ("v: 2\n", "two")
    );
    let tag = fetch(
        &app(o.path(), "tag = \"v1\""),
        state.path(),
        TreeLimits::default(),
    )
    .unwrap();
    assert_eq!(content(&tag), "v: 1\n");
    let first = git(o.path(), &["rev-parse", "v1"]);
    let pinned = fetch(
        &app(o.path(), &format!("commit = \"{first}\"")),
        state.path(),
        TreeLimits::default(),
    )
    .unwrap();
    assert_eq!(pinned.commit.sha, first);
    assert_eq!(pinned.commit.author, "T <t@example.com>");
    let e = fetch(
        &app(o.path(), "tag = \"v9\""),
        state.path(),
        TreeLimits::default(),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("tag v9 not found in"), "{e}");
}

#[test]
fn a_corrupted_cache_is_cloned_again() {
    let o = origin();
    let state = tempfile::tempdir().unwrap();
    let a = app(o.path(), "branch = \"main\"");
    fetch(&a, state.path(), TreeLimits::default()).unwrap();
    let git = source_dir(state.path(), &a.repo).join("git");
    std::fs::remove_dir_all(git.join("objects")).unwrap();
    std::fs::create_dir(git.join("objects")).unwrap();
    std::fs::write(git.join("HEAD"), "garbage").unwrap();
    let again = fetch(&a, state.path(), TreeLimits::default()).unwrap();
    assert_eq!(content(&again), "v: 2\n");
}

#[test]
fn an_unreachable_remote_is_an_error_naming_it() {
    let state = tempfile::tempdir().unwrap();
    let a = app(Path::new("/nonexistent/repo"), "branch = \"main\"");
    let e = fetch(&a, state.path(), TreeLimits::default())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("cannot fetch /nonexistent/repo"), "{e}");
}

#[test]
fn url_kinds() {
    assert!(is_scp_like("git@github.com:org/repo.git"));
    assert!(!is_scp_like("/srv/git/repo"));
    assert!(!is_scp_like("./a@b:c/d"));
    assert_eq!(
        local_path("file:///srv/repo"),
        Some(PathBuf::from("/srv/repo"))
    );
    assert_eq!(local_path("https://x/y"), None);
    assert_eq!(ssh_port("ssh://git@host:2222/repo.git"), 2222);
    assert_eq!(ssh_port("git@host:repo.git"), 22);
}

#[test]
fn the_paths_digest_covers_what_their_links_point_at() {
    // The cache's layout: the repository's git folder in `source/git`.
    let source = tempfile::tempdir().unwrap();
    let d = tempfile::tempdir().unwrap();
    git(d.path(), &["init", "-q", "-b", "main"]);
    std::os::unix::fs::symlink(d.path().join(".git"), source.path().join("git")).unwrap();
    std::fs::create_dir_all(d.path().join("app")).unwrap();
    std::fs::create_dir_all(d.path().join("shared")).unwrap();
    std::fs::write(d.path().join("shared/cm.yaml"), "v: 1\n").unwrap();
    std::fs::write(d.path().join("other.yaml"), "v: 1\n").unwrap();
    std::os::unix::fs::symlink("../shared/cm.yaml", d.path().join("app/cm.yaml")).unwrap();
    git(d.path(), &["add", "."]);
    git(d.path(), &["commit", "-qm", "one"]);
    let digest = || {
        let sha = git(d.path(), &["rev-parse", "HEAD"]);
        paths_digest(source.path(), &sha, &["app".to_string()]).unwrap()
    };
    let first = digest();
    std::fs::write(d.path().join("other.yaml"), "v: 2\n").unwrap();
    git(d.path(), &["commit", "-qam", "elsewhere"]);
    assert_eq!(digest(), first, "a file no link reaches changes nothing");
    std::fs::write(d.path().join("shared/cm.yaml"), "v: 2\n").unwrap();
    git(d.path(), &["commit", "-qam", "the link's target"]);
    assert_ne!(digest(), first, "the link's target changed");
}

#[test]
fn a_file_is_written_once_whatever_the_commits_that_hold_it() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let o = origin();
    std::fs::write(o.path().join("same.yaml"), "kept: yes\n").unwrap();
    // The blob of a.yaml ("v: 2"), as a file that runs.
    std::fs::write(o.path().join("tool.sh"), "v: 2\n").unwrap();
    std::fs::set_permissions(o.path().join("tool.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    git(o.path(), &["add", "."]);
    git(o.path(), &["commit", "-qm", "three"]);
    let state = tempfile::tempdir().unwrap();
    let fetched = || fetch(&app(o.path(), ""), state.path(), TreeLimits::default()).unwrap();
    let first = fetched();
    std::fs::write(o.path().join("a.yaml"), "v: 3\n").unwrap();
    git(o.path(), &["commit", "-qam", "four"]);
    let second = fetched();
    assert_eq!(
        (content(&first), content(&second)),
        ("v: 2\n".into(), "v: 3\n".into())
    );
    let meta = |c: &Checkout, file: &str| std::fs::symlink_metadata(c.dir.join(file)).unwrap();
    assert_eq!(
        meta(&first, "same.yaml").ino(),
        meta(&second, "same.yaml").ino()
    );
    assert_ne!(meta(&first, "a.yaml").ino(), meta(&second, "a.yaml").ino());
    // One blob, a file that runs and one that does not: two files.
    assert_eq!(meta(&second, "tool.sh").mode() & 0o111, 0o100);
    assert_eq!(meta(&first, "a.yaml").mode() & 0o111, 0);
    assert_eq!(
        std::fs::read_to_string(second.dir.join("tool.sh")).unwrap(),
        "v: 2\n"
    );

    // A store's entry that is not a plain file (planted in state_dir) is not linked.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "stolen\n").unwrap();
    std::fs::write(o.path().join("new.yaml"), "v: 5\n").unwrap();
    let id = git(o.path(), &["hash-object", "-w", "new.yaml"]);
    let blobs = second.source.join("blobs");
    std::os::unix::fs::symlink(outside.path().join("secret"), blobs.join(&id)).unwrap();
    git(o.path(), &["add", "."]);
    git(o.path(), &["commit", "-qm", "five"]);
    let third = fetched();
    let new = third.dir.join("new.yaml");
    assert!(std::fs::symlink_metadata(&new).unwrap().is_file());
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "v: 5\n");

    // Once old trees go, so do the blobs' files that only they held.
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let mut trees = vec![first.dir.clone(), second.dir.clone(), third.dir.clone()];
    for n in 6..10 {
        std::fs::write(o.path().join("a.yaml"), format!("v: {n}\n")).unwrap();
        git(o.path(), &["commit", "-qam", "more"]);
        // Each tree last used an hour ago, in the order they were written.
        for (age, tree) in trees.iter().enumerate().filter(|(_, t)| t.exists()) {
            let used = hour_ago + std::time::Duration::from_secs(age as u64);
            std::fs::File::open(tree)
                .unwrap()
                .set_modified(used)
                .unwrap();
        }
        trees.push(fetched().dir);
    }
    assert!(!first.dir.exists() && !second.dir.exists());
    let left: Vec<_> = std::fs::read_dir(&blobs).unwrap().flatten().collect();
    assert!(
        left.iter().all(|e| e.metadata().unwrap().nlink() > 1),
        "{left:?}"
    );
    let v1 = git(o.path(), &["rev-parse", "HEAD~5:a.yaml"]);
    assert!(
        !blobs.join(v1).exists(),
        "the blob of v: 3, in no tree kept"
    );
    assert!(blobs.join(id).is_file(), "new.yaml, in every tree kept");
}

#[test]
fn a_large_commit_links_every_unchanged_file() {
    use std::os::unix::fs::MetadataExt;
    // Enough files for the links to be spread over the cores; none holds what another
    // file does (one blob in two places is one file in the store).
    let o = origin();
    for f in 0..2500 {
        let folder = o.path().join(format!("files/{:02}", f % 50));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(format!("f-{f}.yaml")), format!("n: {f}\n")).unwrap();
    }
    git(o.path(), &["add", "."]);
    git(o.path(), &["commit", "-qm", "many"]);
    let state = tempfile::tempdir().unwrap();
    let fetched = || fetch(&app(o.path(), ""), state.path(), TreeLimits::default()).unwrap();
    let first = fetched();
    std::fs::write(o.path().join("files/07/f-7.yaml"), "v: changed\n").unwrap();
    git(o.path(), &["commit", "-qam", "one changed"]);
    let second = fetched();
    for f in 0..2500 {
        let file = format!("files/{:02}/f-{f}.yaml", f % 50);
        let (a, b) = (first.dir.join(&file), second.dir.join(&file));
        let same = std::fs::metadata(&a).unwrap().ino() == std::fs::metadata(&b).unwrap().ino();
        let expected = if f == 7 {
            "v: changed\n".to_string()
        } else {
            format!("n: {f}\n")
        };
        assert_eq!(std::fs::read_to_string(&b).unwrap(), expected, "{file}");
        assert_eq!(same, f != 7, "{file}");
    }
}
