//! The folders of a checkout that match an app set's `folders`: walked from the root no
//! deeper than the globs reach, links not followed, `.git` skipped, and at most
//! [`MAX_FOLDERS`] looked at, so that a repository of millions of folders costs a bounded
//! walk and a clear error.

use std::path::Path;

use globset::GlobSet;

/// The most folders looked at for one set: a set of 10,000 apps, with room (the walk of
/// 50,000 folders takes tens of milliseconds).
pub const MAX_FOLDERS: usize = 50_000;

/// Why the folders could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// A folder could not be read.
    #[error("reading {path}: {cause}")]
    Read {
        /// The folder, in the repository.
        path: String,
        /// What the OS said.
        cause: std::io::Error,
    },
    /// The globs reach more folders than berth looks at.
    #[error("the folders globs reach more than {MAX_FOLDERS} folders: narrow them")]
    TooMany,
}

/// The repository paths of the folders under `root` that `globs` match, sorted; none
/// deeper than `depth` segments (`None`: any depth, for `**`).
///
/// # Errors
/// A folder cannot be read, or more than [`MAX_FOLDERS`] are within reach.
pub fn matching(
    root: &Path,
    globs: &GlobSet,
    depth: Option<usize>,
) -> Result<Vec<String>, FolderError> {
    let (mut found, mut seen) = (Vec::new(), 0);
    let mut pending = vec![(String::new(), 0)];
    while let Some((rel, level)) = pending.pop() {
        let read = |cause| FolderError::Read {
            path: if rel.is_empty() {
                ".".into()
            } else {
                rel.clone()
            },
            cause,
        };
        for entry in std::fs::read_dir(root.join(&rel)).map_err(read)? {
            let entry = entry.map_err(read)?;
            // A link's own type: a link to a folder is not walked into.
            let is_dir = entry.file_type().map_err(read)?.is_dir();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !is_dir || (rel.is_empty() && name == ".git") {
                continue;
            }
            seen += 1;
            if seen > MAX_FOLDERS {
                return Err(FolderError::TooMany);
            }
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if globs.is_match(&path) {
                found.push(path.clone());
            }
            if depth.is_none_or(|d| level + 1 < d) {
                pending.push((path, level + 1));
            }
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs(patterns: &[&str]) -> GlobSet {
        let mut set = globset::GlobSetBuilder::new();
        for p in patterns {
            let glob = globset::GlobBuilder::new(p).literal_separator(true).build();
            set.add(glob.unwrap());
        }
        set.build().unwrap()
    }

    #[test]
    fn folders_match_at_their_depth_and_links_files_and_git_are_left_out() {
        let root = tempfile::tempdir().unwrap();
        for dir in [
            "addons/dns/base",
            "addons/ingress",
            "apps/web",
            ".git/addons",
        ] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::write(root.path().join("addons/README.md"), "").unwrap();
        std::os::unix::fs::symlink("/etc", root.path().join("addons/etc")).unwrap();
        let found = matching(root.path(), &globs(&["addons/*"]), Some(2)).unwrap();
        assert_eq!(found, ["addons/dns", "addons/ingress"]);
        let deep = matching(root.path(), &globs(&["**/base"]), None).unwrap();
        assert_eq!(deep, ["addons/dns/base"]);
    }

    #[test]
    fn a_walk_past_the_bound_is_an_error() {
        let root = tempfile::tempdir().unwrap();
        // A set of 10,000 apps: its folders and their parent are within the bound.
        for i in 0..10_000 {
            std::fs::create_dir_all(root.path().join(format!("apps/app-{i}"))).unwrap();
        }
        let found = matching(root.path(), &globs(&["apps/*"]), Some(2)).unwrap();
        assert_eq!(found.len(), 10_000);
        for i in 10_000..MAX_FOLDERS {
            std::fs::create_dir(root.path().join(format!("apps/app-{i}"))).unwrap();
        }
        let e = matching(root.path(), &globs(&["apps/*"]), Some(2)).unwrap_err();
        assert!(e.to_string().contains("more than 50000 folders"), "{e}");
    }
}
