//! A real HTTP receiver on loopback for the notification tests: it records every request
//! and answers as scripted (a status per request, then 200), or never answers.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// What it was answered (0: never answered).
    pub status: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("a JSON body")
    }
}

/// How the receiver answers.
pub enum Answer {
    /// These statuses, one per request, then 200.
    Script(Vec<u16>),
    /// Never: the connection is held open.
    Hang,
}

pub struct Receiver {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub fn start(answer: Answer) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(match &answer {
            Answer::Script(s) => Some(s.iter().copied().collect::<VecDeque<u16>>()),
            Answer::Hang => None,
        }));
        let log = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let log = log.clone();
                let script = script.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let mut headers = Vec::new();
                    loop {
                        let mut h = String::new();
                        reader.read_line(&mut h).unwrap();
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':') {
                            headers.push((k.trim().to_string(), v.trim().to_string()));
                        }
                    }
                    let length: usize = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let status = match script.lock().unwrap().as_mut() {
                        Some(s) => s.pop_front().unwrap_or(200),
                        None => 0,
                    };
                    log.lock().unwrap().push(Received {
                        path,
                        headers,
                        body: String::from_utf8_lossy(&body).into_owned(),
                        status,
                    });
                    if status == 0 {
                        std::thread::sleep(Duration::from_secs(600));
                        return;
                    }
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status} Scripted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    );
                });
            }
        });
        Receiver { url, received }
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The bodies it accepted (answered 2xx), as JSON.
    pub fn accepted(&self) -> Vec<serde_json::Value> {
        self.received()
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(Received::json)
            .collect()
    }
}
