//! Who an HTTP request comes from: credentials from `Authorization: Bearer <token>`,
//! `Authorization: Token <token>` (InfluxDB v2 clients), `Authorization: Basic` or the InfluxDB
//! v1 `u`/`p` query parameters, checked at the front door; and the refusal of requests a web
//! page could forge (CSRF).

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use ebb_query::access::AccessError;
use ebb_query::front::{Credentials, FrontDoor, Principal, Protocol};

/// The credentials a request presents; a malformed `Authorization` header is an error.
pub fn credentials(
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Credentials, AccessError> {
    let bad = |why: &str| AccessError::Unauthenticated(why.to_string());
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        let v = v.to_str().map_err(|_| bad("the Authorization header is not text"))?;
        let (scheme, rest) = v.trim().split_once(' ').unwrap_or((v.trim(), ""));
        let rest = rest.trim();
        return match scheme.to_ascii_lowercase().as_str() {
            "bearer" | "token" if !rest.is_empty() => Ok(Credentials::Token(rest.to_string())),
            "basic" => {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(rest)
                    .map_err(|_| bad("Basic credentials are not base64"))?;
                let text =
                    String::from_utf8(raw).map_err(|_| bad("Basic credentials are not UTF-8"))?;
                let (user, password) = text
                    .split_once(':')
                    .ok_or_else(|| bad("Basic credentials need user:password"))?;
                Ok(Credentials::Password { user: user.to_string(), password: password.to_string() })
            }
            _ => Err(bad("use Authorization: Bearer <token>, Token <token> or Basic")),
        };
    }
    match (query.get("u"), query.get("p")) {
        (Some(user), Some(password)) => {
            Ok(Credentials::Password { user: user.clone(), password: password.clone() })
        }
        (None, None) => Ok(Credentials::None),
        _ => Err(bad("give both u and p")),
    }
}

/// True if a browser sent the request (it names the page's origin or its fetch mode); only
/// browsers send these headers, and nothing EbbDB serves is a web page.
fn from_browser(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN) || headers.contains_key("sec-fetch-mode")
}

/// True if a page could send a request with this content type without the browser asking
/// the server first (a CORS "simple" request).
fn simple_content_type(headers: &HeaderMap) -> bool {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    ct.is_empty()
        || ct.starts_with("text/plain")
        || ct.starts_with("application/x-www-form-urlencoded")
        || ct.starts_with("multipart/form-data")
}

/// A JSON error response.
pub fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({ "error": msg.to_string() }).to_string();
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"ebb\", Bearer"),
        );
    }
    r
}

/// The response for an access error: 401 or 403 with the reason.
pub fn access_error(e: &AccessError) -> Response {
    let status = match e {
        AccessError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        AccessError::Forbidden(_) => StatusCode::FORBIDDEN,
        AccessError::Invalid(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e)
}

/// Authenticates a request at the front door. A request a web page could have sent (a browser's,
/// with a form or text body) must carry its credentials in a header: a page cannot set one
/// without the server's consent, so a port reachable from a browser cannot be made to run
/// `ERASE` or writes by a page the user visits.
pub async fn principal(
    door: &FrontDoor,
    method: &Method,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    client: SocketAddr,
) -> Result<Principal, Response> {
    if method == Method::POST
        && from_browser(headers)
        && simple_content_type(headers)
        && !headers.contains_key(header::AUTHORIZATION)
    {
        tracing::warn!(%client, "refused a browser request without an Authorization header");
        return Err(error(
            StatusCode::FORBIDDEN,
            "requests from web pages must authenticate with an Authorization header",
        ));
    }
    let creds = credentials(headers, query).map_err(|e| access_error(&e))?;
    door.authenticate(creds, Protocol::Http, Some(client)).await.map_err(|e| access_error(&e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn h(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn reads_every_credential_form() {
        let q = HashMap::new();
        assert_eq!(
            credentials(&h(&[("authorization", "Bearer ebb_x")]), &q).unwrap(),
            Credentials::Token("ebb_x".into())
        );
        assert_eq!(
            credentials(&h(&[("authorization", "Token ebb_y")]), &q).unwrap(),
            Credentials::Token("ebb_y".into())
        );
        // "alice:pa:ss"
        assert_eq!(
            credentials(&h(&[("authorization", "Basic YWxpY2U6cGE6c3M=")]), &q).unwrap(),
            Credentials::Password { user: "alice".into(), password: "pa:ss".into() }
        );
        let up: HashMap<String, String> =
            [("u".to_string(), "bob".to_string()), ("p".to_string(), "pw".to_string())].into();
        assert_eq!(
            credentials(&HeaderMap::new(), &up).unwrap(),
            Credentials::Password { user: "bob".into(), password: "pw".into() }
        );
        assert_eq!(credentials(&HeaderMap::new(), &q).unwrap(), Credentials::None);
        for bad in ["Basic !!!", "Bearer", "Digest x", "Basic Ym9i"] {
            assert!(credentials(&h(&[("authorization", bad)]), &q).is_err(), "{bad}");
        }
        let only_u: HashMap<String, String> = [("u".to_string(), "bob".to_string())].into();
        assert!(credentials(&HeaderMap::new(), &only_u).is_err());
    }

    #[test]
    fn browser_form_posts_are_recognized() {
        let page = h(&[("origin", "http://evil.example"), ("content-type", "text/plain")]);
        assert!(from_browser(&page) && simple_content_type(&page));
        let curl = h(&[("content-type", "application/x-www-form-urlencoded")]);
        assert!(!from_browser(&curl));
        let json = h(&[("origin", "http://x"), ("content-type", "application/json")]);
        assert!(!simple_content_type(&json));
    }
}
