//! Command-line clients of a running server (over its HTTP API). They authenticate with
//! `EBB_TOKEN` (a bearer token) or `EBB_USER` and `EBB_PASSWORD` when set, and verify an
//! `https://` server against `EBB_CA_CERT` (a PEM file) when set, else the public roots.

pub mod audit;
pub mod backup;
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

/// The TLS settings the environment asks for: `EBB_CA_CERT` names the CA to trust.
fn tls_config() -> ureq::tls::TlsConfig {
    let builder = ureq::tls::TlsConfig::builder();
    let Some(path) = std::env::var_os("EBB_CA_CERT").filter(|p| !p.is_empty()) else {
        return builder.build();
    };
    let certs: Vec<_> = match std::fs::read(&path) {
        Ok(pem) => ureq::tls::parse_pem(&pem)
            .filter_map(|i| match i {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect(),
        Err(e) => {
            eprintln!(
                "ebb: EBB_CA_CERT: cannot read {}: {e}",
                std::path::Path::new(&path).display()
            );
            Vec::new()
        }
    };
    // With no certificate read, nothing is trusted: better than trusting the public roots
    // for a server the user meant to pin.
    builder.root_certs(ureq::tls::RootCerts::Specific(std::sync::Arc::new(certs))).build()
}

/// An HTTP client that returns error statuses as answers and sends the environment's
/// credentials with every request.
pub fn agent() -> ureq::Agent {
    let auth = authorization(|k| std::env::var(k).ok())
        .and_then(|a| ureq::http::HeaderValue::from_str(&a).ok());
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(tls_config())
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

/// `ebb node decommission`: starts draining node `id` through the server at `url`.
pub fn decommission(url: &str, id: u64) -> crate::error::Result<()> {
    let mut resp = agent()
        .post(self::url(url, &format!("v1/cluster/decommission?node={id}")))
        .send_empty()
        .map_err(|e| crate::error::NodeError::Client(format!("{url}: {e}")))?;
    if resp.status().is_success() {
        return Ok(());
    }
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    let why = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(String::from))
        .unwrap_or(body);
    Err(crate::error::NodeError::Client(format!("{}: {why}", resp.status())))
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
