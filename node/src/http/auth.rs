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

/// True if a browser sent the request from a page of another site: an `Origin` that is not
/// this server's own (`scheme://Host`), or a `Sec-Fetch-Site` other than `same-origin`.
fn cross_site(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        if !site.eq_ignore_ascii_case("same-origin") {
            return true;
        }
    }
    match (text("origin"), text("host")) {
        (None, _) => false,
        (Some(origin), Some(host)) => {
            let origin = origin.trim_end_matches('/');
            origin != format!("http://{host}") && origin != format!("https://{host}")
        }
        (Some(_), None) => true,
    }
}

/// True if `Host` names this server in a way no other site's DNS can: an IP address, or
/// `localhost`. A server without users answers nothing else, so a page whose own name is made
/// to resolve to a loopback address (DNS rebinding) cannot reach it.
fn host_is_local(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        // HTTP/1.0 without a Host: no browser sends that.
        return true;
    };
    let name = match host.strip_prefix('[') {
        // [v6 address]:port
        Some(rest) => {
            return rest.split(']').next().is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
        }
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::IpAddr>().is_ok() || name == "localhost" || name.ends_with(".localhost")
}

/// True if the request carries a bearer token (`Bearer` or `Token`), which a page of another
/// site cannot make a browser send.
fn bearer(headers: &HeaderMap) -> bool {
    headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let scheme = v.trim().split(' ').next().unwrap_or("").to_ascii_lowercase();
        scheme == "bearer" || scheme == "token"
    })
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
    error_json(status, serde_json::json!({ "error": msg.to_string() }))
}

/// A JSON error response with this body (an object with `error` and, say, `line`).
pub fn error_json(status: StatusCode, body: serde_json::Value) -> Response {
    let body = body.to_string();
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    if status == StatusCode::UNAUTHORIZED {
        // Never a Basic challenge: a browser that answered one would attach the credentials
        // to every later request to this origin, a cross-site page's included.
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"ebb\""),
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
/// `ERASE` or writes by a page the user visits. A browser's state-changing request from another
/// site needs a bearer token, whatever its body. A server without users answers a browser's
/// request only if its `Host` is an IP address or `localhost` (DNS rebinding).
pub async fn principal(
    door: &FrontDoor,
    method: &Method,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    client: SocketAddr,
) -> Result<Principal, Response> {
    // Only a browser can be made to send a request to a name rebound to this server, and it
    // names the page's origin: other clients (Prometheus, Telegraf, Grafana by a container's
    // name) are not asked.
    if !door.auth_required() && from_browser(headers) && !host_is_local(headers) {
        tracing::warn!(%client, "refused a request for another host name on a server without users");
        return Err(error(
            StatusCode::FORBIDDEN,
            "this server has no users and answers only requests to an IP address or localhost \
             (Host); create a user to serve other names",
        ));
    }
    if method == Method::POST && cross_site(headers) && !bearer(headers) {
        tracing::warn!(%client, "refused a cross-site browser request without a bearer token");
        return Err(error(
            StatusCode::FORBIDDEN,
            "requests from pages of other sites must authenticate with a bearer token",
        ));
    }
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
    fn hosts_cross_site_requests_and_bearers_are_recognized() {
        for local in [
            "127.0.0.1:7080",
            "localhost:7080",
            "[::1]:7080",
            "10.0.0.5",
            "app.localhost",
            "LOCALHOST.",
        ] {
            assert!(host_is_local(&h(&[("host", local)])), "{local}");
        }
        for remote in
            ["attacker.example", "attacker.example:7080", "127.0.0.1.nip.io:7080", "[evil]:1"]
        {
            assert!(!host_is_local(&h(&[("host", remote)])), "{remote}");
        }
        let same = h(&[("host", "127.0.0.1:7080"), ("origin", "http://127.0.0.1:7080")]);
        assert!(!cross_site(&same));
        let other = h(&[("host", "127.0.0.1:7080"), ("origin", "http://evil.example")]);
        assert!(cross_site(&other));
        assert!(cross_site(&h(&[("sec-fetch-site", "cross-site")])));
        assert!(!cross_site(&h(&[("sec-fetch-site", "same-origin")])));
        assert!(!cross_site(&h(&[])), "curl sends neither");
        assert!(bearer(&h(&[("authorization", "Bearer ebb_x")])));
        assert!(!bearer(&h(&[("authorization", "Basic YWxpY2U6cGE6c3M=")])));
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
