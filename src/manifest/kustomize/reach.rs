//! What a render of an app's paths reads of the repository: the paths and whatever
//! their kustomizations reach outside them, so that a commit that changes none of it is
//! known to render the same objects.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::references::{charts, is_remote, references};
use super::{kustomization_in, relative};
use crate::manifest::bounds::Limits;
use crate::manifest::read::read_confined;

/// Every path of the repository at `root` (canonical) that a render of `paths` reads,
/// relative to `root` (`""` is the root), none inside another: the paths themselves and
/// whatever their kustomizations reach outside them. A commit that changes none of them
/// renders the same objects.
pub fn reach(root: &Path, paths: &[String]) -> Vec<String> {
    let mut found = BTreeSet::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<PathBuf> = paths.iter().map(|p| root.join(p)).collect();
    while let Some(path) = stack.pop() {
        let Ok(path) = path.canonicalize() else {
            continue;
        };
        if !path.starts_with(root) || !seen.insert(path.clone()) || !path.is_dir() {
            found.extend(path.starts_with(root).then(|| relative(root, &path)));
            continue;
        }
        found.insert(relative(root, &path));
        if let Some(file) = kustomization_in(&path) {
            // Read under the render's rules (a kustomization it could not read reaches
            // nothing more); the default cap, as berth's own is checked when it renders.
            let doc = read_confined(root, &path.join(file), Limits::default().max_file_size)
                .ok()
                .and_then(|bytes| serde_yaml::from_slice::<Value>(&bytes).ok());
            let charts = doc.as_ref().and_then(|d| charts(d).ok());
            for (_, entry) in doc.as_ref().map(references).unwrap_or_default() {
                if !is_remote(&entry) {
                    stack.push(path.join(entry));
                }
            }
            stack.extend(charts.into_iter().flatten().map(|(_, e)| path.join(e)));
        }
        let folders = std::fs::read_dir(&path).into_iter().flatten().flatten();
        stack.extend(folders.map(|e| e.path()).filter(|p| p.is_dir()));
    }
    let mut outermost: Vec<String> = Vec::new();
    for path in found {
        let inside = |o: &String| o.is_empty() || path.starts_with(&format!("{o}/"));
        if !outermost.iter().any(inside) {
            outermost.push(path);
        }
    }
    outermost
}
