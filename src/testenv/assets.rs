//! Finds the control plane binaries: `$KUBEBUILDER_ASSETS`, then the cache
//! (`~/.cache/berth/testenv/v1.20.2/bin`), else builds them from Debian's packages with
//! `scripts/build-testenv.sh` and fills the cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::TestenvError;

/// The binaries a control plane needs.
pub const BINARIES: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

const BUILD_SCRIPT: &str = include_str!("../../scripts/build-testenv.sh");

/// True when `dir` holds every binary.
pub fn complete(dir: &Path) -> bool {
    BINARIES.iter().all(|b| dir.join(b).is_file())
}

/// The cache folder for built binaries.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("berth/testenv/v1.20.2/bin")
}

/// Where the binaries are, without building.
pub fn find() -> Option<PathBuf> {
    let from_env = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from);
    from_env
        .into_iter()
        .chain([cache_dir()])
        .find(|d| complete(d))
}

/// Where the binaries are, building them into the cache when missing.
///
/// # Errors
/// The build failed.
pub fn ensure() -> Result<PathBuf, TestenvError> {
    if let Some(dir) = find() {
        return Ok(dir);
    }
    let cache = cache_dir();
    eprintln!(
        "building the control plane from Debian's kubernetes source into {} (about 10 minutes)…",
        cache.display()
    );
    let status = Command::new("bash")
        .arg("-c")
        .arg(BUILD_SCRIPT)
        .arg("build-testenv.sh")
        .arg(&cache)
        .status()
        .map_err(|source| TestenvError::Io {
            what: "running the build script".into(),
            source,
        })?;
    if status.success() && complete(&cache) {
        Ok(cache)
    } else {
        Err(TestenvError::Assets(format!(
            "building them failed ({status}); set KUBEBUILDER_ASSETS to a folder with {}",
            BINARIES.join(", ")
        )))
    }
}
