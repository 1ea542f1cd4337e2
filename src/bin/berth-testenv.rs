//! `berth-testenv`: a real local Kubernetes control plane for berth's tests, benchmarks
//! and demo — `up`, `down`, the kubelet stand-in, and where the binaries are.

use std::path::PathBuf;

use anyhow::Context;
use berth_testenv::{assets, control_plane, kubelet, ControlPlane, UpOptions};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    version,
    about = "A local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) with a kubelet stand-in"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the control plane and the kubelet stand-in in the background.
    Up {
        /// State folder (kubeconfig, logs, etcd data).
        #[arg(long, default_value_os_t = default_dir())]
        dir: PathBuf,
        /// Leave out the Deployment controller (for berth's own rollout engine).
        #[arg(long)]
        no_deployment_controller: bool,
    },
    /// Stop what `up` started and remove its state folder.
    Down {
        /// State folder given to `up`.
        #[arg(long, default_value_os_t = default_dir())]
        dir: PathBuf,
    },
    /// Run the kubelet stand-in in the foreground.
    Kubelet {
        /// The kubeconfig to use.
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: PathBuf,
    },
    /// Print the folder with the binaries, building them first when missing.
    Assets,
}

fn default_dir() -> PathBuf {
    std::env::temp_dir().join("berth-testenv")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            // The readiness poll's 500s while the apiserver starts are expected.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Up {
            dir,
            no_deployment_controller,
        } => {
            let started = std::time::Instant::now();
            let opts = UpOptions {
                dir,
                bin: assets::ensure()?,
                deployment_controller: !no_deployment_controller,
                kubelet: Some(std::env::current_exe().context("finding berth-testenv itself")?),
                controller_qps: None,
            };
            eprintln!(
                "starting etcd, kube-apiserver and kube-controller-manager in {}…",
                opts.dir.display()
            );
            let cp = ControlPlane::up(&opts).await?;
            eprintln!(
                "control plane ready in {:.1}s; stop it with: berth-testenv down --dir {}",
                started.elapsed().as_secs_f64(),
                cp.dir.display()
            );
            println!("export KUBECONFIG={}", cp.kubeconfig.display());
        }
        Command::Down { dir } => {
            ControlPlane::down(&dir)?;
            eprintln!("stopped; removed {}", dir.display());
        }
        Command::Kubelet { kubeconfig } => {
            let client = control_plane::client_for(&kubeconfig).await?;
            let ctrl_c = async {
                let _ = tokio::signal::ctrl_c().await;
            };
            kubelet::run(client, ctrl_c).await?;
        }
        Command::Assets => println!("{}", assets::ensure()?.display()),
    }
    Ok(())
}
