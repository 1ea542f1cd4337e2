//! One source's HTTP client for a registry or a chart repository: HTTPS with the system's
//! roots and the source's own CA file (plain HTTP only where `insecure` is written), every
//! answer bounded by size and time, the registry's auth (basic, or its bearer-token flow
//! with the `config.json` login) answered when it asks, redirects followed without the
//! credentials when they leave the host. Errors name the registry's host and what was
//! asked, never a credential or a token.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::header::{ACCEPT, AUTHORIZATION, LOCATION, USER_AGENT, WWW_AUTHENTICATE};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::rt::TokioExecutor;
use url::Url;

use super::{because, Cause, RegistryError};
use crate::config::RegistryConfig;

/// Connecting gives up after this long, as git's fetches do.
const CONNECT: Duration = Duration::from_secs(30);
/// The answer's head, and then each part of its body, must come within this long.
const IDLE: Duration = Duration::from_secs(60);
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 5;
/// The largest token answer read.
const MAX_TOKEN: u64 = 64 << 10;

/// A client for one source.
pub struct Client {
    http: Hyper<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    registry: RegistryConfig,
    /// The `Authorization` that worked, by host and scope.
    granted: Mutex<HashMap<String, Arc<str>>>,
}

/// A bounded answer.
pub struct Answer {
    pub body: Vec<u8>,
    /// Whether a `Link` header names a next page.
    pub next: bool,
}

impl Client {
    /// A client trusting the system's roots and `registry.ca_file`.
    ///
    /// # Errors
    /// The CA file cannot be read or holds no certificate.
    pub fn new(registry: &RegistryConfig) -> Result<Client, RegistryError> {
        let tls = tls_config(registry.ca_file.as_deref())?;
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT));
        connector.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        Ok(Client {
            http: Hyper::builder(TokioExecutor::new()).build(https),
            registry: registry.clone(),
            granted: Mutex::new(HashMap::new()),
        })
    }

    /// GETs `url` (accepting `accept`), its body read up to `limit` bytes; `what` names it
    /// in errors.
    ///
    /// # Errors
    /// [`RegistryError`]: unreachable, refused, an error status, past the bound.
    pub async fn get(
        &self,
        url: &Url,
        accept: &str,
        limit: u64,
        what: &str,
    ) -> Result<Answer, RegistryError> {
        let mut body = Vec::new();
        let next = self
            .fetch(url, accept, limit, what, &mut |part| {
                body.extend_from_slice(part);
                Ok(())
            })
            .await?;
        Ok(Answer { body, next })
    }

    /// GETs `url`, each part of its body given to `sink` (up to `limit` bytes in all);
    /// whether a `Link` header names a next page.
    ///
    /// # Errors
    /// As [`Client::get`]; `sink`'s error as the registry's cache's.
    pub async fn fetch(
        &self,
        url: &Url,
        accept: &str,
        limit: u64,
        what: &str,
        sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
    ) -> Result<bool, RegistryError> {
        let response = self.answered(url, accept, what).await?;
        let next = header_text(&response, "link").is_some_and(|l| l.contains("rel=\"next\""));
        if response.content_length_over(limit) {
            return Err(too_large(url, what, limit));
        }
        let mut body = response.into_body();
        let mut read = 0u64;
        loop {
            let frame = tokio::time::timeout(IDLE, body.frame()).await;
            let frame = match frame {
                Err(_) => {
                    return Err(unreachable(
                        url,
                        because(format!("no byte of {what} for {}s", IDLE.as_secs())),
                    ))
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(unreachable(url, Arc::new(e))),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            read += data.len() as u64;
            if read > limit {
                return Err(too_large(url, what, limit));
            }
            sink(&data).map_err(|e| RegistryError::Cache(Arc::new(e)))?;
        }
        Ok(next)
    }

    /// The answer to a GET of `url` with a success status: the registry's auth answered,
    /// redirects followed.
    async fn answered(
        &self,
        url: &Url,
        accept: &str,
        what: &str,
    ) -> Result<http::Response<hyper::body::Incoming>, RegistryError> {
        let mut url = url.clone();
        let mut retried = false;
        for _ in 0..=MAX_REDIRECTS {
            self.allowed(&url)?;
            let granted = self.granted_for(&url);
            let response = self
                .send(Method::GET, &url, accept, granted.as_deref(), None)
                .await?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !retried {
                retried = true;
                let challenge = header_text(&response, WWW_AUTHENTICATE.as_str());
                self.answer_challenge(&url, challenge.as_deref()).await?;
                continue;
            }
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                return Err(RegistryError::Unauthorized {
                    registry: host(&url),
                    what: what.to_string(),
                    logged_in: self.registry.credentials.is_some(),
                });
            }
            if status.is_redirection() {
                let location = header_text(&response, LOCATION.as_str()).unwrap_or_default();
                let next = url.join(&location).map_err(|_| {
                    unreachable(&url, because(format!("a redirect to {location:?}")))
                })?;
                url = next;
                continue;
            }
            if !status.is_success() {
                return Err(RegistryError::Status {
                    registry: host(&url),
                    what: what.to_string(),
                    status: status.as_u16(),
                });
            }
            return Ok(response);
        }
        Err(unreachable(
            &url,
            because(format!("more than {MAX_REDIRECTS} redirects")),
        ))
    }

    /// Refuses plain HTTP unless the source allows it.
    fn allowed(&self, url: &Url) -> Result<(), RegistryError> {
        match url.scheme() {
            "https" => Ok(()),
            "http" if self.registry.insecure => Ok(()),
            _ => Err(RegistryError::Insecure { url: redacted(url) }),
        }
    }

    async fn send(
        &self,
        method: Method,
        url: &Url,
        accept: &str,
        authorization: Option<&str>,
        form: Option<String>,
    ) -> Result<http::Response<hyper::body::Incoming>, RegistryError> {
        let mut request = Request::builder()
            .method(method)
            .uri(url.as_str())
            .header(USER_AGENT, concat!("berth/", env!("CARGO_PKG_VERSION")))
            .header(ACCEPT, accept);
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        let body = match form {
            Some(form) => {
                request = request.header("content-type", "application/x-www-form-urlencoded");
                Full::new(Bytes::from(form))
            }
            None => Full::new(Bytes::new()),
        };
        let request = request
            .body(body)
            .map_err(|e| unreachable(url, Arc::new(e)))?;
        match tokio::time::timeout(IDLE, self.http.request(request)).await {
            Err(_) => Err(unreachable(
                url,
                because(format!("no answer in {}s", IDLE.as_secs())),
            )),
            Ok(Err(e)) => Err(unreachable(url, Arc::new(e))),
            Ok(Ok(response)) => Ok(response),
        }
    }
}

/// The rustls configuration: the system's roots and the CA file's certificates.
fn tls_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, RegistryError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let ca = |cause: Cause| RegistryError::CaFile {
            path: path.to_path_buf(),
            cause,
        };
        let certs: Vec<_> = CertificateDer::pem_file_iter(path)
            .map_err(|e| ca(Arc::new(e)))?
            .collect::<Result<_, _>>()
            .map_err(|e| ca(Arc::new(e)))?;
        if certs.is_empty() {
            return Err(ca(because("it holds no PEM certificate")));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| ca(Arc::new(e)))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| RegistryError::CaFile {
            path: ca_file.unwrap_or(Path::new("-")).to_path_buf(),
            cause: Arc::new(e),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The body of a small answer (a token), or `None` past `limit`.
async fn read_small(
    response: http::Response<hyper::body::Incoming>,
    limit: u64,
) -> Option<Vec<u8>> {
    let limited = http_body_util::Limited::new(response.into_body(), limit as usize);
    let collected = tokio::time::timeout(IDLE, limited.collect())
        .await
        .ok()?
        .ok()?;
    Some(collected.to_bytes().to_vec())
}

fn header_text<B>(response: &http::Response<B>, name: &str) -> Option<String> {
    Some(response.headers().get(name)?.to_str().ok()?.to_string())
}

trait ContentLength {
    fn content_length_over(&self, limit: u64) -> bool;
}

impl<B> ContentLength for http::Response<B> {
    fn content_length_over(&self, limit: u64) -> bool {
        header_text(self, "content-length")
            .and_then(|l| l.parse::<u64>().ok())
            .is_some_and(|l| l > limit)
    }
}

/// The host and port, as `config.json` and errors name a registry.
pub fn host(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        _ => url.to_string(),
    }
}

/// The URL without user-info or query (a signed download URL's token).
pub fn redacted(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}

fn unreachable(url: &Url, cause: Cause) -> RegistryError {
    RegistryError::Unreachable {
        registry: host(url),
        cause,
    }
}

fn too_large(url: &Url, what: &str, limit: u64) -> RegistryError {
    RegistryError::TooLarge {
        registry: host(url),
        what: what.to_string(),
        limit,
    }
}

mod auth;
