//! One measurement of a check: a Prometheus query (`POST /api/v1/query`, the result one
//! number) or an HTTP check (a 2xx answer, and a JSON field of its body). Each within its
//! time, its answer read up to [`MAX_ANSWER`] bytes: a check's server is not trusted to be
//! small or quick.

use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request};

use super::Value;
use crate::notifications::deliver::HttpClient;

/// The most of an answer read.
pub const MAX_ANSWER: usize = 1 << 20;

/// Where a measurement comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// A PromQL query of a Prometheus server; `{version}` in it is the version measured.
    Prometheus {
        /// The server's address (`http://127.0.0.1:9090`).
        address: String,
        /// The query; its result must be one number.
        query: String,
    },
    /// A GET of `url` (`{version}` in it is the version measured): a 2xx answer, and the
    /// `json` field of its body when given (else the status code is the value).
    Http {
        /// The address.
        url: String,
        /// A field of the body: `.status`, `.checks.db`, `.items.0.state`.
        json: Option<String>,
    },
}

/// Why a check could not be measured.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unmeasured {
    /// The check's address makes no request.
    #[error("not a request: {0}")]
    NotRequest(String),
    /// The server could not be reached.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// No answer in time.
    #[error("no answer within {}", humantime::format_duration(*.0))]
    Slow(Duration),
    /// The answer could not be read.
    #[error("the answer could not be read (at most 1 MiB): {0}")]
    Unreadable(String),
    /// An HTTP check's answer was not 2xx.
    #[error("answered {0}")]
    Status(u16),
    /// A query's answer was not JSON.
    #[error("answered {0}, not JSON")]
    NotJson(u16),
    /// Prometheus refused the query.
    #[error("the query failed ({status}): {error}")]
    QueryFailed {
        /// The answer's status.
        status: u16,
        /// Prometheus' error.
        error: String,
    },
    /// The query's series is not there (yet).
    #[error("the query returned no data")]
    NoData,
    /// More than one series.
    #[error("the query returned {0} series; a check needs one number (sum them)")]
    Series(usize),
    /// A result of another kind (a matrix, a string).
    #[error("the query returned a {0}, not one number")]
    NotOneNumber(String),
    /// A sample's value that is no number.
    #[error("the query's value {0:?} is not a number")]
    NotNumber(String),
    /// An HTTP check's body is not JSON.
    #[error("the answer is not JSON")]
    BodyNotJson,
    /// An HTTP check's field is not there.
    #[error("the answer has no {0}")]
    NoField(String),
    /// The bearer token file cannot be read.
    #[error("bearer_token_file {0}")]
    Token(String),
    /// A Job check's Job could not be made or followed.
    #[error("{0}")]
    Job(String),
}

/// `template` with `{version}` filled.
pub fn fill(template: &str, version: &str) -> String {
    template.replace("{version}", version)
}

/// Measures `check` of `version` once, within `timeout`, sending `authorization` (the
/// configured credentials' header value) when given.
///
/// # Errors
/// What kept it from being measured, as a user reads it: the server unreachable or slow,
/// an answer not 2xx, a result that is not one number, a field not there.
pub async fn measure(
    client: &HttpClient,
    check: &Check,
    version: &str,
    authorization: Option<&str>,
    timeout: Duration,
) -> Result<Value, Unmeasured> {
    let request = match check {
        Check::Prometheus { address, query } => {
            let url = format!("{}/api/v1/query", address.trim_end_matches('/'));
            let form = form_urlencoded::Serializer::new(String::new())
                .append_pair("query", &fill(query, version))
                .finish();
            Request::builder()
                .method(Method::POST)
                .uri(url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Full::new(Bytes::from(form)))
        }
        Check::Http { url, .. } => Request::builder()
            .method(Method::GET)
            .uri(fill(url, version))
            .body(Full::new(Bytes::new())),
    };
    let mut request = request.map_err(|e| Unmeasured::NotRequest(e.to_string()))?;
    if let Some(value) = authorization.and_then(|a| a.parse().ok()) {
        request.headers_mut().insert("authorization", value);
    }
    let (status, body) = tokio::time::timeout(timeout, send(client, request))
        .await
        .map_err(|_| Unmeasured::Slow(timeout))??;
    match check {
        Check::Prometheus { .. } => prometheus_value(status, &body).map(Value::Number),
        Check::Http { .. } if !(200..300).contains(&status) => Err(Unmeasured::Status(status)),
        Check::Http { json: None, .. } => Ok(Value::Number(f64::from(status))),
        Check::Http {
            json: Some(path), ..
        } => json_field(&body, path),
    }
}

async fn send(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> Result<(u16, Bytes), Unmeasured> {
    let answer = client
        .request(request)
        .await
        .map_err(|e| Unmeasured::Unreachable(e.to_string()))?;
    let status = answer.status().as_u16();
    let body = Limited::new(answer.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| Unmeasured::Unreadable(e.to_string()))?;
    Ok((status, body.to_bytes()))
}

/// The one number of a Prometheus query's answer: a scalar, or a vector of one sample.
///
/// # Errors
/// The answer is an error, not JSON, empty (no data: the series is not there yet) or
/// more than one series.
pub fn prometheus_value(status: u16, body: &[u8]) -> Result<f64, Unmeasured> {
    let answer: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| Unmeasured::NotJson(status))?;
    if answer["status"] != "success" {
        let error = answer["error"].as_str().unwrap_or("no error given").into();
        return Err(Unmeasured::QueryFailed { status, error });
    }
    let data = &answer["data"];
    let sample = match (data["resultType"].as_str(), &data["result"]) {
        (Some("scalar"), sample) => sample,
        (Some("vector"), serde_json::Value::Array(series)) => match series.as_slice() {
            [] => return Err(Unmeasured::NoData),
            [one] => &one["value"],
            many => return Err(Unmeasured::Series(many.len())),
        },
        (kind, _) => {
            let kind = kind.unwrap_or("nothing").to_string();
            return Err(Unmeasured::NotOneNumber(kind));
        }
    };
    let text = sample[1].as_str().unwrap_or_default();
    (text.parse::<f64>()).map_err(|_| Unmeasured::NotNumber(text.to_string()))
}

/// The field at `path` (`.a.b.0`) of a JSON body: a number, or a text (a string as it is,
/// anything else as JSON writes it).
///
/// # Errors
/// The body is not JSON, or the field is not there.
pub fn json_field(body: &[u8], path: &str) -> Result<Value, Unmeasured> {
    let mut at: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| Unmeasured::BodyNotJson)?;
    for key in path.split('.').filter(|k| !k.is_empty()) {
        let next = match &mut at {
            serde_json::Value::Array(items) => {
                key.parse::<usize>().ok().and_then(|i| items.get_mut(i))
            }
            serde_json::Value::Object(fields) => fields.get_mut(key),
            _ => None,
        };
        at = next
            .map(serde_json::Value::take)
            .ok_or_else(|| Unmeasured::NoField(path.to_string()))?;
    }
    Ok(match at {
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::String(s) => Value::Text(s),
        other => Value::Text(other.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_answer_gives_one_number_or_says_why_not() {
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"version":"abc"},"value":[1700000000.1,"0.25"]}]}}"#;
        assert_eq!(prometheus_value(200, vector), Ok(0.25));
        let scalar =
            br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000.1,"3"]}}"#;
        assert_eq!(prometheus_value(200, scalar), Ok(3.0));
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(prometheus_value(200, empty), Err(Unmeasured::NoData));
        let two = br#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1"]},{"value":[1,"2"]}]}}"#;
        let said = |r: Result<f64, Unmeasured>| r.unwrap_err().to_string();
        assert!(said(prometheus_value(200, two)).contains("2 series"));
        let bad = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#;
        assert_eq!(
            said(prometheus_value(400, bad)),
            "the query failed (400): parse error at char 4"
        );
        assert_eq!(
            said(prometheus_value(502, b"<html>")),
            "answered 502, not JSON"
        );
        let nan = br#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"NaN"]}]}}"#;
        assert!(prometheus_value(200, nan).unwrap().is_nan());
    }

    #[test]
    fn a_json_field_is_found_by_its_path() {
        let body = br#"{"status":"ok","checks":{"db":{"latency":12.5}},"items":[{"state":"up"}],"ready":true}"#;
        assert_eq!(json_field(body, ".status"), Ok(Value::Text("ok".into())));
        assert_eq!(
            json_field(body, ".checks.db.latency"),
            Ok(Value::Number(12.5))
        );
        assert_eq!(
            json_field(body, ".items.0.state"),
            Ok(Value::Text("up".into()))
        );
        assert_eq!(json_field(body, ".ready"), Ok(Value::Text("true".into())));
        let said = |r: Result<Value, Unmeasured>| r.unwrap_err().to_string();
        assert_eq!(
            said(json_field(body, ".checks.cache")),
            "the answer has no .checks.cache"
        );
        assert_eq!(
            said(json_field(b"fine", ".status")),
            "the answer is not JSON"
        );
    }

    #[test]
    fn the_version_is_filled_in() {
        assert_eq!(
            fill(r#"sum(rate(errors{version="{version}"}[1m]))"#, "7d9f"),
            r#"sum(rate(errors{version="7d9f"}[1m]))"#
        );
    }
}
