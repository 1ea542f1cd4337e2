//! Source visitors: files and folders of a repository checkout, and stdin. They enforce
//! the safety rules before a byte is read: paths stay inside the repository root (no
//! `..` escapes, no symbolic links that lead out), files over the per-file cap are not
//! read, and reading stops when the app's total passes the per-app cap.
//!
//! Over 450 lines only with its tests (about 200, against real folders, links and caps);
//! the code is about 420.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use globset::GlobSet;

use super::bounds::{Budget, Limits};
use super::decode::Stream;
use super::error::ManifestError;
use super::kustomize::{kustomization_in, Kustomize};
use super::object::Manifest;
use super::read::{read_capped, ReadError};
use super::visitor::{Flow, Item, Visitor};

/// Counts the render's objects into `count`, stopping the walk past the cap whatever
/// the error policy (a resource bound, not a bad item).
fn counted<'f>(
    limits: &Limits,
    count: &'f mut usize,
    f: &'f mut dyn FnMut(Item) -> Flow,
) -> impl FnMut(Item) -> Flow + 'f {
    let limit = limits.max_objects;
    move |item| {
        // Bad items count too: collecting errors costs memory as objects do.
        *count += 1;
        if *count > limit {
            let origin = match &item {
                Ok(m) => m.origin.to_string(),
                Err(e) => e.origin().unwrap_or_default(),
            };
            return Err(ManifestError::TooManyObjects { origin, limit });
        }
        f(item)
    }
}

/// Files and folders under a repository root (kubectl's `FileVisitor`s from
/// `ExpandPathsToFileVisitors`). Folders are walked recursively in name order; files found
/// in a folder need a `.yaml`, `.yml` or `.json` extension, a file named directly does
/// not. `.git` is never entered.
pub struct PathSource {
    /// The repository root: nothing outside it is read.
    pub root: PathBuf,
    /// Shown before repository-relative paths in origins (e.g. the folder a user typed).
    pub prefix: String,
    /// Paths relative to the root.
    pub paths: Vec<String>,
    /// When set, only files whose relative path matches are read.
    pub include: Option<GlobSet>,
    /// Files whose relative path matches are skipped.
    pub exclude: Option<GlobSet>,
    /// Size caps.
    pub limits: Limits,
    /// How folders holding a kustomization are rendered; `None`: as plain manifests.
    pub kustomize: Option<Kustomize>,
    /// A path that yields nothing is no error (`allow_empty`).
    pub allow_empty: bool,
}

struct Walk<'a> {
    source: &'a PathSource,
    root: PathBuf,
    total: u64,
    seen_dirs: HashSet<PathBuf>,
    budget: Budget,
    /// The configured path being walked (relative to the root).
    named: String,
    /// The Jsonnet files seen in it.
    jsonnet: usize,
}

impl Visitor for PathSource {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let root = self
            .root
            .canonicalize()
            .map_err(|source| ManifestError::Read {
                path: self.display(""),
                cause: source,
            })?;
        let mut walk = Walk {
            source: self,
            root,
            total: 0,
            seen_dirs: HashSet::new(),
            budget: self.limits.budget(),
            named: String::new(),
            jsonnet: 0,
        };
        let mut objects = 0;
        let f = &mut counted(&self.limits, &mut objects, f);
        for p in &self.paths {
            let Some(rel) = normalize(p) else {
                f(Err(ManifestError::EscapesRoot { path: p.clone() }))?;
                continue;
            };
            walk.named.clone_from(&rel);
            walk.jsonnet = 0;
            let mut items = 0;
            walk.entry(&rel, true, &mut |item| {
                items += 1;
                f(item)
            })?;
            if items == 0 && !self.allow_empty {
                f(Err(ManifestError::NoObjects {
                    path: self.display(&rel),
                    jsonnet: walk.jsonnet,
                }))?;
            }
        }
        Ok(())
    }
}

impl PathSource {
    fn display(&self, rel: &str) -> String {
        match (self.prefix.trim_end_matches('/'), rel) {
            ("", "") => ".".to_string(),
            ("", rel) => rel.to_string(),
            (prefix, "") => prefix.to_string(),
            (prefix, rel) => format!("{prefix}/{rel}"),
        }
    }

    fn selected(&self, rel: &str) -> bool {
        self.include.as_ref().is_none_or(|g| g.is_match(rel))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(rel))
    }
}

impl Walk<'_> {
    /// One path (relative to the root): a file is read, a folder walked.
    fn entry(&mut self, rel: &str, named: bool, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let full = self.source.root.join(rel);
        let shown = self.source.display(rel);
        let resolved = match full.canonicalize() {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && named => {
                return f(Err(ManifestError::NotFound { path: shown }))
            }
            Err(source) => {
                return f(Err(ManifestError::Read {
                    path: shown,
                    cause: source,
                }))
            }
        };
        if !resolved.starts_with(&self.root) {
            return f(Err(ManifestError::OutsideRoot {
                path: shown,
                target: resolved,
            }));
        }
        if resolved.is_dir() {
            if let Some(k) = &self.source.kustomize {
                if let Some(file) = kustomization_in(&resolved) {
                    return self.kustomization(rel, &resolved, file, k, f);
                }
                if k.required && named {
                    return f(Err(ManifestError::Kustomization {
                        path: shown,
                        message:
                            "holds no kustomization.yaml, and the app sets render = \"kustomize\""
                                .into(),
                    }));
                }
            }
            return self.dir(rel, resolved, f);
        }
        let extension = Path::new(rel).extension().and_then(|e| e.to_str());
        if !named && matches!(extension, Some("jsonnet" | "libsonnet")) {
            self.jsonnet += 1;
        }
        let extension_ok = matches!(extension, Some("yaml" | "yml" | "json"));
        if !(named || extension_ok) || !self.source.selected(rel) {
            return Ok(());
        }
        let folder = Path::new(rel)
            .parent()
            .and_then(|p| p.to_str())
            .unwrap_or("");
        if named || folder == self.named {
            return self.file(&resolved, shown, f);
        }
        let folder = folder.to_string();
        self.file(&resolved, shown, &mut |item| {
            f(item.map_err(|e| e.in_subfolder(&folder)))
        })
    }

    fn dir(&mut self, rel: &str, resolved: PathBuf, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        if !self.seen_dirs.insert(resolved.clone()) {
            return Ok(()); // a symlink loop, or a folder reached twice
        }
        let shown = self.source.display(rel);
        let entries = match std::fs::read_dir(&resolved) {
            Ok(entries) => entries,
            Err(source) => {
                return f(Err(ManifestError::Read {
                    path: shown,
                    cause: source,
                }))
            }
        };
        let mut names: Vec<String> = Vec::new();
        for entry in entries {
            match entry {
                Ok(e) => names.push(e.file_name().to_string_lossy().into_owned()),
                Err(source) => {
                    return f(Err(ManifestError::Read {
                        path: shown.clone(),
                        cause: source,
                    }))
                }
            }
        }
        names.sort();
        for name in names.iter().filter(|n| *n != ".git") {
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            self.entry(&child, false, f)?;
        }
        Ok(())
    }

    /// A folder holding a kustomization: rendered by kustomize, none of its files read.
    /// Objects' origins name the kustomization file, and the resource file where
    /// kustomize says (`buildMetadata: [originAnnotations]`).
    fn kustomization(
        &mut self,
        rel: &str,
        resolved: &Path,
        file: &str,
        k: &Kustomize,
        f: &mut dyn FnMut(Item) -> Flow,
    ) -> Flow {
        let file_rel = if rel.is_empty() {
            file.to_string()
        } else {
            format!("{rel}/{file}")
        };
        let shown = self.source.display(&file_rel);
        let budget = self.source.limits.max_app_size.saturating_sub(self.total);
        let bytes = match k.build(&self.root, resolved, &shown, budget) {
            Ok(bytes) => bytes,
            Err(e @ ManifestError::AppTooLarge { .. }) => return Err(e),
            Err(e) => return f(Err(e)),
        };
        self.total += bytes.len() as u64;
        let dir_shown = self.source.display(rel);
        Stream {
            path: shown.clone(),
            bytes,
            budget: &self.budget,
        }
        .visit(&mut |item| {
            f(item.map(|mut m| {
                m.origin.line = 0;
                if let Some(resource) = kustomize_origin(&m) {
                    m.origin.path = format!("{} (via {shown})", join(&dir_shown, &resource));
                }
                m
            }))
        })
    }

    fn file(&mut self, path: &Path, shown: String, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let limits = self.source.limits;
        let size = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(source) => {
                return f(Err(ManifestError::Read {
                    path: shown,
                    cause: source,
                }))
            }
        };
        if size > limits.max_file_size {
            return f(Err(ManifestError::FileTooLarge {
                path: shown,
                size,
                limit: limits.max_file_size,
            }));
        }
        self.total += size;
        if self.total > limits.max_app_size {
            // A resource bound, not a bad item: it stops the walk under every policy.
            return Err(ManifestError::AppTooLarge {
                path: shown,
                limit: limits.max_app_size,
            });
        }
        match read_capped(std::fs::File::open(path), limits.max_file_size) {
            Ok(bytes) => Stream {
                path: shown,
                bytes,
                budget: &self.budget,
            }
            .visit(f),
            Err(ReadError::TooLarge(size)) => f(Err(ManifestError::FileTooLarge {
                path: shown,
                size,
                limit: limits.max_file_size,
            })),
            Err(ReadError::Io(source)) => f(Err(ManifestError::Read {
                path: shown,
                cause: source,
            })),
        }
    }
}

/// The resource file kustomize names in `config.kubernetes.io/origin` (`path: …`),
/// relative to the kustomization's folder.
fn kustomize_origin(m: &Manifest) -> Option<String> {
    let origin = m
        .object
        .get("metadata")?
        .get("annotations")?
        .get("config.kubernetes.io/origin")?
        .as_str()?;
    origin.lines().find_map(|l| {
        l.trim()
            .strip_prefix("path:")
            .map(|p| p.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
    })
}

/// `dir/rel` with `..` resolved, for messages.
fn join(dir: &str, rel: &str) -> String {
    let joined = if dir.is_empty() || dir == "." {
        rel.to_string()
    } else {
        format!("{dir}/{rel}")
    };
    normalize(&joined).unwrap_or(joined)
}

/// A configured path as `a/b` with `.` and `..` resolved; `None` when it leaves the root
/// or is absolute.
fn normalize(p: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in Path::new(p).components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// Standard input, shown as `STDIN`, bounded by the per-file cap.
pub struct Stdin {
    /// Size caps.
    pub limits: Limits,
}

impl Visitor for Stdin {
    fn visit(&self, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        let path = "STDIN".to_string();
        let (budget, mut objects) = (self.limits.budget(), 0);
        let f = &mut counted(&self.limits, &mut objects, f);
        match read_capped(Ok(std::io::stdin().lock()), self.limits.max_file_size) {
            Ok(bytes) => Stream {
                path,
                bytes,
                budget: &budget,
            }
            .visit(f),
            Err(ReadError::TooLarge(size)) => f(Err(ManifestError::FileTooLarge {
                path,
                size,
                limit: self.limits.max_file_size,
            })),
            Err(ReadError::Io(cause)) => f(Err(ManifestError::Read { path, cause })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::visitor::{collect, ContinueOnError};

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: NAME\n";

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn source(root: &Path, paths: &[&str]) -> PathSource {
        PathSource {
            root: root.to_path_buf(),
            prefix: String::new(),
            paths: paths.iter().map(|s| s.to_string()).collect(),
            include: None,
            exclude: None,
            limits: Limits::default(),
            kustomize: None,
            allow_empty: false,
        }
    }

    #[test]
    fn a_folder_with_a_kustomization_is_rendered_by_kustomize_alone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "base/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\n",
        );
        write(root, "app/kustomization.yaml", "resources: [../base]\n");
        write(root, "base/kustomization.yaml", "resources: [cm.yaml]\n");
        // What the stand-in "kustomize" prints: one object with kustomize's origin
        // annotation, one without.
        write(
            root,
            "app/built.out",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  annotations:\n    config.kubernetes.io/origin: |\n      path: ../base/cm.yaml\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
        );
        write(
            root,
            "plain/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        );
        let stand_in = Kustomize {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                "cat \"$0/built.out\"".into(),
            ]),
            ..Kustomize::new(None, std::time::Duration::from_secs(10))
        };
        let mut s = source(root, &["app", "plain"]);
        s.kustomize = Some(stand_in.clone());
        assert_eq!(
            run(s).unwrap(),
            [
                "base/cm.yaml (via app/kustomization.yaml)",
                "app/kustomization.yaml",
                "plain/cm.yaml"
            ]
        );
        // render = "kustomize": a path without a kustomization is an error.
        let mut s = source(root, &["plain"]);
        s.kustomize = Some(Kustomize {
            required: true,
            ..stand_in
        });
        let e = run(s).unwrap_err().to_string();
        assert!(e.starts_with("plain: holds no kustomization.yaml"), "{e}");
        // render = "plain": the kustomization file is read as a manifest (and refused).
        let e = run(source(root, &["app"])).unwrap_err().to_string();
        assert!(e.contains("app/kustomization.yaml"), "{e}");
    }

    fn run(s: PathSource) -> Result<Vec<String>, ManifestError> {
        collect(&ContinueOnError(s)).map(|v| v.iter().map(|m| m.origin.path.clone()).collect())
    }

    #[test]
    fn a_non_manifest_in_a_sub_folder_says_how_to_leave_it_out() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "app/cm.yaml", &CM.replace("NAME", "a"));
        write(d.path(), "app/ci/pipeline.yaml", "steps: [build, test]\n");
        write(d.path(), "app/odd.yaml", "steps: [build]\n");
        let e = run(source(d.path(), &["app"])).unwrap_err().to_string();
        assert!(
            e.contains("app/ci/pipeline.yaml")
                && e.contains("missing apiVersion")
                && e.contains(r#"exclude = ["app/ci/**"]"#),
            "{e}"
        );
        // A file right in the app's folder is the app's own: no hint.
        let odd = e.lines().find(|l| l.contains("app/odd.yaml")).unwrap();
        assert!(!odd.contains("exclude"), "{odd}");
    }

    #[test]
    fn a_path_that_yields_no_object_is_refused_unless_allowed() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "app/cm.yaml", &CM.replace("NAME", "a"));
        write(d.path(), "docs/README.md", "words");
        write(d.path(), "jsonnet/main.jsonnet", "{}");
        let e = run(source(d.path(), &["app", "docs"]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("docs: no objects here"), "{e}");
        let e = run(source(d.path(), &["jsonnet"])).unwrap_err().to_string();
        assert!(
            e.contains("holds Jsonnet (1 .jsonnet/.libsonnet file)"),
            "{e}"
        );
        let mut allowed = source(d.path(), &["app", "docs"]);
        allowed.allow_empty = true;
        assert_eq!(run(allowed).unwrap(), ["app/cm.yaml"]);
    }

    #[test]
    fn walks_folders_in_order_with_extension_rule_and_globs() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "b/x.yaml", &CM.replace("NAME", "x"));
        write(d.path(), "a/y.yml", &CM.replace("NAME", "y"));
        write(
            d.path(),
            "a/z.json",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"z"}}"#,
        );
        write(d.path(), "a/README.md", "not yaml");
        write(d.path(), ".git/config.yaml", "ignored: true");
        write(d.path(), "a/skip.yaml", &CM.replace("NAME", "skip"));
        assert_eq!(
            run(source(d.path(), &["."])).unwrap(),
            ["a/skip.yaml", "a/y.yml", "a/z.json", "b/x.yaml"]
        );
        let mut s = source(d.path(), &["a"]);
        s.exclude = Some(
            globset::GlobSetBuilder::new()
                .add(globset::Glob::new("**/skip.*").unwrap())
                .build()
                .unwrap(),
        );
        s.prefix = "repo".into();
        assert_eq!(run(s).unwrap(), ["repo/a/y.yml", "repo/a/z.json"]);
    }

    #[test]
    fn symlink_out_of_the_root_is_refused_unread() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.yaml", &CM.replace("NAME", "secret"));
        let d = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.yaml"),
            d.path().join("leak.yaml"),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("leakdir")).unwrap();
        let e = run(source(d.path(), &["."])).unwrap_err().to_string();
        assert!(
            e.contains("leak.yaml: symbolic link points outside the repository"),
            "{e}"
        );
        assert!(
            e.contains("leakdir: symbolic link points outside the repository"),
            "{e}"
        );
    }

    #[test]
    fn symlink_inside_the_root_is_followed() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "real/x.yaml", &CM.replace("NAME", "x"));
        std::os::unix::fs::symlink(d.path().join("real/x.yaml"), d.path().join("link.yaml"))
            .unwrap();
        assert_eq!(
            run(source(d.path(), &["link.yaml"])).unwrap(),
            ["link.yaml"]
        );
    }

    #[test]
    fn dot_dot_escape_and_missing_paths() {
        let d = tempfile::tempdir().unwrap();
        let e = run(source(d.path(), &["../etc", "nope"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("../etc: path escapes the repository root"),
            "{e}"
        );
        assert!(e.contains("nope: no such file or directory"), "{e}");
    }

    #[test]
    fn file_over_the_cap_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "big.yaml", &"#".repeat(2000));
        let mut s = source(d.path(), &["."]);
        s.limits.max_file_size = 1000;
        let e = run(s).unwrap_err().to_string();
        assert_eq!(
            e,
            "big.yaml: file is 2000 bytes, over the 1000-byte cap (agent.max_file_size)"
        );
    }

    #[test]
    fn app_over_the_cap_stops_reading() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..5 {
            write(
                d.path(),
                &format!("{i}.yaml"),
                &CM.replace("NAME", &format!("c{i}")),
            );
        }
        let mut s = source(d.path(), &["."]);
        s.limits.max_app_size = 2 * CM.len() as u64 + 10;
        let e = run(s).unwrap_err().to_string();
        assert!(e.starts_with("2.yaml: the app's manifests exceed"), "{e}");
    }

    #[test]
    fn more_objects_than_the_cap_stop_reading() {
        let d = tempfile::tempdir().unwrap();
        let many: Vec<String> = (0..5)
            .map(|i| CM.replace("NAME", &format!("c{i}")))
            .collect();
        write(d.path(), "all.yaml", &many.join("---\n"));
        let mut s = source(d.path(), &["."]);
        s.limits.max_objects = 3;
        let e = run(s).unwrap_err().to_string();
        assert_eq!(
            e,
            "all.yaml:16 (document 4): the app holds more than 3 objects (agent.max_objects); reading stopped here"
        );
    }
}
