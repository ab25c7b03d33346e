//! Building rustls configurations from PEM files: the client side toward brokers (trusted CAs,
//! optional client certificate, hostname verification on by default) and the server side for the
//! proxy's listeners (certificate chain and key, optional client CA for mutual TLS). TLS 1.2 and
//! 1.3 only, ring as the crypto provider. Also the RFC 4514 subject of a peer certificate, the
//! principal of a mutual-TLS connection. Reloading on file changes belongs to the proxy.

use std::path::Path;
use std::sync::Arc;

use kmp_config::{ClientSecurityProps, KeyStore, PemSource, TlsServerConfig};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

/// A TLS setup failure (unreadable file, bad PEM, unusable key). Never contains key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("TLS: {0}")]
pub struct TlsError(pub String);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

fn certs_from(src: &PemSource, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Result<Vec<_>, _> = match src {
        PemSource::File(p) => CertificateDer::pem_file_iter(p)
            .map_err(|e| TlsError(format!("cannot read {what} {}: {e}", p.display())))?
            .collect(),
        PemSource::Inline(text) => CertificateDer::pem_slice_iter(text.as_bytes()).collect(),
    };
    let certs = certs.map_err(|e| TlsError(format!("{what}: bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError(format!("{what} holds no CERTIFICATE block")));
    }
    Ok(certs)
}

/// Certificates in a PEM file.
pub fn certs_file(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    certs_from(&PemSource::File(path.to_owned()), what)
}

fn key_from_slice(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|_| TlsError(format!("{what} holds no usable unencrypted private key (PKCS#8, PKCS#1 or SEC1 PEM)")))
}

/// The private key in a PEM file.
pub fn key_file(path: &Path, what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| TlsError(format!("cannot read {what} {}: {e}", path.display())))?;
    key_from_slice(&pem, what)
}

fn roots(certs: Vec<CertificateDer<'static>>, what: &str) -> Result<Arc<RootCertStore>, TlsError> {
    let mut store = RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsError(format!("{what}: no usable CA certificate")));
    }
    Ok(Arc::new(store))
}

/// The client configuration for broker connections described by `props` (which must be SSL or
/// SASL_SSL).
pub fn client_config(props: &ClientSecurityProps) -> Result<Arc<ClientConfig>, TlsError> {
    let ca = props
        .truststore
        .as_ref()
        .ok_or_else(|| TlsError("no truststore (ssl.truststore.location) given".into()))?;
    let roots = roots(certs_from(ca, "ssl.truststore")?, "ssl.truststore")?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = if props.verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = WebPkiServerVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| TlsError(e.to_string()))?;
        builder.dangerous().with_custom_certificate_verifier(Arc::new(NoHostnameCheck(inner)))
    };
    let config = match &props.keystore {
        None => builder.with_no_client_auth(),
        Some(ks) => {
            let (chain, key) = match ks {
                KeyStore::Combined(p) => (certs_file(p, "ssl.keystore.location")?, key_file(p, "ssl.keystore.location")?),
                KeyStore::Separate { chain, key } => {
                    let key_pem = key.resolve().map_err(TlsError)?;
                    (
                        certs_from(chain, "ssl.keystore.certificate.chain")?,
                        key_from_slice(key_pem.as_bytes(), "ssl.keystore.key")?,
                    )
                }
            };
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError(format!("client certificate and key do not fit: {e}")))?
        }
    };
    Ok(Arc::new(config))
}

/// The client configuration for an `https://` identity-provider endpoint (OAuth token endpoint,
/// JWKS): the system's CA certificates, plus `extra` (a cluster's truststore or a configured CA
/// file) when given. Host names are always checked.
pub fn https_client_config(extra: Option<&PemSource>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut certs: Vec<CertificateDer<'static>> = rustls_native_certs::load_native_certs().certs;
    if let Some(src) = extra {
        certs.extend(certs_from(src, "CA certificates for the identity provider")?);
    }
    let roots = roots(certs, "CA certificates for the identity provider (the system's and the configured ones)")?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| TlsError(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The server configuration of a listener (`[listener.tls]` or `[admin.tls]`), read from its files
/// now. `alpn`: protocols to offer (empty for Kafka).
pub fn server_config(tls: &TlsServerConfig, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
    let read = |path: &Path, what: &str| std::fs::read(path).map_err(|e| TlsError(format!("cannot read {what} {}: {e}", path.display())));
    let pem = ServerPem {
        cert: read(&tls.cert_file, "cert_file")?,
        key: read(&tls.key_file, "key_file")?,
        client_ca: tls.client_ca_file.as_deref().map(|ca| read(ca, "client_ca_file")).transpose()?,
    };
    server_config_from_pem(&pem, alpn)
}

/// The PEM texts of a listener's certificate chain, private key and (mutual TLS) client CA, read
/// by the caller (the proxy reads them off its runtime, size-capped).
#[derive(Clone, PartialEq, Eq)]
pub struct ServerPem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub client_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for ServerPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        write!(
            f,
            "ServerPem {{ cert: {} bytes, key: {} bytes, client_ca: {:?} }}",
            self.cert.len(),
            self.key.len(),
            self.client_ca.as_ref().map(Vec::len)
        )
    }
}

/// The server configuration built from PEM texts already read (see [`server_config`]).
pub fn server_config_from_pem(pem: &ServerPem, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = |text: &[u8], what: &str| {
        let certs = CertificateDer::pem_slice_iter(text)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError(format!("{what}: bad PEM: {e}")))?;
        if certs.is_empty() {
            return Err(TlsError(format!("{what} holds no CERTIFICATE block")));
        }
        Ok(certs)
    };
    let chain = certs(&pem.cert, "cert_file")?;
    let key = key_from_slice(&pem.key, "key_file")?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match &pem.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = roots(certs(ca, "client_ca_file")?, "client_ca_file")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| TlsError(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError(format!("cert_file and key_file do not fit: {e}")))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// The server name to verify a broker at `addr` (`host:port`) against.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, TlsError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|_| TlsError(format!("`{host}` is not a valid TLS server name")))
}

/// The subject of a DER certificate as an RFC 4514 string (`CN=app,O=example`: most specific
/// attribute first, like Kafka's default SSL principal), or `None` if it does not parse.
pub fn subject_name(cert: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|a| {
                    let key = x509_parser::objects::oid2abbrev(a.attr_type(), registry).map_or_else(|_| a.attr_type().to_id_string(), str::to_owned);
                    let value = a.as_str().map_or_else(|_| "#".to_owned(), escape_dn_value);
                    format!("{key}={value}")
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Some(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

fn escape_dn_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, c) in v.chars().enumerate() {
        if matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') || (i == 0 && matches!(c, '#' | ' ')) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Verifies the chain but not the host name (`ssl.endpoint.identification.algorithm=`).
#[derive(Debug)]
struct NoHostnameCheck(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for NoHostnameCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
