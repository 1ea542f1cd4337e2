//! A real Kubernetes control plane on loopback — etcd, kube-apiserver and
//! kube-controller-manager — and the kubelet stand-in that marks pods Running and Ready.
//! For integration tests, benchmarks and the local demo; not used by the agent itself.
//!
//! - [`assets`]: finds (or builds) the binaries;
//! - [`control_plane`]: `up` and `down`, by pid;
//! - `process.rs`: starting and recording its processes, whether one still runs;
//! - [`kubelet`]: the stand-in.

pub mod assets;
pub mod control_plane;
pub mod kubelet;
mod process;

pub use control_plane::{ControlPlane, UpOptions};

/// Errors of the local control plane tool.
#[derive(Debug, thiserror::Error)]
pub enum TestenvError {
    /// A file or process operation failed. The OS's error is in the message and not a
    /// `source` too, so a chain printed whole (`{e:#}`, anyhow's report) shows it once;
    /// nothing walks it.
    #[error("{what}: {cause}")]
    Io {
        /// What was being done.
        what: String,
        /// What the OS said.
        cause: std::io::Error,
    },
    /// The binaries are not there and could not be built.
    #[error("control plane binaries not found: {0}")]
    Assets(String),
    /// A component did not come up.
    #[error("{component} did not become ready within {seconds}s; see {log}")]
    NotReady {
        /// Which component.
        component: &'static str,
        /// How long we waited.
        seconds: u64,
        /// Its log file.
        log: String,
    },
    /// No client could be made from the kubeconfig.
    #[error("cannot use kubeconfig {0}")]
    Client(String),
    /// A component exited early.
    #[error("{component} exited during start-up ({status}); see {log}")]
    Exited {
        /// Which component.
        component: &'static str,
        /// Its exit status.
        status: String,
        /// Its log file.
        log: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestenvError {
    let what = what.into();
    move |cause| TestenvError::Io { what, cause }
}
