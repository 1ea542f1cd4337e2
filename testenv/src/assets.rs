//! Finds the control plane binaries: `$KUBEBUILDER_ASSETS`, then the cache
//! (`~/.cache/berth/testenv/v1.20.2/bin`), else builds them from Debian's packages with
//! `scripts/build-testenv.sh` and fills the cache.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
/// The build's output (apt, go, make) goes to stderr, with a line a minute saying how
/// long it has run: stdout is for the caller's answer alone (`berth-testenv up` prints
/// only `export` lines, which `scripts/demo` evaluates). `$BERTH_TESTENV_BUILD` names
/// another build command, run as `COMMAND OUT_DIR` (the tests' stand-in for the real
/// ten-minute build).
///
/// # Errors
/// The build failed.
pub fn ensure() -> Result<PathBuf, TestenvError> {
    if let Some(dir) = find() {
        return Ok(dir);
    }
    let cache = cache_dir();
    eprintln!(
        "building the control plane (etcd, kube-apiserver, kube-controller-manager v1.20.2) from Debian's kubernetes source into {}: about 10 minutes on 2 cores, once; apt-get needs root (or sudo)",
        cache.display()
    );
    let mut command = match std::env::var_os("BERTH_TESTENV_BUILD") {
        Some(stand_in) => Command::new(stand_in),
        None => {
            let mut bash = Command::new("bash");
            bash.arg("-c").arg(BUILD_SCRIPT).arg("build-testenv.sh");
            bash
        }
    };
    let io_err = |what: &str| {
        let what = what.to_string();
        move |cause| TestenvError::Io { what, cause }
    };
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(io_err("duplicating stderr"))?;
    let mut child = command
        .arg(&cache)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stderr))
        .spawn()
        .map_err(io_err("running the build script"))?;
    let started = Instant::now();
    let mut next_note = started + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().map_err(io_err("waiting for the build"))? {
            break status;
        }
        if Instant::now() >= next_note {
            eprintln!(
                "… still building the control plane ({} min so far)",
                started.elapsed().as_secs() / 60
            );
            next_note += Duration::from_secs(60);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if status.success() && complete(&cache) {
        eprintln!(
            "control plane built in {:.1} min",
            started.elapsed().as_secs_f64() / 60.0
        );
        Ok(cache)
    } else {
        Err(TestenvError::Assets(format!(
            "building them failed ({status}); set KUBEBUILDER_ASSETS to a folder with {}",
            BINARIES.join(", ")
        )))
    }
}
