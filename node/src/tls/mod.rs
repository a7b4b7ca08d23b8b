//! TLS: server-authenticated TLS on the client ports (HTTP, PostgreSQL) and mutual TLS on the
//! cluster port (gRPC), both with rustls and the `ring` provider.
//!
//! A [`TlsSource`] holds the server configuration built from PEM files. [`watch`] rebuilds it
//! when a file changes (checked every few seconds) or on `SIGHUP`; every new connection takes
//! the configuration current when it arrives, so a renewed certificate (cert-manager rotates
//! them in place) is served without a restart, and a broken file keeps the previous one.
//!
//! - [`conn`]: the accept loop shared by HTTP and gRPC (handshakes off the accept path, a
//!   connection limit).
//! - [`cluster`]: what the cluster port checks besides the certificate: the cluster id every
//!   request carries.
//! - [`issue`]: `ebb cert`, a cluster CA and certificates signed by it.

pub mod cluster;
pub mod conn;
pub mod issue;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, RwLock};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The name every node certificate carries and every node verifies its peers against: nodes
/// are reached at many addresses (pod IPs, service names), and what makes a peer a member is
/// the cluster CA's signature.
pub const NODE_NAME: &str = "ebb-node";

/// What went wrong loading TLS files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM item of the kind needed.
    #[error("{path} holds no {what} (PEM)")]
    Missing {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
    },
    /// rustls refused the key, the certificate or the CA.
    #[error("{what}: {source}")]
    Rejected {
        /// What was being loaded.
        what: String,
        /// Why.
        source: rustls::Error,
    },
    /// Making a certificate failed.
    #[error("making a certificate: {0}")]
    Issue(String),
}

/// A certificate chain and its key, in PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate chain (the server's first).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// What the cluster port needs: the node's certificate and the CA that signs every member's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFiles {
    /// The cluster CA certificate (PEM).
    pub ca: PathBuf,
    /// This node's certificate and key, signed by the CA.
    pub node: CertFiles,
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_path_buf(), source })
}

/// The certificates of a PEM file.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem).filter_map(|c| c.ok()).collect();
    if certs.is_empty() {
        return Err(TlsError::Missing { path: path.to_path_buf(), what: "certificate" });
    }
    Ok(certs)
}

pub(crate) fn certified_key(files: &CertFiles) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = certificates(&files.cert)?;
    let pem = read(&files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|_| TlsError::Missing { path: files.key.clone(), what: "private key" })?;
    CertifiedKey::from_der(chain, key, &provider()).map(Arc::new).map_err(|source| {
        TlsError::Rejected {
            what: format!("{} with {}", files.cert.display(), files.key.display()),
            source,
        }
    })
}

fn roots(ca: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in certificates(ca)? {
        roots
            .add(c)
            .map_err(|source| TlsError::Rejected { what: ca.display().to_string(), source })?;
    }
    Ok(Arc::new(roots))
}

#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl rustls::server::ResolvesServerCert for FixedCert {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Which server configuration a [`TlsSource`] builds.
#[derive(Debug, Clone)]
enum Role {
    /// Clients authenticate with passwords or tokens; any client may connect.
    Clients { files: CertFiles, alpn: Vec<Vec<u8>> },
    /// Peers must present a certificate the cluster CA signed.
    Cluster(ClusterFiles),
}

impl Role {
    fn paths(&self) -> Vec<PathBuf> {
        match self {
            Role::Clients { files, .. } => vec![files.cert.clone(), files.key.clone()],
            Role::Cluster(c) => vec![c.ca.clone(), c.node.cert.clone(), c.node.key.clone()],
        }
    }

    fn build(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rejected { what: "TLS versions".into(), source })?;
        let mut config = match self {
            Role::Clients { files, alpn } => {
                let mut c = builder
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::new(FixedCert(certified_key(files)?)));
                c.alpn_protocols.clone_from(alpn);
                c
            }
            Role::Cluster(files) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(roots(&files.ca)?, provider())
                        .build()
                        .map_err(|e| TlsError::Issue(format!("client verifier: {e}")))?;
                let mut c = builder
                    .with_client_cert_verifier(verifier)
                    .with_cert_resolver(Arc::new(FixedCert(certified_key(&files.node)?)));
                c.alpn_protocols = vec![b"h2".to_vec()];
                c
            }
        };
        config.ignore_client_order = true;
        Ok(Arc::new(config))
    }
}

/// A TLS server configuration from files, rebuilt when they change.
#[derive(Debug)]
pub struct TlsSource {
    name: &'static str,
    role: Role,
    current: RwLock<Arc<ServerConfig>>,
    stamps: Mutex<Vec<Option<SystemTime>>>,
}

fn stamps(paths: &[PathBuf]) -> Vec<Option<SystemTime>> {
    paths.iter().map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()).collect()
}

impl TlsSource {
    /// TLS for a client port (`name` names it in logs), offering the `alpn` protocols.
    pub fn clients(
        name: &'static str,
        files: &CertFiles,
        alpn: &[&[u8]],
    ) -> Result<Arc<TlsSource>, TlsError> {
        let alpn = alpn.iter().map(|p| p.to_vec()).collect();
        Self::new(name, Role::Clients { files: files.clone(), alpn })
    }

    /// Mutual TLS for the cluster port.
    pub fn cluster(files: &ClusterFiles) -> Result<Arc<TlsSource>, TlsError> {
        Self::new("gRPC", Role::Cluster(files.clone()))
    }

    fn new(name: &'static str, role: Role) -> Result<Arc<TlsSource>, TlsError> {
        let stamps = Mutex::new(stamps(&role.paths()));
        let current = RwLock::new(role.build()?);
        Ok(Arc::new(TlsSource { name, role, current, stamps }))
    }

    /// The configuration for a connection arriving now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().clone())
    }

    /// Rebuilds the configuration from the files. On failure the previous one stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = stamps(&self.role.paths());
        let config = self.role.build()?;
        *self.current.write() = config;
        *self.stamps.lock() = fresh;
        Ok(())
    }

    /// True if a file changed since the configuration was last built.
    fn changed(&self) -> bool {
        *self.stamps.lock() != stamps(&self.role.paths())
    }

    /// Reloads and logs the outcome; true if the new files are in service.
    fn reload_logged(&self, why: &str) -> bool {
        match self.reload() {
            Ok(()) => {
                tracing::info!(port = self.name, why, "TLS certificate reloaded");
                true
            }
            Err(e) => {
                // Keep the failed files' stamps so the error is not logged every poll.
                *self.stamps.lock() = stamps(&self.role.paths());
                tracing::error!(port = self.name, why, error = %e,
                    "TLS files changed but cannot be loaded; still serving the previous certificate");
                false
            }
        }
    }
}

/// How often [`watch`] looks at the files.
pub const POLL: Duration = Duration::from_secs(5);

/// Reloads each source when its files change or the process receives `SIGHUP`; `after` runs
/// after every successful reload (this node's connections to the others then present the
/// renewed certificate; after a failed one they keep the previous).
pub async fn watch(
    sources: Vec<Arc<TlsSource>>,
    after: impl Fn() + Send + 'static,
    stop: impl std::future::Future<Output = ()>,
) {
    if sources.is_empty() {
        return;
    }
    tokio::pin!(stop);
    #[cfg(unix)]
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        #[cfg(unix)]
        let hangup = async {
            match hup.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let hangup = std::future::pending::<()>();
        let forced = tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => false,
            () = hangup => true,
        };
        let mut any = false;
        for s in &sources {
            if forced || s.changed() {
                any |= s.reload_logged(if forced { "SIGHUP" } else { "files changed" });
            }
        }
        if any {
            after();
        }
    }
}
