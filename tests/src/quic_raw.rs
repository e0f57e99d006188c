//! Raw QUIC streams to a server's QUIC listener, for tests that must send what the official
//! client never sends. The server's certificate is accepted unchecked (loopback tests only).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::ring;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Accepts any server certificate; signatures are still checked by the provider.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A QUIC connection to `address` (a `127.0.0.1:port` string).
pub async fn connect(address: &str) -> anyhow::Result<quinn::Connection> {
    let provider = Arc::new(ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let server: SocketAddr = address.parse()?;
    Ok(endpoint.connect(server, "localhost")?.await?)
}

/// Sends `bytes` on a new stream, finishes it, and reads the answer to its end; `None`
/// when the server reset or stopped the stream, closed the connection or did not answer
/// within 10 s.
pub async fn exchange(connection: &quinn::Connection, bytes: &[u8]) -> Option<Vec<u8>> {
    let round = async {
        let (mut send, mut recv) = connection.open_bi().await.ok()?;
        send.write_all(bytes).await.ok()?;
        send.finish().ok()?;
        recv.read_to_end(64 << 20).await.ok()
    };
    tokio::time::timeout(Duration::from_secs(10), round).await.ok().flatten()
}
