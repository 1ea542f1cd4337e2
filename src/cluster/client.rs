//! A kube [`Client`](kube::Client) from `[cluster]`: a kubeconfig file and context, the
//! usual kubeconfig rules, or the in-cluster service account; every request bounded in
//! time and retried when it fails transiently ([`super::resilient`]).

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::resilient::{Resilience, ResilientLayer};
use super::ClusterError;
use crate::config::ClusterConfig;

/// Connects as configured (no request is sent yet).
///
/// # Errors
/// The kubeconfig cannot be read, names no such context, or no configuration is found.
pub async fn connect(cluster: &ClusterConfig) -> Result<kube::Client, ClusterError> {
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
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| ClusterError::Connect(format!("{}: {e}", path.display())))?
        }
        None if cluster.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| ClusterError::Connect(e.to_string()))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| ClusterError::Connect(format!("{e} (set [cluster] kubeconfig)")))?,
    };
    let mut config = config;
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
        .with_layer(&ResilientLayer(resilience))
        .build())
}
