//! Real registries on loopback for the registry tests: Debian's `docker-registry` (the CNCF
//! distribution registry) with TLS from a test CA and htpasswd auth, and a Helm repository
//! served over HTTPS by `scripts/registry-tool.py`. Artifacts are pushed and signed by that
//! script (Python's cryptography), charts by the real `helm push`. Shared with the
//! benchmarks (`#[path]`): it needs nothing else of `tests/common`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The registry's login.
pub const USER: &str = "robot";
pub const PASSWORD: &str = "s3cret-pass";

/// A test CA and a certificate it signed for 127.0.0.1.
pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    /// Made with openssl in `dir`.
    pub fn new(dir: &Path) -> Tls {
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=berth test CA",
                ],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=127.0.0.1",
                ],
            ]
            .concat(),
        );
        std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ]);
        Tls {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        }
    }
}

/// A running distribution registry.
pub struct Registry {
    pub dir: tempfile::TempDir,
    pub tls: Tls,
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// A Docker `config.json` with the right login.
    pub login: PathBuf,
    child: Child,
    /// With the token flow: its token server.
    tokens: Option<Child>,
}

impl Registry {
    /// Starts one on a free loopback port, logins checked against an htpasswd file;
    /// `None` (the test skipped, said why) without `docker-registry` or `htpasswd`
    /// (scripts/test installs both).
    pub fn start() -> Option<Registry> {
        Registry::start_with(false, "error")
    }

    /// As [`Registry::start`], each request logged (see [`Registry::requests`]).
    pub fn start_logged() -> Option<Registry> {
        Registry::start_with(false, "info")
    }

    /// How many requests the registry answered (one started with [`Registry::start_logged`]).
    pub fn requests(&self) -> usize {
        let log = std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default();
        log.matches("response completed").count()
    }

    /// As [`Registry::start`], with Distribution's token flow instead of basic auth: the
    /// registry answers with a bearer challenge whose realm is a token server of
    /// `scripts/registry-tool.py` (HTTPS, the same login), and trusts the tokens it signs.
    pub fn start_with_tokens() -> Option<Registry> {
        Registry::start_with(true, "error")
    }

    fn start_with(tokens: bool, log: &str) -> Option<Registry> {
        let Some(program) = ["/usr/bin/docker-registry", "/usr/bin/registry"]
            .into_iter()
            .find(|p| Path::new(p).exists())
        else {
            eprintln!("skipped: no docker-registry (scripts/test installs Debian's)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let tls = Tls::new(dir.path());
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", USER, PASSWORD])
            .output()
            .expect("htpasswd (apache2-utils)");
        std::fs::write(dir.path().join("htpasswd"), htpasswd.stdout).unwrap();
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let d = dir.path().display();
        let (auth, tokens) = if tokens {
            let (child, realm) = token_server(dir.path(), &tls);
            let auth = format!("  token:\n    realm: {realm}\n    service: berth-test-registry\n    issuer: berth-test-issuer\n    rootcertbundle: {d}/token-bundle.pem\n");
            (auth, Some(child))
        } else {
            let auth = format!("  htpasswd:\n    realm: berth-test\n    path: {d}/htpasswd\n");
            (auth, None)
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: {log}\nstorage:\n  filesystem:\n    rootdirectory: {d}/data\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n  tls:\n    certificate: {d}/server.pem\n    key: {d}/server.key\nauth:\n{auth}"
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let child = Command::new(program)
            .args(["serve", "config.yml"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("registry.log")).unwrap())
            .spawn()
            .expect("start the registry");
        listening(port, "the registry");
        let login = dir.path().join("config.json");
        let auth = base64(&format!("{USER}:{PASSWORD}"));
        std::fs::write(
            &login,
            format!("{{\"auths\": {{\"{host}\": {{\"auth\": \"{auth}\"}}}}}}"),
        )
        .unwrap();
        Some(Registry {
            dir,
            tls,
            host,
            login,
            child,
            tokens,
        })
    }

    /// The registry's notification of a push to `repo` (Distribution's envelope of events).
    pub fn notification(&self, repo: &str, tag: &str) -> String {
        format!(
            r#"{{"events": [{{"id": "e1", "action": "push", "target": {{"mediaType": "application/vnd.oci.image.manifest.v1+json", "repository": "{repo}", "tag": "{tag}"}}, "request": {{"host": "{}", "method": "PUT"}}}}]}}"#,
            self.host
        )
    }

    /// `scripts/registry-tool.py ARGS` against this registry (logged in); its stdout.
    pub fn tool(&self, args: &[&str]) -> String {
        tool(
            args,
            &[
                ("BERTH_REGISTRY_CA", self.tls.ca.display().to_string()),
                ("BERTH_REGISTRY_AUTH", format!("{USER}:{PASSWORD}")),
            ],
        )
    }

    /// Pushes the tar+gzip `layer` as a one-layer artifact of `media` at `repo:tag`; its
    /// digest.
    pub fn push(&self, repo: &str, tag: &str, layer: &[u8], media: &str) -> String {
        let file = self.dir.path().join(format!("layer-{}", free_port()));
        std::fs::write(&file, layer).unwrap();
        self.tool(&[
            "push",
            &self.host,
            repo,
            tag,
            &file.display().to_string(),
            media,
        ])
        .trim()
        .to_string()
    }

    /// `helm push CHART oci://HOST/REPO`, logged in with `helm registry login`.
    pub fn helm_push(&self, chart: &Path, repo: &str) {
        let config = self.dir.path().join("helm-registry.json");
        let ca = self.tls.ca.display().to_string();
        let cfg = config.display().to_string();
        helm(&[
            "registry",
            "login",
            &self.host,
            "-u",
            USER,
            "-p",
            PASSWORD,
            "--ca-file",
            &ca,
            "--registry-config",
            &cfg,
        ]);
        let target = format!("oci://{}/{repo}", self.host);
        helm(&[
            "push",
            &chart.display().to_string(),
            &target,
            "--ca-file",
            &ca,
            "--registry-config",
            &cfg,
        ]);
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for child in std::iter::once(&mut self.child).chain(&mut self.tokens) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A token server for a registry in `dir` (its signing certificate written to
/// `dir/token-bundle.pem` before it listens); the server and its realm.
fn token_server(dir: &Path, tls: &Tls) -> (Child, String) {
    let port = free_port();
    let child = Command::new(python())
        .arg(script())
        .args(["token", &dir.display().to_string(), &port.to_string()])
        .arg(&tls.cert)
        .arg(&tls.key)
        .args(["berth-test-issuer", "berth-test-registry"])
        .arg(format!("{USER}:{PASSWORD}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("start the token server");
    listening(port, "the token server");
    (child, format!("https://127.0.0.1:{port}/token"))
}

/// A folder served over HTTPS (a Helm repository), until dropped.
pub struct Served {
    pub url: String,
    child: Child,
}

impl Served {
    pub fn start(folder: &Path, tls: &Tls) -> Served {
        let port = free_port();
        let child = Command::new(python())
            .arg(script())
            .args(["serve", &folder.display().to_string(), &port.to_string()])
            .arg(&tls.cert)
            .arg(&tls.key)
            .stdout(Stdio::null())
            .spawn()
            .expect("start the static server");
        listening(port, "the Helm repository");
        Served {
            url: format!("https://127.0.0.1:{port}"),
            child,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on (now).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Waits up to 30 s for `what` to listen on `port`.
fn listening(port: u16, what: &str) {
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < end,
            "{what} does not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `scripts/registry-tool.py ARGS` with `env`; its stdout.
pub fn tool(args: &[&str], env: &[(&str, String)]) -> String {
    let out = Command::new(python())
        .arg(script())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("python for scripts/registry-tool.py");
    assert!(
        out.status.success(),
        "registry-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs helm with `args`, its folders in a throwaway place; its stdout.
pub fn helm(args: &[&str]) -> String {
    helm_in(Path::new("."), args)
}

/// Runs helm with `args` in `dir`, its folders in a throwaway place; its stdout.
pub fn helm_in(dir: &Path, args: &[&str]) -> String {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("helm")
        .args(args)
        .current_dir(dir)
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("helm on PATH (scripts/helm fetches it)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "helm {args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

/// The Python with `cryptography` (sops 1.18's virtualenv: `BERTH_SOPS_PYTHON`).
fn python() -> String {
    std::env::var("BERTH_SOPS_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/registry-tool.py")
}

fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}
