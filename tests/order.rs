//! Ordering against the real control plane: apps that depend on apps (`depends_on`).

mod common;

use std::time::Duration;

use berth::history::{Outcome, Trigger};
use common::{Daemon, Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;

/// A Deployment of one replica whose pods become ready (or, with `never`, never do: its
/// rollout fails after its 4 s progress deadline).
fn deployment(name: &str, image: &str, never: bool) -> String {
    let annotations = if never {
        "testenv.berth.dev/ready: \"false\""
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: 1
  progressDeadlineSeconds: 4
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
      annotations: {{{annotations}}}
    spec:
      containers:
        - name: {name}
          image: {image}
"
    )
}

fn gadget(size: u32) -> String {
    format!("apiVersion: order.berth.dev/v1\nkind: Gadget\nmetadata:\n  name: g\nspec: {{size: {size}}}\n")
}

fn config_map(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  value: \"{value}\"\n")
}

/// `[[app]]` tables after the first (which `Setup` writes): `(name, path, depends_on)`.
fn more_apps(repo: &Repo, ns: &str, apps: &[(&str, &str, &str)]) -> String {
    apps.iter()
        .map(|(name, path, deps)| {
            format!(
                "[[app]]\nname = \"{name}\"\nrepo = \"{}\"\nnamespace = \"{ns}\"\npath = \"{path}\"\ndepends_on = [{deps}]\n[app.rollout]\ntimeout = \"60s\"\n",
                repo.dir.path().display()
            )
        })
        .collect()
}

fn history(setup: &Setup, app: &str) -> Vec<berth::history::SyncRecord> {
    berth::history::HistoryLog::new(setup.state.path())
        .read(app)
        .expect("history")
}

/// Three apps from one commit, listed against their order: the custom resource's app
/// after the operator's, the operator's after the CRD's. Each starts once what it depends
/// on has ended healthy; without the order the custom resource's kind is unknown.
#[tokio::test]
async fn crds_then_operator_then_app_from_one_commit() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-chain").await;
    let repo = Repo::new();
    repo.write(
        "crds/gadget.yaml",
        &common::crd("order.berth.dev", "Gadget"),
    );
    repo.write(
        "operator/deployment.yaml",
        &deployment("operator", "operator:1", false),
    );
    repo.write("app/gadget.yaml", &gadget(1));
    repo.commit("crds, operator and app");
    let rest = more_apps(
        &repo,
        &ns,
        &[
            ("chain-operator", "operator", "\"chain-crds\""),
            ("chain-crds", "crds", ""),
        ],
    );
    let setup = Setup::new(
        cp,
        "chain-app",
        &repo,
        &ns,
        &format!("path = \"app\"\ndepends_on = [\"chain-operator\"]\n{rest}[app.scope]\ncluster_kinds = [\"CustomResourceDefinition\"]\n"),
    );
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let last = |app: &str| {
        history(&setup, app)
            .pop()
            .unwrap_or_else(|| panic!("no record of {app}: {out}"))
    };
    let (crds, op, app) = (
        last("chain-crds"),
        last("chain-operator"),
        last("chain-app"),
    );
    for r in [&crds, &op, &app] {
        assert_eq!(r.outcome, Outcome::Succeeded, "{}: {out}", r.app);
    }
    assert!(op.started_at >= crds.finished_at, "{out}");
    assert!(app.started_at >= op.finished_at, "{out}");
    let gadgets = ApiResource {
        group: "order.berth.dev".into(),
        version: "v1".into(),
        api_version: "order.berth.dev/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &gadgets);
    assert_eq!(api.get("g").await.unwrap().data["spec"]["size"], 1);

    // `berth sync app` alone with a dependency not ready at its commit: not synced, said.
    repo.write(
        "operator/deployment.yaml",
        &deployment("operator", "operator:2", false),
    );
    repo.write("app/gadget.yaml", &gadget(2));
    let second = repo.commit("operator 2, gadget 2");
    let (code, out, _) = setup.berth(&["sync", "chain-app"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "chain-app: waiting on chain-operator: {} not synced yet",
            &second[..7]
        )),
        "{out}"
    );
    assert!(out.contains("berth sync --with-deps chain-app"), "{out}");
    assert_eq!(api.get("g").await.unwrap().data["spec"]["size"], 1);
    // With its dependencies: the operator first, then the app.
    let (code, out, err) = setup.berth(&["sync", "chain-app", "--with-deps"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(api.get("g").await.unwrap().data["spec"]["size"], 2);
    assert_eq!(last("chain-operator").outcome, Outcome::Succeeded, "{out}");
}

/// The operator's rollout fails: the app that depends on it is held (one record, and
/// `berth status` says why), keeps its last commit, and syncs by itself once a new commit
/// fixes the operator.
#[tokio::test]
async fn a_failed_dependency_holds_its_dependent_until_it_recovers() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-hold").await;
    let repo = Repo::new();
    repo.write(
        "operator/deployment.yaml",
        &deployment("operator", "operator:1", false),
    );
    repo.write("app/settings.yaml", &config_map("one"));
    repo.commit("operator and app");
    let rest = more_apps(&repo, &ns, &[("hold-operator", "operator", "")]);
    let setup = Setup::new(
        cp,
        "hold-app",
        &repo,
        &ns,
        &format!("path = \"app\"\ndepends_on = [\"hold-operator\"]\n{rest}"),
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let _daemon = Daemon::start(&setup.config, &[]);
    common::wait_for_value(&maps, "settings", "one", Duration::from_secs(60)).await;

    repo.write(
        "operator/deployment.yaml",
        &deployment("operator", "operator:broken", true),
    );
    repo.write("app/settings.yaml", &config_map("two"));
    let broken = repo.commit("a broken operator, app two");
    let waiting = format!(
        "waiting on hold-operator: rollout failed at {} and was rolled back",
        &broken[..7]
    );
    common::eventually("the app is held", Duration::from_secs(90), || {
        history(&setup, "hold-app")
            .last()
            .is_some_and(|r| r.outcome == Outcome::Held && r.note.as_deref() == Some(&waiting))
    });
    let (code, out, _) = setup.berth(&["status"]);
    assert_eq!(code, 0, "{out}");
    let row = out.lines().find(|l| l.starts_with("hold-app ")).unwrap();
    assert_eq!(row.matches(&waiting).count(), 1, "said once: {out}");
    assert!(row.contains(" waiting "), "{out}");
    let data = maps.get("settings").await.unwrap().data.unwrap();
    assert_eq!(data["value"], "one", "the app keeps its last commit");

    // Fixed: the operator syncs, then the app, with nobody asking.
    repo.write(
        "operator/deployment.yaml",
        &deployment("operator", "operator:2", false),
    );
    let fixed = repo.commit("operator fixed");
    common::eventually("the app syncs by itself", Duration::from_secs(60), || {
        history(&setup, "hold-app")
            .last()
            .is_some_and(|r| r.outcome == Outcome::Succeeded)
    });
    let data = maps.get("settings").await.unwrap().data.unwrap();
    assert_eq!(data["value"], "two");
    let records = history(&setup, "hold-app");
    let held = records
        .iter()
        .filter(|r| r.outcome == Outcome::Held)
        .count();
    assert_eq!(held, 1, "one record for the whole wait: {records:#?}");
    // The release (a sync that finds nothing more to do may follow it).
    let released = records
        .iter()
        .rev()
        .find(|r| r.outcome == Outcome::Succeeded);
    let released = released.unwrap();
    assert_eq!(released.commit.as_ref().unwrap().sha, fixed);
    assert!(matches!(
        released.trigger,
        Trigger::Dependency | Trigger::Notify
    ));
    let (_, out, _) = setup.berth(&["status"]);
    assert!(!out.contains("waiting on"), "{out}");
}

/// A dependency cycle is refused when the configuration is loaded, naming it.
#[test]
fn a_dependency_cycle_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("berth.toml");
    let app = |name: &str, deps: &str| {
        format!("[[app]]\nname = \"{name}\"\nrepo = \"/srv/git/platform\"\ndepends_on = [{deps}]\n")
    };
    std::fs::write(
        &config,
        format!(
            "{}{}{}",
            app("crds", "\"app\""),
            app("operator", "\"crds\""),
            app("app", "\"operator\"")
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("app[0].depends_on: a dependency cycle: crds -> app -> operator -> crds"),
        "{err}"
    );
}

/// A Job (or, with `pod`, a bare Pod) named `name` (a `generateName` when it ends in `-`),
/// with `annotations` on the object; `exit` is the code its pod exits with.
fn job(name: &str, annotations: &str, exit: u32) -> String {
    let naming = if name.ends_with('-') {
        format!("generateName: {name}")
    } else {
        format!("name: {name}")
    };
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  {naming}
  annotations: {{{annotations}}}
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations: {{testenv.berth.dev/exit: \"{exit}\"}}
    spec:
      restartPolicy: Never
      containers:
        - name: run
          image: tools:1
"
    )
}

fn named_map(name: &str, value: &str, annotations: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\ndata:\n  value: \"{value}\"\n")
}

/// The line of `out` that says `what`, by its position.
fn line_of(out: &str, what: &str) -> usize {
    out.lines()
        .position(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what:?} in {out}"))
}

/// (phase, name, outcome) of each hook the record ran.
fn hooks_of(r: &berth::history::SyncRecord) -> Vec<(String, String, String)> {
    r.hooks
        .iter()
        .map(|h| (h.phase.clone(), h.key.name.clone(), h.outcome.clone()))
        .collect()
}

async fn image_of(client: &kube::Client, ns: &str) -> String {
    let d = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns)
        .get("web")
        .await
        .unwrap();
    d.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap()
}

/// A migration Job in berth's own annotations runs before the Deployment that needs it;
/// when it fails, nothing else of the commit is written and the record names it.
#[tokio::test]
async fn a_pre_sync_migration_runs_first_and_a_failing_one_writes_nothing() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-migrate").await;
    let repo = Repo::new();
    repo.write("web.yaml", &deployment("web", "web:1", false));
    repo.write("migrate.yaml", &job("migrate", "berth.dev/hook: pre", 0));
    repo.commit("web 1 and its migration");
    let setup = Setup::new(cp, "order-migrate", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        line_of(
            &out,
            &format!("job.batch/migrate -n {ns}: pre hook succeeded")
        ) < line_of(&out, &format!("deployment.apps/web -n {ns} created")),
        "{out}"
    );
    let record = setup.history().pop().unwrap();
    assert_eq!(
        hooks_of(&record),
        [("pre".into(), "migrate".into(), "succeeded".into())]
    );
    assert!(
        !record.objects.iter().any(|o| o.key.kind == "Job"),
        "a hook is not an object of the app: {:?}",
        record.objects
    );
    let (_, shown, _) = setup.berth(&["history", "show", &record.id]);
    assert!(
        shown.contains(&format!(
            "Hook:      pre job.batch/migrate -n {ns} succeeded in "
        )),
        "{shown}"
    );

    // The next migration fails: nothing else of its commit is written.
    repo.write("web.yaml", &deployment("web", "web:2", false));
    repo.write("settings.yaml", &named_map("settings", "2", ""));
    repo.write("migrate.yaml", &job("migrate", "berth.dev/hook: pre", 1));
    repo.commit("web 2, a failing migration");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Failed);
    let error = &record.errors[0].message;
    assert!(
        error.starts_with(&format!("pre hook Job {ns}/migrate failed: "))
            && error.contains("BackoffLimitExceeded"),
        "{error}"
    );
    assert_eq!(image_of(&client, &ns).await, "web:1");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(maps.get_opt("settings").await.unwrap().is_none());
}

/// An app in Argo CD's annotations: a PreSync Job named by generateName and deleted once
/// it succeeded, waves -1, 0 and 1 applied in order each healthy before the next, a
/// PostSync Job kept until its next run, a SyncFail Job run only when the sync fails — and
/// then a wave that fails stops the waves after it and runs SyncFail instead of PostSync.
#[tokio::test]
async fn an_argo_cd_app_runs_hooks_and_waves_as_argo_cd_documents() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-argo").await;
    let repo = Repo::new();
    let presync =
        "argocd.argoproj.io/hook: PreSync, argocd.argoproj.io/hook-delete-policy: HookSucceeded";
    repo.write("presync.yaml", &job("presync-", presync, 0));
    repo.write(
        "first.yaml",
        &named_map("first", "1", "argocd.argoproj.io/sync-wave: \"-1\""),
    );
    repo.write("web.yaml", &deployment("web", "web:1", false));
    repo.write(
        "last.yaml",
        &named_map("last", "1", "argocd.argoproj.io/sync-wave: \"1\""),
    );
    repo.write(
        "smoke.yaml",
        &job("smoke", "argocd.argoproj.io/hook: PostSync", 0),
    );
    repo.write(
        "cleanup.yaml",
        &job("cleanup-", "argocd.argoproj.io/hook: SyncFail", 0),
    );
    repo.commit("an app in Argo CD's annotations");
    let setup = Setup::new(
        cp,
        "order-argo",
        &repo,
        &ns,
        "prune = true\n[app.rollout]\ntimeout = \"60s\"",
    );
    // The plan shows the phases and waves in order, and which hooks would run.
    let (code, plan, err) = setup.berth(&["plan"]);
    assert_eq!(code, 0, "{plan}{err}");
    if let Some(path) = std::env::var_os("BERTH_SHOW_PLAN") {
        std::fs::write(path, &plan).unwrap(); // for the README's example
    }
    let order = [
        "  pre hooks:\n",
        "job.batch/presync-* -n",
        "(pre hook; deleted once it succeeded)",
        "  wave -1:\n",
        "configmap/first -n",
        "  wave 0:\n",
        "deployment.apps/web -n",
        "  wave 1:\n",
        "  post hooks:\n",
        "job.batch/smoke -n",
        "(post hook; deleted before its next run)",
        "  if the sync fails, fail hooks:\n",
        "job.batch/cleanup-* -n",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|w| plan.find(w).unwrap_or_else(|| panic!("no {w:?} in {plan}")))
        .collect();
    assert!(at.windows(2).all(|p| p[0] < p[1]), "{plan}");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let (pre, first, zero, last, post) = (
        line_of(&out, "pre hook succeeded"),
        line_of(&out, "wave -1: applying 1 object"),
        line_of(&out, "wave 0: applying 1 object"),
        line_of(&out, "wave 1: applying 1 object"),
        line_of(&out, "post hook succeeded"),
    );
    assert!(
        pre < first && first < zero && zero < last && last < post,
        "{out}"
    );
    assert!(
        line_of(&out, "successfully rolled out") < last,
        "wave 0 healthy before wave 1: {out}"
    );
    let record = setup.history().pop().unwrap();
    let ran = hooks_of(&record);
    assert_eq!(ran.len(), 2, "{ran:?}");
    assert!(
        ran[0].0 == "pre" && ran[0].1.starts_with("presync-") && ran[0].2 == "succeeded",
        "{ran:?}"
    );
    assert_eq!(ran[1], ("post".into(), "smoke".into(), "succeeded".into()));
    let waves: Vec<(i32, &str)> = record
        .waves
        .iter()
        .map(|w| (w.wave, w.outcome.as_str()))
        .collect();
    assert_eq!(waves, [(-1, "healthy"), (0, "healthy"), (1, "healthy")]);
    let (_, shown, _) = setup.berth(&["history", "show", &record.id]);
    assert!(
        shown.contains("Wave -1    healthy, 1 object in "),
        "{shown}"
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let names = || async {
        let mut names: Vec<String> = jobs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .filter_map(|j| j.metadata.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names().await,
        ["smoke"],
        "HookSucceeded deleted the PreSync Job; PostSync kept"
    );

    // Wave 0 fails: wave 1 is not reached, PostSync does not run, SyncFail does.
    repo.write("web.yaml", &deployment("web", "web:broken", true));
    repo.write(
        "last.yaml",
        &named_map("last", "2", "argocd.argoproj.io/sync-wave: \"1\""),
    );
    repo.commit("a broken web");
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    let record = setup.history().pop().unwrap();
    let waves: Vec<(i32, &str)> = record
        .waves
        .iter()
        .map(|w| (w.wave, w.outcome.as_str()))
        .collect();
    // Wave -1 changed nothing: only the waves with writes are applied, and recorded.
    assert_eq!(waves, [(0, "failed"), (1, "not-reached")]);
    let phases: Vec<String> = hooks_of(&record)
        .into_iter()
        .map(|h| format!("{} {}", h.0, h.2))
        .collect();
    assert_eq!(phases, ["pre succeeded", "fail succeeded"]);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert_eq!(maps.get("last").await.unwrap().data.unwrap()["value"], "1");
    assert_eq!(image_of(&client, &ns).await, "web:1", "rolled back");
}

/// Helm's hook annotations on plain manifests: `pre-install` hooks on the app's first sync
/// only, in `hook-weight` order, `pre-upgrade` on every later one; `test` hooks never.
#[tokio::test]
async fn helm_hook_annotations_follow_the_table() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-helm").await;
    let repo = Repo::new();
    let install =
        |weight: &str| format!("helm.sh/hook: pre-install, helm.sh/hook-weight: \"{weight}\"");
    repo.write("install-a.yaml", &job("install-a", &install("5"), 0));
    repo.write("install-b.yaml", &job("install-b", &install("-5"), 0));
    repo.write(
        "upgrade.yaml",
        &job(
            "upgrade",
            "helm.sh/hook: pre-upgrade, helm.sh/hook-delete-policy: hook-succeeded",
            0,
        ),
    );
    repo.write("test.yaml", &job("test", "helm.sh/hook: test", 1));
    repo.write("settings.yaml", &named_map("settings", "1", ""));
    repo.commit("a chart's hooks as plain manifests");
    let setup = Setup::new(cp, "order-helm", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let names = |r: &berth::history::SyncRecord| -> Vec<String> {
        hooks_of(r)
            .into_iter()
            .map(|h| format!("{} {} {}", h.0, h.1, h.2))
            .collect()
    };
    assert_eq!(
        names(&setup.history().pop().unwrap()),
        ["pre install-b succeeded", "pre install-a succeeded"]
    );
    assert!(
        out.contains("Job test: not applied (helm.sh/hook: test: not run by the first sync)"),
        "{out}"
    );

    repo.write("settings.yaml", &named_map("settings", "2", ""));
    repo.commit("settings 2");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        names(&setup.history().pop().unwrap()),
        ["pre upgrade succeeded"]
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    assert!(
        jobs.get_opt("test").await.unwrap().is_none(),
        "test hooks never run"
    );
    let upgrade = jobs.get_opt("upgrade").await.unwrap();
    assert!(
        upgrade.is_none_or(|j| j.metadata.deletion_timestamp.is_some()),
        "hook-succeeded deletes it"
    );
    assert!(
        jobs.get_opt("install-a").await.unwrap().is_some(),
        "kept until its next run"
    );
}

/// Apps removed from the configuration with `prune = true` have their objects deleted,
/// the app that depended on another first; one removed with `prune = false` keeps its
/// objects; the app that stays is untouched.
#[tokio::test]
async fn removed_apps_are_pruned_dependents_first() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-removed").await;
    let repo = Repo::new();
    for app in ["base", "mid", "top", "keep"] {
        repo.write(
            &format!("{app}/map.yaml"),
            &named_map(&format!("rm-{app}"), "1", ""),
        );
    }
    repo.commit("four apps");
    let table = |name: &str, deps: &str, prune: bool| {
        format!(
            "[[app]]\nname = \"rm-{name}\"\nrepo = \"{}\"\nnamespace = \"{ns}\"\npath = \"{name}\"\nprune = {prune}\ndepends_on = [{deps}]\n",
            repo.dir.path().display()
        )
    };
    let setup = Setup::new(
        cp,
        "rm-base",
        &repo,
        &ns,
        &format!(
            "path = \"base\"\nprune = true\n{}{}{}",
            table("mid", "\"rm-base\"", true),
            table("top", "\"rm-mid\"", true),
            table("keep", "", false)
        ),
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let daemon = Daemon::start(&setup.config, &[]);
    for app in ["base", "mid", "top", "keep"] {
        common::wait_for_value(&maps, &format!("rm-{app}"), "1", Duration::from_secs(60)).await;
    }
    common::eventually("every app recorded", Duration::from_secs(30), || {
        ["base", "mid", "top", "keep"]
            .iter()
            .all(|a| !history(&setup, &format!("rm-{a}")).is_empty())
    });

    // Only base stays.
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let cut = text.find("[[app]]\nname = \"rm-mid\"").unwrap();
    std::fs::write(&setup.config, &text[..cut]).unwrap();
    daemon.signal(libc::SIGHUP);
    let removal = |app: &str| {
        history(&setup, app)
            .into_iter()
            .find(|r| r.trigger == Trigger::Removed)
    };
    common::eventually("mid and top removed", Duration::from_secs(60), || {
        removal("rm-mid").is_some() && removal("rm-top").is_some()
    });
    let (mid, top) = (removal("rm-mid").unwrap(), removal("rm-top").unwrap());
    assert_eq!(
        (mid.outcome, top.outcome),
        (Outcome::Succeeded, Outcome::Succeeded)
    );
    assert!(
        top.finished_at <= mid.started_at,
        "what depends on mid goes first"
    );
    assert_eq!(
        top.note.as_deref(),
        Some("removed from the configuration: 1 object pruned, its inventory deleted")
    );
    for gone in ["rm-mid", "rm-top"] {
        assert!(maps.get_opt(gone).await.unwrap().is_none(), "{gone} pruned");
        let inventories: Api<ConfigMap> = Api::namespaced(client.clone(), "berth-system");
        let inventory = format!("berth-inventory-{gone}");
        assert!(inventories.get_opt(&inventory).await.unwrap().is_none());
    }
    assert!(
        maps.get_opt("rm-keep").await.unwrap().is_some(),
        "prune = false: kept"
    );
    assert!(removal("rm-keep").is_none());
    assert!(maps.get_opt("rm-base").await.unwrap().is_some());
}

/// A hook kept by its delete policy (`HookFailed` keeps the runs that succeed), named by
/// `generateName`: its runs stay bounded, the newest three kept, whatever the syncs.
#[tokio::test]
async fn kept_hook_runs_are_bounded_to_the_newest_three() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-kept").await;
    let repo = Repo::new();
    repo.write(
        "report.yaml",
        &job(
            "report-",
            "argocd.argoproj.io/hook: PostSync, argocd.argoproj.io/hook-delete-policy: HookFailed",
            0,
        ),
    );
    let setup = Setup::new(cp, "order-kept", &repo, &ns, "");
    for run in 0..5 {
        repo.write(
            "settings.yaml",
            &named_map("settings", &run.to_string(), ""),
        );
        repo.commit(&format!("settings {run}"));
        let (code, out, err) = setup.berth(&["sync"]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), &ns);
    let kept = jobs.list(&Default::default()).await.unwrap().items;
    let names: Vec<_> = kept
        .iter()
        .filter_map(|j| j.metadata.name.clone())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    let record = setup.history().pop().unwrap();
    let (_, last, _) = &hooks_of(&record)[0];
    assert!(
        names.contains(last),
        "the newest run is kept: {last} in {names:?}"
    );
}

/// Issue 61, item 2: a commit's pre hooks run once. A sync of the same commit again — a
/// restart resuming it, or drift repaired — applies what it must and runs no pre hook: the
/// migration does not run twice.
#[tokio::test]
async fn a_commits_pre_hooks_run_once_whatever_syncs_it_again() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "order-once").await;
    let repo = Repo::new();
    repo.write("settings.yaml", &named_map("settings", "1", ""));
    repo.write("migrate.yaml", &job("migrate", "berth.dev/hook: pre", 0));
    repo.commit("settings and their migration");
    let setup = Setup::new(cp, "order-once", &repo, &ns, "");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(hooks_of(&setup.history().pop().unwrap()).len(), 1, "{out}");
    // Drift: the settings deleted by hand, the same commit synced again.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    maps.delete("settings", &Default::default()).await.unwrap();
    let (code, out, err) = setup.berth(&["sync", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(maps.get_opt("settings").await.unwrap().is_some(), "{out}");
    assert!(
        out.contains("pre hooks: not run again (they completed for commit"),
        "{out}"
    );
    let record = setup.history().pop().unwrap();
    assert_eq!(hooks_of(&record), [], "the migration ran twice: {out}");
}
