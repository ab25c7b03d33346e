//! Client-facing security settings: TLS on the Kafka listeners and the admin endpoint
//! (`[listener.tls]`, `[admin.tls]`) and who authenticates clients (`[listener.auth]`). Pure data;
//! building TLS acceptors and answering SASL belong to `proxy`.

use std::path::PathBuf;

use serde::Deserialize;

/// Server-side TLS (`[listener.tls]`, `[admin.tls]`). TLS 1.2 and 1.3 only.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// PEM file with the server certificate first, then its intermediates. Required.
    pub cert_file: PathBuf,
    /// PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1; unencrypted).
    /// Required. A secret: the file is read, never logged.
    pub key_file: PathBuf,
    /// PEM file of CA certificates that client certificates must chain to. Set: every client
    /// must present a valid certificate (mutual TLS) and its subject (RFC 4514 distinguished
    /// name, e.g. `CN=app,O=example`) becomes the connection's principal. Default: unset, no
    /// client certificates asked for.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Milliseconds between checks of the three files' modification times; a change loads them
    /// anew for new connections (open connections keep theirs). SIGHUP reloads at once. 0 turns
    /// the polling off. Default 10000.
    #[serde(default = "default_reload")]
    pub reload_interval_ms: u64,
}

fn default_reload() -> u64 {
    10_000
}

/// How clients authenticate (`[listener.auth]`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClientAuthConfig {
    /// `passthrough` (default): the client's own SASL exchange reaches the broker, which decides;
    /// the proxy only watches it to learn the principal. `terminate`: the proxy authenticates
    /// clients itself (SASL against `credentials_file`, or the mutual-TLS identity) and
    /// authenticates to the brokers with `[upstream.properties]`.
    pub mode: AuthMode,
    /// Terminate mode: SASL mechanisms offered to clients (`PLAIN`, `SCRAM-SHA-256`,
    /// `SCRAM-SHA-512`, `OAUTHBEARER`). Empty: clients authenticate by their TLS certificate only
    /// (`[listener.tls] client_ca_file` must be set). Default `["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]`.
    pub mechanisms: Vec<String>,
    /// Terminate mode: how `OAUTHBEARER` logins are checked (`[listener.auth.oauthbearer]`:
    /// the identity provider's JWKS, expected audience and issuer). Required when `mechanisms`
    /// offers `OAUTHBEARER`. Default: unset.
    pub oauthbearer: Option<crate::OAuthValidationConfig>,
    /// Terminate mode: TOML file of users with salted SCRAM credentials (never passwords; create
    /// entries with `kafka-mirror-proxy scram-credential`). PLAIN logins are checked against the
    /// same salted credentials. Re-read when it changes (with the TLS files' reload interval, or
    /// every 10 s without TLS) and on SIGHUP. Required when `mechanisms` offers PLAIN or SCRAM.
    pub credentials_file: Option<PathBuf>,
    /// Terminate mode: the largest request frame a client may send before it has authenticated
    /// (Kafka's `sasl.server.max.receive.size`); a larger one closes the connection. Default
    /// 524288 (512 KiB).
    pub max_receive_bytes: u32,
    /// Terminate mode: how long a client may take from connecting to having authenticated; then
    /// the connection is closed. Default 10000 ms.
    pub timeout_ms: u64,
    /// Terminate mode: milliseconds a client's SASL login holds (Kafka's
    /// `connections.max.reauth.ms`, KIP-368): the proxy tells clients the lifetime in its
    /// SaslAuthenticate answer, clients that support re-authentication (Kafka's Java client,
    /// librdkafka) log in again on the connection before it ends, and a connection that sends
    /// any other request after its session ended is closed. 0 (default): sessions never end.
    pub session_lifetime_ms: u64,
    /// Terminate mode: principals (`User:name` or the bare user name, or a certificate subject)
    /// that may use the security-administration APIs through the proxy — delegation tokens,
    /// SCRAM credentials, ACLs, client quotas, features and broker registration. Every client
    /// reaches the brokers with the proxy's own identity, so for anyone else those APIs would act
    /// as the proxy; they are refused. Default: none.
    pub admin_principals: Vec<String>,
}

/// Kafka's `sasl.server.max.receive.size` default.
pub const DEFAULT_MAX_RECEIVE_BYTES: u32 = 512 * 1024;

impl Default for ClientAuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::Passthrough,
            mechanisms: vec!["SCRAM-SHA-512".into(), "SCRAM-SHA-256".into(), "PLAIN".into()],
            credentials_file: None,
            oauthbearer: None,
            max_receive_bytes: DEFAULT_MAX_RECEIVE_BYTES,
            timeout_ms: 10_000,
            session_lifetime_ms: 0,
            admin_principals: Vec::new(),
        }
    }
}

/// See [`ClientAuthConfig::mode`].
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    #[default]
    Passthrough,
    Terminate,
}
