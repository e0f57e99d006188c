//! TLS configuration shared by every transport (TCP, WebSocket, QUIC, HTTP) and the replica
//! plane, which also dials: its client side trusts a CA file, or any certificate when the
//! cluster runs on self-signed ones (the pre-shared-key handshake inside then authenticates).
//!
//! The one rule for certificates: a transport uses the certificate and key files its config
//! names; with none named (or `self_signed = true`) it uses the server's self-signed
//! certificate, generated once per start for `localhost` and the listen address, and written
//! to `<data>/runtime/certs/self_signed_cert.pem` so local clients can trust it.
//!
//! `split` divides an accepted TLS stream into a reader and a writer usable from different
//! tasks, so a transport writes replies while it waits for the next request.

mod split;

pub use split::{TlsReader, TlsWriter, split};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate chain and its key, ready for a rustls server.
#[derive(Debug)]
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Self { chain: self.chain.clone(), key: self.key.clone_key() }
    }
}

/// Loads a PEM certificate chain and private key.
pub fn load(cert_file: &Path, key_file: &Path) -> Result<Identity, String> {
    let chain: Result<Vec<_>, _> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|error| format!("cannot read certificate {}: {error}", cert_file.display()))?
        .collect();
    let chain = chain.map_err(|error| format!("certificate {} is not valid PEM: {error}", cert_file.display()))?;
    if chain.is_empty() {
        return Err(format!("certificate {} holds no certificate", cert_file.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|error| format!("cannot read private key {}: {error}", key_file.display()))?;
    Ok(Identity { chain, key })
}

/// A self-signed certificate for `names`, kept in memory only.
pub fn generate(names: &[String]) -> Result<Identity, String> {
    generate_with_pem(names).map(|(identity, _)| identity)
}

/// A self-signed certificate for `names`, and its certificate as PEM.
fn generate_with_pem(names: &[String]) -> Result<(Identity, String), String> {
    let certified = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|error| format!("cannot generate a self-signed certificate: {error}"))?;
    let key = PrivateKeyDer::try_from(certified.signing_key.serialize_der())
        .map_err(|error| format!("self-signed key: {error}"))?;
    Ok((Identity { chain: vec![certified.cert.der().clone()], key }, certified.cert.pem()))
}

/// Generates the self-signed certificate for `names` and writes its PEM under `data_path`.
pub fn self_signed(names: &[String], data_path: &Path) -> Result<(Identity, PathBuf), String> {
    let (identity, pem) = generate_with_pem(names)?;
    let dir = data_path.join("runtime").join("certs");
    std::fs::create_dir_all(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    let cert_path = dir.join("self_signed_cert.pem");
    std::fs::write(&cert_path, pem).map_err(|error| format!("cannot write {}: {error}", cert_path.display()))?;
    Ok((identity, cert_path))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A rustls server configuration without client authentication. `alpn` lists the
/// protocols to offer (none for Iggy's transports).
pub fn server_config(identity: &Identity, alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, String> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS protocol versions: {error}"))?
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|error| format!("TLS certificate: {error}"))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// Whom a dialing side trusts.
#[derive(Debug, Clone)]
pub enum Trust {
    /// The certificates of a PEM file of trust anchors.
    CaFile(PathBuf),
    /// Any certificate: for peers on self-signed certificates, which something else inside
    /// the connection authenticates (the replica plane's key handshake).
    AnyCertificate,
}

/// Accepts every certificate, and still checks that the peer signed the handshake with the
/// key of the certificate it sent.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A rustls client configuration offering `alpn`, trusting `trust`.
pub fn client_config(trust: &Trust, alpn: &[&[u8]]) -> Result<Arc<rustls::ClientConfig>, String> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS protocol versions: {error}"))?;
    let mut config = match trust {
        Trust::AnyCertificate => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth(),
        Trust::CaFile(path) => {
            let mut roots = rustls::RootCertStore::empty();
            let certificates = CertificateDer::pem_file_iter(path)
                .map_err(|error| format!("cannot read CA file {}: {error}", path.display()))?;
            for certificate in certificates {
                let certificate = certificate.map_err(|error| format!("CA file {}: {error}", path.display()))?;
                roots.add(certificate).map_err(|error| format!("CA file {}: {error}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("CA file {} holds no certificate", path.display()));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_certificates_load_back() {
        let dir = std::env::temp_dir().join(format!("rill-tls-{}", std::process::id()));
        let (identity, cert_path) = self_signed(&["localhost".into(), "127.0.0.1".into()], &dir).unwrap();
        assert!(server_config(&identity, &[]).is_ok());
        let key_path = dir.join("key.pem");
        std::fs::write(&key_path, rcgen_key_pem(&identity)).unwrap();
        let loaded = load(&cert_path, &key_path).unwrap();
        assert_eq!(loaded.chain, identity.chain);
        assert!(load(&dir.join("missing.pem"), &key_path).unwrap_err().contains("missing.pem"));
        assert!(client_config(&Trust::CaFile(cert_path.clone()), &[b"x"]).is_ok());
        assert!(client_config(&Trust::AnyCertificate, &[]).is_ok());
        assert!(client_config(&Trust::CaFile(key_path.clone()), &[]).unwrap_err().contains("no certificate"));
        let _ = std::fs::remove_dir_all(dir);
    }

    fn rcgen_key_pem(identity: &Identity) -> String {
        let der = identity.key.secret_der();
        let body: String = base64_lines(der);
        format!("-----BEGIN PRIVATE KEY-----\n{body}-----END PRIVATE KEY-----\n")
    }

    /// Standard base64 in 64-character lines (only for the test's PEM round trip).
    fn base64_lines(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut text = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
            for i in 0..4 {
                text.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
            }
        }
        text.as_bytes().chunks(64).map(|line| format!("{}\n", String::from_utf8_lossy(line))).collect()
    }
}
