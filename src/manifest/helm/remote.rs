//! Chart dependencies downloaded from the repositories `[agent] allow_remote_charts`
//! names. Such a chart must commit its `Chart.lock`: `helm dependency build` fetches what
//! the lock pins (helm itself refuses a lock out of step with `Chart.yaml`) once per lock
//! digest into the cache, which keeps each archive's SHA-256 and the dependencies they
//! were fetched for, and checks both at every later use (a cache folder that fails is
//! fetched again). The chart is rendered from a copy in the render's sandbox, with the
//! downloads in its `charts/`: the checkout is never written.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::{dependencies, Dependency, Helm, Sandbox, CHART_FILE};
use crate::manifest::error::ManifestError;
use crate::manifest::read::{copy_confined, read_capped, read_confined};
use crate::manifest::tool::Tool;

/// The file that pins a chart's dependencies.
const LOCK_FILE: &str = "Chart.lock";
/// What a cache folder holds beside its archives.
const RECORD: &str = "berth-fetched.json";
/// The largest lock or record read.
const MAX_RECORD: u64 = 1 << 20;

/// A cache folder's record: the dependencies of `Chart.yaml` it was fetched for, and each
/// archive's SHA-256.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Fetched {
    dependencies: Vec<Dependency>,
    archives: BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
struct Lock {
    digest: String,
    #[serde(default)]
    dependencies: Vec<Dependency>,
}

/// One render's chart whose dependencies are downloaded.
pub(super) struct Remote<'a> {
    pub helm: &'a Helm,
    /// The helm program.
    pub program: &'a Path,
    /// The canonical repository root.
    pub root: &'a Path,
    /// The chart's folder.
    pub dir: &'a Path,
    pub sandbox: &'a Sandbox,
    /// The chart's file, as errors name it.
    pub shown: &'a str,
}

impl Remote<'_> {
    /// The chart refused, for `message`.
    fn refused(&self, message: String) -> ManifestError {
        let path = self.shown.to_string();
        ManifestError::Chart { path, message }
    }

    /// The chart's files could not be written, doing `what`.
    fn scratch(&self, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ManifestError {
        ManifestError::scratch(self.shown, what)
    }

    /// The chart, copied into the sandbox with the `missing` dependencies (every one from
    /// an allowed repository) added to its `charts/`: from the cache, else fetched.
    pub(super) fn with_dependencies(
        &self,
        missing: &[Dependency],
        max_bytes: u64,
    ) -> Result<PathBuf, ManifestError> {
        let Remote {
            helm,
            root,
            dir,
            sandbox,
            ..
        } = *self;
        let fail = |message| self.refused(message);
        let lock = read_confined(root, &dir.join(LOCK_FILE), MAX_RECORD).map_err(|e| {
        fail(format!(
            "{LOCK_FILE} {e}: a chart whose dependencies are downloaded commits its lock (`helm dependency update`)"
        ))
    })?;
        let lock: Lock =
            serde_yaml::from_slice(&lock).map_err(|e| fail(format!("{LOCK_FILE}: {e}")))?;
        let digest = lock
            .digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .ok_or_else(|| {
                fail(format!(
                    "{LOCK_FILE}: digest {:?} is not sha256: and 64 hex digits",
                    lock.digest
                ))
            })?;
        // `helm dependency build` fetches every dependency the lock pins, vendored or not.
        let refused: Vec<String> = lock
            .dependencies
            .iter()
            .filter(|d| !helm.remote_charts.contains(&d.repository))
            .map(|d| format!("{} ({})", d.name, d.repository))
            .collect();
        if !refused.is_empty() {
            return Err(fail(format!(
            "{LOCK_FILE} also pins {}, which `helm dependency build` would download: name their repository in [agent] allow_remote_charts too, or vendor every dependency",
            refused.join(", ")
        )));
        }
        let wanted =
            dependencies(root, dir, helm.max_file_size).map_err(|e| fail(e.to_string()))?;
        let cached = helm.chart_cache.join(digest);
        let fetched = match verified(&cached, &wanted, helm.max_file_size) {
            Some(fetched) => fetched,
            None => self.fetch(&cached, wanted)?,
        };
        let copy = sandbox.path.join("chart");
        let mut budget = max_bytes;
        copy_confined(root, dir, &copy, &mut budget, helm.max_file_size, 0)
            .map_err(|e| fail(e.to_string()))?;
        std::fs::create_dir_all(copy.join("charts"))
            .map_err(self.scratch("cannot make the chart's copy"))?;
        for archive in fetched.archives.keys() {
            if missing.iter().any(|d| {
                archive
                    .strip_prefix(&d.name)
                    .is_some_and(|v| v.starts_with('-'))
            }) {
                std::fs::copy(cached.join(archive), copy.join("charts").join(archive))
                    .map_err(self.scratch(format!("cannot copy {archive} from the cache")))?;
            }
        }
        Ok(copy)
    }

    /// Runs `helm dependency build` on the chart's `Chart.yaml` and `Chart.lock` alone, in
    /// the sandbox, then moves what it fetched into the cache folder `cached`.
    fn fetch(&self, cached: &Path, wanted: Vec<Dependency>) -> Result<Fetched, ManifestError> {
        let Remote {
            helm,
            program,
            root,
            dir,
            sandbox,
            ..
        } = *self;
        let fail = |message| self.refused(message);
        let work = sandbox.path.join("fetch");
        std::fs::create_dir_all(&work).map_err(self.scratch("cannot make helm's folder"))?;
        for file in [CHART_FILE, LOCK_FILE] {
            let bytes = read_confined(root, &dir.join(file), MAX_RECORD)
                .map_err(|e| fail(format!("{file} {e}")))?;
            std::fs::write(work.join(file), bytes)
                .map_err(self.scratch(format!("cannot copy {file}")))?;
        }
        self.write_repositories()?;
        let mut command = vec![
            program.as_os_str().to_owned(),
            "dependency".into(),
            "build".into(),
            OsString::from(&work),
        ];
        command.extend(self.registry_args()?);
        let tool = Tool {
            command,
            dir: &work,
            env: sandbox.env(None),
            timeout: helm.timeout,
            max_bytes: MAX_RECORD,
            memory: helm.memory,
            reach: sandbox.reach(&sandbox.path, true),
        };
        tool.render("helm dependency build", self.shown)?;
        let fetched = Fetched {
            dependencies: wanted,
            archives: self.archives(&work.join("charts"))?,
        };
        self.keep(&fetched, &work.join("charts"), cached)?;
        Ok(fetched)
    }

    /// The app's `[app.registry]` handed to helm in the sandbox: its login as helm's
    /// registry configuration (an OCI dependency's), its CA file and plain HTTP as flags.
    fn registry_args(&self) -> Result<Vec<OsString>, ManifestError> {
        let registry = &self.helm.registry;
        let mut args = Vec::new();
        if let Some(login) = &registry.credentials {
            let into = self.sandbox.path.join("config/registry/config.json");
            self.copy_in(login, &into, "the registry credentials")?;
        }
        if let Some(ca) = &registry.ca_file {
            let into = self.sandbox.path.join("registry-ca.pem");
            self.copy_in(ca, &into, "the registry CA file")?;
            args.extend(["--ca-file".into(), into.into_os_string()]);
        }
        if registry.insecure {
            args.push("--plain-http".into());
        }
        Ok(args)
    }

    /// Copies the host's file `from` (`what`, at most [`MAX_RECORD`]) into the sandbox,
    /// readable by berth alone.
    fn copy_in(&self, from: &Path, into: &Path, what: &str) -> Result<(), ManifestError> {
        let bytes = read_capped(std::fs::File::open(from), MAX_RECORD)
            .map_err(|e| self.refused(format!("cannot read {what} {}: {e}", from.display())))?;
        let dir = into.parent().unwrap_or(&self.sandbox.path);
        crate::state::private_dir(dir)
            .and_then(|()| crate::state::write_private(into, &bytes))
            .map_err(self.scratch(format!("cannot copy {what} into helm's folder")))
    }

    /// The sandbox's helm configuration: helm builds from named repositories only, the
    /// allowed ones (an OCI registry is named by its dependencies' `oci://` alone).
    fn write_repositories(&self) -> Result<(), ManifestError> {
        let repositories: Vec<serde_json::Value> = self
            .helm
            .remote_charts
            .iter()
            .filter(|url| !url.starts_with("oci://"))
            .enumerate()
            .map(|(i, url)| serde_json::json!({"name": format!("allowed-{i}"), "url": url}))
            .collect();
        let config = self.sandbox.path.join("config");
        std::fs::create_dir_all(&config)
            .and_then(|()| {
                std::fs::write(
                    config.join("repositories.yaml"),
                    serde_json::json!({"apiVersion": "", "repositories": repositories}).to_string(),
                )
            })
            .map_err(self.scratch("cannot write helm's repositories"))
    }

    /// The archives `helm dependency build` fetched into `charts`, each with its digest:
    /// plain names, each at most `max_file_size`.
    fn archives(&self, charts: &Path) -> Result<BTreeMap<String, String>, ManifestError> {
        let (fail, max) = (|message| self.refused(message), self.helm.max_file_size);
        let mut archives = BTreeMap::new();
        let entries = std::fs::read_dir(charts)
            .map_err(self.scratch("cannot read what helm dependency build fetched"))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let size = std::fs::symlink_metadata(&path).map_or(u64::MAX, |m| m.len());
            if !plain_name(&name) || size > max {
                return Err(fail(format!(
                    "helm dependency build fetched {name:?} ({size} bytes), not an archive of at most {max} bytes"
                )));
            }
            let sum = sha256_of(&path).ok_or_else(|| fail(format!("cannot read {name}")))?;
            archives.insert(name, sum);
        }
        Ok(archives)
    }

    /// Keeps what was fetched in the cache folder `cached`: into a folder of its own beside
    /// the cache's, then renamed into place, so a render never sees half a folder, and two
    /// fetching at once both end with a whole one.
    fn keep(&self, fetched: &Fetched, charts: &Path, cached: &Path) -> Result<(), ManifestError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let parent = cached.parent().unwrap_or(Path::new("."));
        let temporary = parent.join(format!(
            ".fetch-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let store = || -> std::io::Result<()> {
            crate::state::private_dir(&temporary)?;
            for name in fetched.archives.keys() {
                std::fs::copy(charts.join(name), temporary.join(name))?;
            }
            std::fs::write(temporary.join(RECORD), serde_json::to_vec(fetched)?)?;
            std::fs::rename(&temporary, cached)
        };
        if let Err(e) = store() {
            let _ = std::fs::remove_dir_all(&temporary);
            if verified(cached, &fetched.dependencies, self.helm.max_file_size).is_none() {
                let what = format!("cannot keep the fetched charts in {}", cached.display());
                return Err(self.scratch(what)(e));
            }
        }
        Ok(())
    }
}

/// The cache folder's record, when it was fetched for `wanted` and every archive is as it
/// was fetched; otherwise the folder is removed.
fn verified(cached: &Path, wanted: &[Dependency], max_file_size: u64) -> Option<Fetched> {
    let check = || -> Option<Fetched> {
        let record = read_capped(std::fs::File::open(cached.join(RECORD)), MAX_RECORD).ok()?;
        let fetched: Fetched = serde_json::from_slice(&record).ok()?;
        let intact = fetched.dependencies == wanted
            && fetched.archives.iter().all(|(name, sum)| {
                plain_name(name)
                    && std::fs::symlink_metadata(cached.join(name))
                        .is_ok_and(|m| m.is_file() && m.len() <= max_file_size)
                    && sha256_of(&cached.join(name)).as_deref() == Some(sum)
            });
        intact.then_some(fetched)
    };
    let found = check();
    if found.is_none() && cached.exists() {
        let _ = std::fs::remove_dir_all(cached);
    }
    found
}

/// A file name and no more: not empty, no separator, not `.` or `..`.
fn plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != ".."
}

/// The SHA-256 of the file at `path`, in hex.
fn sha256_of(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(format!("{:x}", hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dependency(version: &str) -> Dependency {
        Dependency {
            name: "cache".into(),
            version: version.into(),
            repository: "https://charts.example.com".into(),
        }
    }

    /// A cache folder as `fetch` leaves it: one archive and the record.
    fn cached(dir: &Path) -> PathBuf {
        let cached = dir.join("0".repeat(64));
        std::fs::create_dir_all(&cached).unwrap();
        std::fs::write(cached.join("cache-0.1.0.tgz"), b"archive").unwrap();
        let fetched = Fetched {
            dependencies: vec![dependency("0.1.0")],
            archives: [(
                "cache-0.1.0.tgz".to_string(),
                sha256_of(&cached.join("cache-0.1.0.tgz")).unwrap(),
            )]
            .into(),
        };
        std::fs::write(cached.join(RECORD), serde_json::to_vec(&fetched).unwrap()).unwrap();
        cached
    }

    #[test]
    fn a_cache_folder_is_used_only_as_it_was_fetched() {
        let dir = tempfile::tempdir().unwrap();
        let folder = cached(dir.path());
        assert!(verified(&folder, &[dependency("0.1.0")], 1 << 20).is_some());
        // Fetched for other dependencies (Chart.yaml changed, its lock not): fetched again.
        assert!(verified(&folder, &[dependency("0.2.0")], 1 << 20).is_none());
        assert!(!folder.exists());
        // An archive changed on disk.
        let folder = cached(dir.path());
        std::fs::write(folder.join("cache-0.1.0.tgz"), b"tampered").unwrap();
        assert!(verified(&folder, &[dependency("0.1.0")], 1 << 20).is_none());
        assert!(!folder.exists());
        // A record naming a file outside the folder.
        let folder = cached(dir.path());
        let record = std::fs::read_to_string(folder.join(RECORD)).unwrap();
        let record = record.replace("cache-0.1.0.tgz", "../cache-0.1.0.tgz");
        std::fs::write(folder.join(RECORD), record).unwrap();
        assert!(verified(&folder, &[dependency("0.1.0")], 1 << 20).is_none());
    }

    #[test]
    fn a_chart_is_copied_with_links_inside_the_checkout_only() {
        let repo = tempfile::tempdir().unwrap();
        let root = repo.path().canonicalize().unwrap();
        let chart = root.join("web");
        std::fs::create_dir_all(chart.join("templates")).unwrap();
        std::fs::write(chart.join("Chart.yaml"), "name: web\n").unwrap();
        std::fs::write(root.join("shared.yaml"), "kind: ConfigMap\n").unwrap();
        std::os::unix::fs::symlink(root.join("shared.yaml"), chart.join("templates/cm.yaml"))
            .unwrap();
        let out = tempfile::tempdir().unwrap();
        let mut budget = 1 << 20;
        copy_confined(
            &root,
            &chart,
            &out.path().join("a"),
            &mut budget,
            1 << 20,
            0,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(out.path().join("a/templates/cm.yaml")).unwrap(),
            "kind: ConfigMap\n"
        );
        assert_eq!(budget, (1 << 20) - 10 - 16);

        std::os::unix::fs::symlink("/etc/passwd", chart.join("templates/passwd.yaml")).unwrap();
        let e = copy_confined(
            &root,
            &chart,
            &out.path().join("b"),
            &mut (1 << 20),
            1 << 20,
            0,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("web/templates/passwd.yaml "),
            "{e}"
        );
        std::fs::remove_file(chart.join("templates/passwd.yaml")).unwrap();
        let e =
            copy_confined(&root, &chart, &out.path().join("c"), &mut 20, 1 << 20, 0).unwrap_err();
        assert!(
            matches!(e, crate::manifest::read::CopyError::OverBudget(_)),
            "{e}"
        );
    }
}
