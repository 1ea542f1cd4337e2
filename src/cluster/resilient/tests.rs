use super::*;

#[test]
fn backoff_doubles_with_jitter_up_to_the_cap() {
    for attempt in 0..8 {
        let full = (BACKOFF.base * 2u32.pow(attempt)).min(MAX_BACKOFF);
        for _ in 0..20 {
            let b = BACKOFF.delay(attempt);
            assert!(b >= full / 2 && b <= full, "attempt {attempt}: {b:?}");
        }
    }
    assert_eq!(BACKOFF.delay(40).max(MAX_BACKOFF), MAX_BACKOFF);
}

#[test]
fn watches_are_told_apart() {
    let req = |uri: &str| Request::get(uri).body(()).unwrap();
    assert!(is_watch(&req("/api/v1/pods?watch=true&resourceVersion=1")));
    assert!(!is_watch(&req("/api/v1/pods?labelSelector=watch%3Dtrue")));
    assert!(!is_watch(&req("/api/v1/pods")));
}

#[test]
fn transient_answers_and_errors() {
    assert!(transient_status(StatusCode::TOO_MANY_REQUESTS.as_u16()));
    assert!(transient_status(StatusCode::SERVICE_UNAVAILABLE.as_u16()));
    assert!(!transient_status(StatusCode::CONFLICT.as_u16()));
    assert!(!transient_status(StatusCode::UNPROCESSABLE_ENTITY.as_u16()));
    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    assert!(transient_error(&reset));
    let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
    assert!(!transient_error(&denied));
    assert!(transient_error(&TimedOut(Duration::from_secs(1))));
    let mut h = http::HeaderMap::new();
    h.insert(http::header::RETRY_AFTER, "2".parse().unwrap());
    assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
}

/// A service answering `statuses` in turn (the last one for ever), counting calls;
/// status 0 never answers.
fn answering(
    statuses: &'static [u16],
    message: &'static [u8],
) -> (
    impl Service<
            Request<Body>,
            Response = Response<Full<Bytes>>,
            Error = BoxError,
            Future = impl Send + 'static,
        > + Clone
        + Send
        + 'static,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::Ordering;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let service = tower::service_fn(move |_req: Request<Body>| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let status = statuses[n.min(statuses.len() - 1)];
        async move {
            if status == 0 {
                futures::future::pending::<()>().await;
            }
            let body = Full::new(Bytes::from_static(message));
            Ok::<_, BoxError>(Response::builder().status(status).body(body).unwrap())
        }
    });
    (service, calls)
}

async fn send_one(
    statuses: &'static [u16],
    policy: Resilience,
) -> (Result<Answer<Full<Bytes>>, BoxError>, usize) {
    send_answering(statuses, b"", policy).await
}

async fn send_answering(
    statuses: &'static [u16],
    message: &'static [u8],
    policy: Resilience,
) -> (Result<Answer<Full<Bytes>>, BoxError>, usize) {
    let (service, calls) = answering(statuses, message);
    let mut service = ResilientLayer {
        policy,
        reach: Reach::new("test", "https://test/"),
    }
    .layer(service);
    let req = Request::patch("/api/v1/namespaces/shop/configmaps/a")
        .body(Body::from(b"{}".to_vec()))
        .unwrap();
    let result = service.ready().await.unwrap().call(req).await;
    (result, calls.load(std::sync::atomic::Ordering::SeqCst))
}

const PATIENT: Resilience = Resilience {
    request_timeout: Duration::from_secs(5),
    retry_for: Duration::from_secs(30),
};

#[tokio::test]
async fn transient_answers_are_sent_again_until_one_succeeds() {
    let (result, calls) = send_one(&[503, 429, 200], PATIENT).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(calls, 3);
}

#[tokio::test]
async fn a_500_for_an_invalid_request_is_final_and_keeps_its_message() {
    let invalid = br#"{"kind":"Status","status":"Failure","message":"failed to create typed patch object: .data.x: expected string, got &value.valueUnstructured{Value:1}","reason":"InternalError","code":500}"#;
    let (result, calls) = send_answering(&[500, 200], invalid, PATIENT).await;
    let answer = result.unwrap();
    assert_eq!(answer.status(), 500);
    assert_eq!(calls, 1);
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains(".data.x: expected string"));
    let busy = br#"{"kind":"Status","message":"etcdserver: request timed out","code":500}"#;
    let (result, calls) = send_answering(&[500, 200], busy, PATIENT).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(calls, 2);
}

#[tokio::test]
async fn a_refusal_is_not_sent_again() {
    let (result, calls) = send_one(&[422, 200], PATIENT).await;
    assert_eq!(result.unwrap().status(), 422);
    assert_eq!(calls, 1);
}

/// A server that does not answer fails the request within `request_timeout`,
/// however long `retry_for` is, naming the server and the cause.
#[tokio::test]
async fn a_request_that_hangs_fails_within_request_timeout_naming_the_server() {
    let brief = Resilience {
        request_timeout: Duration::from_millis(100),
        retry_for: Duration::from_secs(60),
    };
    let clock = Instant::now();
    let (result, calls) = send_one(&[0], brief).await;
    let e = result.unwrap_err().to_string();
    assert_eq!(
        e,
        "cannot reach the API server at https://test/: no answer within 100ms"
    );
    assert_eq!(calls, 1);
    assert!(
        clock.elapsed() < Duration::from_millis(500),
        "{:?}",
        clock.elapsed()
    );
}

/// The first failed connection marks the server down, the next answer marks it back;
/// in a known outage a request is tried once; `stop` ends a request in flight.
#[tokio::test]
async fn reach_follows_outages_and_stop_cuts_requests_short() {
    let reach = Reach::new("test", "https://test/");
    let refused = tower::service_fn(|_req: Request<Body>| async {
        Err::<Response<Full<Bytes>>, BoxError>(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))
    });
    let policy = Resilience {
        request_timeout: Duration::from_millis(400),
        retry_for: Duration::from_secs(60),
    };
    let layer = ResilientLayer {
        policy,
        reach: reach.clone(),
    };
    let req = || Request::get("/version").body(Body::empty()).unwrap();
    let mut down = layer.layer(refused);
    let clock = Instant::now();
    let e = down.ready().await.unwrap().call(req()).await.unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot reach the API server at https://test/: ")
            && e.to_string().to_lowercase().contains("connection refused"),
        "{e}"
    );
    assert!(reach.is_down());
    assert!(clock.elapsed() <= Duration::from_millis(600));
    // An outage older than request_timeout: one attempt, at once.
    tokio::time::sleep(policy.request_timeout).await;
    let clock = Instant::now();
    down.ready().await.unwrap().call(req()).await.unwrap_err();
    assert!(clock.elapsed() < Duration::from_millis(100));

    let (answers, _) = answering(&[200], b"");
    let mut up = layer.layer(answers);
    up.ready().await.unwrap().call(req()).await.unwrap();
    assert!(!reach.is_down());
    reach.back().await;

    // Stopping: an answer still comes; in an outage nothing waits.
    reach.stop();
    up.ready().await.unwrap().call(req()).await.unwrap();
    let clock = Instant::now();
    down.ready().await.unwrap().call(req()).await.unwrap_err();
    let (hangs, _) = answering(&[0], b"");
    let e = layer
        .layer(hangs)
        .ready()
        .await
        .unwrap()
        .call(req())
        .await
        .unwrap_err();
    assert!(e.is::<Stopping>(), "{e}");
    assert!(clock.elapsed() < Duration::from_millis(500));
}
