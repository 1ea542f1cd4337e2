//! The fleet case (issue 46): one agent, four local control planes, 250 apps on each from
//! one app set, one commit changing every app — time to every app applied and peak RSS,
//! beside kubectl applying the same change cluster by cluster and the published Argo CD
//! figures; then the same 1000 apps on one cluster, for what each added cluster costs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use berth_testenv::ControlPlane;

use super::daemon::rss;
use super::daemon::Daemon;
use super::fleet::{wait_named, write_fleet};
use super::{git, run, timed, Bench};

/// Argo CD's published memory figures (its application controller), as issue 46 cites
/// them, with the memory per cluster and per app they make.
const ARGO: &str = "Argo CD's application controller: 753 MiB for 12 apps on 9 clusters (84 MiB a cluster, 63 MiB an app), more than 12 GiB for 500 apps on 50 clusters (over 245 MiB a cluster, 25 MiB an app), out of memory at 400 apps on 4 clusters";

/// One run of the case: the agent's time to every app's record of the new commit, its
/// peak RSS over the whole run (the first sync of every app included), and the first
/// sync's time.
struct Measured {
    seconds: f64,
    peak: f64,
    first: f64,
}

impl Bench {
    /// 1000 apps from one set: `per_cluster` folders on each of four control planes (this
    /// one and three more), then `4 × per_cluster` folders on this one alone.
    pub async fn clusters(&mut self, per_cluster: usize) -> Result<()> {
        let mut planes = Vec::new();
        for i in 1..4 {
            let plane = self.extra_plane(&format!("cp-{i}"), None).await;
            match plane {
                Ok(plane) => planes.push(plane),
                Err(e) => {
                    for plane in &planes {
                        let _ = ControlPlane::down(&plane.dir);
                    }
                    return Err(e);
                }
            }
        }
        let kubeconfigs: Vec<PathBuf> = std::iter::once(&self.cp)
            .chain(&planes)
            .map(|cp| cp.kubeconfig.clone())
            .collect();
        let result = self.clusters_measured(per_cluster, &kubeconfigs);
        for plane in &planes {
            let _ = ControlPlane::down(&plane.dir);
        }
        result
    }

    fn clusters_measured(&mut self, per_cluster: usize, kubeconfigs: &[PathBuf]) -> Result<()> {
        let apps = per_cluster * kubeconfigs.len();
        let four = self.set_run("clusters", per_cluster, kubeconfigs)?;
        let one = self.set_run("one-cluster", apps, &kubeconfigs[..1])?;
        let kubectl = kubectl_by_cluster(&self.work, per_cluster, kubeconfigs)?;
        let per_added = (four.peak - one.peak) / (kubeconfigs.len() - 1) as f64;
        eprintln!(
            "{apps} apps on {} clusters: {:.1}s, {:.1} MiB; on one: {:.1}s, {:.1} MiB; kubectl {kubectl:.1}s",
            kubeconfigs.len(),
            four.seconds,
            four.peak,
            one.seconds,
            one.peak
        );
        self.rows.push(format!(
            "| 13. {apps} apps from one app set, {per_cluster} on each of {} clusters, one commit changing all | berth run | {:.1} s | {:.1} MiB peak (first sync of every app {:.0} s) | {:.1} MiB per added cluster | {:.2} of kubectl cluster by cluster ({kubectl:.1} s); {ARGO} |",
            kubeconfigs.len(),
            four.seconds,
            four.peak,
            four.first,
            per_added,
            four.seconds / kubectl,
        ));
        self.notes.push(format!(
            "Fleets: {apps} apps on {} clusters from one app set, one commit changing all: every app applied {:.1} s after the commit; berth run's peak RSS {:.1} MiB over the whole run (goal < 100 MiB); the same {apps} apps on one cluster {:.1} MiB, so each added cluster costs {per_added:.1} MiB (goal < 5 MiB), and each app {:.2} MiB. Like with like: Argo CD's figures are its application controller's memory with every cluster's state cached (its design), berth's the whole agent's; neither counts the API servers.",
            kubeconfigs.len(),
            four.seconds,
            four.peak,
            one.peak,
            four.peak / apps as f64
        ));
        Ok(())
    }

    /// `berth run` of one app set over `folders` folders on the clusters of `kubeconfigs`
    /// (each app's objects in the namespace `<label>`): the first sync of every app, then
    /// one commit changing all.
    fn set_run(&self, label: &str, folders: usize, kubeconfigs: &[PathBuf]) -> Result<Measured> {
        let repo = self.fleet_repo(label, label, folders)?;
        let path = self.set_config(
            label,
            &repo,
            kubeconfigs,
            &format!("app_name = \"{{folder}}-{{cluster}}\"\nnamespace = \"{label}\"\ncreate_namespace = true\n"),
        )?;
        let state = path.parent().unwrap_or(&self.work).to_path_buf();
        let names: Vec<String> = (0..folders)
            .flat_map(|f| (0..kubeconfigs.len()).map(move |c| format!("app-{f}-c{c}")))
            .collect();
        let first = git(&repo, &["rev-parse", "HEAD"])?.trim().to_string();
        let since = jiff::Timestamp::now();
        let daemon = Daemon::start(&self.berth, &path, label)?;
        daemon.explain((|| -> Result<Measured> {
            let first = wait_named(&state, &names, (&first, since), Duration::from_secs(1800))?;
            write_fleet(&repo, label, folders, 2)?;
            let since = jiff::Timestamp::now();
            git(&repo, &["commit", "-qam", "version 2"])?;
            let second = git(&repo, &["rev-parse", "HEAD"])?.trim().to_string();
            let seconds = wait_named(&state, &names, (&second, since), Duration::from_secs(900))?;
            Ok(Measured {
                seconds,
                peak: rss(daemon.pid()).0,
                first,
            })
        })())
    }
}

/// kubectl applying the same change, cluster by cluster: each cluster's objects applied
/// at version 1 first (not timed), then the seconds version 2 took on all of them, one
/// cluster after the other.
fn kubectl_by_cluster(work: &Path, per_cluster: usize, kubeconfigs: &[PathBuf]) -> Result<f64> {
    let ns = "clusters-kubectl";
    let mirror = work.join(ns);
    let kubectl = |kubeconfig: &Path| {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", kubeconfig);
        c
    };
    write_fleet(&mirror, ns, per_cluster, 1)?;
    for kubeconfig in kubeconfigs {
        run(kubectl(kubeconfig).args(["create", "namespace", ns]))?;
        run(kubectl(kubeconfig)
            .args(["apply", "--server-side", "-R", "-f"])
            .arg(&mirror))?;
    }
    write_fleet(&mirror, ns, per_cluster, 2)?;
    let mut seconds = 0.0;
    for kubeconfig in kubeconfigs {
        seconds += timed(
            kubectl(kubeconfig)
                .args(["apply", "--server-side", "-R", "-f"])
                .arg(&mirror),
        )?;
    }
    Ok(seconds)
}
