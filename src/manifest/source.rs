//! Source visitors: files and folders of a repository checkout, and stdin. They enforce
//! the safety rules before a byte is read: paths stay inside the repository root (no
//! `..` escapes, no symbolic links that lead out), files over the per-file cap are not
//! read, and reading stops when the app's total passes the per-app cap.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use globset::GlobSet;

use super::bounds::{Budget, Limits};
use super::decode::Stream;
use super::decrypt::{self, Decryption};
use super::error::ManifestError;
use super::helm::{chart_in, source_of, sources, Helm, CHART_FILE};
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
    /// How folders holding a `Chart.yaml` are rendered; `None`: as plain manifests.
    pub helm: Option<Helm>,
    /// A path that yields nothing is no error (`allow_empty`).
    pub allow_empty: bool,
    /// How files encrypted with sops are opened; `None`: they are refused.
    pub decrypt: Option<Decryption>,
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
    /// Encrypted files, decrypted at the walk's end, and what waits on them.
    deferred: &'a Deferred,
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
        let deferred = Deferred::new(self.decrypt.as_ref());
        let mut walk = Walk {
            source: self,
            root,
            total: 0,
            seen_dirs: HashSet::new(),
            budget: self.limits.budget(),
            named: String::new(),
            jsonnet: 0,
            deferred: &deferred,
        };
        let mut objects = 0;
        let f = &mut counted(&self.limits, &mut objects, f);
        {
            let f = &mut |item| deferred.or_now(item, f);
            for p in &self.paths {
                let Some(rel) = normalize(p) else {
                    f(Err(ManifestError::EscapesRoot { path: p.clone() }))?;
                    continue;
                };
                walk.named.clone_from(&rel);
                walk.jsonnet = 0;
                let (mut items, files) = (0, deferred.files());
                walk.entry(&rel, true, &mut |item| {
                    items += 1;
                    f(item)
                })?;
                if items == 0 && files == deferred.files() && !self.allow_empty {
                    f(Err(ManifestError::NoObjects {
                        path: self.display(&rel),
                        jsonnet: walk.jsonnet,
                    }))?;
                }
            }
        }
        deferred.finish(&walk.budget, f)
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
            return self.folder(rel, resolved, named, shown, f);
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

    /// A folder: rendered by kustomize or helm when it holds their file, walked otherwise.
    fn folder(
        &mut self,
        rel: &str,
        resolved: PathBuf,
        named: bool,
        shown: String,
        f: &mut dyn FnMut(Item) -> Flow,
    ) -> Flow {
        if let Some(k) = &self.source.kustomize {
            if let Some(file) = kustomization_in(&resolved) {
                return self.kustomization(rel, &resolved, file, k, f);
            }
            if k.required && named {
                return f(Err(ManifestError::Kustomization {
                    path: shown,
                    message: "holds no kustomization.yaml, and the app sets render = \"kustomize\""
                        .into(),
                }));
            }
        }
        if let Some(h) = &self.source.helm {
            if chart_in(&resolved) {
                return self.chart(rel, &resolved, h, f);
            }
            if h.required && named {
                return f(Err(ManifestError::Chart {
                    path: shown,
                    message: "holds no Chart.yaml, and the app sets render = \"helm\"".into(),
                }));
            }
        }
        self.dir(rel, resolved, f)
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
        let (output, decrypted) = match k.build(&self.root, resolved, &shown, self.left()) {
            Ok(built) => (Ok(built.output), built.decrypted),
            Err(e) => (Err(e), Vec::new()),
        };
        let dir_shown = self.source.display(rel);
        let allow = k.decrypt.as_ref().map_or(&[][..], |d| &d.allow_in[..]);
        // What kustomize made of decrypted values is marked, and may land where they may.
        let marks = decrypt::Marks::new(&decrypted);
        let f = &mut |item: Item| {
            f(item.and_then(|mut m| {
                marks.mark(&mut m);
                decrypt::refused_kind(&m, allow).map_or(Ok(m), Err)
            }))
        };
        self.rendered(&shown, output, f, &|m| {
            m.origin.line = 0;
            if let Some(resource) = kustomize_origin(m) {
                m.origin.path = format!("{} (via {shown})", join(&dir_shown, &resource));
            }
        })
    }

    /// What the app may still read.
    fn left(&self) -> u64 {
        self.source.limits.max_app_size.saturating_sub(self.total)
    }

    /// A tool's render of a folder (kustomize, helm): its output charged to the app's
    /// size, decoded, each object's origin set by `origin`.
    fn rendered(
        &mut self,
        shown: &str,
        output: Result<Vec<u8>, ManifestError>,
        f: &mut dyn FnMut(Item) -> Flow,
        origin: &dyn Fn(&mut Manifest),
    ) -> Flow {
        let bytes = match output {
            Ok(bytes) => bytes,
            Err(e @ ManifestError::AppTooLarge { .. }) => return Err(e),
            Err(e) => return f(Err(e)),
        };
        self.total += bytes.len() as u64;
        Stream {
            path: shown.to_string(),
            bytes,
            budget: &self.budget,
        }
        .visit(&mut |item| {
            f(item.map(|mut m| {
                origin(&mut m);
                m
            }))
        })
    }

    /// A folder holding a chart: rendered by `helm template`, none of its files read.
    /// Objects' origins name the template as helm prints it and the chart.
    fn chart(
        &mut self,
        rel: &str,
        resolved: &Path,
        h: &Helm,
        f: &mut dyn FnMut(Item) -> Flow,
    ) -> Flow {
        let shown = self.source.display(&join(rel, CHART_FILE));
        let output = h.template(&self.root, resolved, &shown, self.left());
        let templates = output.as_deref().map(sources).unwrap_or_default();
        self.rendered(&shown, output, f, &|m| {
            if let Some(template) = source_of(&templates, m.origin.line) {
                m.origin.path = format!("{template} (helm template of {shown})");
                m.origin.document = 0; // helm's output is no file of the repository
            }
            m.origin.line = 0;
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
            Ok(bytes) => self.decode(shown, bytes, f),
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

impl Walk<'_> {
    /// A file's documents; see [`decode`].
    fn decode(&mut self, path: String, bytes: Vec<u8>, f: &mut dyn FnMut(Item) -> Flow) -> Flow {
        decode(path, bytes, &self.budget, self.deferred, f)
    }
}

/// A file's documents; a file encrypted with sops goes to `deferred`: unread when its
/// text looks encrypted, or its documents once decoded when the first holds a `sops:`
/// block.
fn decode(
    path: String,
    bytes: Vec<u8>,
    budget: &Budget,
    deferred: &Deferred,
    f: &mut dyn FnMut(Item) -> Flow,
) -> Flow {
    let Some((path, bytes)) = deferred.hand_over(path, bytes, budget) else {
        return Ok(());
    };
    let stream = Stream {
        path: path.clone(),
        bytes,
        budget,
    };
    if let Some(documents) = deferred::visit_file(&stream, f)? {
        deferred.encrypted(path, documents);
    }
    Ok(())
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

mod deferred;
mod stdin;
use deferred::Deferred;
pub use stdin::Stdin;

#[cfg(test)]
mod tests;
