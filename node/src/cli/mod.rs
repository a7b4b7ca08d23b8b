//! Command-line clients of a running server (over its HTTP API). They authenticate with
//! `EBB_TOKEN` (a bearer token) or `EBB_USER` and `EBB_PASSWORD` when set.

pub mod audit;
pub mod import;
pub mod sql;

use base64::Engine;

/// Joins a base URL and a path.
pub fn url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

/// The `Authorization` header the environment asks for: `EBB_TOKEN`, else `EBB_USER` with
/// `EBB_PASSWORD`.
pub fn authorization(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(t) = get("EBB_TOKEN").filter(|t| !t.is_empty()) {
        return Some(format!("Bearer {t}"));
    }
    let user = get("EBB_USER").filter(|u| !u.is_empty())?;
    let password = get("EBB_PASSWORD").unwrap_or_default();
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    Some(format!("Basic {pair}"))
}

/// An HTTP client that returns error statuses as answers and sends the environment's
/// credentials with every request.
pub fn agent() -> ureq::Agent {
    let auth = authorization(|k| std::env::var(k).ok())
        .and_then(|a| ureq::http::HeaderValue::from_str(&a).ok());
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .middleware(
            move |mut req: ureq::http::Request<ureq::SendBody>,
                  next: ureq::middleware::MiddlewareNext| {
                if let Some(a) = &auth {
                    req.headers_mut().insert(ureq::http::header::AUTHORIZATION, a.clone());
                }
                next.handle(req)
            },
        )
        .build()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(authorization(env(&[("EBB_TOKEN", "ebb_x")])).as_deref(), Some("Bearer ebb_x"));
        assert_eq!(
            authorization(env(&[("EBB_USER", "alice"), ("EBB_PASSWORD", "pw")])).as_deref(),
            Some("Basic YWxpY2U6cHc=")
        );
        assert_eq!(authorization(env(&[])), None);
    }
}
