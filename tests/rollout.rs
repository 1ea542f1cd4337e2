//! Rollouts against the real control plane (Deployment controller + kubelet stand-in):
//! following the rolling steps, rolling a failed rollout back, manual rollback, `berth
//! plan`'s predicted steps against what the controller really did, `berth status`.

mod common;

use std::time::Duration;

use berth::history::{Outcome, RolloutOutcome};
use common::{web_deployment as deployment, Repo, Setup, NEVER_READY as NEVER};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

/// A Deployment that rolls one pod at a time; `annotations` go on the pod template.
const SLOW: &str = "testenv.berth.dev/ready-after: \"1s\"";

async fn image(client: &kube::Client, ns: &str) -> String {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .unwrap();
    d.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap()
}

/// (new, old) ReplicaSet sizes as they changed, consecutive repeats dropped.
fn sizes(steps: &[berth::history::TimelineStep]) -> Vec<(i32, i32)> {
    let mut out: Vec<(i32, i32)> = Vec::new();
    for s in steps {
        let pair = (s.new_replicas, s.old_replicas);
        if out.last() != Some(&pair) {
            out.push(pair);
        }
    }
    out
}

#[tokio::test]
async fn a_new_image_rolls_out_step_by_step_and_plan_predicted_the_steps() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "rollout").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web:1", SLOW, ""));
    let first = repo.commit("web 1");
    let setup = Setup::new(cp, "rollout", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("successfully rolled out"), "{out}");

    repo.write("web.yaml", &deployment("web:2", SLOW, ""));
    repo.commit("web 2");
    let (code, out, err) = setup.berth(&["plan", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let plan: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let predicted = &plan["deployments"][0];
    assert_eq!(predicted["revision_from"], 1);
    assert_eq!(predicted["revision_to"], 2);
    assert_eq!(
        (
            predicted["max_surge"].as_i64(),
            predicted["max_unavailable"].as_i64()
        ),
        (Some(1), Some(0))
    );
    let predicted: Vec<(i32, i32)> = predicted["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["new"].as_i64().unwrap() as i32,
                s["old"].as_i64().unwrap() as i32,
            )
        })
        .collect();
    assert_eq!(predicted, [(1, 3), (1, 2), (2, 2), (2, 1), (3, 1), (3, 0)]);
    assert_eq!(image(&client, &ns).await, "web:1", "plan writes nothing");

    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("Waiting for deployment \"web\" rollout to finish"),
        "progress is shown: {out}"
    );
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded);
    let rollout = &record.rollouts[0];
    assert_eq!(
        (rollout.revision_from, rollout.rollout.revision),
        (Some(1), Some(2))
    );
    assert_eq!(rollout.rollout.outcome, RolloutOutcome::Complete);
    assert_eq!(
        (rollout.images_from.as_slice(), rollout.images_to.as_slice()),
        (&["web:1".to_string()][..], &["web:2".to_string()][..])
    );
    assert!(
        rollout.rollout.steps.len() >= 6,
        "a multi-step timeline: {:?}",
        rollout.rollout.steps
    );
    // The controller took exactly the predicted steps (the watch may start before or
    // after the new ReplicaSet appears).
    let mut observed = sizes(&rollout.rollout.steps);
    if observed.first() == Some(&(0, 3)) {
        observed.remove(0);
    }
    assert_eq!(observed, predicted, "{:?}", rollout.rollout.steps);

    let (code, out, _) = setup.berth(&["history", "show", &record.id]);
    assert_eq!(code, 0);
    assert!(
        out.contains("revision 1 → 2, complete") && out.contains("images web:1 → web:2"),
        "{out}"
    );

    let (code, out, _) = setup.berth(&["status"]);
    assert_eq!(code, 0);
    let line = out
        .lines()
        .find(|l| l.contains(&format!("{ns}/web")))
        .unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cols[2..], ["2", "3/3", "3", "complete"], "{out}");

    // Manual rollback to revision 1: recorded, held, and warned about.
    let (code, out, err) = setup.berth(&["rollback", "rollout", "web", "--to-revision", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("rolled back Deployment"), "{out}");
    assert!(
        out.contains(&format!("to 1 (commit {})", &first[..7])),
        "{out}"
    );
    assert!(
        out.contains("the next commit to git rolls forward again"),
        "{out}"
    );
    assert_eq!(image(&client, &ns).await, "web:1");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.trigger, berth::history::Trigger::Cli);
    assert_eq!(record.rollouts[0].rollout.outcome, RolloutOutcome::Complete);
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("held at"),
        "berth does not undo the rollback: {out}"
    );
    assert_eq!(image(&client, &ns).await, "web:1");
}

#[tokio::test]
async fn a_rollout_that_never_becomes_ready_fails_and_is_rolled_back() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "rollback").await;
    let repo = Repo::new();
    let deadline = "  progressDeadlineSeconds: 4\n";
    repo.write("web.yaml", &deployment("web:1", "", deadline));
    let good = repo.commit("web 1");
    let setup = Setup::new(cp, "rollback", &repo, &ns, "");
    assert_eq!(setup.berth(&["sync"]).0, 0);

    repo.write("web.yaml", &deployment("web:broken", NEVER, deadline));
    let bad = repo.commit("broken web");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("exceeded its progress deadline"), "{out}");
    assert!(
        out.contains(&format!(
            "rolled back Deployment {ns}/web from revision 2 to 1 (commit {})",
            &good[..7]
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("rollback: ROLLED BACK at {} after ", &bad[..7])),
        "{out}"
    );
    assert_eq!(image(&client, &ns).await, "web:1");
    let d = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(d.status.unwrap().available_replicas, Some(3));

    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::RolledBack);
    assert_eq!(record.commit.as_ref().unwrap().sha, bad);
    let rollout = &record.rollouts[0];
    assert_eq!(rollout.rollout.outcome, RolloutOutcome::Failed);
    let rollback = rollout
        .rollback
        .as_ref()
        .expect("the record says it was rolled back");
    assert_eq!(
        (rollback.to_revision, rollback.commit.as_deref()),
        (1, Some(good.as_str()))
    );
    assert_eq!(rollback.rollout.outcome, RolloutOutcome::Complete);

    // The same commit is not applied again on the next sync, only a new one (or --force).
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "held: rollout failed at {} and was rolled back",
            &bad[..7]
        )) && out.contains("--force"),
        "{out}"
    );
    assert_eq!(image(&client, &ns).await, "web:1");
    repo.write("web.yaml", &deployment("web:3", "", deadline));
    repo.commit("web 3");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(image(&client, &ns).await, "web:3");
}

#[tokio::test]
async fn halt_leaves_a_failed_rollout_as_it_is() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "halt").await;
    let repo = Repo::new();
    let deadline = "  progressDeadlineSeconds: 3\n";
    repo.write("web.yaml", &deployment("web:1", "", deadline));
    repo.commit("web 1");
    let setup = Setup::new(
        cp,
        "halt",
        &repo,
        &ns,
        "[app.rollout]\non_failure = \"halt\"\ntimeout = \"60s\"",
    );
    assert_eq!(setup.berth(&["sync"]).0, 0);
    repo.write("web.yaml", &deployment("web:broken", NEVER, deadline));
    repo.commit("broken");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        image(&client, &ns).await,
        "web:broken",
        "halt does not roll back"
    );
    assert!(setup.history().pop().unwrap().rollouts[0]
        .rollback
        .is_none());
    let (_, out, _) = setup.berth(&["sync"]);
    assert!(out.contains("the app is halted"), "{out}");
}

/// What `berth rollback` and the history say: a mistyped rollback is refused and recorded
/// nowhere; a real one is an outcome of its own; `plan` and `sync` agree on what is held;
/// a later automatic rollback credits the commit the restored template came from, even
/// though the manual rollback gave that template a new revision number.
#[tokio::test]
async fn rollbacks_say_what_happened() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "say-rollback").await;
    let repo = Repo::new();
    let deadline = "  progressDeadlineSeconds: 4\n";
    repo.write("web.yaml", &deployment("web:1", "", deadline));
    let first = repo.commit("web 1");
    let setup = Setup::new(cp, "say", &repo, &ns, "");
    assert_eq!(setup.berth(&["sync"]).0, 0);
    repo.write("web.yaml", &deployment("web:2", "", deadline));
    let second = repo.commit("web 2");
    assert_eq!(setup.berth(&["sync"]).0, 0);
    let recorded = setup.history().len();

    let (code, out, err) = setup.berth(&["rollback", "say", "nosuch"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("app say manages no Deployment \"nosuch\""),
        "{err}"
    );
    let (code, _, err) = setup.berth(&["rollback", "say", "web", "--to-revision", "99"]);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "Deployment {ns}/web has no revision 99 (revisions: 2, 1)"
        )),
        "{err}"
    );
    assert_eq!(
        setup.history().len(),
        recorded,
        "a refused rollback records nothing"
    );
    assert_eq!(image(&client, &ns).await, "web:2");

    let (code, out, err) = setup.berth(&["rollback", "say", "web"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("say: rolled back in"), "{out}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::RolledBack);
    let note = record.note.clone().unwrap_or_default();
    assert!(
        note.starts_with(&format!("rolled back Deployment {ns}/web from revision"))
            && note.contains(" by berth rollback; berth holds commit"),
        "{note}"
    );
    let (_, table, _) = setup.berth(&["history"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(&record.id))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("rolled-back"), "{table}");
    assert_eq!(image(&client, &ns).await, "web:1");

    // Held at the current commit: plan and sync both say so.
    let (_, plan, _) = setup.berth(&["plan"]);
    assert!(plan.contains("held:"), "{plan}");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0);
    assert!(out.contains("held at"), "{out}");

    // A new commit is not held: plan says it will be applied, and sync applies it. Its
    // rollout fails and is rolled back to revision 3, the template of the first commit.
    repo.write("web.yaml", &deployment("web:broken", NEVER, deadline));
    repo.commit("broken web");
    let (_, plan, _) = setup.berth(&["plan"]);
    assert!(!plan.contains("held:"), "{plan}");
    assert!(plan.contains("configure"), "{plan}");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "rolled back Deployment {ns}/web from revision 4 to 3 (commit {})",
            &first[..7]
        )),
        "credits the first commit, not {}: {out}",
        &second[..7]
    );
    assert_eq!(image(&client, &ns).await, "web:1");
}

fn stateful_set(annotations: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 2
  selector:
    matchLabels: {{app: db}}
  template:
    metadata:
      labels: {{app: db}}
      annotations: {{{annotations}}}
    spec:
      containers:
        - name: db
          image: postgres:16
"
    )
}

fn daemon_set(annotations: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {{app: agent}}
  template:
    metadata:
      labels: {{app: agent}}
      annotations: {{{annotations}}}
    spec:
      containers:
        - name: agent
          image: agent:1
"
    )
}

fn job(name: &str, annotations: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations: {{{annotations}}}
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: migrate:1
"
    )
}

/// Every kind with a notion of readiness is waited for, not only Deployments: a
/// StatefulSet, a DaemonSet and a Job are followed to ready and complete; when none of them
/// gets there, nor a custom resource whose `Ready` condition is False, nor a LoadBalancer
/// Service that no controller gives an address, the sync fails naming each (saying what it
/// waits for, and every quarter of the timeout where it stands).
#[tokio::test]
async fn statefulsets_daemonsets_jobs_and_custom_resources_are_waited_for() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "health").await;
    let repo = Repo::new();
    repo.write("db.yaml", &stateful_set(""));
    repo.write("agent.yaml", &daemon_set(""));
    repo.write("migrate.yaml", &job("migrate", ""));
    let service = |name: &str, selects: &str| {
        format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector: {{app: {selects}}}\n  ports: [{{port: 5432}}]\n")
    };
    repo.write(
        "services.yaml",
        &format!(
            "{}---\n{}",
            service("db", "db"),
            service("nobody", "nobody")
        ),
    );
    repo.commit("workloads");
    let setup = Setup::new(
        cp,
        "health",
        &repo,
        &ns,
        "[app.rollout]\ntimeout = \"30s\"\n[app.scope]\ncluster_kinds = [\"CustomResourceDefinition\"]",
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let record = setup.history().pop().unwrap();
    let mut ready: Vec<(&str, &str)> = record
        .health
        .iter()
        .map(|h| (h.key.kind.as_str(), h.outcome.as_str()))
        .collect();
    ready.sort();
    assert_eq!(
        ready,
        [
            ("DaemonSet", "ready"),
            ("Job", "ready"),
            ("Service", "ready"),
            ("Service", "ready"),
            ("StatefulSet", "ready")
        ],
        "{out}"
    );
    // A Service that selects no ready pod is a warning, not a failure.
    assert!(
        out.contains(&format!(
            "service/nobody -n {ns}: warning: no ready endpoints"
        )),
        "{out}"
    );
    assert!(
        !out.contains(&format!("service/db -n {ns}: warning")),
        "db has endpoints: {out}"
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let status = jobs.get("migrate").await.unwrap().status.unwrap();
    assert_eq!(status.succeeded, Some(1), "{status:?}");
    let health_of = |out: &str, object: &str| -> String {
        out.lines()
            .find(|l| l.contains(object))
            .and_then(|l| l.split_once(object))
            .map(|(_, rest)| rest.trim().to_string())
            .unwrap_or_else(|| panic!("no {object} in {out}"))
    };
    let (code, out, _) = setup.berth(&["status"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(health_of(&out, &format!("StatefulSet {ns}/db")), "ready");
    assert_eq!(health_of(&out, &format!("Job {ns}/migrate")), "ready");

    // None of them gets there: each is named, and the sync fails once the timeout passes.
    repo.write("db.yaml", &stateful_set(NEVER));
    repo.write("agent.yaml", &daemon_set(NEVER));
    repo.write("migrate.yaml", &job("migrate-2", NEVER));
    repo.write(
        "widget-crd.yaml",
        &common::crd("health.berth.dev", "Widget"),
    );
    repo.write(
        "widget.yaml",
        "apiVersion: health.berth.dev/v1\nkind: Widget\nmetadata:\n  name: w\nspec: {size: 1}\nstatus:\n  conditions:\n    - {type: Ready, status: \"False\", reason: NoBackend, message: no backend answers}\n",
    );
    repo.write(
        "lb.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: lb\nspec:\n  type: LoadBalancer\n  ports: [{port: 80}]\n",
    );
    repo.commit("never ready");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    // The long wait says what it waits for, then where it stands.
    assert!(
        out.contains(&format!("service/lb -n {ns}: waiting: no load-balancer address yet (a cluster without a load-balancer controller never gives one"))
            && (out.lines())
                .filter(|l| l.contains(&format!("service/lb -n {ns}: still waiting (")))
                .filter(|l| l.ends_with("s of 30s)"))
                .count()
                >= 3,
        "{out}"
    );
    for named in [
        format!("Service {ns}/lb did not become ready within 30s: no load-balancer address yet"),
        format!("StatefulSet {ns}/db did not become ready within 30s"),
        format!("DaemonSet {ns}/agent did not become ready within 30s"),
        format!("Job {ns}/migrate-2 did not become ready within 30s"),
        format!("Widget.health.berth.dev {ns}/w did not become ready within 30s: Ready=False: NoBackend (no backend answers)"),
    ] {
        assert!(out.contains(&named), "missing {named:?} in {out}");
    }
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
    assert!(
        record.health.iter().all(|h| h.outcome == "timed-out"),
        "{:?}",
        record.health
    );
}

/// With `require_endpoints`, a Service is ready once its Endpoints route to a ready pod,
/// as a watch of them tells; one that selects no pod times out naming why.
#[tokio::test]
async fn require_endpoints_waits_for_a_service_to_route() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "routes").await;
    let repo = Repo::new();
    let service = |name: &str, selects: &str| {
        format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  selector: {{app: {selects}}}\n  ports:\n    - {{port: 80, targetPort: 8080}}\n")
    };
    repo.write("web.yaml", &deployment("web:1", "", ""));
    repo.write("svc.yaml", &service("front", "web"));
    repo.commit("web behind a service");
    let rollout = "[app.rollout]\ntimeout = \"20s\"\nrequire_endpoints = true";
    let setup = Setup::new(cp, "routes", &repo, &ns, rollout);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let record = setup.history().pop().unwrap();
    let front = (record.health.iter()).find(|h| h.key.name == "front");
    assert_eq!(front.map(|h| h.outcome.as_str()), Some("ready"), "{out}");
    assert!(!out.contains("warning: no ready endpoints"), "{out}");

    repo.write("lonely.yaml", &service("lonely", "nobody"));
    repo.commit("a service that routes nowhere");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let named = format!("Service {ns}/lonely did not become ready within 20s: no ready endpoints");
    assert!(out.contains(&named), "missing {named:?} in {out}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
}

#[tokio::test]
async fn a_change_of_labels_only_starts_no_rollout_to_follow() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "labels-only").await;
    let repo = Repo::new();
    // Pods that never become ready: following this Deployment could only fail.
    let web = deployment("web:1", NEVER, "  progressDeadlineSeconds: 4\n");
    repo.write("web.yaml", &web);
    repo.commit("web");
    let setup = Setup::new(
        cp,
        "labels",
        &repo,
        &ns,
        "[app.rollout]\non_failure = \"halt\"",
    );
    let (code, out, _) = setup.berth(&["sync", "--no-wait"]);
    assert_eq!(code, 0, "{out}");

    let labelled = web.replace("  name: web\n", "  name: web\n  labels: {team: shop}\n");
    repo.write("web.yaml", &labelled);
    repo.commit("label web");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "a label is not a rollout: {out}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{:?}", record.errors);
    assert!(record.rollouts.is_empty(), "{:?}", record.rollouts);
    let d = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        d.metadata.labels.unwrap().get("team").map(String::as_str),
        Some("shop")
    );

    repo.write("web.yaml", &labelled.replace("web:1", "web:2"));
    repo.commit("web 2");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(
        code, 1,
        "a new image is a rollout, followed until it fails: {out}"
    );
    assert!(out.contains("exceeded its progress deadline"), "{out}");
}

/// Stops `berth run` with `signal` while it follows the rollout of `image`; then a
/// one-shot `berth sync` picks the unfinished rollout up. Returns its exit code and output.
async fn stopped_mid_rollout(
    cp: &berth_testenv::ControlPlane,
    ns: &str,
    image: &str,
    pods: &str,
    deadline: &str,
    signal: i32,
) -> (Setup, i32, String) {
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web:1", "", deadline));
    repo.commit("web 1");
    let app = format!("restart-{signal}-{}", image.replace([':', '.'], "-"));
    let setup = Setup::new(cp, &app, &repo, ns, "");
    assert_eq!(setup.berth(&["sync"]).0, 0);

    repo.write("web.yaml", &deployment(image, pods, deadline));
    repo.commit("web 2");
    let mut daemon = common::Daemon::start(&setup.config, &[]);
    let state = setup.state.path().to_path_buf();
    common::eventually(
        "berth run follows the rollout",
        Duration::from_secs(30),
        || {
            berth::sync::in_flight(&state, &app)
                .is_some_and(|m| m.step == berth::sync::Step::RollOut)
        },
    );
    daemon.signal(signal);
    daemon.wait(Duration::from_secs(30));
    if signal == libc::SIGTERM {
        let record = setup.history().pop().unwrap();
        assert_eq!(record.outcome, Outcome::Interrupted, "{record:?}");
    }
    let (code, out, err) = setup.berth(&["sync"]);
    (setup, code, format!("{out}{err}"))
}

/// A restart (SIGTERM, as `systemctl restart` sends) or a kill mid-rollout is never
/// recorded as a success: the next sync follows the unfinished rollout to its end and
/// applies the failure policy as an uninterrupted sync would.
#[tokio::test]
async fn a_rollout_cut_short_by_a_restart_is_followed_to_its_end_by_the_next_sync() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        // Pods that never become ready: the next sync sees it fail and rolls it back.
        let ns = common::namespace(&client, &format!("cut-fails-{signal}")).await;
        let deadline = "  progressDeadlineSeconds: 4\n";
        let (setup, code, out) =
            stopped_mid_rollout(cp, &ns, "web:broken", NEVER, deadline, signal).await;
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("exceeded its progress deadline"), "{out}");
        assert!(out.contains("rolled back Deployment"), "{out}");
        assert_eq!(image(&client, &ns).await, "web:1");
        let records = setup.history();
        assert!(
            records.iter().all(|r| r.outcome != Outcome::Succeeded
                || r.commit.as_ref().is_some_and(|c| c.subject == "web 1")),
            "{records:?}"
        );

        // Pods that become ready after a while: the next sync sees it complete.
        let ns = common::namespace(&client, &format!("cut-completes-{signal}")).await;
        let slow = "testenv.berth.dev/ready-after: \"3s\"";
        let deadline = "  progressDeadlineSeconds: 60\n";
        let (setup, code, out) =
            stopped_mid_rollout(cp, &ns, "web:2", slow, deadline, signal).await;
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("successfully rolled out"), "{out}");
        assert_eq!(image(&client, &ns).await, "web:2");
        let resumed = setup.history().pop().unwrap();
        assert_eq!(resumed.outcome, Outcome::Succeeded);
        if signal == libc::SIGTERM {
            // The record reads as the whole change: from the commit and revision before.
            let commit = resumed.commit.as_ref().map(|c| c.sha.clone());
            assert_ne!(resumed.previous_commit, commit, "{resumed:?}");
            let rollout = &resumed.rollouts[0];
            assert!(
                rollout.revision_from.is_some() && rollout.revision_from < rollout.rollout.revision,
                "{rollout:?}"
            );
        }
    }
}

/// The object lines of `berth plan` (`configmap/a -n ns configure`), and of `berth sync`
/// (`configmap/a -n ns configured`) in plan's words, sorted.
fn plan_lines(out: &str) -> Vec<String> {
    let verbs = [" create", " configure", " prune", " kept", " refused"];
    let mut lines: Vec<String> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("error:") && verbs.iter().any(|v| l.contains(v)))
        .filter(|l| l.split(' ').next().is_some_and(|o| o.contains('/')))
        .map(|l| l.split(" (").next().unwrap_or(l).to_string())
        .collect();
    lines.sort();
    lines
}

fn sync_lines(out: &str, app: &str) -> Vec<String> {
    let words = [
        (" created", " create"),
        (" configured", " configure"),
        (" pruned", " prune"),
        (" kept", " kept"),
    ];
    let mut lines: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{app}: ")))
        .filter(|l| l.split(' ').next().is_some_and(|o| o.contains('/')))
        .filter_map(|l| {
            let l = l.split(" (").next().unwrap_or(l);
            words
                .iter()
                .find_map(|(done, plan)| l.strip_suffix(done).map(|o| format!("{o}{plan}")))
        })
        .collect();
    lines.sort();
    lines
}

/// `berth plan` and `berth sync` make one decision for every object: create, configure,
/// unchanged, prune, kept, refused and held, compared line for line.
#[tokio::test]
async fn plan_and_sync_agree_line_for_line() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "agree").await;
    let cm = |name: &str, value: &str, meta: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{meta}data:\n  v: \"{value}\"\n")
    };
    let keep = "  annotations: {berth.dev/prune: \"false\"}\n";
    let repo = Repo::new();
    repo.write("same.yaml", &cm("same", "1", ""));
    repo.write("conf.yaml", &cm("conf", "1", ""));
    repo.write("gone.yaml", &cm("gone", "1", ""));
    repo.write("keep.yaml", &cm("keep", "1", keep));
    repo.commit("first");
    let setup = Setup::new(cp, "agree", &repo, &ns, "prune = true");
    assert_eq!(setup.berth(&["sync", "--no-wait"]).0, 0);

    repo.write("conf.yaml", &cm("conf", "2", ""));
    repo.write("new.yaml", &cm("new", "1", ""));
    repo.write(
        "bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndata:\n  \"not a key!\": x\n",
    );
    repo.git(&["rm", "-q", "gone.yaml", "keep.yaml"]);
    repo.commit("second");
    let object = |name: &str, verb: &str| format!("configmap/{name} -n {ns} {verb}");
    let (code, plan, _) = setup.berth(&["plan"]);
    assert_eq!(code, 1, "{plan}");
    assert_eq!(
        plan_lines(&plan),
        [
            object("bad", "refused"),
            object("conf", "configure"),
            object("gone", "prune"),
            object("keep", "kept"),
            object("new", "create"),
        ],
        "{plan}"
    );
    // The sync refuses as the plan said: nothing written.
    let (code, out, _) = setup.berth(&["sync", "--no-wait"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("ConfigMap") && out.contains("bad") && out.contains("nothing was written"),
        "{out}"
    );

    repo.git(&["rm", "-q", "bad.yaml"]);
    repo.commit("third");
    let (code, plan, _) = setup.berth(&["plan", "--detailed-exitcode"]);
    assert_eq!(code, 2, "changes to come: {plan}");
    assert!(plan.contains("1 unchanged"), "{plan}");
    let (code, out, _) = setup.berth(&["sync", "--no-wait"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        plan_lines(&plan),
        sync_lines(&out, "agree"),
        "{plan}\n{out}"
    );
    assert_eq!(
        sync_lines(&out, "agree"),
        [
            object("conf", "configure"),
            object("gone", "prune"),
            object("keep", "kept"),
            object("new", "create"),
        ]
    );
    let (code, plan, _) = setup.berth(&["plan", "--detailed-exitcode"]);
    assert_eq!(code, 0, "nothing to change: {plan}");

    // Held after a failed rollout: neither writes anything.
    let deadline = "  progressDeadlineSeconds: 3\n";
    repo.write("web.yaml", &deployment("web:1", "", deadline));
    repo.commit("web 1");
    assert_eq!(setup.berth(&["sync"]).0, 0);
    repo.write("web.yaml", &deployment("web:broken", NEVER, deadline));
    repo.commit("web broken");
    assert_eq!(setup.berth(&["sync"]).0, 1);
    let (_, plan, _) = setup.berth(&["plan"]);
    let (_, out, _) = setup.berth(&["sync"]);
    assert!(
        plan.contains("held:") && out.contains("held:"),
        "{plan}\n{out}"
    );
    assert_eq!(plan_lines(&plan), Vec::<String>::new(), "{plan}");
    assert_eq!(sync_lines(&out, "agree"), Vec::<String>::new(), "{out}");
}

/// `berth status` is true while a sync runs and of a Service routing nowhere.
#[tokio::test]
async fn status_shows_the_sync_in_flight_and_a_service_without_endpoints() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "status-true").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web:1", "", ""));
    repo.write(
        "lonely.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: lonely\nspec:\n  selector: {app: nobody}\n  ports:\n    - port: 80\n",
    );
    repo.commit("web 1");
    let setup = Setup::new(
        cp,
        "truth",
        &repo,
        &ns,
        "rollout = { timeout = \"90s\", on_failure = \"halt\" }",
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");

    // A Service whose selector matches no pod is not ready.
    let (code, out, err) = setup.berth(&["status"]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.contains(&format!("Service {ns}/lonely")))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.ends_with("waiting: no ready endpoints"), "{out}");
    let status = |args: &[&str]| -> serde_json::Value {
        let (code, out, err) = setup.berth(&[&["status", "-o", "json"], args].concat());
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.lines().count(), 1, "one line per app: {out}");
        serde_json::from_str(&out).unwrap()
    };
    let v = status(&[]);
    assert_eq!(v["app"], "truth");
    assert_eq!(v["last"]["outcome"], "succeeded", "{v}");
    assert_eq!(v["syncing"], serde_json::Value::Null, "{v}");
    assert_eq!(
        v["objects"][0]["health"], "waiting: no ready endpoints",
        "{v}"
    );
    assert_eq!(v["deployments"][0]["phase"], "complete", "{v}");

    // A rollout that takes its time: status says what runs, not the last record alone.
    repo.write("web.yaml", &deployment("web:2", NEVER, ""));
    let second = repo.commit("web 2");
    let mut sync = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["sync", "--config"])
        .arg(&setup.config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let v = loop {
        let v = status(&[]);
        if v["syncing"]["step"] == "roll out" {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    assert_eq!(v["syncing"]["commit"], second.as_str(), "{v}");
    let (_, out, _) = setup.berth(&["status"]);
    let row = out.lines().find(|l| l.starts_with("truth")).unwrap();
    assert!(
        row.contains(&format!("syncing {}: roll out", &second[..7])),
        "{out}"
    );

    // Killed: the marker it leaves is no sync in flight.
    sync.kill().unwrap();
    sync.wait().unwrap();
    let v = status(&[]);
    assert_eq!(v["syncing"], serde_json::Value::Null, "{v}");
    let (_, out, _) = setup.berth(&["status"]);
    assert!(!out.contains("syncing"), "{out}");
}

/// A long wait says it is still waiting, every 10 s, as `kubectl rollout status` does.
#[tokio::test]
async fn a_long_wait_shows_progress() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "long-wait").await;
    let repo = Repo::new();
    let deadline = "  progressDeadlineSeconds: 60\n";
    repo.write("web.yaml", &deployment("web:1", "", deadline));
    repo.commit("web 1");
    let setup = Setup::new(cp, "longwait", &repo, &ns, "");
    assert_eq!(setup.berth(&["sync"]).0, 0);
    let slow = "testenv.berth.dev/ready-after: \"12s\"";
    repo.write("web.yaml", &deployment("web:2", slow, deadline));
    repo.commit("web 2, slow to start");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("deployment.apps/web -n {ns}: still waiting: Waiting for deployment \"web\" rollout to finish")),
        "{out}"
    );
}
