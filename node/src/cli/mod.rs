//! Command-line clients of a running server (over its HTTP API).

pub mod audit;
pub mod import;
pub mod sql;

/// Joins a base URL and a path.
pub fn url(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}
