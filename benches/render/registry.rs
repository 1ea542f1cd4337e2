//! Registries' case (issue 63): the charts case's chart of 50 templates, resolved, fetched
//! and rendered from a local OCI registry (Debian's docker-registry, TLS from a test CA,
//! htpasswd auth) and from a Helm repository served over HTTPS — `berth render oci://…`
//! beside `helm template oci://…`, `berth render --repo` beside `helm template --repo`,
//! each run cold (no cache kept between runs, for either), interleaved.

use std::process::Command;

use anyhow::{bail, Result};

use super::registry_support::{helm, Registry, Served, Tls};
use super::{run, timed, Bench, Samples};

/// Runs of each tool: a fetch and render takes about a tenth of a second.
fn runs() -> usize {
    super::sized(30, 2)
}

impl Bench {
    /// `berth render` of a chart from each registry beside `helm template` of it.
    pub(crate) fn registry(&mut self) -> Result<()> {
        let Some(registry) = Registry::start() else {
            bail!("no docker-registry: scripts/bench installs Debian's");
        };
        let dir = self.work.join("registry");
        std::fs::create_dir_all(&dir)?;
        super::chart::write_chart(&dir)?;
        let site = dir.join("site");
        std::fs::create_dir_all(&site)?;
        helm(&[
            "package",
            &dir.join("bench").display().to_string(),
            "-d",
            &site.display().to_string(),
        ]);
        let chart = site.join("bench-0.1.0.tgz");
        registry.helm_push(&chart, "charts");
        helm(&["repo", "index", &site.display().to_string()]);
        let tls = Tls::new(&dir);
        let served = Served::start(&site, &tls);
        let reference = format!("oci://{}/charts/bench", registry.host);
        let common = [
            "-n",
            "shop",
            "--kube-version",
            "1.20.2",
            "--version",
            "0.1.0",
        ];
        let helm_home = dir.join("helm-home");
        let helm_registry = registry.dir.path().join("helm-registry.json");
        let helm_cmd = |args: &[&str], ca: &std::path::Path| {
            let mut cmd = Command::new("helm");
            cmd.args(["template", "web"])
                .args(args)
                .args(["--include-crds", "--skip-tests", "--ca-file"])
                .arg(ca)
                .args(common)
                .env("HELM_CONFIG_HOME", helm_home.join("config"))
                .env("HELM_CACHE_HOME", helm_home.join("cache"))
                .env("HELM_DATA_HOME", helm_home.join("data"));
            cmd
        };
        let berth_cmd = |args: &[&str], ca: &std::path::Path| {
            let mut cmd = Command::new(&self.berth);
            cmd.arg("render")
                .args(args)
                .args(["--release", "web", "--ca-file"])
                .arg(ca)
                .args(common);
            cmd
        };
        let oci = (
            berth_cmd(
                &[
                    &reference,
                    "--registry-credentials",
                    &registry.login.display().to_string(),
                ],
                &registry.tls.ca,
            ),
            helm_cmd(
                &[
                    &reference,
                    "--registry-config",
                    &helm_registry.display().to_string(),
                ],
                &registry.tls.ca,
            ),
        );
        let repo = (
            berth_cmd(&["bench", "--repo", &served.url], &tls.ca),
            helm_cmd(&["bench", "--repo", &served.url], &tls.ca),
        );
        for (name, (mut ours, mut theirs)) in
            [("an OCI registry", oci), ("a Helm repository", repo)]
        {
            let objects = run(&mut ours)?.matches("\n---").count() + 1;
            if objects != 100 {
                bail!("berth render of the chart from {name} gave {objects} objects, not 100");
            }
            run(&mut theirs)?;
            let (mut mine, mut peer) = (Vec::new(), Vec::new());
            for _ in 0..runs() {
                peer.push(timed(&mut theirs)?);
                mine.push(timed(&mut ours)?);
            }
            let (mine, peer) = (Samples(mine), Samples(peer));
            let case = format!(
                "14. resolve, fetch and render a chart of 100 objects from {name} (local, TLS)"
            );
            self.table(&case, &[("berth render", &mine)], "s", Some(&peer));
            self.table(&case, &[("helm template", &peer)], "s", None);
            self.notes.push(format!(
                "Registries: the chart of 100 objects from {name} resolved, fetched and rendered by berth render in {:.0} ms, by helm template in {:.0} ms ({:.2}×).",
                mine.median() * 1e3,
                peer.median() * 1e3,
                mine.median() / peer.median()
            ));
        }
        Ok(())
    }
}
