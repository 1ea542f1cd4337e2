//! `GET /readyz`: whether the cluster answers. The endpoint is unauthenticated, so a
//! caller must not be able to turn it into API requests: the answer is the last check's
//! while it is younger than [`FRESH`], and callers arriving while a check is in flight
//! wait for that one instead of starting their own. At most one request per [`FRESH`]
//! reaches the API server, however often `/readyz` is called.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// How long a check's answer is given out again.
pub const FRESH: Duration = Duration::from_secs(1);
/// How long the API server has to answer a check.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// Why the cluster counts as unreachable (the `/readyz` body). Cloned to every caller
/// within [`FRESH`], hence the shared error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreachable {
    /// The version request failed (the client's error in the message: it is all
    /// `/readyz` shows).
    #[error("cluster unreachable: {0}")]
    Request(Arc<kube::Error>),
    /// No answer within [`TIMEOUT`].
    #[error("cluster unreachable: no answer in {}s", TIMEOUT.as_secs())]
    NoAnswer,
}

/// The cluster's readiness, checked at most once per [`FRESH`].
pub struct Readiness {
    client: kube::Client,
    /// The last check: when it ended and what it found. Held across a check, so
    /// concurrent callers share the one in flight.
    last: Mutex<Option<(Instant, Result<(), Unreachable>)>>,
}

impl Readiness {
    /// Readiness of the cluster `client` talks to; nothing is asked until the first call.
    pub fn new(client: kube::Client) -> Self {
        Readiness {
            client,
            last: Mutex::new(None),
        }
    }

    /// `Ok` when the API server answered its version within [`TIMEOUT`] at most
    /// [`FRESH`] ago.
    ///
    /// # Errors
    /// Why the cluster counts as unreachable, for the response body.
    pub async fn check(&self) -> Result<(), Unreachable> {
        let mut last = self.last.lock().await;
        if let Some((_, outcome)) = last.as_ref().filter(|(at, _)| at.elapsed() < FRESH) {
            return outcome.clone();
        }
        let outcome = match tokio::time::timeout(TIMEOUT, self.client.apiserver_version()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Unreachable::Request(Arc::new(e))),
            Err(_) => Err(Unreachable::NoAnswer),
        };
        *last = Some((Instant::now(), outcome.clone()));
        outcome
    }
}
