//! The registry's auth, answered when it asks (a 401's `WWW-Authenticate`): basic auth
//! with the `config.json` login, or Distribution's token flow — a bearer token from the
//! challenge's realm, for a login, an identity token or none. What worked is kept by host
//! and repository for the client's later requests.

use std::collections::HashMap;
use std::sync::Arc;

use http::Method;
use url::Url;

use super::{host, read_small, Client, MAX_TOKEN};
use crate::source::registry::credentials::{self, Login};
use crate::source::registry::RegistryError;

impl Client {
    /// The `Authorization` that worked for `url`'s host (and, after a token flow, scope).
    pub(super) fn granted_for(&self, url: &Url) -> Option<Arc<str>> {
        let granted = self.granted.lock().ok()?;
        granted.get(&grant_key(url)).cloned()
    }

    /// Answers a 401's challenge: basic auth with the login, or a token from the realm.
    pub(super) async fn answer_challenge(
        &self,
        url: &Url,
        challenge: Option<&str>,
    ) -> Result<(), RegistryError> {
        let login = self.login(url)?;
        let challenge = challenge.unwrap_or("Basic");
        let value: String = if let Some(params) = strip_scheme(challenge, "bearer") {
            self.token(url, &params_of(params), login.as_ref()).await?
        } else {
            match &login {
                Some(Login::Basic { username, password }) => basic(username, password),
                _ => {
                    return Err(RegistryError::Unauthorized {
                        registry: host(url),
                        what: "a login".into(),
                        logged_in: login.is_some(),
                    })
                }
            }
        };
        if let Ok(mut granted) = self.granted.lock() {
            granted.insert(grant_key(url), value.into());
        }
        Ok(())
    }

    fn login(&self, url: &Url) -> Result<Option<Login>, RegistryError> {
        let Some(path) = &self.registry.credentials else {
            return Ok(None);
        };
        credentials::login_for(path, &host(url))
            .map_err(|e| RegistryError::Credentials(Arc::new(e)))
    }

    /// A bearer token from the challenge's realm (Distribution's token flow): a GET with
    /// basic auth, or a POST trading an identity token (OAuth2's refresh grant).
    async fn token(
        &self,
        url: &Url,
        params: &HashMap<String, String>,
        login: Option<&Login>,
    ) -> Result<String, RegistryError> {
        let refused = || RegistryError::Unauthorized {
            registry: host(url),
            what: "a token".into(),
            logged_in: login.is_some(),
        };
        let realm = params.get("realm").ok_or_else(refused)?;
        let mut realm = Url::parse(realm).map_err(|_| refused())?;
        self.allowed(&realm)?;
        let service = params.get("service").cloned().unwrap_or_default();
        let scope = params.get("scope").cloned().unwrap_or_default();
        let response = match login {
            Some(Login::IdentityToken(token)) => {
                let form = form_urlencoded::Serializer::new(String::new())
                    .append_pair("grant_type", "refresh_token")
                    .append_pair("service", &service)
                    .append_pair("scope", &scope)
                    .append_pair("client_id", "berth")
                    .append_pair("refresh_token", token)
                    .finish();
                self.send(Method::POST, &realm, "application/json", None, Some(form))
                    .await?
            }
            other => {
                realm.query_pairs_mut().append_pair("service", &service);
                if !scope.is_empty() {
                    realm.query_pairs_mut().append_pair("scope", &scope);
                }
                let auth = match other {
                    Some(Login::Basic { username, password }) => Some(basic(username, password)),
                    _ => None,
                };
                self.send(
                    Method::GET,
                    &realm,
                    "application/json",
                    auth.as_deref(),
                    None,
                )
                .await?
            }
        };
        if !response.status().is_success() {
            return Err(refused());
        }
        let body = read_small(response, MAX_TOKEN).await.ok_or_else(refused)?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body).map_err(|_| refused())?;
        let token = token.token.or(token.access_token).ok_or_else(refused)?;
        Ok(format!("Bearer {token}"))
    }
}

fn basic(username: &str, password: &str) -> String {
    use base64::Engine as _;
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    format!("Basic {encoded}")
}

/// The parameters of a challenge after its scheme, when it is `scheme`.
fn strip_scheme<'c>(challenge: &'c str, scheme: &str) -> Option<&'c str> {
    let (first, rest) = challenge
        .trim()
        .split_once(' ')
        .unwrap_or((challenge.trim(), ""));
    first.eq_ignore_ascii_case(scheme).then_some(rest)
}

/// `realm="…",service="…",scope="…"` as a map (a quoted value may hold commas).
fn params_of(text: &str) -> HashMap<String, String> {
    let mut params = HashMap::new();
    let mut rest = text.trim();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => quoted.split_once('"').unwrap_or((quoted, "")),
            None => after.split_once(',').unwrap_or((after, "")),
        };
        params.insert(key, value.to_string());
        rest = next.trim_start_matches(',').trim();
    }
    params
}

/// Grants are kept by host and the repository's path (a token's scope is one repository).
pub(super) fn grant_key(url: &Url) -> String {
    let repository = url.path().split("/manifests/").next().unwrap_or_default();
    let repository = repository.split("/blobs/").next().unwrap_or_default();
    let repository = repository.split("/tags/").next().unwrap_or_default();
    format!("{}{repository}", host(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_read_with_its_quoted_commas() {
        let challenge = r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#;
        let params = params_of(strip_scheme(challenge, "bearer").unwrap());
        assert_eq!(params["realm"], "https://auth.example/token");
        assert_eq!(params["service"], "registry.example");
        assert_eq!(params["scope"], "repository:a/b:pull,push");
        assert_eq!(strip_scheme("Basic realm=\"x\"", "bearer"), None);
    }

    #[test]
    fn grants_are_kept_by_host_and_repository() {
        let url = |s: &str| Url::parse(s).unwrap();
        let manifest = grant_key(&url("https://r.example:5000/v2/charts/web/manifests/1.0.0"));
        let blob = grant_key(&url("https://r.example:5000/v2/charts/web/blobs/sha256:ab"));
        let other = grant_key(&url("https://r.example:5000/v2/charts/db/manifests/1.0.0"));
        assert_eq!(manifest, blob);
        assert_ne!(manifest, other);
    }
}
