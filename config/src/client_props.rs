//! Kafka client properties for the proxy's own connections (to the destination: `[upstream.properties]`;
//! to a mirror's source: `[mirrors.source_properties]` or CreateClusterMirror configs), under
//! Kafka's own names: `security.protocol`, `ssl.*`, `sasl.*`. This module parses and validates them
//! into [`ClientSecurityProps`] — pure data, paths and secret references unresolved. Building TLS
//! configurations, reading files and talking SASL belong to `kmp_protocol::security`.
//!
//! Secrets (`sasl.password`, `sasl.jaas.config`, `ssl.keystore.key`) are given inline (config file
//! only) or by reference: `file:/path` (the file's content, trailing newline removed) or
//! `env:NAME`. Mirrors created through the APIs must use references, so nothing secret is ever
//! stored in the state topic.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where the OAUTHBEARER properties begin in [`CLIENT_SECURITY_KEYS`] (`crate::OAUTH_CLIENT_KEYS`).
pub(crate) const FIRST_OAUTH_KEY: usize = 14;

/// Property names understood here (anything else under these prefixes is refused).
pub const CLIENT_SECURITY_KEYS: &[&str] = &[
    "security.protocol",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.jaas.config",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.header.urlencode",
    "sasl.login.callback.handler.class",
];

/// Properties whose values are secrets: never logged, returned or stored in clear.
pub const SENSITIVE_KEYS: &[&str] = &[
    "sasl.password",
    "sasl.jaas.config",
    "ssl.keystore.key",
    "ssl.key.password",
    "sasl.oauthbearer.client.credentials.client.secret",
];

/// Whether `key` names a secret (see [`SENSITIVE_KEYS`]).
pub fn is_sensitive(key: &str) -> bool {
    SENSITIVE_KEYS.contains(&key)
}

/// Whether `key` is one of the client security properties ([`CLIENT_SECURITY_KEYS`]).
pub fn is_client_security_key(key: &str) -> bool {
    CLIENT_SECURITY_KEYS.contains(&key)
}

/// A property map (`name → value`) under Kafka's names. `Debug` hides the values of secrets;
/// [`ClientProperties::for_storage`] drops inline secrets before anything is persisted.
#[derive(Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct ClientProperties(pub BTreeMap<String, String>);

/// What an inline secret is replaced with when a definition is stored or shown.
pub const REDACTED: &str = "<redacted>";

impl std::fmt::Debug for ClientProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, if is_sensitive(k) { REDACTED } else { v.as_str() })))
            .finish()
    }
}

impl ClientProperties {
    /// Whether no property is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A copy safe to store or show: inline secrets become [`REDACTED`]; references
    /// (`file:`/`env:`) stay, they name where the secret lives, not the secret.
    pub fn for_storage(&self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| {
                    let keep = !is_sensitive(k) || !SecretRef::parse(v.trim()).is_inline();
                    (k.clone(), if keep { v.clone() } else { REDACTED.to_owned() })
                })
                .collect(),
        )
    }

    /// A copy to show to users: every secret value, reference or not, is [`REDACTED`].
    pub fn for_display(&self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), if is_sensitive(k) { REDACTED.to_owned() } else { v.clone() }))
                .collect(),
        )
    }

    /// Parses the properties (see [`parse_client_props`]).
    pub fn parse(&self, origin: PropsOrigin) -> Result<ClientSecurityProps, Vec<String>> {
        parse_client_props(&self.0, origin)
    }
}

/// Kafka's `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecurityProtocol {
    #[default]
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    /// Whether the transport is TLS.
    pub fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }
    /// Whether SASL authentication follows the connect.
    pub fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
    /// Kafka's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }
}

/// A SASL mechanism the proxy speaks (client side toward brokers, server side in termination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    /// RFC 7628 bearer tokens (KIP-255): a client-credentials token toward clusters, JWTs checked
    /// against a JWKS in termination mode.
    OAuthBearer,
}

impl SaslMechanism {
    /// Parses Kafka's mechanism name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "PLAIN" => Some(Self::Plain),
            "SCRAM-SHA-256" => Some(Self::ScramSha256),
            "SCRAM-SHA-512" => Some(Self::ScramSha512),
            "OAUTHBEARER" => Some(Self::OAuthBearer),
            _ => None,
        }
    }
    /// Kafka's mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// A secret value or where to find it. `Debug` never shows an inline value.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// Given inline (config file only).
    Inline(String),
    /// `file:/path`: the file's content, one trailing newline removed.
    File(PathBuf),
    /// `env:NAME`: the environment variable's value.
    Env(String),
}

impl std::fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline(_) => f.write_str("<inline secret>"),
            Self::File(p) => write!(f, "file:{}", p.display()),
            Self::Env(n) => write!(f, "env:{n}"),
        }
    }
}

impl SecretRef {
    /// `file:…` and `env:…` are references; anything else is an inline value.
    pub fn parse(v: &str) -> Self {
        if let Some(p) = v.strip_prefix("file:") {
            Self::File(PathBuf::from(p))
        } else if let Some(n) = v.strip_prefix("env:") {
            Self::Env(n.to_owned())
        } else {
            Self::Inline(v.to_owned())
        }
    }

    /// Whether the value is given inline.
    pub fn is_inline(&self) -> bool {
        matches!(self, Self::Inline(_))
    }

    /// The secret itself. The error names the reference, never a value.
    pub fn resolve(&self) -> Result<String, String> {
        match self {
            Self::Inline(v) => Ok(v.clone()),
            Self::File(p) => std::fs::read_to_string(p)
                .map(|s| s.strip_suffix('\n').map(|s| s.strip_suffix('\r').unwrap_or(s)).unwrap_or(&s).to_owned())
                .map_err(|e| format!("cannot read secret file {}: {e}", p.display())),
            Self::Env(n) => std::env::var(n).map_err(|_| format!("environment variable {n} (a secret reference) is not set")),
        }
    }
}

/// PEM data: a file or inline text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemSource {
    File(PathBuf),
    Inline(String),
}

/// The client identity presented in TLS (mutual TLS toward the broker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyStore {
    /// `ssl.keystore.location` (PEM type): private key and certificate chain in one file.
    Combined(PathBuf),
    /// `ssl.keystore.certificate.chain` + `ssl.keystore.key`.
    Separate { chain: PemSource, key: SecretRef },
}

/// SASL credentials of the proxy toward one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslProps {
    pub mechanism: SaslMechanism,
    /// The user (PLAIN, SCRAM) or OAuth client id (OAUTHBEARER); empty when it comes from a
    /// referenced `sasl.jaas.config`.
    pub username: String,
    /// The password or client secret, or a referenced `sasl.jaas.config` line.
    pub password: SecretRef,
    /// OAUTHBEARER: where tokens come from.
    pub oauth: Option<crate::OAuthClientProps>,
}

/// Parsed security properties of one cluster connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientSecurityProps {
    pub protocol: SecurityProtocol,
    /// Trusted CA certificates; `None` uses no roots (a TLS connection then fails to verify), so
    /// validation requires it for SSL/SASL_SSL.
    pub truststore: Option<PemSource>,
    pub keystore: Option<KeyStore>,
    /// `ssl.endpoint.identification.algorithm`: `https` (default) checks the broker's certificate
    /// against the host name connected to; empty turns the check off (the chain is still verified).
    pub verify_hostname: bool,
    pub sasl: Option<SaslProps>,
}

/// Where properties came from: the config file may hold inline secrets, the APIs may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropsOrigin {
    ConfigFile,
    Api,
}

/// Parses and checks `props`; every problem is reported (messages name keys, never values of
/// secrets).
pub fn parse_client_props(props: &BTreeMap<String, String>, origin: PropsOrigin) -> Result<ClientSecurityProps, Vec<String>> {
    let mut errs = Vec::new();
    for k in props.keys() {
        if !is_client_security_key(k) {
            errs.push(format!("unknown client property `{k}` (supported: {})", CLIENT_SECURITY_KEYS.join(", ")));
        }
    }
    let get = |k: &str| props.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
    if origin == PropsOrigin::Api {
        for k in SENSITIVE_KEYS {
            if let Some(v) = get(k)
                && SecretRef::parse(v).is_inline()
            {
                errs.push(format!(
                    "{k} must be given by reference (file:/path or env:NAME) when a mirror is created or altered through the API"
                ));
            }
        }
    }
    let protocol = match get("security.protocol").unwrap_or("PLAINTEXT").to_ascii_uppercase().as_str() {
        "PLAINTEXT" => SecurityProtocol::Plaintext,
        "SSL" => SecurityProtocol::Ssl,
        "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
        "SASL_SSL" => SecurityProtocol::SaslSsl,
        other => {
            errs.push(format!("security.protocol `{other}` is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"));
            SecurityProtocol::Plaintext
        }
    };
    for k in ["ssl.truststore.type", "ssl.keystore.type"] {
        if let Some(t) = get(k)
            && !t.eq_ignore_ascii_case("PEM")
        {
            errs.push(format!("{k} `{t}` is not supported: only PEM (convert JKS/PKCS12 stores with keytool/openssl)"));
        }
    }
    if get("ssl.key.password").is_some() {
        errs.push("ssl.key.password: encrypted private keys are not supported; give an unencrypted PKCS#8 key (protected by file permissions)".into());
    }
    let truststore = match (get("ssl.truststore.location"), get("ssl.truststore.certificates")) {
        (Some(_), Some(_)) => {
            errs.push("give ssl.truststore.location or ssl.truststore.certificates, not both".into());
            None
        }
        (Some(p), None) => Some(PemSource::File(PathBuf::from(p))),
        (None, Some(pem)) => Some(PemSource::Inline(pem.to_owned())),
        (None, None) => None,
    };
    let keystore = match (get("ssl.keystore.location"), get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")) {
        (None, None, None) => None,
        (Some(p), None, None) => Some(KeyStore::Combined(PathBuf::from(p))),
        (None, Some(chain), Some(key)) => Some(KeyStore::Separate {
            chain: match chain.strip_prefix("file:") {
                Some(p) => PemSource::File(PathBuf::from(p)),
                None => PemSource::Inline(chain.to_owned()),
            },
            key: SecretRef::parse(key),
        }),
        _ => {
            errs.push("give either ssl.keystore.location, or both ssl.keystore.certificate.chain and ssl.keystore.key".into());
            None
        }
    };
    let verify_hostname = match get("ssl.endpoint.identification.algorithm") {
        // Absent: Kafka's default `https`; present but empty: off.
        None => !props.contains_key("ssl.endpoint.identification.algorithm"),
        Some(a) if a.eq_ignore_ascii_case("https") => true,
        Some(a) => {
            errs.push(format!("ssl.endpoint.identification.algorithm `{a}` is not `https` or empty"));
            true
        }
    };
    if protocol.tls() && truststore.is_none() {
        errs.push(format!(
            "security.protocol {} needs ssl.truststore.location or ssl.truststore.certificates (PEM CA certificates)",
            protocol.name()
        ));
    }
    if !protocol.tls() && (truststore.is_some() || keystore.is_some()) {
        errs.push(format!("ssl.* properties are set but security.protocol is {}", protocol.name()));
    }
    let sasl = parse_sasl(&get, protocol, &mut errs);
    if errs.is_empty() {
        Ok(ClientSecurityProps {
            protocol,
            truststore,
            keystore,
            verify_hostname,
            sasl,
        })
    } else {
        Err(errs)
    }
}

fn parse_sasl<'a>(get: &dyn Fn(&str) -> Option<&'a str>, protocol: SecurityProtocol, errs: &mut Vec<String>) -> Option<SaslProps> {
    let any_sasl = ["sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password"]
        .iter()
        .chain(crate::oauth::OAUTH_CLIENT_KEYS)
        .any(|k| get(k).is_some());
    if !protocol.sasl() {
        if any_sasl {
            errs.push(format!("sasl.* properties are set but security.protocol is {}", protocol.name()));
        }
        return None;
    }
    let mech_name = get("sasl.mechanism").unwrap_or("GSSAPI");
    let Some(mechanism) = SaslMechanism::parse(mech_name) else {
        errs.push(format!(
            "sasl.mechanism `{mech_name}` is not supported: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
        ));
        return None;
    };
    if mechanism == SaslMechanism::OAuthBearer {
        return crate::oauth::parse_client(get, errs);
    }
    for k in crate::oauth::OAUTH_CLIENT_KEYS {
        if get(k).is_some() {
            errs.push(format!("{k} is set but sasl.mechanism is {} (it is for OAUTHBEARER)", mechanism.name()));
        }
    }
    let (username, password) = match (get("sasl.jaas.config"), get("sasl.username"), get("sasl.password")) {
        (Some(jaas), None, None) => {
            let jaas = SecretRef::parse(jaas);
            if !jaas.is_inline() {
                // Resolved when the connection is made: the reference holds the whole JAAS line.
                return Some(SaslProps {
                    mechanism,
                    username: String::new(),
                    password: jaas,
                    oauth: None,
                });
            }
            let SecretRef::Inline(text) = jaas else { return None };
            match crate::jaas::parse_jaas(&text) {
                Ok((u, p)) => (u, SecretRef::Inline(p)),
                Err(e) => {
                    errs.push(e);
                    return None;
                }
            }
        }
        (None, Some(u), Some(p)) => (u.to_owned(), SecretRef::parse(p)),
        (None, _, _) => {
            errs.push(format!(
                "security.protocol {} needs sasl.username and sasl.password (or sasl.jaas.config)",
                protocol.name()
            ));
            return None;
        }
        (Some(_), _, _) => {
            errs.push("give sasl.jaas.config or sasl.username/sasl.password, not both".into());
            return None;
        }
    };
    Some(SaslProps {
        mechanism,
        username,
        password,
        oauth: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn kafka_sasl_ssl_properties_parse_with_jaas_or_separate_keys() {
        let p = parse_client_props(
            &props(&[
                ("security.protocol", "SASL_SSL"),
                ("ssl.truststore.type", "PEM"),
                ("ssl.truststore.location", "/ca.pem"),
                ("sasl.mechanism", "SCRAM-SHA-512"),
                (
                    "sasl.jaas.config",
                    "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"mirror\" password=\"s3 cr=t\";",
                ),
            ]),
            PropsOrigin::ConfigFile,
        )
        .unwrap();
        assert_eq!(p.protocol, SecurityProtocol::SaslSsl);
        assert!(p.verify_hostname);
        let s = p.sasl.unwrap();
        assert_eq!((s.mechanism, s.username.as_str()), (SaslMechanism::ScramSha512, "mirror"));
        assert_eq!(s.password.resolve().unwrap(), "s3 cr=t");
        assert!(!format!("{:?}", s.password).contains("s3"), "Debug shows no inline secret");

        let p = parse_client_props(
            &props(&[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", "u"),
                ("sasl.password", "env:PW"),
            ]),
            PropsOrigin::Api,
        )
        .unwrap();
        assert_eq!(p.sasl.unwrap().password, SecretRef::Env("PW".into()));
    }

    #[test]
    fn api_created_mirrors_must_give_secrets_by_reference_and_errors_never_echo_them() {
        let e = parse_client_props(
            &props(&[
                ("security.protocol", "SASL_PLAINTEXT"),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", "u"),
                ("sasl.password", "hunter2"),
            ]),
            PropsOrigin::Api,
        )
        .unwrap_err();
        assert!(e.iter().any(|m| m.contains("by reference")), "{e:?}");
        assert!(!e.join(" ").contains("hunter2"));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let e = parse_client_props(
            &props(&[
                ("security.protocol", "SSL"),
                ("ssl.truststore.type", "JKS"),
                ("ssl.endpoint.identification.algorithm", "http"),
                ("sasl.mechanism", "PLAIN"),
                ("ssl.bogus", "x"),
            ]),
            PropsOrigin::ConfigFile,
        )
        .unwrap_err();
        assert_eq!(e.len(), 5, "{e:#?}");
    }

    #[test]
    fn an_empty_identification_algorithm_turns_hostname_checks_off() {
        let p = parse_client_props(
            &props(&[
                ("security.protocol", "SSL"),
                ("ssl.truststore.location", "/ca.pem"),
                ("ssl.endpoint.identification.algorithm", ""),
            ]),
            PropsOrigin::ConfigFile,
        )
        .unwrap();
        assert!(!p.verify_hostname);
    }

    #[test]
    fn secret_references_resolve_from_files_and_the_environment() {
        let dir = std::env::temp_dir().join(format!("kmp-secret-{}", std::process::id()));
        std::fs::write(&dir, "from-file\n").unwrap();
        assert_eq!(SecretRef::parse(&format!("file:{}", dir.display())).resolve().unwrap(), "from-file");
        std::fs::remove_file(&dir).unwrap();
        let e = SecretRef::parse("env:KMP_SURELY_UNSET_VAR").resolve().unwrap_err();
        assert!(e.contains("KMP_SURELY_UNSET_VAR"));
    }
}
