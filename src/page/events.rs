//! `/api/events`: the apps' changes as server-sent events, while the connection lasts.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use hyper::Response;

use super::answer::{secure, to_json};
use super::StatusPage;
use crate::service::http::Body;

/// Changes this close together go out as one event.
const COALESCE: Duration = Duration::from_millis(100);

impl StatusPage {
    /// `/api/events`: `event: apps` with the apps `names` (one app's page, or a page of
    /// `/`), then an `event: app` with those each change touched, until a moment before
    /// the connection `closes` (the browser reconnects after `retry`). An event holds
    /// [`super::html::PAGE_APPS`] apps at most.
    pub(super) fn events(
        self: &Arc<Self>,
        names: Vec<String>,
        closes: tokio::time::Instant,
    ) -> Response<Body> {
        struct Stream {
            page: Arc<StatusPage>,
            changed: tokio::sync::watch::Receiver<u64>,
            seen: Option<u64>,
            names: Vec<String>,
            until: tokio::time::Instant,
        }
        let until = closes - Duration::from_secs(1);
        let start = Stream {
            page: self.clone(),
            changed: self.board.changed(),
            seen: None,
            names,
            until,
        };
        let frames = futures::stream::unfold(start, |mut s| async move {
            let Some(seen) = s.seen else {
                s.seen = Some(*s.changed.borrow_and_update());
                let apps = s.page.board.among(&s.names, None);
                let text = format!("retry: 500\nevent: apps\ndata: {}\n\n", to_json(&apps));
                return Some((Ok(hyper::body::Frame::data(Bytes::from(text))), s));
            };
            loop {
                s.page.looked();
                match tokio::time::timeout_at(s.until, s.changed.changed()).await {
                    Ok(Ok(())) => {}
                    _ => return None, // time is up, or the agent stops
                }
                // A sync says several lines at once: one event for them.
                tokio::time::sleep(COALESCE).await;
                let version = *s.changed.borrow_and_update();
                let apps = s.page.board.among(&s.names, Some(seen));
                s.seen = Some(version);
                if !apps.is_empty() {
                    let text = format!("event: app\ndata: {}\n\n", to_json(&apps));
                    return Some((Ok(hyper::body::Frame::data(Bytes::from(text))), s));
                }
            }
        });
        let mut r = Response::new(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(frames),
        ));
        secure(&mut r, "text/event-stream; charset=utf-8");
        r
    }
}
