//! Backup destinations: a local directory (`/path`, `file:///path`) or an S3-compatible bucket
//! (`s3://bucket/prefix?endpoint=...&region=...&allow_http=true&credentials=/path`).
//!
//! Credentials never travel in the URI: they come from the environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` and the rest `object_store` reads) or from a
//! credentials file in the AWS shared-credentials form that the URI names. A URI carrying a user,
//! a password or a key parameter is refused, so no secret reaches a log, `system.queries` or a
//! set's manifest. [`Destination`]'s `Display` is what may be shown.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;

use crate::error::{AtPath, BackupError, Result};

/// Where backup sets are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Destination {
    /// A directory on a file system the server (or the CLI) sees.
    Dir(PathBuf),
    /// A bucket (and a prefix in it) of S3-compatible object storage.
    S3(S3Destination),
}

/// An S3-compatible destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Destination {
    /// The bucket.
    pub bucket: String,
    /// The prefix in the bucket ("" for the whole bucket).
    pub prefix: String,
    /// The service's address (`http://127.0.0.1:9000`, say), if not AWS's own.
    pub endpoint: Option<String>,
    /// The region, if not the environment's.
    pub region: Option<String>,
    /// Whether plain HTTP is allowed (for a store on a trusted network).
    pub allow_http: bool,
    /// A credentials file (AWS shared-credentials form), if not the environment.
    pub credentials: Option<PathBuf>,
}

/// Query parameters that would put a secret in the URI.
const SECRET_KEYS: &[&str] = &[
    "access_key_id",
    "secret_access_key",
    "aws_access_key_id",
    "aws_secret_access_key",
    "token",
    "session_token",
    "aws_session_token",
    "password",
    "secret",
];

impl Destination {
    /// Reads a destination URI.
    pub fn parse(uri: &str) -> Result<Destination> {
        let refuse = |why: &str| BackupError::Uri { uri: redact(uri), why: why.to_string() };
        let uri = uri.trim();
        if uri.is_empty() {
            return Err(refuse("empty"));
        }
        if uri.starts_with('/') {
            return Ok(Destination::Dir(PathBuf::from(uri)));
        }
        let url = url::Url::parse(uri).map_err(|e| refuse(&e.to_string()))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refuse(
                "credentials do not go in the URI: set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY in the environment or name a credentials file \
                 (credentials=/path)",
            ));
        }
        match url.scheme() {
            "file" => {
                if url.host_str().is_some_and(|h| !h.is_empty() && h != "localhost") {
                    return Err(refuse("a file URI names a local path (file:///path)"));
                }
                let path = url.to_file_path().map_err(|()| refuse("not a local path"))?;
                Ok(Destination::Dir(path))
            }
            "s3" => {
                let bucket = url.host_str().unwrap_or_default().to_string();
                if bucket.is_empty() {
                    return Err(refuse("no bucket (s3://bucket/prefix)"));
                }
                let prefix = url.path().trim_matches('/').to_string();
                let mut d = S3Destination {
                    bucket,
                    prefix,
                    endpoint: None,
                    region: None,
                    allow_http: false,
                    credentials: None,
                };
                for (k, v) in url.query_pairs() {
                    let key = k.to_ascii_lowercase();
                    if SECRET_KEYS.contains(&key.as_str()) {
                        return Err(refuse(
                            "credentials do not go in the URI: set them in the environment or \
                             name a credentials file (credentials=/path)",
                        ));
                    }
                    match key.as_str() {
                        "endpoint" => d.endpoint = Some(v.into_owned()),
                        "region" => d.region = Some(v.into_owned()),
                        "allow_http" => {
                            d.allow_http = match v.as_ref() {
                                "true" | "1" => true,
                                "false" | "0" => false,
                                _ => return Err(refuse("allow_http is true or false")),
                            }
                        }
                        "credentials" => d.credentials = Some(PathBuf::from(v.as_ref())),
                        other => {
                            return Err(refuse(&format!(
                                "unknown parameter {other:?} (endpoint, region, allow_http, \
                                 credentials)"
                            )))
                        }
                    }
                }
                Ok(Destination::S3(d))
            }
            other => Err(refuse(&format!(
                "unknown scheme {other:?}: a directory (/path or file:///path) or s3://bucket/prefix"
            ))),
        }
    }

    /// The store at this destination. `create` makes a missing directory (for a new backup);
    /// without it a missing directory is an error (nothing to read there).
    pub fn open(&self, create: bool) -> Result<Arc<dyn ObjectStore>> {
        match self {
            Destination::Dir(dir) => {
                if create {
                    crate::transfer::private_dir(dir)?;
                } else if !dir.is_dir() {
                    return Err(BackupError::Uri {
                        uri: self.to_string(),
                        why: "no such directory".into(),
                    });
                }
                let fs = LocalFileSystem::new_with_prefix(dir).map_err(|source| {
                    BackupError::Store { what: format!("opening {}", dir.display()), source }
                })?;
                Ok(Arc::new(fs))
            }
            Destination::S3(d) => {
                let mut b = AmazonS3Builder::from_env()
                    .with_bucket_name(&d.bucket)
                    .with_allow_http(d.allow_http)
                    .with_checksum_algorithm(object_store::aws::Checksum::SHA256);
                if let Some(e) = &d.endpoint {
                    b = b.with_endpoint(e);
                }
                if let Some(r) = &d.region {
                    b = b.with_region(r);
                }
                if let Some(path) = &d.credentials {
                    let c = Credentials::read(path)?;
                    b = b.with_access_key_id(c.key_id).with_secret_access_key(c.secret);
                    if let Some(t) = c.token {
                        b = b.with_token(t);
                    }
                }
                let s3 = b.build().map_err(|source| BackupError::Store {
                    what: format!("opening {self}"),
                    source,
                })?;
                if d.prefix.is_empty() {
                    Ok(Arc::new(s3))
                } else {
                    Ok(Arc::new(PrefixStore::new(s3, d.prefix.as_str())))
                }
            }
        }
    }
}

impl std::fmt::Display for Destination {
    /// The destination without anything secret (there is nothing secret in a parsed one).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Dir(d) => write!(f, "{}", d.display()),
            Destination::S3(d) => {
                write!(f, "s3://{}/{}", d.bucket, d.prefix)?;
                let mut sep = '?';
                let mut param = |f: &mut std::fmt::Formatter<'_>, k: &str, v: &str| {
                    let r = write!(f, "{sep}{k}={v}");
                    sep = '&';
                    r
                };
                if let Some(e) = &d.endpoint {
                    param(f, "endpoint", e)?;
                }
                if let Some(r) = &d.region {
                    param(f, "region", r)?;
                }
                if d.allow_http {
                    param(f, "allow_http", "true")?;
                }
                if let Some(c) = &d.credentials {
                    param(f, "credentials", &c.display().to_string())?;
                }
                Ok(())
            }
        }
    }
}

/// `uri` as it may be shown: everything after a scheme's `//` up to `@`, and every query
/// value, replaced (used for URIs that could not be parsed, so nothing in them is trusted).
pub fn redact(uri: &str) -> String {
    let mut out = uri.to_string();
    if let Some(at) = out.find('@') {
        if let Some(start) = out.find("//").filter(|s| *s < at) {
            out.replace_range(start + 2..at, "***");
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let params: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) => format!("{k}=***"),
                None => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", params.join("&"));
    }
    out
}

/// Keys read from a credentials file.
struct Credentials {
    key_id: String,
    secret: String,
    token: Option<String>,
}

impl Credentials {
    /// Reads `aws_access_key_id`, `aws_secret_access_key` and `aws_session_token` from an AWS
    /// shared-credentials file (`key = value` lines; of several profiles, `[default]` or the
    /// first).
    fn read(path: &std::path::Path) -> Result<Credentials> {
        let text = std::fs::read_to_string(path).at(path)?;
        let mut profile: Option<String> = None;
        let mut found: Vec<(Option<String>, String, String)> = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                profile = Some(name.trim().to_string());
                continue;
            }
            if let Some((k, v)) = line.split_once('=') {
                found.push((profile.clone(), k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let chosen = found
            .iter()
            .find(|(p, _, _)| p.as_deref() == Some("default"))
            .or(found.first())
            .map(|(p, _, _)| p.clone());
        let get = |key: &str| {
            found
                .iter()
                .find(|(p, k, _)| *p == chosen.clone().flatten() && k == key)
                .map(|(_, _, v)| v.clone())
        };
        let missing = |key: &str| BackupError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("no {key} in the credentials file"),
            ),
        };
        Ok(Credentials {
            key_id: get("aws_access_key_id").ok_or_else(|| missing("aws_access_key_id"))?,
            secret: get("aws_secret_access_key").ok_or_else(|| missing("aws_secret_access_key"))?,
            token: get("aws_session_token"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_and_buckets() {
        assert_eq!(Destination::parse("/b").unwrap(), Destination::Dir("/b".into()));
        assert_eq!(Destination::parse("file:///b/c").unwrap(), Destination::Dir("/b/c".into()));
        let Destination::S3(d) = Destination::parse(
            "s3://bk/some/prefix/?endpoint=http://127.0.0.1:9000&region=eu-west-1&allow_http=true",
        )
        .unwrap() else {
            panic!("an s3 destination")
        };
        assert_eq!(d.bucket, "bk");
        assert_eq!(d.prefix, "some/prefix");
        assert_eq!(d.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(d.region.as_deref(), Some("eu-west-1"));
        assert!(d.allow_http);
        assert_eq!(
            Destination::S3(d).to_string(),
            "s3://bk/some/prefix?endpoint=http://127.0.0.1:9000&region=eu-west-1&allow_http=true"
        );
    }

    #[test]
    fn secrets_in_a_uri_are_refused_and_never_shown() {
        for uri in [
            "s3://AKIA:hunter2@bk/p",
            "s3://bk/p?secret_access_key=hunter2",
            "s3://bk/p?AWS_SECRET_ACCESS_KEY=hunter2",
            "s3://bk/p?token=hunter2",
        ] {
            let e = Destination::parse(uri).unwrap_err().to_string();
            assert!(e.contains("credentials do not go in the URI"), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let e = Destination::parse("s3://bk/p?foo=hunter2").unwrap_err().to_string();
        assert!(e.contains("unknown parameter") && !e.contains("hunter2"), "{e}");
        let e = Destination::parse("gs://x:hunter2@bk").unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn a_credentials_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds");
        std::fs::write(
            &path,
            "[other]\naws_access_key_id = O\naws_secret_access_key = OS\n\n[default]\n\
             aws_access_key_id = K\naws_secret_access_key = S\n",
        )
        .unwrap();
        let c = Credentials::read(&path).unwrap();
        assert_eq!((c.key_id.as_str(), c.secret.as_str(), c.token), ("K", "S", None));
        std::fs::write(&path, "aws_access_key_id = K\n").unwrap();
        let e = Credentials::read(&path).err().expect("refused").to_string();
        assert!(e.contains("no aws_secret_access_key"), "{e}");
    }
}
