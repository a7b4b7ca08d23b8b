//! `ebb cert`: a cluster CA, and certificates it signs for nodes and client ports.
//!
//! ```text
//! ebb cert ca --dir certs                      # certs/ca.crt, certs/ca.key
//! ebb cert issue node1 --dir certs --host 127.0.0.1 --host localhost
//!                                              # certs/node1.crt, certs/node1.key
//! ```
//!
//! Every issued certificate names [`NODE_NAME`] besides the given hosts and serves both as a
//! server and a client certificate, so one file pair can be a node's cluster identity
//! (`--cluster-cert`) and its HTTP/PostgreSQL certificate (`--tls-cert`). Keys are ECDSA P-256,
//! written readable by the owner only.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::{TlsError, NODE_NAME};

fn issue_error(e: impl std::fmt::Display) -> TlsError {
    TlsError::Issue(e.to_string())
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A little slack for clocks behind this one.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
}

/// Writes `contents` to a new file `path` (never over an existing one), readable only by its
/// owner when `private`.
fn write_new(path: &Path, contents: &str, private: bool) -> Result<(), TlsError> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let io = |source| TlsError::Read { path: path.to_path_buf(), source };
    let mut f = opts.open(path).map_err(io)?;
    f.write_all(contents.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)
}

/// Creates a CA in `dir` (`ca.crt`, `ca.key`) valid for `days`. Returns the certificate's path.
pub fn make_ca(dir: &Path, days: u32) -> Result<PathBuf, TlsError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| TlsError::Read { path: dir.to_path_buf(), source })?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "EbbDB");
    name.push(DnType::CommonName, "EbbDB cluster CA");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(issue_error)?;
    let cert = params.self_signed(&key).map_err(issue_error)?;
    let (crt, pem) = (dir.join("ca.crt"), dir.join("ca.key"));
    write_new(&pem, &key.serialize_pem(), true)?;
    write_new(&crt, &cert.pem(), false)?;
    Ok(crt)
}

/// Issues `name.crt` and `name.key` in `dir`, signed by the CA there, for `hosts` (DNS names
/// or IP addresses) and [`NODE_NAME`], valid for `days`. Returns the certificate's path.
pub fn issue(dir: &Path, name: &str, hosts: &[String], days: u32) -> Result<PathBuf, TlsError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(TlsError::Issue(format!(
            "{name:?}: a certificate name is letters, digits, '-', '_' and '.'"
        )));
    }
    let read = |p: PathBuf| {
        std::fs::read_to_string(&p).map_err(|source| TlsError::Read { path: p, source })
    };
    let ca_key = KeyPair::from_pem(&read(dir.join("ca.key"))?).map_err(issue_error)?;
    let issuer =
        Issuer::from_ca_cert_pem(&read(dir.join("ca.crt"))?, ca_key).map_err(issue_error)?;
    let mut sans = vec![NODE_NAME.to_string()];
    sans.extend(hosts.iter().filter(|h| h.as_str() != NODE_NAME).cloned());
    let mut params = CertificateParams::new(sans).map_err(issue_error)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "EbbDB");
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages =
        vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    let key = KeyPair::generate().map_err(issue_error)?;
    let cert = params.signed_by(&key, &issuer).map_err(issue_error)?;
    let (crt, pem) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    write_new(&pem, &key.serialize_pem(), true)?;
    write_new(&crt, &cert.pem(), false)?;
    Ok(crt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{CertFiles, ClusterFiles, TlsSource};

    #[test]
    fn issued_certificates_load_and_verify_against_the_ca() {
        let dir = tempfile::tempdir().expect("tempdir");
        make_ca(dir.path(), 30).expect("ca");
        assert!(make_ca(dir.path(), 30).is_err(), "an existing CA is never overwritten");
        issue(dir.path(), "n1", &["127.0.0.1".into(), "localhost".into()], 30).expect("issue");
        assert!(issue(dir.path(), "../x", &[], 30).is_err());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("n1.key")).expect("key").permissions();
            assert_eq!(mode.mode() & 0o077, 0, "keys are private");
        }
        let node = CertFiles { cert: dir.path().join("n1.crt"), key: dir.path().join("n1.key") };
        TlsSource::clients("HTTP", &node, &[b"http/1.1"]).expect("client port TLS");
        let files = ClusterFiles { ca: dir.path().join("ca.crt"), node: node.clone() };
        TlsSource::cluster(&files).expect("cluster TLS");
        // A key that is not the certificate's is refused.
        issue(dir.path(), "n2", &[], 30).expect("issue");
        let mixed = CertFiles { cert: node.cert.clone(), key: dir.path().join("n2.key") };
        assert!(TlsSource::clients("HTTP", &mixed, &[]).is_err());
    }
}
