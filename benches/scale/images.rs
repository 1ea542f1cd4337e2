//! Image updates' case (issue 64): a scan of 100 image policies over a registry of 10,000
//! tags (10 repositories of 1,000, ten policies each), `berth images` beside `skopeo
//! list-tags` of the same 100 policies' repositories — time, the requests the registry
//! answered (its own access log) and peak memory; then `berth run` following an app whose
//! Deployment's image a policy owns: the time from a tag pushed to the Deployment applied
//! with it, over 20 tags.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use super::daemon::Daemon;
use super::registry_support::{Registry, PASSWORD, USER};
use super::{git, run, sized, Bench, Samples};

const REPOSITORIES: usize = 10;
const TAGS: usize = 1000;
const MEDIA: &str = "application/vnd.oci.image.layer.v1.tar";

/// Runs a command to its end: its wall time (s) and its peak resident set (MiB).
fn peak(cmd: &mut Command) -> Result<(f64, f64)> {
    let start = Instant::now();
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value; wait4 on the child this function started.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    if waited < 0 || status != 0 {
        bail!("{cmd:?} failed (status {status})");
    }
    Ok((
        start.elapsed().as_secs_f64(),
        usage.ru_maxrss as f64 / 1024.0,
    ))
}

impl Bench {
    /// Cases 15 and 16 on a control plane of their own, with the kubelet stand-in: a tag's
    /// rollout must not queue behind the Deployment controller's work the cases before left.
    pub(crate) async fn images(&mut self) -> Result<()> {
        let kubelet = std::path::PathBuf::from(env!("CARGO_BIN_EXE_berth-testenv"));
        let plane = self.plane_beside("cp-images", None, Some(kubelet)).await?;
        let main = std::mem::replace(&mut self.cp, plane);
        let result = self.images_here().await;
        let plane = std::mem::replace(&mut self.cp, main);
        let _ = berth_testenv::ControlPlane::down(&plane.dir);
        result
    }

    async fn images_here(&mut self) -> Result<()> {
        let Some(registry) = Registry::start_logged() else {
            bail!("no docker-registry: scripts/bench installs Debian's");
        };
        let dir = self.work.join("images");
        std::fs::create_dir_all(&dir)?;
        let layer = dir.join("layer");
        std::fs::write(&layer, b"an image")?;
        let tags: Vec<String> = (0..TAGS)
            .map(|i| format!("1.{}.{}", i / 100, i % 100))
            .collect();
        let listed = dir.join("tags");
        std::fs::write(&listed, tags.join("\n"))?;
        let (layer, listed) = (layer.display().to_string(), listed.display().to_string());
        for r in 0..REPOSITORIES {
            let repo = format!("bench/app{r}");
            registry.tool(&["tags", &registry.host, &repo, &layer, MEDIA, &listed]);
        }
        let policy = |name: &str, repo: &str, range: &str, interval: &str| {
            format!(
                "[[image_policy]]\nname = \"{name}\"\nimage = \"{}/{repo}\"\nsemver = \"{range}\"\ninterval = \"{interval}\"\ncredentials = \"{}\"\nca_file = \"{}\"\n",
                registry.host,
                registry.login.display(),
                registry.tls.ca.display()
            )
        };
        let state = dir.join("state");
        std::fs::create_dir_all(&state)?;
        let mut config = format!(
            "[agent]\nstate_dir = \"{}\"\nlisten = \"off\"\n[cluster]\nkubeconfig = \"{}\"\n",
            state.display(),
            self.cp.kubeconfig.display()
        );
        for p in 0..100 {
            let repo = format!("bench/app{}", p % REPOSITORIES);
            config += &policy(
                &format!("p{p}"),
                &repo,
                &format!("~1.{}", p / REPOSITORIES),
                "1m",
            );
        }
        let file = dir.join("scan.toml");
        std::fs::write(&file, config)?;
        let out = run(Command::new(&self.berth)
            .args(["images", "--config"])
            .arg(&file))?;
        let chosen = (0..100).filter(|p| {
            let want = format!("1.{}.99", p / REPOSITORIES);
            out.lines()
                .any(|l| l.starts_with(&format!("p{p} ")) && l.contains(&format!(" {want} ")))
        });
        if chosen.count() != 100 {
            bail!("berth images did not choose each policy's newest tag:\n{out}");
        }
        // skopeo reads its CA from a folder.
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs)?;
        std::fs::copy(&registry.tls.ca, certs.join("ca.crt"))?;
        let creds = format!("{USER}:{PASSWORD}");
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let (mut our_rss, mut their_rss) = (0f64, 0f64);
        let (mut our_requests, mut their_requests) = (0, 0);
        for _ in 0..sized(10, 2) {
            let before = registry.requests();
            let (secs, rss) = peak(
                Command::new(&self.berth)
                    .args(["images", "--config"])
                    .arg(&file),
            )?;
            ours.push(secs);
            our_rss = our_rss.max(rss);
            our_requests = registry.requests() - before;
            let before = registry.requests();
            let start = Instant::now();
            for p in 0..100 {
                let reference = format!("docker://{}/bench/app{}", registry.host, p % REPOSITORIES);
                let (_, rss) = peak(
                    Command::new("skopeo")
                        .args(["list-tags", "--creds", &creds, "--cert-dir"])
                        .arg(&certs)
                        .arg(&reference),
                )?;
                their_rss = their_rss.max(rss);
            }
            theirs.push(start.elapsed().as_secs_f64());
            their_requests = registry.requests() - before;
        }
        let (ours, theirs) = (Samples(ours), Samples(theirs));
        let case =
            "15. scan 100 image policies over 10,000 tags (10 repositories, local registry, TLS)";
        self.table(case, &[("berth images", &ours)], "s", Some(&theirs));
        self.table(case, &[("skopeo list-tags ×100", &theirs)], "s", None);
        self.rows.push(format!("| {case} | requests, peak RSS | berth {our_requests}, {our_rss:.1} MiB | skopeo {their_requests}, {their_rss:.1} MiB (one run of 100) | — | {:.2} of the requests |", our_requests as f64 / their_requests.max(1) as f64));
        self.notes.push(format!(
            "Image policies: 100 policies over 10,000 tags scanned by berth images in {:.2} s ({our_requests} requests, peak RSS {our_rss:.1} MiB); skopeo list-tags of the same 100 repositories in {:.2} s ({their_requests} requests, {their_rss:.1} MiB each run) — {:.2}×.",
            ours.median(),
            theirs.median(),
            ours.median() / theirs.median()
        ));
        self.tag_to_applied(&registry, &dir, &policy("web", "bench/web", "^2", "10s"))
            .await
    }

    /// `berth run` with one app whose Deployment's image a policy owns: each of 20 tags
    /// pushed, and the time until the Deployment is applied with it.
    async fn tag_to_applied(
        &mut self,
        registry: &Registry,
        dir: &Path,
        policy: &str,
    ) -> Result<()> {
        let image = format!("{}/bench/web", registry.host);
        registry.push("bench/web", "2.0.0", b"web", MEDIA);
        let bare = dir.join("web.git");
        git(
            dir,
            &[
                "init",
                "-q",
                "--bare",
                "-b",
                "main",
                &bare.display().to_string(),
            ],
        )?;
        let work = dir.join("web");
        std::fs::create_dir_all(work.join("deploy"))?;
        git(&work, &["init", "-q", "-b", "main"])?;
        let deployment = format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: images\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n        - name: web\n          image: {image}:2.0.0 # {{\"$imagepolicy\": \"web\"}}\n");
        std::fs::write(work.join("deploy/web.yaml"), deployment)?;
        std::fs::write(
            work.join("deploy/ns.yaml"),
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: images\n",
        )?;
        git(&work, &["add", "-A"])?;
        git(
            &work,
            &[
                "-c",
                "user.name=b",
                "-c",
                "user.email=b@x",
                "commit",
                "-qm",
                "web",
            ],
        )?;
        git(
            &work,
            &["push", "-q", &bare.display().to_string(), "HEAD:main"],
        )?;
        let state = dir.join("state-web");
        std::fs::create_dir_all(&state)?;
        let secret = dir.join("hook-secret");
        std::fs::write(&secret, "hook-s3cret")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let config = dir.join("web.toml");
        std::fs::write(&config, format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"127.0.0.1:{port}\"\n[cluster]\nkubeconfig = \"{}\"\n[[app]]\nname = \"web\"\nrepo = \"{}\"\nbranch = \"main\"\npath = \"deploy\"\nwebhook_secret_file = \"{}\"\n[app.scope]\nnamespaces = [\"*\"]\n[app.image_updates]\nauthor = \"berth <berth@example.com>\"\n{policy}",
            state.display(), self.cp.kubeconfig.display(), bare.display(), secret.display()
        ))?;
        let daemon = Daemon::start(&self.berth, &config, "images")?;
        let client = self.client().await?;
        let deployments: Api<Deployment> = Api::namespaced(client, "images");
        let image_now = || async {
            let d = deployments.get_opt("web").await.ok()??;
            d.spec?.template.spec?.containers.first()?.image.clone()
        };
        let samples = daemon.explain(
            async {
                let wait = |want: String| async move {
                    let start = Instant::now();
                    while image_now().await.as_deref() != Some(want.as_str()) {
                        if start.elapsed() > Duration::from_secs(60) {
                            bail!("{want} was not applied within 60 s");
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    anyhow::Ok(())
                };
                wait(format!("{image}:2.0.0"))
                    .await
                    .context("the first sync")?;
                // Each tag pushed and the registry's notification sent (as a signing relay
                // in front of it would), then each tag left to the policy's interval.
                // Tags are pushed a second apart at least: berth lists a repository at most
                // once a second however many notifications come (the latency of a burst
                // is that floor's, not a scan's).
                let (mut notified, mut scanned) = (Vec::new(), Vec::new());
                let mut last = Instant::now();
                for i in 1..=2 * sized(20, 3) {
                    let tag = format!("2.0.{i}");
                    tokio::time::sleep(Duration::from_secs(1).saturating_sub(last.elapsed())).await;
                    last = Instant::now();
                    registry.push("bench/web", &tag, b"web", MEDIA);
                    let start = Instant::now();
                    let notify = i <= sized(20, 3);
                    if notify {
                        notify_push(port, &registry.host, "bench/web", b"hook-s3cret")?;
                    }
                    wait(format!("{image}:{tag}")).await?;
                    let took = start.elapsed().as_secs_f64();
                    if notify {
                        notified.push(took)
                    } else {
                        scanned.push(took)
                    }
                }
                anyhow::Ok((notified, scanned))
            }
            .await,
        )?;
        drop(daemon);
        let (notified, scanned) = (Samples(samples.0), Samples(samples.1));
        for (how, s) in [
            ("the registry's notification", &notified),
            ("the policy's 10 s interval", &scanned),
        ] {
            self.rows.push(format!("| 16. image tag pushed → Deployment applied, 20 tags, by {how} | berth run | p50 {:.2} s | p95 {:.2} s | max {:.2} s | — |", s.median(), s.percentile(0.95), s.max()));
        }
        self.notes.push(format!("Image updates: a tag pushed to the registry is applied (scanned, committed, pushed, synced) p50 {:.2} s, p95 {:.2} s after the registry's notification; p50 {:.1} s, p95 {:.1} s later by the policy's 10 s interval alone.", notified.median(), notified.percentile(0.95), scanned.median(), scanned.percentile(0.95)));
        Ok(())
    }
}

/// POSTs Distribution's notification of a push to `repo` to the app `web`'s webhook on
/// `port`, signed with `secret` as a relay in front of the registry would.
fn notify_push(port: u16, host: &str, repo: &str, secret: &[u8]) -> Result<()> {
    use std::io::{Read, Write};
    let body = format!(
        r#"{{"events": [{{"id": "1", "action": "push", "target": {{"repository": "{repo}"}}, "request": {{"host": "{host}", "method": "PUT"}}}}]}}"#
    );
    let signature = berth::body_hmac::sign(secret, body.as_bytes());
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stream,
        "POST /hooks/web HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if !answer.starts_with("HTTP/1.1 202") {
        bail!("the webhook answered: {answer}");
    }
    Ok(())
}
