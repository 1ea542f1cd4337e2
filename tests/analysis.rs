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
