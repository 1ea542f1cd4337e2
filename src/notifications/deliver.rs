//! Sending to one receiver: its own bounded queue and task, so a slow or dead receiver
//! never holds up a sync or another receiver; each request with a timeout, retried after
//! a network error, a 5xx or a 429 with exponential backoff and jitter.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::retry::{Backoff, Policy};

/// The delay before a retry: from a second, doubling, up to a minute.
const BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    max: Duration::from_secs(60),
};

/// The HTTP(S) client every receiver shares.
pub type HttpClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// A client for http and https receivers (the system's trusted roots).
///
/// # Errors
/// The system's roots cannot be read.
pub fn client() -> std::io::Result<HttpClient> {
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

/// A receiver, as its task sends to it.
pub struct Receiver {
    /// Its name in logs and metrics (never its address: that may hold a secret).
    pub name: String,
    /// Its address.
    pub url: String,
    /// The HMAC key of `X-Berth-Signature-256`.
    pub secret: Option<Vec<u8>>,
    /// The bearer token.
    pub token: Option<String>,
    /// One request's time limit.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub retries: u32,
}

/// What one receiver has done, for `/metrics`.
#[derive(Default)]
pub struct Counts {
    /// Messages it accepted.
    pub sent: AtomicU64,
    /// Messages given up on after the last retry (or refused with a 4xx).
    pub failed: AtomicU64,
    /// Messages dropped because its queue was full.
    pub dropped: AtomicU64,
}

/// One message on its way: the body and the event's name.
pub struct Delivery {
    /// The JSON body (shared by its attempts, not copied).
    pub body: Bytes,
    /// The event (`X-Berth-Event`).
    pub event: &'static str,
}

/// Sends what comes down `queue` until it closes. `pending` counts messages not yet
/// settled (sent or given up), for [`super::Notifications::flush`].
pub async fn run(
    receiver: Receiver,
    client: HttpClient,
    mut queue: tokio::sync::mpsc::Receiver<Delivery>,
    counts: Arc<Counts>,
    pending: Arc<(AtomicUsize, tokio::sync::Notify)>,
) {
    while let Some(delivery) = queue.recv().await {
        let sent = send(&receiver, &client, &delivery).await;
        match sent {
            Ok(()) => counts.sent.fetch_add(1, Ordering::Relaxed),
            Err(why) => {
                tracing::warn!(receiver = %receiver.name, event = delivery.event, "notification not delivered: {why}");
                counts.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
        pending.0.fetch_sub(1, Ordering::AcqRel);
        pending.1.notify_waiters();
    }
}

/// Why a message was given up (never with the receiver's address: it may hold a secret).
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The address makes no request.
    #[error("the address is not a valid URL")]
    InvalidUrl,
    /// A 4xx (other than 429): sending it again would be refused again.
    #[error("the receiver refused it ({0}); not retried")]
    Refused(http::StatusCode),
    /// The last attempt failed too.
    #[error("{last}; gave up after {attempts} attempts")]
    GaveUp {
        /// Why the last attempt failed.
        last: AttemptError,
        /// Attempts made, the first included.
        attempts: u32,
    },
}

/// Why one attempt failed; worth another.
#[derive(Debug, thiserror::Error)]
pub enum AttemptError {
    /// No answer within the receiver's timeout.
    #[error("no answer within {}s", .0.as_secs_f32())]
    NoAnswer(Duration),
    /// The connection failed or broke (the reason without the address).
    #[error("request failed ({0})")]
    Request(String),
    /// A 5xx or 429.
    #[error("the receiver answered {0}")]
    Answered(http::StatusCode),
}

/// One message, with its retries; the reason when it was given up.
async fn send(
    receiver: &Receiver,
    client: &HttpClient,
    delivery: &Delivery,
) -> Result<(), DeliveryError> {
    let signature = receiver
        .secret
        .as_ref()
        .map(|key| crate::body_hmac::sign(key, &delivery.body));
    let mut attempt = 0;
    loop {
        let mut request = http::Request::post(&receiver.url)
            .header("content-type", "application/json")
            .header("user-agent", concat!("berth/", env!("CARGO_PKG_VERSION")))
            .header("x-berth-event", delivery.event);
        if let Some(s) = &signature {
            request = request.header("x-berth-signature-256", s);
        }
        if let Some(t) = &receiver.token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        let request = request
            .body(Full::new(delivery.body.clone()))
            .map_err(|_| DeliveryError::InvalidUrl)?;
        let why = match tokio::time::timeout(receiver.timeout, client.request(request)).await {
            Err(_) => AttemptError::NoAnswer(receiver.timeout),
            Ok(Err(e)) => AttemptError::Request(connect_error(&e)),
            Ok(Ok(answer)) => {
                let status = answer.status();
                if status.is_success() {
                    return Ok(());
                }
                if !crate::retry::transient_receiver_status(status.as_u16()) {
                    return Err(DeliveryError::Refused(status));
                }
                AttemptError::Answered(status)
            }
        };
        let retry = Policy {
            backoff: BACKOFF,
            retries: receiver.retries,
            within: Duration::MAX,
        };
        let Some(wait) = retry.next(attempt, Duration::ZERO, None) else {
            return Err(DeliveryError::GaveUp {
                last: why,
                attempts: attempt + 1,
            });
        };
        tracing::debug!(receiver = %receiver.name, attempt = attempt + 1, "{why}; retrying in {wait:?}");
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// A client error's kind without the address it was sent to (which may hold a secret).
fn connect_error(e: &hyper_util::client::legacy::Error) -> String {
    if e.is_connect() {
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            if let Some(io) = s.downcast_ref::<std::io::Error>() {
                return format!("cannot connect: {}", io.kind());
            }
            source = s.source();
        }
        return "cannot connect".into();
    }
    "the connection broke".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_a_minute() {
        for attempt in 0..10 {
            let full = (BACKOFF.base * (1 << attempt)).min(BACKOFF.max);
            let wait = BACKOFF.delay(attempt);
            assert!(wait >= full / 2 && wait <= full, "{attempt}: {wait:?}");
        }
        assert!(BACKOFF.delay(40) <= BACKOFF.max);
    }
}
