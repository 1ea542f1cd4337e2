//! A loopback proxy in front of the API server that a fault test controls: plain HTTP on
//! its side, each request sent on through the admin client (TLS and token included). It
//! answers every request itself with an error status (429 with `Retry-After`, or a 5xx)
//! for as long as the test says, and cuts every open connection (watches included) on
//! demand.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The proxy; it runs until dropped.
pub struct Proxy {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

struct State {
    client: kube::Client,
    /// 0: pass through; else the status to answer with.
    answer: AtomicU16,
    /// How many requests the proxy answered itself.
    answered: AtomicU64,
    cut: tokio::sync::watch::Sender<u64>,
}

type Reply = Response<Either<kube::client::Body, Full<Bytes>>>;

impl Proxy {
    /// Listens on a free loopback port, sending requests on through `client`.
    pub async fn start(client: kube::Client) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            client,
            answer: AtomicU16::new(0),
            answered: AtomicU64::new(0),
            cut: tokio::sync::watch::channel(0).0,
        });
        let s = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let s = s.clone();
                let mut cut = s.cut.subscribe();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| forward(s.clone(), req));
                    let serve = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(conn), service);
                    tokio::select! {
                        _ = serve => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy { url, state, task }
    }

    /// From now on, answers every request with `status` (0: pass through again); open
    /// connections are cut so that no watch slips past.
    pub fn answer(&self, status: u16) {
        self.state.answer.store(status, Ordering::SeqCst);
        self.cut();
    }

    /// Cuts every open connection.
    pub fn cut(&self) {
        self.state.cut.send_modify(|g| *g += 1);
    }

    /// How many requests the proxy answered with an error itself.
    pub fn answered(&self) -> u64 {
        self.state.answered.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

async fn forward(state: Arc<State>, req: Request<Incoming>) -> Result<Reply, Infallible> {
    let status = state.answer.load(Ordering::SeqCst);
    if status != 0 {
        state.answered.fetch_add(1, Ordering::SeqCst);
        return Ok(error(status, "injected by the fault test"));
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await else {
        return Ok(error(502, "proxy: request body"));
    };
    let req = Request::from_parts(parts, kube::client::Body::from(body.to_bytes().to_vec()));
    Ok(match state.client.send(req).await {
        Ok(res) => res.map(Either::Left),
        Err(e) => error(502, &format!("proxy: {e}")),
    })
}

fn error(status: u16, message: &str) -> Reply {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": status});
    Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .header("Retry-After", "1")
        .body(Either::Right(Full::new(Bytes::from(body.to_string()))))
        .unwrap()
}
