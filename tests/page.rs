//! The status page (`[agent] status_page`) in a real browser (Debian's chromium, driven by
//! chromedriver) against `berth run` on the real control plane: a sync shows on `/`
//! within a second of its end, a sync in flight shows its step, the filters, a failed
//! rollout's page with its chart and rollback point, no console error; then every page
//! and API answer is scanned for a planted Secret value and the page's, the webhook's
//! and the kubeconfig's secrets. Screenshots go to `target/page-screenshots/` (not
//! committed; `docs/status-page.png` is one of them).

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use berth::history::{Outcome, SyncRecord};
use common::browser::Browser;
use common::{eventually, web_deployment, Daemon, Repo, NEVER_READY};
use serde_json::json;

const PLANTED: &str = "planted-db-password-7f3a";
const USER_PASSWORD: &str = "ops:page-pass-91c2";
const TOKEN: &str = "page-token-4d1e";
const HOOK_SECRET: &str = "hook-secret-5b8e";

const SECRET: &str = "apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: planted-db-password-7f3a
";

/// The Deployment `web` at `image`: a rollout that fails fails within 4 s.
fn deployment(image: &str, annotations: &str) -> String {
    web_deployment(image, annotations, "  progressDeadlineSeconds: 4\n")
}

/// One GET on a fresh connection: status, head and body (an event stream is read up to
/// its first event).
fn get(port: u16, path: &str, authorization: Option<&str>) -> (u16, String, String) {
    get_at(port, "localhost", path, authorization)
}

/// [`get`] with `Host: host`.
fn get_at(port: u16, host: &str, path: &str, authorization: Option<&str>) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&out);
        if text.contains("text/event-stream")
            && text.contains("\n\n")
            && text.matches("data: ").count() > 0
        {
            break;
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_lowercase(), body.to_string())
}

fn history(state: &std::path::Path, app: &str) -> Vec<SyncRecord> {
    berth::history::HistoryLog::new(state).read(app).unwrap()
}

#[tokio::test]
async fn the_status_page_follows_the_agent_in_a_browser() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let shop_ns = common::namespace(&client, "page-shop").await;
    let broken_ns = common::namespace(&client, "page-broken").await;
    let repo = Repo::new();
    repo.write("shop/web.yaml", &deployment("web:1", ""));
    repo.write("shop/secret.yaml", SECRET);
    repo.write("broken/web.yaml", &deployment("web:1", ""));
    repo.commit("first version");

    let state = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let credentials = secrets.path().join("page");
    std::fs::write(
        &credentials,
        format!("# who may read the page\n{USER_PASSWORD}\n{TOKEN}\n"),
    )
    .unwrap();
    let hook = secrets.path().join("hook");
    std::fs::write(&hook, HOOK_SECRET).unwrap();
    let port = common::free_port();
    let config = state.path().join("berth.toml");
    let app = |name: &str, ns: &str, extra: &str| {
        format!(
            "[[app]]\nname = \"{name}\"\nrepo = \"{}\"\npath = \"{name}\"\nnamespace = \"{ns}\"\n{extra}\n",
            repo.dir.path().display()
        )
    };
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\ninterval = \"1h\"\njitter = \"0s\"\nlisten = \"127.0.0.1:{port}\"\nstatus_page = true\nstatus_page_credentials = \"{}\"\n[cluster]\nkubeconfig = \"{}\"\n{}{}",
            state.path().display(),
            credentials.display(),
            cp.kubeconfig.display(),
            app("shop", &shop_ns, &format!("webhook_secret_file = \"{}\"", hook.display())),
            app("broken", &broken_ns, "[app.rollout]\non_failure = \"rollback\""),
        ),
    )
    .unwrap();
    let _daemon = Daemon::start(&config, &[]);
    eventually("both apps' first syncs", Duration::from_secs(60), || {
        ["shop", "broken"].iter().all(|a| {
            history(state.path(), a)
                .iter()
                .any(|r| r.outcome == Outcome::Succeeded)
        })
    });

    // Nobody reads it without a credential; /healthz stays open to probes.
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(USER_PASSWORD)
    );
    let bearer = format!("Bearer {TOKEN}");
    let (code, head, _) = get(port, "/", None);
    assert_eq!(code, 401, "{head}");
    assert!(
        head.contains("www-authenticate: basic realm=\"berth\""),
        "{head}"
    );
    assert_eq!(get(port, "/api/apps", Some("Bearer wrong")).0, 401);
    assert_eq!(get(port, "/api/apps", Some("Basic b3BzOndyb25n")).0, 401);
    assert_eq!(get(port, "/healthz", None).0, 200);
    let (code, head, _) = get(port, "/", Some(&basic));
    assert_eq!(code, 200, "{head}");
    for header in [
        "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'",
        "frame-ancestors 'none'",
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
    ] {
        assert!(head.contains(header), "{header} missing: {head}");
    }
    // Only the configuration's apps: a name that is a path is no app.
    assert_eq!(get(port, "/apps/..%2F..%2Fetc", Some(&bearer)).0, 404);
    assert_eq!(get(port, "/api/apps/shop/syncs/nope", Some(&bearer)).0, 404);

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../page-screenshots");
    let browser = Browser::start(1280, 900);
    browser.authorize(&basic);
    let base = format!("http://127.0.0.1:{port}");
    browser.open(&format!("{base}/"));
    browser.until(
        "the page follows the agent",
        Duration::from_secs(10),
        "return document.getElementById('live').textContent === 'live'",
    );
    let status = |app: &str| {
        browser.run(
            "return document.querySelector(`tr[data-app='${arguments[0]}']`).dataset.status",
            json!([app]),
        )
    };
    assert_eq!(status("shop"), json!("succeeded"));
    // Its health says objects and pods apart: web's 3 pods are ready.
    browser.until(
        "the health cell counts pods",
        Duration::from_secs(30),
        "const t = document.querySelector(`tr[data-app='shop'] [data-field='health']`).textContent; return t.includes('objects ready') && t.includes('3/3 pods ready')",
    );

    // A new commit: the agent syncs it (the repository is watched), and the row shows
    // its commit within a second of the sync's end.
    repo.write("shop/web.yaml", &deployment("web:2", ""));
    let second = repo.commit("web 2");
    let short = &second[..7];
    let shown = "return document.querySelector(`tr[data-app='shop'] [data-field='commit']`).textContent.includes(arguments[0])";
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if browser.run(shown, json!([short])) == json!(true) {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "the new commit never showed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = jiff::Timestamp::now();
    let record = history(state.path(), "shop").pop().unwrap();
    assert_eq!(record.commit.as_ref().unwrap().sha, second);
    let late = seen.duration_since(record.finished_at);
    assert!(
        late.as_millis() < 1000,
        "shown {late:?} after the sync ended"
    );
    assert_eq!(status("shop"), json!(record.outcome.as_str()));

    // A broken commit: its rollout is followed live (the step shows), fails and is rolled
    // back.
    repo.write("broken/web.yaml", &deployment("web:broken", NEVER_READY));
    let bad = repo.commit("broken web");
    browser.until(
        "the sync in flight shows its step",
        Duration::from_secs(30),
        "return document.querySelector(`tr[data-app='broken'] [data-field='status']`).textContent.startsWith('syncing roll out')",
    );
    // Rolled back, or already "held" by the sync after it: on a loaded machine the second
    // sync can come between two looks.
    browser.until(
        "the rolled-back sync shows",
        Duration::from_secs(60),
        "return ['rolled-back', 'held'].includes(document.querySelector(`tr[data-app='broken']`).dataset.status)",
    );
    let records = history(state.path(), "broken");
    let failed = (records.into_iter().rev())
        .find(|r| r.outcome != Outcome::Held)
        .unwrap();
    assert_eq!(
        (failed.outcome, failed.commit.as_ref().unwrap().sha.as_str()),
        (Outcome::RolledBack, bad.as_str())
    );
    browser.screenshot(&shots, "index");

    // The filters: by name and by outcome, as a user types and picks (an outcome as the
    // row says it at that moment: a second sync of the broken commit says "held").
    let filter = "const [name, app] = arguments;
        const outcome = app ? document.querySelector(`tr[data-app='${app}']`).dataset.status : '';
        const n = document.getElementById('filter-name'); n.value = name; n.dispatchEvent(new Event('input'));
        const o = document.getElementById('filter-outcome'); o.value = outcome; o.dispatchEvent(new Event('change'));
        return [outcome, Array.from(document.querySelectorAll('tr[data-app]')).filter(r => !r.hidden).map(r => r.dataset.app),
                document.getElementById('count').textContent];";
    assert_eq!(
        browser.run(filter, json!(["bro", null])),
        json!(["", ["broken"], "1 of 2 apps"])
    );
    let by_outcome = browser.run(filter, json!(["", "broken"]));
    assert!(
        by_outcome[0] == json!("rolled-back") || by_outcome[0] == json!("held"),
        "{by_outcome}"
    );
    assert_eq!(
        (&by_outcome[1], &by_outcome[2]),
        (&json!(["broken"]), &json!("1 of 2 apps"))
    );
    let by_outcome = browser.run(filter, json!(["", "shop"]));
    assert_eq!(
        (&by_outcome[1], &by_outcome[2]),
        (&json!(["shop"]), &json!("1 of 2 apps"))
    );
    assert_eq!(
        browser.run(filter, json!(["", null])),
        json!(["", ["broken", "shop"], "2 of 2 apps"])
    );
    // The filter is in the address: a reload keeps it (rendered by the server).
    browser.run(filter, json!(["sho", null]));
    let here = browser.run("return location.href", json!([]));
    browser.open(here.as_str().unwrap());
    assert_eq!(browser.run("return Array.from(document.querySelectorAll('tr[data-app]')).filter(r => !r.hidden).map(r => r.dataset.app)", json!([])), json!(["shop"]));

    // The failed sync's page, reached by links: the chart with the rollback point.
    browser.open(&format!("{base}/"));
    browser.run(
        "document.querySelector(`a[href='/apps/broken']`).click()",
        json!([]),
    );
    browser.until("the app's page", Duration::from_secs(10), "return document.body.dataset.page === 'app' && document.getElementById('live').textContent === 'live'");
    browser.screenshot(&shots, "app");
    browser.run(
        &format!(
            "document.querySelector(`tr[data-record='{}'] a`).click()",
            failed.id
        ),
        json!([]),
    );
    browser.until(
        "the sync's page",
        Duration::from_secs(10),
        "return document.body.dataset.page === 'sync'",
    );
    let chart = browser.run(
        "const svg = document.querySelector('svg.chart');
         return [!!svg.querySelector('line.rollback'), svg.querySelector('.rollback-label').textContent,
                 svg.querySelectorAll('polyline').length, document.querySelector('main').innerText];",
        json!([]),
    );
    assert_eq!(chart[0], json!(true), "{chart}");
    assert_eq!(chart[1], json!("rollback to revision 1"), "{chart}");
    assert!(chart[2].as_u64().unwrap() >= 4, "{chart}");
    let text = chart[3].as_str().unwrap();
    assert!(
        text.contains("exceeded its progress deadline") && text.contains(&bad[..7]),
        "{text}"
    );
    browser.run(
        "document.querySelector('section.rollout').scrollIntoView()",
        json!([]),
    );
    browser.screenshot(&shots, "sync-rolled-back");
    assert_eq!(
        browser.console_errors(),
        Vec::<String>::new(),
        "console errors"
    );

    // A narrow window and the dark scheme.
    browser.resize(420, 900);
    browser.cdp(
        "Emulation.setEmulatedMedia",
        json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
    );
    browser.open(&format!("{base}/"));
    browser.until(
        "the page follows the agent",
        Duration::from_secs(10),
        "return document.getElementById('live').textContent === 'live'",
    );
    let overflow = browser.run(
        "return document.documentElement.scrollWidth <= window.innerWidth + 1",
        json!([]),
    );
    assert_eq!(
        overflow,
        json!(true),
        "the page is wider than a narrow window"
    );
    browser.screenshot(&shots, "index-narrow-dark");
    assert_eq!(
        browser.console_errors(),
        Vec::<String>::new(),
        "console errors"
    );

    // Every page and API answer, scanned for the secrets the agent holds.
    let kubeconfig = std::fs::read_to_string(&cp.kubeconfig).unwrap();
    let kube_token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(str::to_string);
    let mut forbidden = vec![
        PLANTED.to_string(),
        base64::engine::general_purpose::STANDARD.encode(PLANTED),
        USER_PASSWORD.to_string(),
        TOKEN.to_string(),
        HOOK_SECRET.to_string(),
    ];
    forbidden.extend(kube_token);
    let mut paths: Vec<String> = [
        "/",
        "/?name=shop&outcome=failed",
        "/apps/shop",
        "/apps/broken",
        "/api/apps",
        "/api/apps/shop",
        "/api/apps/broken",
        "/api/apps/shop/syncs",
        "/api/apps/broken/syncs",
        "/api/events",
        "/api/events?app=shop",
        "/assets/page.js",
        "/assets/page.css",
    ]
    .map(String::from)
    .to_vec();
    for app in ["shop", "broken"] {
        for r in history(state.path(), app) {
            paths.push(format!("/apps/{app}/syncs/{}", r.id));
            paths.push(format!("/api/apps/{app}/syncs/{}", r.id));
        }
    }
    for path in &paths {
        let (code, _, body) = get(port, path, Some(&bearer));
        assert_eq!(code, 200, "{path}: {body}");
        for secret in &forbidden {
            assert!(
                !body.contains(secret.as_str()),
                "{path} shows a secret: {body}"
            );
        }
    }
    // The Secret is there, with its value, in the cluster.
    let secret: k8s_openapi::api::core::v1::Secret =
        kube::Api::namespaced(client.clone(), &shop_ns)
            .get("db")
            .await
            .unwrap();
    assert_eq!(secret.data.unwrap()["password"].0, PLANTED.as_bytes());
}

/// Off unless configured; on without credentials, answered only under an address.
#[test]
fn without_credentials_the_page_answers_only_under_an_address() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let repo = Repo::new();
    repo.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\n",
    );
    repo.commit("first");
    let port = common::free_port();
    let setup = common::Setup::new(cp, "open", &repo, "default", "");
    let config = std::fs::read_to_string(&setup.config).unwrap();
    let with = |page: &str| {
        let text = config.replace(
            "[cluster]",
            &format!("listen = \"127.0.0.1:{port}\"\n{page}[cluster]"),
        );
        std::fs::write(&setup.config, text).unwrap();
        Daemon::start(&setup.config, &[])
    };
    let up = || {
        eventually("berth run answers", Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
    };
    {
        let _daemon = with("");
        up();
        assert_eq!(get(port, "/", None).0, 404, "the page is off by default");
        assert_eq!(get(port, "/api/apps", None).0, 404);
    }
    let _daemon = with("status_page = true\n");
    up();
    let (code, _, body) = get_at(port, &format!("127.0.0.1:{port}"), "/api/apps", None);
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"name\":\"open\""), "{body}");
    assert_eq!(get_at(port, "[::1]", "/", None).0, 200);
    let (code, _, body) = get_at(port, &format!("rebound.example:{port}"), "/", None);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("answers only under an address"), "{body}");
}
