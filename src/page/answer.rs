//! The status page's answers: the headers every one carries, pages, JSON, assets and
//! errors; the query string's values and the `Host` check.

use hyper::body::Bytes;
use hyper::{header, Response, StatusCode};

use super::html;
use crate::service::http::{full, Body};

/// The value of `key` in a query string, percent-decoded (`+` a space); at most 256 bytes.
pub(super) fn param(query: &str, key: &str) -> Option<String> {
    let (_, value) = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == key)?;
    let mut end = value.len().min(256);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Some(value[..end].to_string())
}

/// `value` as JSON (`null` if it cannot be).
pub(super) fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

/// The headers of every answer: what the page may load (nothing inline, nothing from
/// elsewhere), no framing, no sniffing, no caching, no referrer.
pub(super) fn secure(r: &mut Response<Body>, content_type: &'static str) {
    let h = r.headers_mut();
    let mut set = |name: &'static str, value: &'static str| {
        h.insert(name, header::HeaderValue::from_static(value));
    };
    set("content-type", content_type);
    set(
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    );
    set("x-frame-options", "DENY");
    set("x-content-type-options", "nosniff");
    set("referrer-policy", "no-referrer");
    set("cache-control", "no-store");
}

/// An answer with `status`, `body` and the headers of [`secure`].
pub(super) fn answer(
    status: StatusCode,
    body: impl Into<Bytes>,
    content_type: &'static str,
) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    secure(&mut r, content_type);
    r
}

/// A page of HTML.
pub(super) fn page(html: String) -> Response<Body> {
    answer(StatusCode::OK, html, "text/html; charset=utf-8")
}

/// A page of apps as JSON (an array, as a whole list was), with how many there are in
/// `X-Total-Count` and the next page in `Link`, as paged APIs say them.
pub(super) fn paged(page: html::IndexPage) -> Response<Body> {
    let mut r = json(&page.apps);
    let h = r.headers_mut();
    h.insert("x-total-count", header::HeaderValue::from(page.kept));
    if page.number < page.pages() {
        let next = format!("</api/apps?page={}>; rel=\"next\"", page.number + 1);
        if let Ok(value) = header::HeaderValue::from_str(&next) {
            h.insert(header::LINK, value);
        }
    }
    r
}

/// `value` as JSON.
pub(super) fn json<T: serde::Serialize>(value: &T) -> Response<Body> {
    answer(StatusCode::OK, to_json(value), "application/json")
}

/// One of the assets compiled into the binary.
pub(super) fn asset(text: &'static str, content_type: &'static str) -> Response<Body> {
    answer(StatusCode::OK, text, content_type)
}

/// 401, asking for the credentials.
pub(super) fn unauthorized() -> Response<Body> {
    let mut r = answer(
        StatusCode::UNAUTHORIZED,
        "the status page needs a user and password, or a bearer token (agent.status_page_credentials)\n",
        "text/plain; charset=utf-8",
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Basic realm=\"berth\", charset=\"UTF-8\""),
    );
    r
}

/// Whether a request's `Host` is an IP address or `localhost` (with a port or not).
pub(super) fn addressed(host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// 403: the page answers only under an address without credentials.
pub(super) fn misnamed() -> Response<Body> {
    answer(
        StatusCode::FORBIDDEN,
        "without agent.status_page_credentials the status page answers only under an address (http://127.0.0.1:PORT/) or localhost: set credentials to serve it under a name\n",
        "text/plain; charset=utf-8",
    )
}

/// 404: a page saying so, or `{"error": …}` for the API.
pub(super) fn not_found(title: &str, text: &str, api: bool) -> Response<Body> {
    if api {
        let body = to_json(&serde_json::json!({ "error": text }));
        answer(StatusCode::NOT_FOUND, body, "application/json")
    } else {
        answer(
            StatusCode::NOT_FOUND,
            html::message(title, text),
            "text/html; charset=utf-8",
        )
    }
}

/// 404: no app `app`.
pub(super) fn no_app(app: &str, api: bool) -> Response<Body> {
    not_found(
        "No such app",
        &format!("No app named {app:?} in the configuration."),
        api,
    )
}

/// 404: no record `id` of `app`.
pub(super) fn no_record(app: &str, id: &str, api: bool) -> Response<Body> {
    not_found(
        "No such sync",
        &format!("The history of {app:?} holds no record {id:?} (kept: agent.history_keep, agent.history_max_age)."),
        api,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_credentials_only_an_address_or_localhost_is_answered() {
        for host in [
            "127.0.0.1:9464",
            "localhost:9464",
            "LOCALHOST",
            "[::1]:9464",
            "10.0.0.7",
        ] {
            assert!(addressed(Some(host)), "{host}");
        }
        for host in [
            "evil.example:9464",
            "127.0.0.1.nip.io",
            "localhost.evil.example",
            "",
        ] {
            assert!(!addressed(Some(host)), "{host}");
        }
        assert!(!addressed(None));
    }

    #[test]
    fn query_values_are_decoded_and_bounded() {
        assert_eq!(
            param("name=shop+web&outcome=failed", "outcome").as_deref(),
            Some("failed")
        );
        assert_eq!(param("name=shop+web", "name").as_deref(), Some("shop web"));
        assert_eq!(param("name=a%2Fb%3C", "name").as_deref(), Some("a/b<"));
        assert_eq!(param("name=100%", "name").as_deref(), Some("100%"));
        assert_eq!(param("name=%zz", "name").as_deref(), Some("%zz"));
        assert_eq!(param("x=1", "name"), None);
        assert_eq!(
            param(&format!("name={}", "a".repeat(5000)), "name")
                .unwrap()
                .len(),
            256
        );
    }
}
