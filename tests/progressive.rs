//! Progressive delivery on the plain Deployment (issue 66), against the real control plane
//! with Kubernetes' Deployment controller running and a real Prometheus fed by a
//! Pushgateway: the test pushes an error rate for each version once berth has made its
//! ReplicaSet, and counts each version's ready pods from the API server at every step.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use berth::history::{Outcome, RolloutOutcome};
use common::prometheus::Prometheus;
use common::{Repo, Setup};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};

/// Ten replicas of `web` (`image`), its strategy the RollingUpdate git writes: what
/// berth holds during a canary and gives back at its end.
fn deployment(image: &str) -> String {
    common::web_deployment(image, "", "").replace("replicas: 3", "replicas: 10")
}

/// Four replicas of `web` (`image`).
fn web(image: &str) -> String {
    common::web_deployment(image, "", "").replace("replicas: 3", "replicas: 4")
}

const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector: {app: web}\n  ports:\n    - port: 80\n";

/// Ready pods by pod-template hash (pods being deleted left out).
async fn ready_by_version(pods: &Api<Pod>) -> BTreeMap<String, i32> {
    let mut ready = BTreeMap::new();
    for pod in pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
    {
        let is_ready = (pod.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if pod.metadata.deletion_timestamp.is_none() && is_ready {
            let labels = pod.metadata.labels.unwrap_or_default();
            *ready
                .entry(labels["pod-template-hash"].clone())
                .or_default() += 1;
        }
    }
    ready
}

/// The hash of the ReplicaSet running `image`, once there is one.
async fn version_of(sets: &Api<ReplicaSet>, image: &str) -> String {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        for rs in sets.list(&ListParams::default()).await.unwrap() {
            let spec = rs.spec.as_ref().and_then(|s| s.template.as_ref());
            let runs = spec
                .and_then(|t| t.spec.as_ref())
                .is_some_and(|s| s.containers[0].image.as_deref() == Some(image));
            if runs {
                return rs.metadata.labels.unwrap_or_default()["pod-template-hash"].clone();
            }
        }
        assert!(Instant::now() < end, "no ReplicaSet runs {image}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The splits of the pods seen, each with how long it held, in order.
async fn watch_splits(
    pods: &Api<Pod>,
    new: &str,
    until: impl Fn() -> bool,
) -> Vec<((i32, i32), Duration)> {
    let mut seen: Vec<((i32, i32), Instant, Instant)> = Vec::new();
    while !until() {
        let ready = ready_by_version(pods).await;
        let new_ready = ready.get(new).copied().unwrap_or(0);
        let old_ready: i32 = ready
            .iter()
            .filter(|(h, _)| *h != new)
            .map(|(_, n)| n)
            .sum();
        let now = Instant::now();
        match seen.last_mut() {
            Some((split, _, last)) if *split == (new_ready, old_ready) => *last = now,
            _ => seen.push(((new_ready, old_ready), now, now)),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen.into_iter()
        .map(|(s, first, last)| (s, last - first))
        .collect()
}

/// A namespace of ten replicas of web:1, synced by an app whose canary has `steps`.
struct Bed {
    client: kube::Client,
    ns: String,
    repo: Repo,
    setup: Setup,
    pods: Api<Pod>,
    sets: Api<ReplicaSet>,
}

impl Bed {
    /// The bed of app `name`, `agent` added to its `[agent]` settings.
    async fn canary(
        cp: &'static berth_testenv::ControlPlane,
        name: &str,
        steps: &str,
        agent: &str,
    ) -> Bed {
        let client = common::client(cp).await;
        let ns = common::namespace(&client, name).await;
        let repo = Repo::new();
        repo.write("web.yaml", &deployment("web:1"));
        repo.commit("web 1");
        let rollout =
            format!("[app.rollout]\nstrategy = \"canary\"\ntimeout = \"2m\"\nsteps = {steps}\n");
        let setup = Setup::new(cp, name, &repo, &ns, &rollout);
        let config = std::fs::read_to_string(&setup.config).unwrap();
        let config = config.replacen(
            "interval = \"1h\"\n",
            "",
            usize::from(agent.contains("interval")),
        );
        std::fs::write(&setup.config, config).unwrap();
        setup.agent_setting(agent);
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 0, "{out}{err}");
        Bed {
            pods: Api::namespaced(client.clone(), &ns),
            sets: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            repo,
            setup,
        }
    }
}

fn config(prometheus: &Prometheus) -> String {
    format!(
        "[app.rollout]\nstrategy = \"canary\"\ntimeout = \"2m\"\nsteps = [{{ weight = 20, pause = \"10s\", analysis = [\"errors\"] }}, {{ weight = 50, analysis = [\"errors\"] }}, {{ weight = 100 }}]\n[[analysis]]\nname = \"errors\"\nprometheus = \"{}\"\nquery = 'max(http_error_ratio{{app=\"web\",version=\"{{version}}\"}})'\nmax = 0.05\ninterval = \"1s\"\ncount = 2\n",
        prometheus.address
    )
}

/// A good version goes 20 % → 50 % → 100 % with its error rate checked at each step, the
/// pods of each version counted at each; a bad one is aborted at its first check, the old
/// version back at its full size and its template restored.
#[tokio::test(flavor = "multi_thread")]
async fn a_canary_steps_through_its_weights_and_a_bad_version_is_aborted() {
    let (Some(cp), Some(prometheus)) = (common::control_plane(), Prometheus::start()) else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "canary").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web:1"));
    repo.write("service.yaml", SERVICE);
    repo.commit("web 1");
    let setup = Setup::new(cp, "canary", &repo, &ns, &config(&prometheus));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "the first version is created as it is: {out}{err}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);

    repo.write("web.yaml", &deployment("web:2"));
    repo.commit("web 2");
    // The plan predicts the steps, their pods and what holds each.
    let (code, out, err) = setup.berth(&["plan"]);
    assert_eq!(code, 0, "{out}{err}");
    for said in [
        "; canary, 10 replicas",
        "1      20 %     2     8     pause 10s, analysis errors",
        "2      50 %     5     5     analysis errors",
        "3      100 %    10    0     -",
    ] {
        assert!(out.contains(said), "{said}: {out}");
    }
    let (splits, (code, out, err)) = std::thread::scope(|s| {
        let sync = s.spawn(|| setup.berth(&["sync"]));
        let splits = async {
            let new = version_of(&sets, "web:2").await;
            prometheus.push(
                "web",
                &format!("http_error_ratio{{app=\"web\",version=\"{new}\"}} 0.01\n"),
            );
            watch_splits(&pods, &new, || sync.is_finished()).await
        };
        let splits =
            tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(splits));
        (splits, sync.join().unwrap())
    });
    assert_eq!(code, 0, "{out}{err}");
    // 20 % of 10: 2 new and 8 old, held through the 10 s pause and the checks.
    let held = |want: (i32, i32)| {
        (splits.iter())
            .filter(|(split, _)| *split == want)
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    };
    assert!(held((2, 8)) >= Duration::from_secs(5), "{splits:?}");
    assert!(held((5, 5)) >= Duration::from_millis(500), "{splits:?}");
    assert_eq!(splits.last().unwrap().0, (10, 0), "{splits:?}");
    // New pods come up before old ones go: never fewer than 10 ready.
    for ((new, old), _) in &splits {
        assert!(new + old >= 10, "{splits:?}");
    }
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{:?}", record.errors);
    let rollout = &record.rollouts[0];
    assert_eq!(rollout.rollout.outcome, RolloutOutcome::Complete);
    let weights: Vec<(u8, i32, i32)> = rollout
        .canary
        .iter()
        .map(|s| (s.weight, s.new, s.old))
        .collect();
    assert_eq!(weights, [(20, 2, 8), (50, 5, 5), (100, 10, 0)]);
    let check = &rollout.canary[0].checks[0];
    assert!(check.passed && check.measurements.len() == 2, "{check:?}");
    assert_eq!(
        check.measurements[0].value,
        Some(berth::history::Value::Number(0.01))
    );
    let live = deployments.get("web").await.unwrap();
    let spec = live.spec.unwrap();
    assert_ne!(spec.paused, Some(true), "as git has it at the end");
    let strategy = spec.strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let surge = strategy.rolling_update.and_then(|r| r.max_surge);
    assert_eq!(
        surge,
        Some(IntOrString::Int(1)),
        "git's maxSurge given back"
    );
    let good = version_of(&sets, "web:2").await;

    // A bad version: aborted at its first check, the old version back at 10.
    repo.write("web.yaml", &deployment("web:3"));
    repo.commit("web 3");
    let (code, out, err) = std::thread::scope(|s| {
        let sync = s.spawn(|| setup.berth(&["sync"]));
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(async {
                let bad = version_of(&sets, "web:3").await;
                prometheus.push(
                    "web",
                    &format!("http_error_ratio{{app=\"web\",version=\"{bad}\"}} 0.3\n"),
                );
            })
        });
        sync.join().unwrap()
    });
    assert_eq!(code, 1, "{out}{err}");
    let said = "analysis errors failed at step 1 (20 %): 0.3, over the max 0.05";
    assert!(out.contains(said) || err.contains(said), "{out}{err}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::RolledBack);
    let rollout = &record.rollouts[0];
    assert_eq!(rollout.rollout.outcome, RolloutOutcome::Failed);
    assert!(
        rollout.rollout.message.contains(said),
        "{}",
        rollout.rollout.message
    );
    assert!(rollout.rollback.is_some(), "rolled back");
    assert!(!rollout.canary[0].checks[0].passed);
    let ready = ready_by_version(&pods).await;
    assert_eq!(ready.get(&good).copied(), Some(10), "{ready:?}");
    assert_eq!(ready.values().sum::<i32>(), 10, "{ready:?}");
    let live = deployments.get("web").await.unwrap();
    let image = live.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("web:2"), "the old template restored");
    // The status page's chart: the step's hold with its weight, each measurement marked.
    let body = sync_page(&setup, &record.id);
    for said in [
        r#"<rect class="hold""#,
        ">20 %</text>",
        r#"<circle class="check-failed""#,
        "<title>errors 0.3: 0.3, over the max 0.05</title>",
        "step 1 at 20 %, errors 0 of 1 passed",
    ] {
        assert!(body.contains(said), "{said} in {body}");
    }
}

/// The status page of record `id` of the app of `setup`, from a `berth run` serving it.
fn sync_page(setup: &Setup, id: &str) -> String {
    use std::io::{Read, Write};
    let port = common::free_port();
    setup.agent_setting(&format!(
        "listen = \"127.0.0.1:{port}\"\nstatus_page = true"
    ));
    let _daemon = common::Daemon::start(&setup.config, &[]);
    let end = Instant::now() + Duration::from_secs(30);
    let mut stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(e) => assert!(Instant::now() < end, "berth run never answered: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let path = format!("/apps/{}/syncs/{id}", setup.app);
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
}

/// `berth run` killed (SIGKILL) while a canary holds step 2: the Deployment stays held at
/// 5 new and 5 old, and the restarted agent carries on from step 2 — never back to 20 % —
/// to 100 %, recording the steps it ran.
#[tokio::test(flavor = "multi_thread")]
async fn a_canary_cut_short_by_a_killed_agent_carries_on_from_its_step() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let steps =
        r#"[{ weight = 20, pause = "1s" }, { weight = 50, pause = "8s" }, { weight = 100 }]"#;
    let Bed {
        repo,
        setup,
        pods,
        sets,
        ..
    } = Bed::canary(cp, "restart", steps, "listen = \"off\"").await;
    repo.write("web.yaml", &deployment("web:2"));
    repo.commit("web 2");
    let mut daemon = common::Daemon::start(&setup.config, &[]);
    let new = version_of(&sets, "web:2").await;
    let split = || async {
        let ready = ready_by_version(&pods).await;
        let new_ready = ready.get(&new).copied().unwrap_or(0);
        (new_ready, ready.values().sum::<i32>() - new_ready)
    };
    let end = Instant::now() + Duration::from_secs(90);
    while split().await != (5, 5) {
        assert!(
            Instant::now() < end,
            "step 2 never stood: {:?}",
            split().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    daemon.signal(libc::SIGKILL);
    daemon.wait(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(split().await, (5, 5), "held where it stood");
    let _daemon = common::Daemon::start(&setup.config, &[]);
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let now = split().await;
        assert!(now.0 >= 5, "carried on, never back to 20 %: {now:?}");
        if now == (10, 0)
            && setup
                .history()
                .last()
                .is_some_and(|r| !r.rollouts.is_empty())
        {
            break;
        }
        assert!(Instant::now() < end, "never reached 100 %: {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{:?}", record.errors);
    let weights: Vec<u8> = record.rollouts[0].canary.iter().map(|s| s.weight).collect();
    assert_eq!(weights, [50, 100], "carried on from step 2");
}

/// A chart's Deployment carries its own strategy in `berth.dev/rollout` (the app's is
/// rolling): its canary runs; an annotation whose steps cannot run fails the sync, naming
/// the file and the Deployment, and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_annotated_with_a_canary_runs_it_and_a_wrong_one_writes_nothing() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "annotated").await;
    let annotated = |image: &str, steps: &str| {
        let annotation = format!(
            "  annotations:\n    berth.dev/rollout: '{{\"strategy\": \"canary\", \"steps\": {steps}}}'\n"
        );
        let web = web(image);
        web.replacen("  name: web\n", &format!("  name: web\n{annotation}"), 1)
    };
    let steps = r#"[{"weight": 50}, {"weight": 100}]"#;
    let repo = Repo::new();
    repo.write("web.yaml", &annotated("web:1", steps));
    repo.commit("web 1");
    let setup = Setup::new(cp, "annotated", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    repo.write("web.yaml", &annotated("web:2", steps));
    repo.commit("web 2");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("step 1 of 2: 50 % (2 new, 2 old)"), "{out}");
    let record = setup.history().pop().unwrap();
    let ran: Vec<(u8, i32, i32)> = (record.rollouts[0].canary.iter())
        .map(|s| (s.weight, s.new, s.old))
        .collect();
    assert_eq!(ran, [(50, 2, 2), (100, 4, 0)]);

    repo.write("web.yaml", &annotated("web:3", r#"[{"weight": 50}]"#));
    repo.commit("web 3");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = format!("web.yaml:1 (document 1): Deployment {ns}/web: annotation berth.dev/rollout: the last step has weight 50: a canary ends at weight = 100; nothing was written");
    assert!(out.contains(&said), "{out}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let live = deployments.get("web").await.unwrap().spec.unwrap();
    let image = live.template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("web:2"), "nothing written");
    assert_ne!(live.paused, Some(true));
}

/// Waits until the ready pods are `want` (hash, count), no other version's among them.
async fn wait_ready(pods: &Api<Pod>, want: &[(&str, i32)]) {
    let want: BTreeMap<String, i32> = want.iter().map(|(h, n)| (h.to_string(), *n)).collect();
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = ready_by_version(pods).await;
        if ready == want {
            return;
        }
        assert!(Instant::now() < end, "never {want:?}: {ready:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `berth sync` of `config` stopped (SIGTERM) once 8 pods of `stable` and 2 of `new` are
/// ready: a canary cut short at 20 %.
async fn cut_short_at_20(
    config: &std::path::Path,
    pods: &Api<Pod>,
    stable: &str,
    sets: &Api<ReplicaSet>,
    image: &str,
) -> String {
    let sync = spawn_sync(config);
    let new = version_of(sets, image).await;
    wait_ready(pods, &[(stable, 8), (&new, 2)]).await;
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(sync.id() as i32, libc::SIGTERM) };
    sync.wait_with_output().unwrap();
    new
}

/// `berth sync` of `config` started in the background, its output kept.
fn spawn_sync(config: &std::path::Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["sync", "--config"])
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `berth status APP` shows its canary at step 1, paused.
fn wait_paused(setup: &Setup, app: &str) -> String {
    let end = Instant::now() + Duration::from_secs(90);
    loop {
        let (_, out, err) = setup.berth(&["status", app]);
        if out.contains("paused until berth promote") {
            return out;
        }
        assert!(Instant::now() < end, "never paused:\n{out}{err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A step paused until `berth promote` holds its pods (2 new, 2 old) until promoted, then
/// goes on to 100 %; the next canary, paused likewise, is ended by `berth abort`: the
/// old version back at its full size, its template restored, the abort in the history.
#[tokio::test(flavor = "multi_thread")]
async fn berth_promote_ends_a_pause_and_berth_abort_the_canary() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "promote").await;
    let repo = Repo::new();
    repo.write("web.yaml", &web("web:1"));
    repo.commit("web 1");
    let rollout = "[app.rollout]\nstrategy = \"canary\"\ntimeout = \"2m\"\nsteps = [{ weight = 50, pause = \"promote\" }, { weight = 100 }]\n";
    let setup = Setup::new(cp, "shop", &repo, &ns, rollout);
    let (code, out, err) = setup.berth(&["promote", "shop"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("app shop has no canary running: nothing to promote"),
        "{err}"
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);

    repo.write("web.yaml", &web("web:2"));
    repo.commit("web 2");
    let sync = spawn_sync(&setup.config);
    let status = wait_paused(&setup, "shop");
    let deployment = format!("deployment.apps/web -n {ns}");
    for cell in [deployment.as_str(), "1/2", "50 %", "2/2"] {
        assert!(status.contains(cell), "{cell} in:\n{status}");
    }
    let new = version_of(&sets, "web:2").await;
    // Held, nobody promoting: 2 new and 2 old for the 3 s watched.
    let watched = Instant::now() + Duration::from_secs(3);
    let held = watch_splits(&pods, &new, || Instant::now() > watched).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].0, (2, 2), "{held:?}");
    let (code, out, err) = setup.berth(&["promote", "shop"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{deployment}: step 1 of 2 (50 %): promoted")),
        "{out}"
    );
    let done = sync.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{said}");
    assert!(said.contains("promoted by "), "{said}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{:?}", record.errors);
    let ran: Vec<(u8, i32, i32)> = (record.rollouts[0].canary.iter())
        .map(|s| (s.weight, s.new, s.old))
        .collect();
    assert_eq!(ran, [(50, 2, 2), (100, 4, 0)]);
    let (_, out, _) = setup.berth(&["status", "shop"]);
    assert!(
        !out.contains("NEW/OLD"),
        "no canary shown once it ended:\n{out}"
    );

    repo.write("web.yaml", &web("web:3"));
    repo.commit("web 3");
    let sync = spawn_sync(&setup.config);
    wait_paused(&setup, "shop");
    let (code, out, err) = setup.berth(&["abort", "shop"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{deployment}: step 1 of 2 (50 %): aborted")),
        "{out}"
    );
    let done = sync.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(!done.status.success(), "{said}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::RolledBack, "{:?}", record.errors);
    let rollout = &record.rollouts[0].rollout;
    assert_eq!(rollout.outcome, RolloutOutcome::Failed);
    assert!(
        rollout.message.contains("aborted by berth abort ("),
        "{}",
        rollout.message
    );
    let ready = ready_by_version(&pods).await;
    assert_eq!(
        ready.get(&new).copied(),
        Some(4),
        "web:2 back in full: {ready:?}"
    );
    assert_eq!(ready.values().sum::<i32>(), 4, "{ready:?}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let live = deployments.get("web").await.unwrap().spec.unwrap();
    let image = live.template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("web:2"), "the old template restored");
}

/// Canaries cut short at 20 % (their sync stopped): a new commit starts its own canary
/// from the version that ran before, the abandoned one's pods gone at its first step;
/// git reverted to the version that ran before brings it back to full size at once — no
/// steps — and the Deployment is as git has it.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_commit_or_a_git_revert_after_a_canary_was_cut_short() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let steps = r#"[{ weight = 20, pause = "5m" }, { weight = 100 }]"#;
    let Bed {
        client,
        ns,
        repo,
        setup,
        pods,
        sets,
    } = Bed::canary(cp, "revert", steps, "").await;
    let stable = version_of(&sets, "web:1").await;
    repo.write("web.yaml", &deployment("web:2"));
    repo.commit("web 2");
    cut_short_at_20(&setup.config, &pods, &stable, &sets, "web:2").await;
    // web:3 while web:2's canary holds: its own canary from web:1, web:2's pods gone.
    repo.write("web.yaml", &deployment("web:3"));
    repo.commit("web 3");
    cut_short_at_20(&setup.config, &pods, &stable, &sets, "web:3").await;
    repo.write("web.yaml", &deployment("web:1"));
    repo.commit("revert to web 1");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("git went back to the version this canary replaced"),
        "{out}"
    );
    let ready = ready_by_version(&pods).await;
    assert_eq!(ready.get(&stable).copied(), Some(10), "{ready:?}");
    assert_eq!(ready.values().sum::<i32>(), 10, "{ready:?}");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let live = deployments.get("web").await.unwrap().spec.unwrap();
    assert_ne!(live.paused, Some(true), "as git has it");
    let image = live.template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("web:1"));
}

/// `berth run` holding web:2's canary at 20 % (a five-minute pause): a commit of web:3
/// supersedes it — within the agent's interval, no waiting out the pause — and web:3's own
/// canary starts from web:1 at once, web:2's pods gone; the record says what superseded it.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_commit_supersedes_a_running_canary() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let steps = r#"[{ weight = 20, pause = "5m" }, { weight = 100 }]"#;
    // The agent fetches every 5 s during a canary's hold: its interval.
    let agent = "listen = \"off\"\ninterval = \"5s\"";
    let Bed {
        repo,
        setup,
        pods,
        sets,
        ..
    } = Bed::canary(cp, "supersede", steps, agent).await;
    let stable = version_of(&sets, "web:1").await;
    repo.write("web.yaml", &deployment("web:2"));
    repo.commit("web 2");
    let _daemon = common::Daemon::start(&setup.config, &[]);
    let second = version_of(&sets, "web:2").await;
    wait_ready(&pods, &[(&stable, 8), (&second, 2)]).await;
    repo.write("web.yaml", &deployment("web:3"));
    let sha = repo.commit("web 3");
    let third = version_of(&sets, "web:3").await;
    wait_ready(&pods, &[(&stable, 8), (&third, 2)]).await;
    let superseded = setup.history().into_iter().find_map(|r| {
        let rollout = r.rollouts.into_iter().next()?.rollout;
        (rollout.outcome == RolloutOutcome::Superseded).then_some(rollout.message)
    });
    let said = format!("superseded at step 1 (20 %) by commit {}", &sha[..7]);
    assert!(
        superseded.as_deref().is_some_and(|m| m.starts_with(&said)),
        "{superseded:?}"
    );
}

/// The version Service `name`'s selector is pinned to (`pod-template-hash`), if any.
async fn pinned(services: &Api<Service>, name: &str) -> Option<String> {
    let service = services.get(name).await.unwrap();
    let selector = service.spec.unwrap().selector.unwrap_or_default();
    selector.get("pod-template-hash").cloned()
}

/// Blue-green: web:2 at full size beside web:1, the active Service `web` pinned to web:1's
/// pods and `web-preview` to web:2's while a Job check runs, the switch only once it passed,
/// web:1 kept through the scale-down delay and then gone. A failing check leaves `web` on
/// web:2 and brings web:3 to 0.
#[tokio::test(flavor = "multi_thread")]
async fn blue_green_switches_the_active_service_only_after_its_checks() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "bluegreen").await;
    let repo = Repo::new();
    repo.write("web.yaml", &common::web_deployment("web:1", "", ""));
    let preview = SERVICE.replace("name: web\n", "name: web-preview\n");
    repo.write("services.yaml", &format!("{SERVICE}---\n{preview}"));
    repo.commit("web 1");
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("smoke.yaml");
    std::fs::write(&job, common::check_job(0)).unwrap();
    let rollout = format!(
        "[app.rollout]\nstrategy = \"blue-green\"\ntimeout = \"1m\"\npreview_service = \"web-preview\"\nactive_service = \"web\"\nanalysis = [\"smoke\"]\nscale_down_delay = \"3s\"\n[[analysis]]\nname = \"smoke\"\njob = \"{}\"\ninterval = \"1s\"\ncount = 2\n",
        job.display()
    );
    let setup = Setup::new(cp, "bluegreen", &repo, &ns, &rollout);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let old = version_of(&sets, "web:1").await;

    repo.write("web.yaml", &common::web_deployment("web:2", "", ""));
    repo.commit("web 2");
    let mut sync = spawn_sync(&setup.config);
    let mut seen = Vec::new();
    while sync.try_wait().unwrap().is_none() {
        let active = pinned(&services, "web").await;
        let preview = pinned(&services, "web-preview").await;
        let ready = ready_by_version(&pods).await;
        seen.push((jiff::Timestamp::now(), active, preview, ready));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = sync.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stdout)
    );
    let new = version_of(&sets, "web:2").await;
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{:?}", record.errors);
    let checked = &record.rollouts[0].canary[0].checks[0];
    assert!(checked.passed, "{checked:?}");
    let last_measured = checked.measurements.last().unwrap().at;
    let (old_pin, new_pin) = (Some(old.clone()), Some(new.clone()));
    let full = |ready: &BTreeMap<String, i32>, v: &str| ready.get(v) == Some(&3);
    assert!(
        seen.iter()
            .any(|(_, a, p, r)| *a == old_pin && *p == new_pin && full(r, &new) && full(r, &old)),
        "both versions at full size, each behind its Service: {seen:?}"
    );
    let switched: Vec<_> = seen.iter().filter(|(_, a, ..)| *a == new_pin).collect();
    assert!(
        switched.iter().all(|(at, ..)| *at > last_measured),
        "switched only after the check's last measurement ({last_measured}): {seen:?}"
    );
    assert!(
        switched.iter().any(|(.., r)| full(r, &old)),
        "web:1 kept through the scale-down delay: {seen:?}"
    );
    wait_ready(&pods, &[(&new, 3)]).await;

    std::fs::write(&job, common::check_job(1)).unwrap();
    repo.write("web.yaml", &common::web_deployment("web:3", "", ""));
    repo.commit("web 3");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::RolledBack, "{:?}", record.errors);
    assert_eq!(pinned(&services, "web").await, new_pin, "never switched");
    wait_ready(&pods, &[(&new, 3)]).await;

    // A commit naming another app's Service in its annotation switches nothing.
    let other: Service = serde_yaml::from_str(&SERVICE.replace(
        "name: web\n",
        "name: other\n  labels: {berth.dev/app: shop}\n",
    ))
    .unwrap();
    services.create(&Default::default(), &other).await.unwrap();
    let hijack = r#"  annotations:
    berth.dev/rollout: '{"strategy": "blue-green", "preview_service": "web-preview", "active_service": "other"}'
"#;
    let web4 = common::web_deployment("web:4", "", "");
    repo.write(
        "web.yaml",
        &web4.replacen("  name: web\n", &format!("  name: web\n{hijack}"), 1),
    );
    repo.commit("web 4, switching another app's Service");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let said = "Service other is not one of app bluegreen's objects: blue-green switches only the app's own Services; nothing was written";
    assert!(out.contains(said), "{out}");
    assert_eq!(
        pinned(&services, "other").await,
        None,
        "another app's Service untouched"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let live = deployments.get("web").await.unwrap().spec.unwrap();
    let image = live.template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("web:2"), "nothing written");
    assert_ne!(live.paused, Some(true));
}

/// `engine = "agent"` on a control plane without Kubernetes' Deployment controller: berth's
/// own engine leaves the held Deployment to the canary's steps, then completes the rollout
/// it is given at 100 % and writes its status.
#[tokio::test(flavor = "multi_thread")]
async fn a_canary_runs_with_berths_own_engine() {
    let Some(cp) = common::control_plane_without_deployment_controller() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "agent-canary").await;
    let repo = Repo::new();
    repo.write("web.yaml", &web("web:1"));
    repo.commit("web 1");
    let rollout = "[app.rollout]\nengine = \"agent\"\nstrategy = \"canary\"\ntimeout = \"1m\"\nsteps = [{ weight = 50, pause = \"1s\" }, { weight = 100 }]\n";
    let setup = Setup::new(cp, "agent-canary", &repo, &ns, rollout);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    repo.write("web.yaml", &web("web:2"));
    repo.commit("web 2");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{:?}", record.errors);
    let ran: Vec<(u8, i32, i32)> = (record.rollouts[0].canary.iter())
        .map(|s| (s.weight, s.new, s.old))
        .collect();
    assert_eq!(ran, [(50, 2, 2), (100, 4, 0)]);
    assert_eq!(record.rollouts[0].rollout.outcome, RolloutOutcome::Complete);
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let new = version_of(&sets, "web:2").await;
    wait_ready(&pods, &[(&new, 4)]).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let live = deployments.get("web").await.unwrap();
    assert_ne!(live.spec.unwrap().paused, Some(true), "as git has it");
    let status = live.status.unwrap();
    assert_eq!(
        (status.updated_replicas, status.available_replicas),
        (Some(4), Some(4)),
        "the engine's status"
    );
}
