//! The Trust Anchor: an in-memory CA that
//! lives as long as the coordinator, a server certificate for the
//! coordinator's end of the Escalation Socket, and one short-lived client
//! certificate per sandbox whose URI SAN names the profile and sandbox id.
//! The client credentials are written to a memory-backed directory that is
//! bind-mounted read-only into the sandbox.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lazaret_protocol::escalation::paths;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::{Context, Result};

/// The CA's, the coordinator's and the sandboxes' certificates expire after
/// this long (`CREDENTIAL_LIFETIME_MS`); the CA exists only in this
/// coordinator's memory, so none outlives the domain in practice.
const CERTIFICATE_LIFETIME: time::Duration = time::Duration::milliseconds(lazaret_protocol::escalation::CREDENTIAL_LIFETIME_MS as i64);

/// The URI SAN of a sandbox's client certificate.
pub fn sandbox_identity(profile: &str, domain_hash: &str, sandbox_id: &str) -> String {
    format!("lazaret://sandbox/{profile}/{domain_hash}/{sandbox_id}")
}

pub struct TrustAnchor {
    ca_certificate: CertificateDer<'static>,
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// What the sandbox needs, as PEM.
pub struct ClientCredentials {
    pub certificate_pem: String,
    pub key_pem: String,
}

impl TrustAnchor {
    pub fn generate() -> Result<TrustAnchor> {
        let key = KeyPair::generate().context("cannot generate the CA key")?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "Lazaret Trust Anchor");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + CERTIFICATE_LIFETIME + time::Duration::hours(1);
        let certificate = params.self_signed(&key).context("cannot sign the CA certificate")?;
        Ok(TrustAnchor { ca_certificate: certificate.der().clone(), ca_pem: certificate.pem(), issuer: Issuer::new(params, key) })
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The coordinator's certificate (server name [`paths::SERVER_NAME`]).
    fn server_certificate(&self) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>)> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![paths::SERVER_NAME.to_owned()])?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + CERTIFICATE_LIFETIME;
        let certificate = params.signed_by(&key, &self.issuer)?;
        Ok((certificate.der().clone(), PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()))))
    }

    /// A client certificate whose only SAN is `identity`.
    pub fn client_credentials(&self, identity: &str) -> Result<ClientCredentials> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = vec![SanType::URI(identity.try_into().context("bad identity URI")?)];
        params.distinguished_name.push(DnType::CommonName, "lazaret sandbox");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(5);
        params.not_after = now + CERTIFICATE_LIFETIME;
        let certificate = params.signed_by(&key, &self.issuer)?;
        Ok(ClientCredentials { certificate_pem: certificate.pem(), key_pem: key.serialize_pem() })
    }

    /// TLS 1.3 server configuration that requires a client certificate
    /// signed by this CA (identity checked after the handshake).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_certificate.clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .context("cannot build the client verifier")?;
        let (certificate, key) = self.server_certificate()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![certificate], key)?;
        // Each `lazaret-escalate` is a new process with one connection: it
        // cannot resume, so tickets would be work on both sides for nothing
        // (and one more flight for the client to read).
        config.send_tls13_tickets = 0;
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        Ok(Arc::new(config))
    }
}

/// The directory of the sandbox's TLS files: `tls` in the domain's socket
/// directory, which is the user's own (0700, in the private socket root).
/// It was `/dev/shm/lazaret-<uid>/<hash>`, which any local user could create
/// first and so stop every start of this user's domains (issue 33, the
/// class of hole DECISIONS D12 closed for the lockfile). The runtime
/// directory is a tmpfs where a login manager makes it (`/run/user/<uid>`).
pub fn credentials_directory(socket_dir: &Path) -> PathBuf {
    socket_dir.join("tls")
}

/// Where the sandbox finds the credentials directory, and the bundle's name
/// in it: both from `paths::CLIENT_BUNDLE`, which the client reads.
pub fn bundle_location() -> (&'static str, &'static str) {
    paths::CLIENT_BUNDLE.rsplit_once('/').unwrap_or(("/", "bundle.pem"))
}

/// Writes `bundle.pem` (`paths::CLIENT_BUNDLE`: the client's key, its
/// certificate, the CA certificate) into `dir`, which only this user can
/// enter.
pub fn write_credentials(dir: &Path, ca_pem: &str, client: &ClientCredentials) -> Result<()> {
    if let Some(parent) = dir.parent() {
        crate::private_dirs::ensure_private_dir(parent)?;
    }
    crate::private_dirs::ensure_private_dir(dir)?;
    // The sandbox reads it as its own (mapped) root; in rootless mode the
    // container root is the host user, so the directory can stay 0700.
    let bundle: String =
        [client.key_pem.as_str(), client.certificate_pem.as_str(), ca_pem].iter().map(|pem| format!("{}\n", pem.trim_end())).collect();
    let path = dir.join(bundle_location().1);
    crate::private_dirs::write_private(&path, bundle.as_bytes())?;
    Ok(())
}

/// The URI SANs of a DER certificate.
pub fn uri_sans(certificate: &[u8]) -> Vec<String> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(certificate) else { return Vec::new() };
    let Ok(Some(extension)) = parsed.subject_alternative_name() else { return Vec::new() };
    extension
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            x509_parser::extensions::GeneralName::URI(uri) => Some((*uri).to_owned()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_certificates_carry_the_sandbox_identity() {
        let anchor = TrustAnchor::generate().expect("ca");
        let identity = sandbox_identity("claude", "0123456789ab", "abcd");
        let credentials = anchor.client_credentials(&identity).expect("client");
        let der = CertificateDer::from_pem_slice(credentials.certificate_pem.as_bytes()).expect("pem");
        assert_eq!(uri_sans(&der), vec![identity]);
        anchor.server_config().expect("server config");
        // Valid for the credential lifetime (30 days), not 24 h.
        let (_, parsed) = x509_parser::parse_x509_certificate(der.as_ref()).expect("x509");
        let days = (parsed.validity().not_after.timestamp() - time::OffsetDateTime::now_utc().unix_timestamp()) / 86_400;
        assert!((29..=30).contains(&days), "client certificate valid for {days} days");
    }

    #[test]
    fn the_bundle_holds_the_key_then_the_client_certificate_then_the_ca() {
        let anchor = TrustAnchor::generate().expect("ca");
        let credentials = anchor.client_credentials(&sandbox_identity("claude", "0123456789ab", "abcd")).expect("client");
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = dir.path().join("tls");
        write_credentials(&tls, anchor.ca_pem(), &credentials).expect("write");
        assert_eq!(bundle_location(), ("/run/lazaret/tls", "bundle.pem"));
        let bundle = std::fs::read(tls.join("bundle.pem")).expect("bundle");
        let key = PrivateKeyDer::from_pem_slice(&bundle).expect("key");
        assert_eq!(key.secret_der(), PrivateKeyDer::from_pem_slice(credentials.key_pem.as_bytes()).expect("key").secret_der());
        let certificates: Vec<CertificateDer> =
            CertificateDer::pem_slice_iter(&bundle).collect::<std::result::Result<_, _>>().expect("pem");
        let expected = [credentials.certificate_pem.as_str(), anchor.ca_pem()]
            .map(|pem| CertificateDer::from_pem_slice(pem.as_bytes()).expect("certificate"));
        assert_eq!(certificates, expected.to_vec());
        assert_eq!(std::fs::read_dir(&tls).expect("dir").count(), 1, "one file");
    }

    use rustls::pki_types::pem::PemObject;
}
