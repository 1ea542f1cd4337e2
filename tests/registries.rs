//! Charts and artifacts from real registries on loopback (issue 63): Debian's
//! `docker-registry` with TLS from a test CA and htpasswd auth, charts pushed by the real
//! `helm push`, artifacts and cosign signatures by `scripts/registry-tool.py` (Python's
//! cryptography), and a Helm repository from `helm repo index` served over HTTPS.

mod common;

use std::io::Write as _;
use std::path::Path;

use common::registry::{helm, helm_in, Registry, Served, Tls, PASSWORD};
use common::{Repo, Setup};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

const FLUX_CONTENT: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";

/// A chart `web` at `version` whose one ConfigMap says its version, packaged into `out`.
fn chart(out: &Path, version: &str, note: &str) -> std::path::PathBuf {
    let src = tempfile::tempdir().unwrap();
    let dir = src.path().join("web");
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: web\nversion: {version}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("templates/cm.yaml"),
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  version: {{{{ .Chart.Version | quote }}}}\n  note: {note:?}\n"),
    )
    .unwrap();
    std::fs::create_dir_all(out).unwrap();
    helm(&[
        "package",
        &dir.display().to_string(),
        "-d",
        &out.display().to_string(),
    ]);
    out.join(format!("web-{version}.tgz"))
}

/// A tar+gzip of `(path, body)` files, each path written as given (`..` too).
fn tgz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, body) in files {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append(&header, *body).unwrap();
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar.into_inner().unwrap()).unwrap();
    gz.finish().unwrap()
}

/// The control plane, a registry, a client and a fresh namespace named from `name`; `None`
/// (the test skipped) without either.
async fn start(
    name: &str,
) -> Option<(
    &'static berth_testenv::ControlPlane,
    Registry,
    kube::Client,
    String,
)> {
    let cp = common::control_plane()?;
    let registry = Registry::start()?;
    let client = common::client(cp).await;
    let ns = common::namespace(&client, name).await;
    Some((cp, registry, client, ns))
}

/// The ConfigMap `web`'s `version`, if it exists.
async fn web_version(client: &kube::Client, ns: &str) -> Option<String> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    maps.get_opt("web").await.unwrap()?.data?.remove("version")
}

/// The last sync's errors, for a failing assertion's message.
fn errors(setup: &Setup) -> String {
    let last = setup.history().pop();
    let errors = last.map(|r| r.errors).unwrap_or_default();
    errors.iter().map(|e| format!("{e:?}\n")).collect()
}

/// Whether the ConfigMap `web` comes to say `version` within a minute.
async fn has_version(client: &kube::Client, ns: &str, version: &str) -> bool {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if web_version(client, ns).await.as_deref() == Some(version) {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

fn registry_keys(registry: &Registry, credentials: &Path) -> String {
    format!(
        "[app.registry]\ncredentials = \"{}\"\nca_file = \"{}\"\n",
        credentials.display(),
        registry.tls.ca.display()
    )
}

/// A chart from the OCI registry: synced; a new version inside the range picked up, one
/// outside ignored; an older one refused as a rewind; a wrong password refused with a
/// message naming the registry, not the password.
#[tokio::test]
async fn an_oci_chart_follows_its_range_and_never_moves_back_unasked() {
    let Some((cp, registry, client, ns)) = start("oci-chart").await else {
        return;
    };
    let packages = registry.dir.path().join("packages");
    registry.helm_push(&chart(&packages, "1.0.0", "first"), "charts");
    let source = |range: &str| {
        format!(
            "chart = {{ repository = \"oci://{}/charts\", name = \"web\", version = \"{range}\" }}",
            registry.host
        )
    };
    let keys = registry_keys(&registry, &registry.login);
    let setup = Setup::with_source(cp, "oci-chart", &source("^1"), &ns, &keys);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}{}", errors(&setup));
    assert_eq!(
        web_version(&client, &ns).await.as_deref(),
        Some("1.0.0"),
        "{out}"
    );
    assert!(out.contains("version 1.0.0@sha256:"), "{out}");
    // berth render of the chart by its reference, as helm template oci://… renders it.
    let reference = format!("oci://{}/charts/web:1.0.0", registry.host);
    let login = registry.login.display().to_string();
    let (ok, out, err) = render(
        &[&reference, "--registry-credentials", &login],
        &registry.tls.ca,
    );
    assert!(
        ok && out.contains("  version: \"1.0.0\"\n  note: first"),
        "{out}{err}"
    );

    registry.helm_push(&chart(&packages, "1.1.0", "second"), "charts");
    registry.helm_push(&chart(&packages, "2.0.0", "major"), "charts");
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}{}", errors(&setup));
    assert_eq!(
        web_version(&client, &ns).await.as_deref(),
        Some("1.1.0"),
        "2.0.0 is outside ^1: {out}"
    );
    let last = setup.history().pop().unwrap();
    let revision = last.commit.unwrap().sha;
    assert!(revision.starts_with("1.1.0@sha256:"), "{revision}");

    // The same digest again writes nothing.
    let (code, out, _) = setup.berth(&["sync"]);
    assert_eq!(code, 0);
    assert!(out.contains("no change"), "{out}");
    // A version the range does not pick, planned against the cluster: its diff, nothing
    // written.
    let (code, out, err) = setup.berth(&["plan", "--version", "2.0.0"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("version 2.0.0@sha256:") && out.contains("+  version: 2.0.0"),
        "{out}"
    );
    assert_eq!(web_version(&client, &ns).await.as_deref(), Some("1.1.0"));

    // A range narrowed to an older version: refused, the newer one stays.
    setup.rewrite(cp, &source("~1.0.0"), &ns, &keys);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_ne!(code, 0, "{out}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("version 1.0.0 is older than 1.1.0, the last applied: refusing to apply it"),
        "{said}"
    );
    assert_eq!(web_version(&client, &ns).await.as_deref(), Some("1.1.0"));

    // A wrong password: the registry is named, the password never.
    let wrong = wrong_login(&registry);
    setup.rewrite(cp, &source("^1"), &ns, &registry_keys(&registry, &wrong));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_ne!(code, 0, "{out}");
    let said = format!("{out}{err}");
    assert!(
        said.contains(&format!("{} refused", registry.host)) && said.contains("check the login"),
        "{said}"
    );
    assert!(!err.contains(PASSWORD) && !out.contains(PASSWORD), "{err}");
}

/// `berth render ARGS --ca-file CA`: whether it succeeded, its stdout and stderr.
fn render(args: &[&str], ca: &Path) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("render")
        .args(args)
        .arg("--ca-file")
        .arg(ca)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// A Docker `config.json` with a wrong password for `registry`.
fn wrong_login(registry: &Registry) -> std::path::PathBuf {
    let wrong = registry.dir.path().join("wrong.json");
    let auth = base64_of(&format!("{}:not-{PASSWORD}", common::registry::USER));
    let host = &registry.host;
    let text = format!("{{\"auths\": {{\"{host}\": {{\"auth\": \"{auth}\"}}}}}}");
    std::fs::write(&wrong, text).unwrap();
    wrong
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A chart from a Helm repository (`helm repo index`, served over HTTPS by a test CA):
/// synced; an archive that is not the one the index names refused, nothing changed.
#[tokio::test]
async fn a_helm_repository_chart_is_synced_and_a_swapped_archive_is_refused() {
    let Some(cp) = common::control_plane() else {
        return;
    };
    let client = common::client(cp).await;
    let ns = common::namespace(&client, "helm-repo").await;
    let certs = tempfile::tempdir().unwrap();
    let tls = Tls::new(certs.path());
    let site = tempfile::tempdir().unwrap();
    chart(site.path(), "1.0.0", "first");
    chart(site.path(), "1.1.0", "second");
    helm(&["repo", "index", &site.path().display().to_string()]);
    // 1.1.0 replaced after indexing: the index's digest no longer matches.
    let swapped = tempfile::tempdir().unwrap();
    let other = chart(swapped.path(), "1.1.0", "swapped");
    std::fs::copy(other, site.path().join("web-1.1.0.tgz")).unwrap();
    let served = Served::start(site.path(), &tls);
    let source = |range: &str| {
        format!(
            "chart = {{ repository = \"{}\", name = \"web\", version = \"{range}\" }}",
            served.url
        )
    };
    let keys = format!("[app.registry]\nca_file = \"{}\"\n", tls.ca.display());
    let setup = Setup::with_source(cp, "helm-repo", &source("1.0.x"), &ns, &keys);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}{}", errors(&setup));
    assert_eq!(
        web_version(&client, &ns).await.as_deref(),
        Some("1.0.0"),
        "{out}"
    );

    // berth render --repo, as helm template --repo.
    let (ok, out, err) = render(
        &["--repo", &served.url, "web", "--version", "1.0.0"],
        &tls.ca,
    );
    assert!(
        ok && out.contains("  version: \"1.0.0\"\n  note: first"),
        "{out}{err}"
    );

    setup.rewrite(cp, &source("^1"), &ns, &keys);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_ne!(code, 0, "{out}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("chart web 1.1.0: its digest is sha256:") && said.contains("refused"),
        "{said}"
    );
    assert_eq!(web_version(&client, &ns).await.as_deref(), Some("1.0.0"));
}

/// Flux-style artifacts, resolved and rendered without a cluster by `berth validate`: one
/// of manifests renders; a tar with `../`, one with a link out and a gzip bomb are refused
/// before anything of them is written.
#[test]
fn artifacts_render_and_hostile_archives_are_refused_unread() {
    let Some(registry) = Registry::start() else {
        return;
    };
    let good = tgz(&[(
        "deploy/cm.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shop\ndata:\n  a: b\n",
    )]);
    registry.push("manifests/shop", "1.0.0", &good, FLUX_CONTENT);
    registry.push(
        "manifests/shop",
        "1.0.1",
        &tgz(&[("../escape.yaml", b"kind: ConfigMap\n")]),
        FLUX_CONTENT,
    );
    let mut link = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_path("deploy/passwd").unwrap();
    header.set_link_name("../../../../etc/passwd").unwrap();
    header.set_size(0);
    header.set_cksum();
    link.append(&header, std::io::empty()).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&link.into_inner().unwrap()).unwrap();
    registry.push(
        "manifests/shop",
        "1.0.2",
        &gz.finish().unwrap(),
        FLUX_CONTENT,
    );
    // Three files each under max_file_size, together far over max_app_size: a few kB
    // compressed.
    let zeros = vec![b'#'; 900 << 10];
    let bomb = tgz(&[
        ("deploy/a.yaml", &zeros),
        ("deploy/b.yaml", &zeros),
        ("deploy/c.yaml", &zeros),
    ]);
    assert!(bomb.len() < 16 << 10, "{} bytes", bomb.len());
    registry.push("manifests/shop", "1.0.3", &bomb, FLUX_CONTENT);

    let state = tempfile::tempdir().unwrap();
    let validate = |tag: &str| {
        let config = state.path().join("berth.toml");
        std::fs::write(
            &config,
            format!(
                "[agent]\nstate_dir = \"{}\"\nmax_app_size = \"1MiB\"\nmax_file_size = \"1MiB\"\n[[app]]\nname = \"shop\"\npath = \"deploy\"\noci = {{ url = \"oci://{}/manifests/shop\", tag = \"{tag}\" }}\n{}",
                state.path().join("state").display(),
                registry.host,
                registry_keys(&registry, &registry.login)
            ),
        )
        .unwrap();
        common::berth_on(&config, &["validate"])
    };
    let (code, out, err) = validate("1.0.0");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 ConfigMap"), "{out}");
    // berth render of the artifact itself, its files' origins named by its digest.
    let rendered = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "render",
            &format!("oci://{}/manifests/shop:1.0.0", registry.host),
        ])
        .arg("--registry-credentials")
        .arg(&registry.login)
        .arg("--ca-file")
        .arg(&registry.tls.ca)
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&rendered.stdout),
        String::from_utf8_lossy(&rendered.stderr),
    );
    assert!(rendered.status.success(), "{out}{err}");
    let origin = format!("# Source: oci://{}/manifests/shop@sha256:", registry.host);
    assert!(
        out.contains(&origin) && out.contains("/deploy/cm.yaml:1 (document 1)"),
        "{out}"
    );
    assert!(err.contains("at 1.0.0@sha256:"), "{err}");
    for (tag, refusal) in [
        ("1.0.1", "entry \"../escape.yaml\": a path with '..'"),
        ("1.0.2", "entry \"deploy/passwd\": a link"),
        ("1.0.3", "inflating stopped there"),
    ] {
        let (code, out, err) = validate(tag);
        assert_ne!(code, 0, "{tag}: {out}");
        assert!(
            out.contains(refusal) && out.contains("nothing of it written"),
            "{tag}: {out}{err}"
        );
    }
    assert!(!state.path().join("escape.yaml").exists());
    assert!(!state
        .path()
        .join("state/sources")
        .join("escape.yaml")
        .exists());
}

/// cosign keyed signatures: an artifact signed by a configured key is applied; one signed
/// by another key, or unsigned, is refused with nothing applied.
#[tokio::test]
async fn only_artifacts_signed_by_a_trusted_key_are_applied() {
    let Some((cp, registry, client, ns)) = start("cosign").await else {
        return;
    };
    let (trusted, stranger) = (
        registry.dir.path().join("trusted"),
        registry.dir.path().join("stranger"),
    );
    for dir in [&trusted, &stranger] {
        std::fs::create_dir_all(dir).unwrap();
        registry.tool(&["keygen", &dir.display().to_string()]);
    }
    let manifests = tgz(&[(
        "web.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  version: \"signed\"\n",
    )]);
    let digest = registry.push("apps/web", "1.0.0", &manifests, FLUX_CONTENT);
    let unsigned = tgz(&[("web.yaml", b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  version: \"unsigned\"\n")]);
    registry.push("apps/web", "1.0.1", &unsigned, FLUX_CONTENT);
    registry.tool(&[
        "sign",
        &registry.host,
        "apps/web",
        &digest,
        &stranger.join("cosign.key").display().to_string(),
    ]);
    let source = |tag: &str| {
        format!(
            "oci = {{ url = \"oci://{}/apps/web\", tag = \"{tag}\" }}",
            registry.host
        )
    };
    let keys = format!(
        "{}[app.verify]\ncosign_keys = [\"{}\"]\n",
        registry_keys(&registry, &registry.login),
        trusted.join("cosign.pub").display()
    );
    let setup = Setup::with_source(cp, "cosign", &source("1.0.0"), &ns, &keys);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_ne!(code, 0, "{out}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("none of its 1 signatures is by a key in [app.verify] cosign_keys"),
        "{said}"
    );
    assert_eq!(web_version(&client, &ns).await, None, "nothing applied");

    registry.tool(&[
        "sign",
        &registry.host,
        "apps/web",
        &digest,
        &trusted.join("cosign.key").display().to_string(),
    ]);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}{}", errors(&setup));
    assert_eq!(web_version(&client, &ns).await.as_deref(), Some("signed"));

    setup.rewrite(cp, &source("1.0.1"), &ns, &keys);
    let (code, out, err) = setup.berth(&["sync"]);
    assert_ne!(code, 0, "{out}");
    let said = format!("{out}{err}");
    assert!(said.contains("it carries no cosign signature"), "{said}");
    assert_eq!(web_version(&client, &ns).await.as_deref(), Some("signed"));
}

/// An app set over an OCI artifact's folders: one app per folder, each rendering its
/// folder of the same artifact; a new version with another folder adds its app.
#[tokio::test]
async fn an_app_set_makes_an_app_per_folder_of_an_artifact() {
    let Some((cp, registry, client, ns)) = start("oci-set").await else {
        return;
    };
    let map = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  team: {name}\n"
        )
    };
    let (a, b) = (map("team-a"), map("team-b"));
    let v1 = tgz(&[("teams/a/cm.yaml", a.as_bytes())]);
    registry.push("fleet/teams", "1.0.0", &v1, FLUX_CONTENT);
    let state = tempfile::tempdir().unwrap();
    let config = state.path().join("berth.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nstate_dir = \"{}\"\n[cluster]\nkubeconfig = \"{}\"\n[[app_set]]\nname = \"teams\"\nfolders = \"teams/*\"\noci = {{ url = \"oci://{}/fleet/teams\", version = \"^1\" }}\nnamespace = \"{ns}\"\n{}",
            state.path().display(),
            cp.kubeconfig.display(),
            registry.host,
            registry_keys(&registry, &registry.login).replace("[app.registry]", "[app_set.registry]"),
        ),
    )
    .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let (code, out, err) = common::berth_on(&config, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(maps.get_opt("team-a").await.unwrap().is_some(), "{out}");
    let v2 = tgz(&[
        ("teams/a/cm.yaml", a.as_bytes()),
        ("teams/b/cm.yaml", b.as_bytes()),
    ]);
    registry.push("fleet/teams", "1.1.0", &v2, FLUX_CONTENT);
    let (code, out, err) = common::berth_on(&config, &["sync"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("teams-a") && out.contains("teams-b"), "{out}");
    assert!(maps.get_opt("team-b").await.unwrap().is_some(), "{out}");
}

/// A registry's push notification (Distribution's envelope), HMAC-signed as a git host's
/// webhook is, wakes the app that follows the pushed repository in `berth run`: the new
/// version is applied with no interval passing; an unsigned one is refused.
#[tokio::test]
async fn a_registry_notification_syncs_the_apps_of_what_was_pushed() {
    let Some((cp, registry, client, ns)) = start("oci-hook").await else {
        return;
    };
    let packages = registry.dir.path().join("packages");
    registry.helm_push(&chart(&packages, "1.0.0", "first"), "charts");
    let port = common::free_port();
    let secret = registry.dir.path().join("hook-secret");
    std::fs::write(&secret, "hook-s3cret\n").unwrap();
    let source = format!(
        "chart = {{ repository = \"oci://{}/charts\", name = \"web\", version = \"^1\" }}\nwebhook_secret_file = \"{}\"",
        registry.host,
        secret.display()
    );
    let keys = registry_keys(&registry, &registry.login);
    let setup = Setup::with_source(cp, "oci-hook", &source, &ns, &keys);
    let text = std::fs::read_to_string(&setup.config).unwrap();
    let text = text.replace(
        "[cluster]",
        &format!("listen = \"127.0.0.1:{port}\"\n[cluster]"),
    );
    std::fs::write(&setup.config, text).unwrap();
    let _daemon = common::Daemon::start(&setup.config, &[]);
    assert!(has_version(&client, &ns, "1.0.0").await, "the first sync");

    registry.helm_push(&chart(&packages, "1.1.0", "second"), "charts");
    let envelope = registry.notification("charts/web", "1.1.0");
    let content = (
        "Content-Type",
        "application/vnd.docker.distribution.events.v1+json".to_string(),
    );
    let (code, said) = common::http(
        port,
        "POST",
        "/hooks/oci-hook",
        std::slice::from_ref(&content),
        envelope.as_bytes(),
    );
    assert_eq!(code, 401, "unsigned: {said}");
    let secret = b"hook-s3cret";
    let (code, said) =
        common::signed_hook(port, "oci-hook", secret, &[content], envelope.as_bytes());
    assert_eq!((code, said.as_str()), (202, "sync of oci-hook requested\n"));
    assert!(
        has_version(&client, &ns, "1.1.0").await,
        "the interval is 1h: the notification synced it"
    );
}

/// An umbrella chart in git whose dependency lies in the OCI registry (TLS, a login),
/// pinned by its committed `Chart.lock`: refused until `[agent] allow_remote_charts`
/// names the registry's path, then fetched by `helm dependency build` with the app's
/// `[app.registry]` login and CA file, and rendered with it.
#[tokio::test]
async fn an_umbrella_charts_dependency_comes_from_an_oci_registry() {
    let Some((cp, registry, client, ns)) = start("oci-dependency").await else {
        return;
    };
    let packages = registry.dir.path().join("packages");
    registry.helm_push(&chart(&packages, "1.0.0", "a dependency"), "charts");
    let repo = Repo::new();
    let shop = repo.dir.path().join("shop");
    std::fs::create_dir_all(shop.join("templates")).unwrap();
    let oci = format!("oci://{}/charts", registry.host);
    std::fs::write(
        shop.join("Chart.yaml"),
        format!("apiVersion: v2\nname: shop\nversion: 0.1.0\ndependencies:\n  - name: web\n    version: 1.0.0\n    repository: {oci}\n"),
    )
    .unwrap();
    let (ca, login) = (registry.tls.ca.display(), registry.login.display());
    let (ca, login) = (ca.to_string(), login.to_string());
    helm_in(
        &shop,
        &[
            "dependency",
            "update",
            ".",
            "--ca-file",
            &ca,
            "--registry-config",
            &login,
        ],
    );
    assert!(shop.join("Chart.lock").exists());
    std::fs::remove_dir_all(shop.join("charts")).unwrap();
    repo.commit("an umbrella chart whose dependency lies in an OCI registry");
    let keys = format!(
        "path = \"shop\"\n{}",
        registry_keys(&registry, &registry.login)
    );

    let refused = Setup::new(cp, "oci-dependency", &repo, &ns, &keys);
    let (code, out, _) = refused.berth(&["sync"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("web ({oci})")) && out.contains("allow_remote_charts"),
        "{out}"
    );
    assert_eq!(web_version(&client, &ns).await, None, "nothing applied");

    let setup = Setup::new(cp, "oci-dependency", &repo, &ns, &keys);
    setup.agent_setting(&format!("allow_remote_charts = [\"{oci}\"]"));
    let (code, out, err) = setup.berth(&["sync"]);
    assert_eq!(code, 0, "{out}{err}{}", errors(&setup));
    assert_eq!(web_version(&client, &ns).await.as_deref(), Some("1.0.0"));
    assert!(!shop.join("charts").exists(), "the checkout is not written");
}

/// Distribution's token flow: the registry answers with a bearer challenge, berth trades
/// the login for a token at the challenge's realm (HTTPS) and reads with it; a wrong
/// password is refused at the realm, and the message names the registry, not the password.
#[test]
fn a_registry_behind_the_token_flow_is_read_with_a_bearer_token() {
    let Some(registry) = Registry::start_with_tokens() else {
        return;
    };
    let map = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  via: token\n";
    registry.push(
        "manifests/web",
        "1.0.0",
        &tgz(&[("cm.yaml", map)]),
        FLUX_CONTENT,
    );
    let reference = format!("oci://{}/manifests/web:1.0.0", registry.host);
    let login = registry.login.display().to_string();
    let (ok, out, err) = render(
        &[&reference, "--registry-credentials", &login],
        &registry.tls.ca,
    );
    assert!(ok && out.contains("via: token"), "{out}{err}");

    let wrong = wrong_login(&registry).display().to_string();
    let (ok, out, err) = render(
        &[&reference, "--registry-credentials", &wrong],
        &registry.tls.ca,
    );
    assert!(!ok, "{out}");
    assert!(
        err.contains(&format!("{} refused a token", registry.host))
            && err.contains("check the login"),
        "{err}"
    );
    assert!(!err.contains(PASSWORD), "{err}");
    // Without a login, the realm gives no token either.
    let (ok, _, err) = render(&[&reference], &registry.tls.ca);
    assert!(!ok && err.contains("it asks for a login"), "{err}");
}
