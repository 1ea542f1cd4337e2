//! Paths looked up in a commit's trees, through a cache of tree entries that the whole
//! process shares. The apps of one repository look their folders up in the same trees,
//! and a folder holding 10,000 apps' folders is one tree of 10,000 entries (about
//! 370 KB) that libgit2 would read, inflate and hash again for every app and every look
//! (its own cache is per opened repository and keeps no tree over 4 KiB). A tree is named
//! by the hash of what it holds, so its entries, once read, hold for any repository.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use git2::{Oid, Repository};

/// What an entry of a tree names.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    pub id: Oid,
    /// Git's file mode: 0o040000 a folder, 0o120000 a link.
    pub mode: i32,
}

/// A tree's entries by name.
type Entries = HashMap<Box<str>, Entry>;

/// The most entries kept (about 80 bytes each); past it the cache starts again.
const MAX_ENTRIES: usize = 50_000;

/// The trees read, and how many entries they hold.
type Trees = (HashMap<Oid, Arc<Entries>>, usize);

static TREES: Mutex<Option<Trees>> = Mutex::new(None);

/// What `path` (`a/b/c`, relative to the tree `root`) names; `None` when nothing.
pub(super) fn lookup(repo: &Repository, root: Oid, path: &str) -> Option<Entry> {
    let mut found = Entry {
        id: root,
        mode: 0o040000,
    };
    for part in path.split('/').filter(|p| !p.is_empty()) {
        found = *entries(repo, found.id)?.get(part)?;
    }
    Some(found)
}

/// The entries of tree `id`, read once.
fn entries(repo: &Repository, id: Oid) -> Option<Arc<Entries>> {
    if let Some((trees, _)) = TREES.lock().ok()?.as_ref() {
        if let Some(entries) = trees.get(&id) {
            return Some(entries.clone());
        }
    }
    let tree = repo.find_tree(id).ok()?;
    let entries: Arc<Entries> = Arc::new(
        tree.iter()
            .filter_map(|e| {
                let entry = Entry {
                    id: e.id(),
                    mode: e.filemode(),
                };
                Some((e.name().ok()?.into(), entry))
            })
            .collect(),
    );
    let mut lock = TREES.lock().ok()?;
    let (trees, count) = lock.get_or_insert_with(Default::default);
    if *count + entries.len() > MAX_ENTRIES {
        trees.clear();
        *count = 0;
    }
    *count += entries.len();
    trees.insert(id, entries.clone());
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lookup_finds_what_git_finds() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let file = repo.blob(b"kind: ConfigMap\n").unwrap();
        let link = repo.blob(b"../app-1/objects.yaml").unwrap();
        let mut apps = repo.treebuilder(None).unwrap();
        for i in 0..3 {
            let mut app = repo.treebuilder(None).unwrap();
            app.insert("objects.yaml", file, 0o100644).unwrap();
            if i == 2 {
                app.insert("shared.yaml", link, 0o120000).unwrap();
            }
            apps.insert(format!("app-{i}"), app.write().unwrap(), 0o040000)
                .unwrap();
        }
        let mut root = repo.treebuilder(None).unwrap();
        root.insert("apps", apps.write().unwrap(), 0o040000)
            .unwrap();
        let root = repo.find_tree(root.write().unwrap()).unwrap();
        for path in [
            "apps",
            "apps/app-0",
            "apps/app-2/shared.yaml",
            "apps/app-1/objects.yaml",
        ] {
            let git = root.get_path(std::path::Path::new(path)).unwrap();
            // Twice: read, then from the cache.
            for _ in 0..2 {
                let found = lookup(&repo, root.id(), path).unwrap();
                assert_eq!((found.id, found.mode), (git.id(), git.filemode()), "{path}");
            }
        }
        assert_eq!(lookup(&repo, root.id(), "").unwrap().id, root.id());
        for missing in ["apps/app-9", "apps/app-0/objects.yaml/x", "nowhere"] {
            assert!(lookup(&repo, root.id(), missing).is_none(), "{missing}");
        }
    }
}
