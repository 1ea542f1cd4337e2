//! berth's own rollout engine against the real Deployment controller: every scenario runs
//! once on a control plane with kube-controller-manager's Deployment controller and once
//! on one without it, driven by `rollout.engine = "agent"`. Both must keep the same
//! invariants at every observed state and end in the same ReplicaSets, status and
//! conditions. Also: the engine refuses a Deployment another controller reconciles, and a
//! SIGKILLed `berth run` resumes a rollout.

mod common;

use std::future::Future;
use std::time::Duration;

use berth::history::{RolloutOutcome, TimelineStep};
use berth::rollout::engine::{follow_driving, Engine};
use berth::rollout::hash::POD_TEMPLATE_HASH;
use berth::rollout::predict::view;
use berth::rollout::revisions::{self, REVISION};
use berth::rollout::{steps, track};
use common::{Repo, Setup};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    replicas: i32,
    surge: Option<&'static str>,
    unavailable: Option<&'static str>,
    recreate: bool,
    /// Pod-template annotation of the new versions: instant, after a delay, or never ready.
    readiness: &'static str,
    deadline: Option<i32>,
    scale_to: Option<i32>,
    paused: bool,
    history_limit: Option<i32>,
    /// Versions after the first.
    updates: i32,
}

const BASE: Scenario = Scenario {
    name: "",
    replicas: 3,
    surge: None,
    unavailable: None,
    recreate: false,
    readiness: "",
    deadline: None,
    scale_to: None,
    paused: false,
    history_limit: None,
    updates: 1,
};
const SLOW: &str = "testenv.berth.dev/ready-after";

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "r1-defaults",
            replicas: 1,
            ..BASE
        },
        Scenario {
            name: "r4-int-1-0-slow",
            replicas: 4,
            surge: Some("1"),
            unavailable: Some("0"),
            readiness: SLOW,
            ..BASE
        },
        Scenario {
            name: "r10-pct-30-20",
            replicas: 10,
            surge: Some("30%"),
            unavailable: Some("20%"),
            ..BASE
        },
        Scenario {
            name: "r4-int-0-1",
            replicas: 4,
            surge: Some("0"),
            unavailable: Some("1"),
            ..BASE
        },
        Scenario {
            name: "r4-pct-0-50-slow",
            replicas: 4,
            surge: Some("0%"),
            unavailable: Some("50%"),
            readiness: SLOW,
            ..BASE
        },
        Scenario {
            name: "never-ready",
            replicas: 3,
            surge: Some("1"),
            unavailable: Some("0"),
            readiness: "testenv.berth.dev/ready",
            deadline: Some(8),
            ..BASE
        },
        Scenario {
            name: "scaled-mid-rollout",
            replicas: 4,
            surge: Some("1"),
            unavailable: Some("1"),
            readiness: SLOW,
            scale_to: Some(8),
            ..BASE
        },
        Scenario {
            name: "recreate",
            replicas: 3,
            recreate: true,
            ..BASE
        },
        Scenario {
            name: "paused",
            replicas: 3,
            paused: true,
            deadline: Some(600),
            ..BASE
        },
        Scenario {
            name: "history-0",
            replicas: 2,
            history_limit: Some(0),
            updates: 2,
            ..BASE
        },
        Scenario {
            name: "history-2",
            replicas: 2,
            history_limit: Some(2),
            updates: 3,
            ..BASE
        },
    ]
}

fn int_or_percent(v: &str) -> Value {
    v.parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::from(v))
}

/// Version `v` of the scenario's Deployment.
fn manifest(s: &Scenario, ns: &str, v: i32, replicas: i32) -> Value {
    let mut annotations = serde_json::Map::new();
    if v > 1 && !s.readiness.is_empty() {
        let value = if s.readiness == SLOW { "1s" } else { "false" };
        annotations.insert(s.readiness.into(), json!(value));
    }
    let strategy = if s.recreate {
        json!({"type": "Recreate"})
    } else {
        let mut rolling = serde_json::Map::new();
        if let Some(v) = s.surge {
            rolling.insert("maxSurge".into(), int_or_percent(v));
        }
        if let Some(v) = s.unavailable {
            rolling.insert("maxUnavailable".into(), int_or_percent(v));
        }
        json!({"type": "RollingUpdate", "rollingUpdate": rolling})
    };
    let mut spec = json!({
        "replicas": replicas,
        "strategy": strategy,
        "selector": {"matchLabels": {"app": "app"}},
        "template": {"metadata": {"labels": {"app": "app"}, "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": format!("app:{v}")}]}},
    });
    if let Some(d) = s.deadline.filter(|_| v > 1 || s.paused) {
        spec["progressDeadlineSeconds"] = json!(d);
    }
    if let Some(l) = s.history_limit {
        spec["revisionHistoryLimit"] = json!(l);
    }
    if s.paused && v > 1 {
        spec["paused"] = json!(true);
    }
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": ns}, "spec": spec})
}

/// What a scenario ended in; the names differ between engines (different hashes), the rest
/// must not.
#[derive(Debug, PartialEq)]
struct End {
    /// (revision, spec.replicas, status.replicas, has the hash label), by revision.
    replica_sets: Vec<(i64, i32, i32, bool)>,
    /// replicas, updated, ready, available, unavailable.
    counts: (i32, i32, i32, i32, i32),
    /// Available and Progressing reasons.
    reasons: (Option<String>, Option<String>),
    outcome: RolloutOutcome,
}

struct Played {
    steps: Vec<TimelineStep>,
    end: End,
    /// Every ReplicaSet change seen: name, spec.replicas, available, resourceVersion.
    events: Vec<String>,
}

/// Logs every ReplicaSet change in a namespace until the returned sender is dropped.
fn log_replica_sets(
    client: &kube::Client,
    ns: &str,
) -> (
    tokio::task::JoinHandle<Vec<String>>,
    tokio::sync::oneshot::Sender<()>,
) {
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(events);
        let mut log = Vec::new();
        let mut stopped = stopped;
        loop {
            tokio::select! {
                _ = &mut stopped => return log,
                e = events.next() => match e {
                    Some(Ok(rs)) => log.push(format!("{} spec={} avail={} rv={}",
                        rs.metadata.name.unwrap_or_default(),
                        rs.spec.and_then(|s| s.replicas).unwrap_or(0),
                        rs.status.and_then(|s| s.available_replicas).unwrap_or(0),
                        rs.metadata.resource_version.unwrap_or_default())),
                    _ => return log,
                },
            }
        }
    });
    (task, stop)
}

async fn apply(api: &Api<Deployment>, m: &Value) -> i64 {
    let d = api
        .patch(
            "app",
            &PatchParams::apply("berth-test").force(),
            &Patch::Apply(m),
        )
        .await
        .expect("apply");
    d.metadata.generation.unwrap_or(0)
}

/// Follows a rollout; with an engine, the engine drives it meanwhile (the product's own
/// follow loop).
async fn follow(
    client: &kube::Client,
    ns: &str,
    generation: i64,
    engine: Option<&Engine>,
) -> berth::history::FollowedRollout {
    let (_stop, shutdown) = berth::shutdown::channel();
    let one = [track::Follow {
        namespace: ns.into(),
        name: "app".into(),
        generation,
        selector: "app=app".into(),
    }];
    follow_driving(
        client,
        &one,
        Duration::from_secs(90),
        &shutdown,
        engine,
        &|_, _| {},
    )
    .await
    .expect("the engine drives it")
    .remove(0)
}

/// Polls `check` until it holds (or panics after `timeout`), the engine driving meanwhile.
async fn until<F: Future<Output = bool>>(
    ns: &str,
    engine: Option<&Engine>,
    timeout: Duration,
    check: impl Fn() -> F,
) {
    let wait = async {
        let deadline = tokio::time::Instant::now() + timeout;
        while !check().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition not reached within {timeout:?} in {ns}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    match engine {
        None => wait.await,
        Some(e) => {
            tokio::select! {
                () = wait => {}
                r = e.drive(ns, "app", std::future::pending()) => panic!("engine stopped: {r:?}"),
            }
        }
    }
}

async fn play(client: kube::Client, ns: String, s: Scenario, engine: Option<Engine>) -> Played {
    let (logger, stop_log) = log_replica_sets(&client, &ns);
    let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let generation = apply(&api, &manifest(&s, &ns, 1, s.replicas)).await;
    let first = follow(&client, &ns, generation, engine.as_ref()).await;
    assert_eq!(
        first.outcome,
        RolloutOutcome::Complete,
        "{}: version 1 in {ns}: {}",
        s.name,
        first.message
    );
    let mut steps = Vec::new();
    let mut outcome = RolloutOutcome::Complete;
    for v in 2..=s.updates + 1 {
        let generation = apply(&api, &manifest(&s, &ns, v, s.replicas)).await;
        if s.paused {
            let api = api.clone();
            until(&ns, engine.as_ref(), Duration::from_secs(30), || {
                let api = api.clone();
                async move {
                    let d = api.get("app").await.unwrap();
                    let observed = d.status.as_ref().and_then(|st| st.observed_generation)
                        >= d.metadata.generation;
                    let paused = d
                        .status
                        .and_then(|st| st.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.reason.as_deref() == Some("DeploymentPaused"));
                    observed && paused
                }
            })
            .await;
            continue;
        }
        let scale = async {
            if let Some(to) = s.scale_to {
                let api = api.clone();
                until(&ns, engine.as_ref(), Duration::from_secs(30), || {
                    let api = api.clone();
                    async move {
                        api.get("app")
                            .await
                            .unwrap()
                            .status
                            .and_then(|st| st.updated_replicas)
                            .unwrap_or(0)
                            >= 1
                    }
                })
                .await;
                apply(&api, &manifest(&s, &ns, v, to)).await;
            }
        };
        let (followed, ()) = tokio::join!(follow(&client, &ns, generation, engine.as_ref()), scale);
        outcome = followed.outcome;
        steps.extend(followed.steps);
    }
    if let Some(limit) = s.history_limit {
        let want = (limit.min(s.updates) + 1) as usize;
        let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
        until(&ns, engine.as_ref(), Duration::from_secs(30), || {
            let rs_api = rs_api.clone();
            async move {
                rs_api
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .len()
                    == want
            }
        })
        .await;
    }
    // Compare settled states: every ReplicaSet has the pods it wants, and the Deployment's
    // status counts them (the engine keeps driving meanwhile, as the controller would).
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    until(&ns, engine.as_ref(), Duration::from_secs(30), || {
        let (rs_api, api) = (rs_api.clone(), api.clone());
        async move {
            let all = rs_api.list(&ListParams::default()).await.unwrap().items;
            let pods: i32 = all
                .iter()
                .map(|rs| rs.status.as_ref().map_or(0, |st| st.replicas))
                .sum();
            let settled = all.iter().all(|rs| {
                rs.status.as_ref().map_or(0, |st| st.replicas)
                    == rs.spec.as_ref().and_then(|sp| sp.replicas).unwrap_or(0)
            });
            let d = api.get("app").await.unwrap();
            settled && d.status.and_then(|st| st.replicas).unwrap_or(0) == pods
        }
    })
    .await;
    let end = end(&client, &ns, outcome).await;
    drop(stop_log);
    Played {
        steps,
        end,
        events: logger.await.unwrap_or_default(),
    }
}

async fn end(client: &kube::Client, ns: &str, outcome: RolloutOutcome) -> End {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("app")
        .await
        .unwrap();
    let revisions = revisions::list(client, &d).await.unwrap();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let all = rs_api.list(&ListParams::default()).await.unwrap().items;
    let mut replica_sets: Vec<(i64, i32, i32, bool)> = all
        .iter()
        .map(|rs| {
            let revision = rs
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION))
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            let labelled = rs
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(POD_TEMPLATE_HASH));
            (
                revision,
                rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
                rs.status.as_ref().map_or(0, |s| s.replicas),
                labelled,
            )
        })
        .collect();
    replica_sets.sort();
    assert!(
        revisions.new.is_some() || d.spec.as_ref().and_then(|s| s.paused) == Some(true),
        "a new ReplicaSet exists"
    );
    let st = d.status.clone().unwrap_or_default();
    let reason = |t: &str| {
        st.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .and_then(|c| c.reason.clone())
    };
    End {
        replica_sets,
        counts: (
            st.replicas.unwrap_or(0),
            st.updated_replicas.unwrap_or(0),
            st.ready_replicas.unwrap_or(0),
            st.available_replicas.unwrap_or(0),
            st.unavailable_replicas.unwrap_or(0),
        ),
        reasons: (reason("Available"), reason("Progressing")),
        outcome,
    }
}

/// At every observed state: total ≤ replicas + maxSurge, and (rolling updates, which
/// start healthy) available ≥ replicas − maxUnavailable.
fn check_invariants(s: &Scenario, engine: &str, played: &Played) {
    let steps = &played.steps;
    let events = played.events.join("\n  ");
    let dep = |replicas| {
        let m = manifest(s, "x", 2, replicas);
        view(&serde_json::from_value::<Deployment>(m).unwrap())
    };
    let sizes: Vec<i32> = std::iter::once(s.replicas).chain(s.scale_to).collect();
    let max_total = sizes
        .iter()
        .map(|&r| r + steps::max_surge(&dep(r)))
        .max()
        .unwrap_or(0);
    let min_available = sizes
        .iter()
        .map(|&r| r - steps::max_unavailable(&dep(r)))
        .min()
        .unwrap_or(0);
    for st in steps {
        let total = st.new_replicas + st.old_replicas;
        assert!(
            total <= max_total,
            "{} ({engine}): {total} pods > {max_total} at {st:?}\n  {events}",
            s.name
        );
        if !s.recreate {
            let available = st.new_available + st.old_available;
            assert!(
                available >= min_available,
                "{} ({engine}): {available} available < {min_available} at {st:?}\n  {events}",
                s.name
            );
        }
    }
}

fn side_by_side(s: &Scenario, cluster: &[TimelineStep], agent: &[TimelineStep]) {
    println!("\n{}: (new/ready/avail + old) — controller | agent", s.name);
    for i in 0..cluster.len().max(agent.len()) {
        let cell = |steps: &[TimelineStep]| {
            steps.get(i).map_or(String::new(), |t| {
                format!(
                    "{}/{}/{} + {}",
                    t.new_replicas, t.new_ready, t.new_available, t.old_replicas
                )
            })
        };
        println!("  {:>3}  {:<22} | {}", i + 1, cell(cluster), cell(agent));
    }
}

/// Eleven scenarios, two engines each, at once: their futures are deep, so they run on
/// worker threads with room for them.
#[test]
fn the_agent_engine_matches_the_deployment_controller() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(16 << 20)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(fidelity());
}

async fn fidelity() {
    let (Some(with), Some(without)) = (
        common::control_plane(),
        common::control_plane_without_deployment_controller(),
    ) else {
        return;
    };
    let real = common::client(with).await;
    let ours = common::client(without).await;
    let engine = Engine {
        client: ours.clone(),
        field_manager: "berth".into(),
    };
    let mut runs = Vec::new();
    for s in scenarios() {
        let ns_real = common::namespace(&real, &format!("f-{}", s.name)).await;
        let ns_ours = common::namespace(&ours, &format!("f-{}", s.name)).await;
        let (real, ours, engine) = (real.clone(), ours.clone(), engine.clone());
        runs.push(tokio::spawn(async move {
            let (cluster, agent) = tokio::join!(
                Box::pin(play(real, ns_real, s, None)),
                Box::pin(play(ours, ns_ours, s, Some(engine)))
            );
            (s, cluster, agent)
        }));
    }
    for run in runs {
        let (s, cluster, agent) = run.await.expect("scenario");
        side_by_side(&s, &cluster.steps, &agent.steps);
        assert_eq!(
            agent.end, cluster.end,
            "{}: the engines ended differently",
            s.name
        );
        check_invariants(&s, "controller", &cluster);
        check_invariants(&s, "agent", &agent);
    }
}

#[tokio::test]
async fn the_engine_refuses_a_deployment_another_controller_reconciles() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "foreign").await;
    let repo = Repo::new();
    let d = |image: &str| {
        manifest(&Scenario { name: "x", ..BASE }, &ns, 1, 2)
            .to_string()
            .replace("app:1", image)
    };
    repo.write("app.json", &d("app:1"));
    repo.commit("one");
    let setup = Setup::new(
        cp,
        "foreign",
        &repo,
        &ns,
        "[app.rollout]\nengine = \"agent\"\ntimeout = \"20s\"",
    );
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "the real controller made the ReplicaSet: {out}");
    assert!(out.contains("is reconciled by another controller"), "{out}");
    repo.write("app.json", &d("app:2"));
    repo.commit("two");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "Deployment {ns}/app is reconciled by another controller"
        )) && out.contains("nothing was written"),
        "{out}"
    );
    let live = Api::<Deployment>::namespaced(client, &ns)
        .get("app")
        .await
        .unwrap();
    assert_eq!(
        live.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("app:1")
    );
}

#[tokio::test]
async fn a_killed_berth_resumes_the_rollout_after_a_restart() {
    let Some(cp) = common::control_plane_without_deployment_controller() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "restart").await;
    let s = Scenario {
        name: "restart",
        replicas: 4,
        surge: Some("1"),
        unavailable: Some("0"),
        readiness: SLOW,
        ..BASE
    };
    let repo = Repo::new();
    repo.write("app.json", &manifest(&s, &ns, 1, 4).to_string());
    repo.commit("one");
    let setup = Setup::new(
        cp,
        "restart",
        &repo,
        &ns,
        "[app.rollout]\nengine = \"agent\"",
    );
    assert_eq!(setup.berth(&["sync"]).0, 0);
    repo.write("app.json", &manifest(&s, &ns, 2, 4).to_string());
    repo.commit("two");
    let start = || {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["run", "--config"])
            .arg(&setup.config)
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("berth run")
    };
    let mut first = start();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    common::wait_for(
        &deployments,
        "app",
        Duration::from_secs(30),
        |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref()?.updated_replicas)
                .is_some_and(|u| (1..4).contains(&u))
        },
    )
    .await;
    first.kill().await.expect("SIGKILL");
    let mut second = start();
    let done = common::wait_for(
        &deployments,
        "app",
        Duration::from_secs(60),
        |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref()).is_some_and(|st| {
                st.updated_replicas == Some(4)
                    && st.available_replicas == Some(4)
                    && st.replicas == Some(4)
            })
        },
    )
    .await;
    assert_eq!(
        done.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("app:2")
    );
    second.kill().await.ok();
}
