//! A real browser for the status page's tests: Debian's chromium, headless, driven through
//! chromedriver's WebDriver protocol (JSON over HTTP on a loopback port). Installed by
//! `scripts/test` and `.ci/run` (packages chromium and chromium-driver).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

use super::free_port;

/// A chromedriver process and one browser session.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

fn program(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} is not installed: the status page's browser tests need Debian's chromium and chromium-driver (scripts/test installs them: apt-get install chromium chromium-driver)")
    })
}

impl Browser {
    /// Starts chromedriver and a headless chromium (`width`×`height`), its console logged.
    pub fn start(width: u32, height: u32) -> Browser {
        let chromium = program("chromium");
        let port = free_port();
        let driver = Command::new(program("chromedriver"))
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let end = Instant::now() + Duration::from_secs(20);
        let listening = || TcpStream::connect(("127.0.0.1", port)).is_ok();
        while !listening()
            || browser.call("GET", "/status", None).get("ready") != Some(&json!(true))
        {
            assert!(
                Instant::now() < end,
                "chromedriver did not start within 20s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The flags this machine's closed network needs (no background connections).
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ]
        .map(String::from)
        .into_iter()
        .chain([
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", browser._profile.path().display()),
        ])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let answer = browser.call("POST", "/session", Some(caps));
        browser.session = answer["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {answer}"))
            .to_string();
        browser
    }

    /// One WebDriver command; its `value`. The answer is read to its Content-Length:
    /// chromedriver keeps the connection open.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to chromedriver");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes())
            .expect("send to chromedriver");
        let mut reader = BufReader::new(s);
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("chromedriver's answer");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut text = vec![0; length];
        reader.read_exact(&mut text).expect("chromedriver's answer");
        let value: Value = serde_json::from_slice(&text).unwrap_or(Value::Null);
        value.get("value").cloned().unwrap_or(value)
    }

    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let value = self.call(method, &path, body);
        if let Some(error) = value.get("error") {
            panic!("webdriver {path}: {error}: {}", value["message"]);
        }
        value
    }

    /// A DevTools command (headers, emulated media).
    pub fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.command(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": cmd, "params": params})),
        )
    }

    /// Every request carries `Authorization: value`.
    pub fn authorize(&self, value: &str) {
        self.cdp("Network.enable", json!({}));
        self.cdp(
            "Network.setExtraHTTPHeaders",
            json!({"headers": {"Authorization": value}}),
        );
    }

    /// Opens `url` (returns when it has loaded).
    pub fn open(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body) in the page with `args`; what it returns.
    pub fn run(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Polls `script` until it returns true, within `timeout`.
    pub fn until(&self, what: &str, timeout: Duration, script: &str) {
        let end = Instant::now() + timeout;
        while self.run(script, json!([])) != json!(true) {
            assert!(
                Instant::now() < end,
                "{what}: not within {timeout:?}; the page says: {}",
                self.run("return document.querySelector('main').innerText", json!([]))
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// The console's messages at level SEVERE (script errors, CSP refusals, failed loads).
    pub fn console_errors(&self) -> Vec<String> {
        let logs = self.command("POST", "/se/log", Some(json!({"type": "browser"})));
        logs.as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["level"] == "SEVERE")
            .map(|l| l["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Saves a PNG of the window into `dir/name.png`.
    pub fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let shot = self.command("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot.as_str().expect("a screenshot"))
            .expect("base64");
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Resizes the window.
    pub fn resize(&self, width: u32, height: u32) {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = std::panic::catch_unwind(|| self.call("DELETE", &path, None));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
