//! Progressive delivery's checks against real servers (issue 66): a Prometheus scraping a
//! Pushgateway the test pushes an error rate to for each version, and HTTP checks of
//! Prometheus' own endpoints.

mod common;

use std::time::Duration;

use berth::rollout::analysis::measure::{measure, Check};
use berth::rollout::analysis::{judged, Condition, Unmeasured, Value};
use common::prometheus::Prometheus;

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_query_measures_each_version_and_a_bad_one_breaks_its_bound() {
    let Some(prometheus) = Prometheus::start() else {
        return;
    };
    prometheus.push(
        "shop",
        "# TYPE http_error_ratio gauge\nhttp_error_ratio{app=\"shop\",version=\"good5f7\"} 0.01\nhttp_error_ratio{app=\"shop\",version=\"bad9c1\"} 0.3\n",
    );
    let client = berth::notifications::deliver::client().unwrap();
    let errors = Check::Prometheus {
        address: prometheus.address.clone(),
        query: r#"max(http_error_ratio{app="shop",version="{version}"})"#.into(),
    };
    let at_most = Condition {
        max: Some(0.05),
        ..Condition::default()
    };
    let read = |version: &'static str| {
        let (client, errors) = (&client, &errors);
        async move { measure(client, errors, version, None, SECOND * 5).await }
    };
    // Scraped within a second or two.
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while read("good5f7").await.is_err() {
        assert!(
            std::time::Instant::now() < end,
            "the series is never scraped"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let now = jiff::Timestamp::now();
    let good = judged(now, read("good5f7").await, &at_most);
    assert_eq!(good.value, Some(Value::Number(0.01)));
    assert!(good.passed, "{good:?}");
    let bad = judged(now, read("bad9c1").await, &at_most);
    assert_eq!(bad.value, Some(Value::Number(0.3)));
    assert!(!bad.passed);
    assert_eq!(bad.why.as_deref(), Some("0.3, over the max 0.05"));
    // A version without a series, a broken query and a dead server: not measured, failed.
    assert_eq!(read("none").await, Err(Unmeasured::NoData));
    let broken = Check::Prometheus {
        address: prometheus.address.clone(),
        query: "sum(".into(),
    };
    let said = measure(&client, &broken, "v", None, SECOND * 5).await;
    assert!(
        said.as_ref()
            .is_err_and(|e| e.to_string().starts_with("the query failed (400)")),
        "{said:?}"
    );
    let dead = Check::Prometheus {
        address: format!("http://127.0.0.1:{}", common::free_port()),
        query: "up".into(),
    };
    let said = measure(&client, &dead, "v", None, SECOND * 5).await;
    assert!(
        said.as_ref()
            .is_err_and(|e| e.to_string().starts_with("unreachable")),
        "{said:?}"
    );
}

#[tokio::test]
async fn an_http_check_reads_the_status_and_a_json_field() {
    let Some(prometheus) = Prometheus::start() else {
        return;
    };
    let client = berth::notifications::deliver::client().unwrap();
    let field = Check::Http {
        url: format!("{}/api/v1/status/buildinfo", prometheus.address),
        json: Some(".status".into()),
    };
    let ok = Condition {
        equals: Some("success".into()),
        ..Condition::default()
    };
    let read = measure(&client, &field, "v", None, SECOND * 5).await;
    assert_eq!(read, Ok(Value::Text("success".into())));
    assert!(judged(jiff::Timestamp::now(), read, &ok).passed);
    let ready = Check::Http {
        url: format!("{}/-/ready", prometheus.address),
        json: None,
    };
    assert_eq!(
        measure(&client, &ready, "v", None, SECOND * 5).await,
        Ok(Value::Number(200.0))
    );
    let missing = Check::Http {
        url: format!("{}/no-such-page", prometheus.address),
        json: None,
    };
    assert_eq!(
        measure(&client, &missing, "v", None, SECOND * 5).await,
        Err(Unmeasured::Status(404))
    );
}

/// A canary whose step runs an HTTP check (Prometheus' build info, its `.status`) and a
/// Job check side by side: a good version passes both, each value recorded, the Jobs
/// deleted; a failing Job aborts the next version, the old one back at full size.
#[tokio::test(flavor = "multi_thread")]
async fn a_canary_runs_an_http_check_and_a_job_check() {
    use berth::history::{Outcome, RolloutOutcome};
    use k8s_openapi::api::batch::v1::Job;
    use kube::api::{Api, ListParams};

    let (Some(cp), Some(prometheus)) = (common::control_plane(), Prometheus::start()) else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "checks").await;
    let web =
        |image: &str| common::web_deployment(image, "", "").replace("replicas: 3", "replicas: 4");
    let repo = common::Repo::new();
    repo.write("web.yaml", &web("web:1"));
    repo.commit("web 1");
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("smoke.yaml");
    std::fs::write(&job, common::check_job(0)).unwrap();
    let checks = format!(
        "[app.rollout]\nstrategy = \"canary\"\ntimeout = \"1m\"\nsteps = [{{ weight = 50, analysis = [\"health\", \"smoke\"] }}, {{ weight = 100 }}]\n[[analysis]]\nname = \"health\"\nhttp = \"{}/api/v1/status/buildinfo\"\njson = \".status\"\nequals = \"success\"\ninterval = \"1s\"\ncount = 2\n[[analysis]]\nname = \"smoke\"\njob = \"{}\"\n",
        prometheus.address,
        job.display()
    );
    let setup = common::Setup::new(cp, "checks", &repo, &ns, &checks);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");

    repo.write("web.yaml", &web("web:2"));
    repo.commit("web 2");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::Succeeded, "{:?}", record.errors);
    let step = &record.rollouts[0].canary[0];
    let values = |name: &str| -> Vec<Option<Value>> {
        let check = step.checks.iter().find(|c| c.name == name).unwrap();
        assert!(check.passed, "{check:?}");
        check.measurements.iter().map(|m| m.value.clone()).collect()
    };
    let success = Some(Value::Text("success".into()));
    assert_eq!(values("health"), [success.clone(), success]);
    assert_eq!(values("smoke"), [Some(Value::Text("complete".into()))]);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while !jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < end,
            "the check's Job is left behind"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    std::fs::write(&job, common::check_job(1)).unwrap();
    repo.write("web.yaml", &web("web:3"));
    repo.commit("web 3");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 1, "{out}{err}");
    let record = setup.history().pop().unwrap();
    assert_eq!(record.outcome, Outcome::RolledBack, "{:?}", record.errors);
    let rollout = &record.rollouts[0].rollout;
    assert_eq!(rollout.outcome, RolloutOutcome::Failed);
    assert!(
        rollout
            .message
            .starts_with("analysis smoke failed at step 1 (50 %): \"failed: "),
        "{}",
        rollout.message
    );
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), &ns);
    let live = deployments.get("web").await.unwrap();
    let image = live.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("web:2"), "the old template restored");
    assert_eq!(live.status.unwrap().ready_replicas, Some(4));
}

/// A server that answers `/big` with a 2 MiB JSON body and never answers `/slow`.
fn hostile_server() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = [0u8; 1024];
                let n = stream.read(&mut head).unwrap_or(0);
                if String::from_utf8_lossy(&head[..n]).starts_with("GET /slow") {
                    std::thread::sleep(Duration::from_secs(60));
                    return;
                }
                let body = format!("{{\"status\": \"{}\"}}", "x".repeat(2 << 20));
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            });
        }
    });
    port
}

/// A hostile check server: an answer over 1 MiB is refused unread, a server that never
/// answers fails the measurement at its timeout; neither passes.
#[tokio::test]
async fn an_oversized_or_silent_answer_fails_the_measurement() {
    let port = hostile_server();
    let client = berth::notifications::deliver::client().unwrap();
    let check = |path: &str| Check::Http {
        url: format!("http://127.0.0.1:{port}{path}"),
        json: Some(".status".into()),
    };
    let big = measure(&client, &check("/big"), "v", None, SECOND * 5).await;
    assert!(matches!(big, Err(Unmeasured::Unreadable(_))), "{big:?}");
    let started = std::time::Instant::now();
    let slow = measure(&client, &check("/slow"), "v", None, SECOND * 2).await;
    assert_eq!(slow, Err(Unmeasured::Slow(SECOND * 2)));
    assert!(started.elapsed() < SECOND * 5, "{:?}", started.elapsed());
    let judged = judged(jiff::Timestamp::now(), slow, &Condition::default());
    assert!(!judged.passed);
    assert_eq!(judged.why.as_deref(), Some("no answer within 2s"));
}
