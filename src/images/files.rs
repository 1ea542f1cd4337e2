//! The files of a commit that hold markers: YAML files under the paths of the apps whose
//! repository it is, each within bounds, read from the repository's objects (no tree is
//! written out). A marked file the app does not render (its `include` and `exclude` leave
//! it out, or it is not YAML) is left alone, with a warning.
use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};
use serde::Deserialize;

use crate::config::AppConfig;

/// The largest file read for markers (a larger one is not inflated).
const MAX_FILE: usize = 1 << 20;
/// The most files read in one commit.
const MAX_FILES: usize = 20_000;
/// The most marked text kept of one commit.
const MAX_MARKED: usize = 64 << 20;

/// A file with markers, and the app whose path holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkedFile {
    pub app: String,
    /// From the repository's root.
    pub path: String,
    pub text: String,
}

/// The marked files of `commit` under the paths of `apps` (a file under two apps' paths
/// once, for the first).
///
/// # Errors
/// The commit or its tree cannot be read.
pub fn marked_files(
    repo: &Repository,
    commit: Oid,
    apps: &[&AppConfig],
) -> Result<Vec<MarkedFile>, git2::Error> {
    let tree = repo.find_commit(commit)?.tree()?;
    let mut found: Vec<MarkedFile> = Vec::new();
    let mut read = 0;
    let mut kept = 0;
    let odb = repo.odb()?;
    tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
        let Some(path) = yaml_path(dir, entry) else {
            return TreeWalkResult::Ok;
        };
        let Some((app, rel)) = apps.iter().find_map(|a| Some((*a, under(a, &path)?))) else {
            return TreeWalkResult::Ok;
        };
        read += 1;
        if read > MAX_FILES {
            tracing::warn!(commit = %commit, "more than {MAX_FILES} YAML files: the rest are not read for image markers");
            return TreeWalkResult::Abort;
        }
        if odb.read_header(entry.id()).is_ok_and(|(size, _)| size > MAX_FILE) {
            tracing::warn!(app = %app.name, file = %path, "image markers not read: the file is over {MAX_FILE} bytes");
            return TreeWalkResult::Ok;
        }
        let Ok(blob) = repo.find_blob(entry.id()) else {
            return TreeWalkResult::Ok;
        };
        if memchr::memmem::find(blob.content(), b"$imagepolicy").is_none() {
            return TreeWalkResult::Ok;
        }
        kept += blob.size();
        if kept > MAX_MARKED {
            tracing::warn!(commit = %commit, "more than {MAX_MARKED} bytes of marked files: the rest are not read for image markers");
            return TreeWalkResult::Abort;
        }
        let Ok(text) = std::str::from_utf8(blob.content()) else {
            return TreeWalkResult::Ok;
        };
        if super::markers::markers(text).is_empty() {
            return TreeWalkResult::Ok;
        }
        match left_out(app, rel, text) {
            None => found.push(MarkedFile {
                app: app.name.clone(),
                path,
                text: text.to_string(),
            }),
            Some(why) => tracing::warn!(app = %app.name, file = %path, "image markers ignored: {why}"),
        }
        TreeWalkResult::Ok
    })?;
    Ok(found)
}

/// The path of `entry`, in the folder `dir`, when it is a YAML file.
fn yaml_path(dir: &str, entry: &git2::TreeEntry<'_>) -> Option<String> {
    let name = entry
        .name()
        .ok()
        .filter(|_| entry.kind() == Some(ObjectType::Blob))?;
    (name.ends_with(".yaml") || name.ends_with(".yml")).then(|| format!("{dir}{name}"))
}

/// `path` relative to the one of `app`'s paths that holds it (a path that is the file
/// itself: its name), the paths read as the render reads them.
fn under<'p>(app: &AppConfig, path: &'p str) -> Option<&'p str> {
    app.path.iter().find_map(|prefix| {
        let prefix = prefix.trim_matches('/').trim_start_matches("./");
        if prefix.is_empty() || prefix == "." {
            return Some(path);
        }
        if path == prefix {
            return path.rsplit('/').next();
        }
        path.strip_prefix(prefix)?.strip_prefix('/')
    })
}

/// Why the app does not render the file, if it does not: its globs leave it out, or it
/// is not YAML.
fn left_out(app: &AppConfig, rel: &str, text: &str) -> Option<String> {
    let include = app.include.set().ok().flatten();
    let exclude = app.exclude.set().ok().flatten();
    if include.is_some_and(|g| !g.is_match(rel)) || exclude.is_some_and(|g| g.is_match(rel)) {
        return Some("the app's include and exclude leave the file out".into());
    }
    for document in serde_yaml::Deserializer::from_str(text) {
        if let Err(e) = serde_yaml::Value::deserialize(document) {
            return Some(format!("the file is not YAML ({e})"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_app;

    const MARKED: &str = "image: r.example.com/shop:1.0.0 # {\"$imagepolicy\": \"shop\"}\n";

    /// A commit holding `files`.
    fn commit(repo: &Repository, files: &[(&str, &str)]) -> Oid {
        let mut index = repo.index().unwrap();
        for (path, text) in files {
            let blob = repo.blob(text.as_bytes()).unwrap();
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100_644,
                uid: 0,
                gid: 0,
                file_size: text.len() as u32,
                id: blob,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index.add(&entry).unwrap();
        }
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let who = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(None, &who, &who, "files", &tree, &[]).unwrap()
    }

    #[test]
    fn each_app_reads_the_markers_of_its_own_folder_alone() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let head = commit(
            &repo,
            &[
                ("teams/a/web.yaml", MARKED),
                ("teams/a/left-out.yaml", MARKED),
                ("teams/a/broken.yaml", &format!("{MARKED}: [\n")),
                ("teams/ab/web.yaml", MARKED),
                ("teams/b/web.yaml", MARKED),
                ("teams/b/plain.yaml", "image: r.example.com/shop:1.0.0\n"),
                ("outside.yaml", MARKED),
            ],
        );
        let a = test_app(
            "name = \"a\"\nrepo = \"/r\"\npath = \"teams/a\"\nnamespace = \"a\"\nexclude = [\"left-out.yaml\"]",
        );
        let b = test_app("name = \"b\"\nrepo = \"/r\"\npath = \"./teams/b/\"\nnamespace = \"b\"");
        let c = test_app("name = \"c\"\nrepo = \"/r\"\npath = \"outside.yaml\"\nnamespace = \"c\"");
        let found = marked_files(&repo, head, &[&a, &b, &c]).unwrap();
        let found: Vec<(&str, &str)> = (found.iter())
            .map(|f| (f.app.as_str(), f.path.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("c", "outside.yaml"),
                ("a", "teams/a/web.yaml"),
                ("b", "teams/b/web.yaml")
            ]
        );
    }
}
