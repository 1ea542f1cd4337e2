//! Previews' case (issue 65): an app set of `refs = ["refs/pull/*/head"]` over a bare
//! repository with 100 open pull requests, followed by `berth run`; then a push to one
//! pull request at a time: the time from the push to its preview's ConfigMap holding the
//! new value, and what the other 99 previews cost meanwhile — their syncs (each a fetch)
//! and the API server's requests for their namespaces (its audit log). The goal: none.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

use super::daemon::Daemon;
use super::{git, sized, Bench, Samples};

fn config_map(value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  value: \"{value}\"\n"
    )
}

impl Bench {
    pub(crate) async fn previews(&mut self) -> Result<()> {
        let prs = sized(100, 5);
        let dir = self.work.join("previews");
        let (work, bare) = (dir.join("work"), dir.join("shop.git"));
        std::fs::create_dir_all(work.join("deploy"))?;
        git(&work, &["init", "-q", "-b", "main"])?;
        std::fs::write(work.join("deploy/cm.yaml"), config_map("0"))?;
        git(&work, &["add", "-A"])?;
        git(&work, &["commit", "-qm", "main"])?;
        let bare_path = bare.display().to_string();
        git(&work, &["clone", "-q", "--bare", ".", &bare_path])?;
        // Each pull request's ref, as a server writes it.
        let head = git(&work, &["rev-parse", "HEAD"])?.trim().to_string();
        let refs: String = (1..=prs)
            .map(|n| format!("create refs/pull/{n}/head {head}\n"))
            .collect();
        let mut update = Command::new("git")
            .args(["--git-dir", &bare_path, "update-ref", "--stdin"])
            .stdin(Stdio::piped())
            .spawn()?;
        update.stdin.take().unwrap().write_all(refs.as_bytes())?;
        if !update.wait()?.success() {
            bail!("git update-ref --stdin failed");
        }
        let state = dir.join("state");
        std::fs::create_dir_all(&state)?;
        let config = dir.join("previews.toml");
        std::fs::write(&config, format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"off\"\n[cluster]\nkubeconfig = \"{}\"\n[[app_set]]\nname = \"bench\"\nrepo = \"{bare_path}\"\nrefs = [\"refs/pull/*/head\"]\napp_name = \"pr-{{number}}\"\nnamespace = \"bp-{{number}}\"\ncreate_namespace = true\nprune = true\npath = \"deploy\"\nmax_apps = 200\n",
            state.display(), self.cp.kubeconfig.display(),
        ))?;
        let daemon = Daemon::start(&self.berth, &config, "previews")?;
        let client = self.client().await?;
        let maps: Api<ConfigMap> = Api::all(client.clone());
        let value_of = |n: usize| {
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("bp-{n}"));
            async move {
                let map = maps.get_opt("web").await.ok()??;
                map.data?.get("value").cloned()
            }
        };
        let history = berth::history::HistoryLog::new(&state);
        let syncs = |n: usize| history.read(&format!("pr-{n}")).map_or(0, |r| r.len());
        let measured = daemon.explain(
            async {
                let start = Instant::now();
                let listed = ListParams::default().fields("metadata.name=web");
                while maps.list(&listed).await.map_or(0, |l| l.items.len()) < prs {
                    if start.elapsed() > Duration::from_secs(300) {
                        bail!("the {prs} previews were not all applied within 300 s");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                let (mut took, mut syncs_of_others, mut requests_of_others) = (Vec::new(), 0, 0);
                for (round, n) in (1..=sized(10, 2)).map(|i| (i, (i * 37) % prs + 1)) {
                    let before: Vec<usize> = (1..=prs).map(syncs).collect();
                    let value = format!("push-{round}");
                    std::fs::write(work.join("deploy/cm.yaml"), config_map(&value))?;
                    git(&work, &["commit", "-qam", &value])?;
                    let since = jiff::Timestamp::now();
                    let started = Instant::now();
                    let target = format!("+HEAD:refs/pull/{n}/head");
                    git(&work, &["push", "-q", &bare_path, &target])?;
                    while value_of(n).await.as_deref() != Some(value.as_str()) {
                        if started.elapsed() > Duration::from_secs(60) {
                            bail!("the push to pull request {n} was not applied within 60 s");
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    took.push(started.elapsed().as_secs_f64());
                    std::thread::sleep(Duration::from_millis(500)); // the audit log lags
                    let own = format!("bp-{n}");
                    requests_of_others += (self.cp.audit_events(since).iter())
                        .filter(|e| {
                            e["userAgent"]
                                .as_str()
                                .is_some_and(|a| a.starts_with("berth/"))
                        })
                        .filter(|e| {
                            let ns = e["objectRef"]["namespace"].as_str().unwrap_or("");
                            ns.starts_with("bp-") && ns != own
                        })
                        .count();
                    syncs_of_others += (1..=prs)
                        .filter(|m| *m != n)
                        .map(|m| syncs(m) - before[m - 1])
                        .sum::<usize>();
                }
                anyhow::Ok((took, syncs_of_others, requests_of_others))
            }
            .await,
        )?;
        drop(daemon);
        let (took, syncs_of_others, requests_of_others) = measured;
        let pushes = took.len();
        let took = Samples(took);
        self.rows.push(format!(
            "| 17. push to one of {prs} open pull requests → its preview applied, {pushes} pushes | berth run | p50 {:.2} s | p95 {:.2} s | max {:.2} s | — |",
            took.median(),
            took.percentile(0.95),
            took.max()
        ));
        self.rows.push(format!(
            "| 17. … the other {} previews meanwhile | syncs (fetches), API requests | {syncs_of_others} | {requests_of_others} | — | goal 0 |",
            prs - 1
        ));
        self.notes.push(format!(
            "Previews: with {prs} pull requests open, a push to one is applied p50 {:.2} s, p95 {:.2} s later; the other {} previews synced {syncs_of_others} times and sent {requests_of_others} API requests meanwhile ({pushes} pushes).",
            took.median(),
            took.percentile(0.95),
            prs - 1
        ));
        Ok(())
    }
}
