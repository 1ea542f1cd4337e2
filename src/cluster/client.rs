//! A kube [`Client`](kube::Client) from `[cluster]`: a kubeconfig file and context, the
//! usual kubeconfig rules, or the in-cluster service account; every request bounded in
//! time and retried when it fails transiently ([`super::resilient`]).

use kube::config::{KubeConfigOptions, Kubeconfig};

use std::sync::Arc;

use super::resilient::{root_cause, Reach, Resilience, ResilientLayer, Unreachable};
use super::ClusterError;
use crate::config::ClusterConfig;

/// Connects as configured (no request is sent yet).
///
/// # Errors
/// The kubeconfig cannot be read, names no such context, or no configuration is found.
pub async fn connect(cluster: &ClusterConfig) -> Result<kube::Client, ClusterError> {
    Ok(connect_reaching(cluster).await?.0)
}

/// As [`connect`], with the client's [`Reach`]: whether its API server answers, and the
/// stop that cuts its requests short.
///
/// # Errors
/// As [`connect`].
pub async fn connect_reaching(
    cluster: &ClusterConfig,
) -> Result<(kube::Client, Arc<Reach>), ClusterError> {
    let config = config_of(cluster).await?;
    let reach = Reach::new(cluster.name(), config.cluster_url.to_string().as_str());
    let client = client_of(config, cluster, reach.clone())?;
    Ok((client, reach))
}

/// Asks the API server for its version once, within `within` and without retries: what a
/// command at a terminal checks before its first request, so that a cluster that is down
/// is one clear line in seconds (retries are for an agent riding out a restart).
///
/// # Errors
/// [`ClusterError::Connect`] naming the server, the cause and what to check.
pub async fn probe(
    cluster: &ClusterConfig,
    within: std::time::Duration,
) -> Result<(), ClusterError> {
    let config = config_of(cluster).await?;
    let server = config.cluster_url.to_string();
    let once = ClusterConfig {
        request_timeout: within,
        retry_for: std::time::Duration::ZERO,
        ..cluster.clone()
    };
    let client = client_of(config, &once, Reach::quiet(&server))?;
    let (cause, hint) = match tokio::time::timeout(within, version(&client)).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(Version::Unreached(e))) => (
            match e {
                kube::Error::Service(inner) if inner.is::<Unreachable>() => inner.to_string(),
                e => format!("cannot reach the API server at {server}: {}", root_cause(&e)),
            },
            UNREACHED,
        ),
        Ok(Err(Version::Refused(status))) => (
            format!("the API server at {server} refuses the kubeconfig's credentials ({status}): its token or client certificate is wrong or has expired"),
            REFUSED,
        ),
        Ok(Err(Version::Answered(answer))) => (
            format!("{server} is not a Kubernetes API server that berth can use: it answered GET /version with {answer}"),
            WRONG_SERVER,
        ),
        Err(_) => (
            format!(
                "cannot reach the API server at {server}: no answer within {}s",
                within.as_secs()
            ),
            UNREACHED,
        ),
    };
    Err(ClusterError::Unreachable { cause, hint })
}

/// What to check when the API server does not answer.
const UNREACHED: &str =
    "Is it running, and is [cluster] kubeconfig (or the context) the right one?";

/// What to check when the API server refuses the credentials.
const REFUSED: &str = "Check the user of [cluster] kubeconfig (or the context): its token, client certificate or exec plugin.";

/// What to check when something else answers.
const WRONG_SERVER: &str = "Is [cluster] kubeconfig (or the context) the right one?";

/// How `GET /version` went wrong.
enum Version {
    /// No answer: the connection or TLS failed.
    Unreached(kube::Error),
    /// An answer that is not an API server's version: its status, or what the body is.
    Answered(String),
    /// 401: the server asks for other credentials than those given.
    Refused(http::StatusCode),
}

/// Asks `GET /version` and checks that the answer is a Kubernetes version (a server
/// that answers but is something else — a web server, a proxy's error page — is said
/// as such, not as an error about parsing).
async fn version(client: &kube::Client) -> Result<(), Version> {
    use http_body_util::BodyExt;
    let request = http::Request::get("/version")
        .body(kube::client::Body::empty())
        .map_err(|e| Version::Answered(e.to_string()))?;
    let answer = client.send(request).await.map_err(Version::Unreached)?;
    let status = answer.status();
    if status == http::StatusCode::UNAUTHORIZED {
        return Err(Version::Refused(status));
    }
    if !status.is_success() {
        return Err(Version::Answered(status.to_string()));
    }
    // A version is a few hundred bytes; whatever else answers is not read further.
    let body = http_body_util::Limited::new(answer.into_body(), 64 * 1024)
        .collect()
        .await
        .map_err(|_| Version::Answered(format!("{status} and a body over 64 KiB")))?
        .to_bytes();
    match serde_json::from_slice::<k8s_openapi::apimachinery::pkg::version::Info>(&body) {
        Ok(_) => Ok(()),
        Err(_) => Err(Version::Answered(format!(
            "{status} and a body that is not a Kubernetes version ({} bytes)",
            body.len()
        ))),
    }
}

/// The kube configuration `[cluster]` names.
async fn config_of(cluster: &ClusterConfig) -> Result<kube::Config, ClusterError> {
    let options = KubeConfigOptions {
        context: cluster.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &cluster.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                ClusterError::Connect(match e {
                    kube::config::KubeconfigError::ReadConfig(io, _) => format!(
                        "cannot read kubeconfig {}: {} (check [cluster] kubeconfig)",
                        path.display(),
                        crate::config::io_message(&io)
                    ),
                    e => format!("{}: {e}", path.display()),
                })
            })?;
            has_context(&kc, options.context.as_deref(), &path.display().to_string())?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| ClusterError::Connect(format!("{}: {e}", path.display())))?
        }
        None if cluster.context.is_some() => {
            if let Ok(kc) = Kubeconfig::read() {
                has_context(
                    &kc,
                    options.context.as_deref(),
                    "the kubeconfig ($KUBECONFIG or ~/.kube/config)",
                )?;
            }
            kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| ClusterError::Connect(e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ClusterError::Connect(not_inferred(&e)))?,
    };
    Ok(config)
}

/// Why no configuration was found without `[cluster] kubeconfig`: outside a pod, the
/// kubeconfig's reason alone (the in-cluster one says only that this is not a pod).
fn not_inferred(e: &kube::config::InferConfigError) -> String {
    let in_pod = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    let kubeconfig = std::error::Error::source(e)
        .and_then(|source| source.downcast_ref::<kube::config::KubeconfigError>());
    match kubeconfig {
        Some(kube::config::KubeconfigError::ReadConfig(io, path)) if !in_pod => format!(
            "no kubeconfig: cannot read {}: {} ([cluster] kubeconfig is unset, so berth reads $KUBECONFIG, else ~/.kube/config): set [cluster] kubeconfig to the cluster's kubeconfig",
            path.display(),
            crate::config::io_message(io)
        ),
        _ => format!("{e} (set [cluster] kubeconfig)"),
    }
}

/// Refuses a context `kc` (read from `shown`) does not have, naming the ones it has.
fn has_context(kc: &Kubeconfig, context: Option<&str>, shown: &str) -> Result<(), ClusterError> {
    let Some(context) = context else {
        return Ok(());
    };
    if kc.contexts.iter().any(|c| c.name == context) {
        return Ok(());
    }
    let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
    Err(ClusterError::Connect(format!(
        "{shown} has no context {context:?} (its contexts: {}): check [cluster] context",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    )))
}

/// A client of `config`, bounded and retried as `[cluster]` says.
fn client_of(
    mut config: kube::Config,
    cluster: &ClusterConfig,
    reach: Arc<Reach>,
) -> Result<kube::Client, ClusterError> {
    // So that audit logs and API server metrics can tell berth's requests apart.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("berth/", env!("CARGO_PKG_VERSION"))),
    ));
    // Retries are berth's own (see `resilient`): bounded in time, and covering 5xx and
    // lost connections as well.
    config.default_retry = false;
    let resilience = Resilience {
        request_timeout: cluster.request_timeout,
        retry_for: cluster.retry_for,
    };
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| ClusterError::Connect(e.to_string()))?;
    // Innermost: at most `max_requests_in_flight` requests are sent at once (a watch holds
    // its place only until the answer starts); the others wait in the buffer's queue.
    Ok(builder
        .with_layer(&tower::limit::ConcurrencyLimitLayer::new(
            cluster.max_requests_in_flight,
        ))
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&ResilientLayer {
            policy: resilience,
            reach,
        })
        .build())
}

/// Who an app's requests are sent as (`service_account`, or `user` and `groups`): the API
/// server then checks each request against that identity's RBAC, so an app can write only
/// what its account may, even if berth's own scope check were wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `Impersonate-User`: a user, or `system:serviceaccount:NAMESPACE:NAME`.
    pub user: String,
    /// `Impersonate-Group`, one header each.
    pub groups: Vec<String>,
}

impl Identity {
    /// The identity `[[app]]` names, if any.
    pub fn of(app: &crate::config::AppConfig) -> Option<Identity> {
        let user = match (&app.service_account, &app.user) {
            (Some(sa), _) => {
                let (ns, name) = sa.split_once('/')?;
                format!("system:serviceaccount:{ns}:{name}")
            }
            (None, Some(user)) => user.clone(),
            (None, None) => return None,
        };
        Some(Identity {
            user,
            groups: app.groups.clone(),
        })
    }
}

/// A client that sends every request of `client` as `identity`: the same connections,
/// timeouts, retries and in-flight bound, with the impersonation headers added. A name
/// that cannot be a header value (validation refuses it first) fails every request:
/// never sent as berth itself.
pub fn impersonating(client: &kube::Client, identity: &Identity) -> kube::Client {
    let names = std::iter::once(("impersonate-user", &identity.user))
        .chain(identity.groups.iter().map(|g| ("impersonate-group", g)));
    let headers: Result<Vec<_>, NotImpersonable> = names
        .map(|(header, name)| {
            http::HeaderValue::from_str(name)
                .map(|v| (http::HeaderName::from_static(header), v))
                .map_err(|_| NotImpersonable(name.clone()))
        })
        .collect();
    let service = Impersonate {
        client: client.clone(),
        headers: std::sync::Arc::new(headers),
    };
    kube::Client::new(service, client.default_namespace())
}

/// A user or group name that cannot be sent as an impersonation header.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0:?} cannot be impersonated: not a valid header value")]
pub struct NotImpersonable(String);

#[derive(Clone)]
struct Impersonate {
    client: kube::Client,
    headers: std::sync::Arc<Result<Vec<(http::HeaderName, http::HeaderValue)>, NotImpersonable>>,
}

impl tower::Service<http::Request<kube::client::Body>> for Impersonate {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), kube::Error>> {
        // The inner client waits for its own capacity in `send`.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<kube::client::Body>) -> Self::Future {
        let headers = match self.headers.as_ref() {
            Ok(headers) => headers,
            Err(e) => {
                let e = kube::Error::Service(Box::new(e.clone()));
                return Box::pin(async move { Err(e) });
            }
        };
        // Whatever the request carried, only these headers say who it is sent as.
        request.headers_mut().remove("impersonate-user");
        request.headers_mut().remove("impersonate-group");
        for (name, value) in headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await })
    }
}
