//! The configuration model. Every field documents its unit, its default and its effect.
//! Parsing and validation rules live in `load` and `validate`, not here.

use serde::Deserialize;

/// Whole-process configuration, as read from the TOML file (all sections optional).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where clients connect and which addresses they are told about.
    pub listener: ListenerConfig,
    /// Several client listeners (`[[listeners]]`), replacing `[listener]`'s address, TLS and
    /// authentication; default none (the `[listener]` section is the one listener).
    pub listeners: Vec<crate::NamedListenerConfig>,
    /// The destination Kafka cluster the proxy fronts.
    pub upstream: UpstreamConfig,
    /// The HTTP admin endpoint (health, readiness, metrics).
    pub admin: AdminConfig,
    /// Settings shared by all mirrors (`[engine]`).
    pub engine: crate::EngineConfig,
    /// Mirrors declared in the file (`[[mirrors]]`); default none.
    pub mirrors: Vec<crate::MirrorConfig>,
    /// Authorization of mirror management and the source allow-list (`[security]`).
    pub security: crate::SecurityConfig,
    /// Connection, buffer and timeout limits (`[limits]`).
    pub limits: crate::LimitsConfig,
}

/// Client-facing listeners.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ListenerConfig {
    /// `host:port` of the bootstrap listener that clients put in `bootstrap.servers`.
    /// Default `127.0.0.1:9192`.
    pub listen: String,
    /// Host name or IP written into every broker address the proxy hands to clients
    /// (Metadata, FindCoordinator, DescribeCluster, Produce/Fetch `node_endpoints`). Set it to the
    /// name clients can reach (container name, NAT address). Default: the host of `listen`, or
    /// `localhost` when `listen` binds a wildcard address.
    pub advertised_host: Option<String>,
    /// First port of the per-broker listeners: upstream broker with node id `N` is reachable
    /// through the proxy at `advertised_host:(node_port_base + N)`. Default: the port of `listen`
    /// plus one. Brokers whose port would exceed 65535 are refused with an error in the log.
    pub node_port_base: Option<u16>,
    /// Largest request frame (bytes, excluding the 4-byte length prefix) accepted from a client;
    /// a larger frame closes that client's connection. Default 104857600 (100 MiB, Kafka's
    /// `socket.request.max.bytes`).
    pub max_request_frame_bytes: u32,
    /// Listen backlog (connections) of the bootstrap and every node listener: how many connection
    /// attempts the kernel queues before the proxy accepts them. A fleet reconnecting at once
    /// (after a restart) overflows a small queue and waits for SYN retries (1 s, 3 s, ...).
    /// Linux caps it at `net.core.somaxconn`. Default 4096.
    pub listen_backlog: u32,
    /// Time (milliseconds) that a SIGTERM/Ctrl-C waits for in-flight requests to get their
    /// responses before connections are closed. Default 30000.
    pub drain_timeout_ms: u64,
    /// TLS on the bootstrap and every node listener (`[listener.tls]`). Default: unset, plaintext.
    pub tls: Option<crate::TlsServerConfig>,
    /// How clients authenticate (`[listener.auth]`): SASL pass-through (default) or termination.
    pub auth: crate::ClientAuthConfig,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9192".to_owned(),
            advertised_host: None,
            node_port_base: None,
            max_request_frame_bytes: 100 * 1024 * 1024,
            listen_backlog: 4096,
            drain_timeout_ms: 30_000,
            tls: None,
            auth: crate::ClientAuthConfig::default(),
        }
    }
}

/// The destination cluster.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Bootstrap brokers of the destination cluster, `host:port` each. Required (no default).
    pub bootstrap_servers: Vec<String>,
    /// Timeout (milliseconds) for opening one TCP connection to an upstream broker. Default 10000.
    pub connect_timeout_ms: u64,
    /// Interval (milliseconds) between the proxy's own Metadata requests, which discover brokers
    /// that joined or left and drive `/readyz`. Default 10000.
    pub metadata_refresh_interval_ms: u64,
    /// Largest response frame (bytes, excluding the length prefix) accepted from a broker; a
    /// larger one closes that client connection. Default 1073741824 (1 GiB).
    pub max_response_frame_bytes: u32,
    /// How long (milliseconds) a broker's answer to ApiVersions may be given to new client
    /// connections before their own upstream connection is open. A connection's first ApiVersions
    /// is then answered at once from the last answer of the same listener's broker (same request
    /// version) while the upstream connection opens, and still forwarded so the broker sees it
    /// and its answer refreshes the one kept. 0: never answered early (every connection waits for
    /// its upstream connection first). Default 30000.
    pub api_versions_cache_ms: u64,
    /// Kafka client properties of the proxy's connections to the destination (`[upstream.properties]`,
    /// Kafka's names: `security.protocol`, `ssl.truststore.location`, `ssl.keystore.location`,
    /// `ssl.endpoint.identification.algorithm`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
    /// `sasl.jaas.config`, …; see `kmp_config::CLIENT_SECURITY_KEYS`). TLS settings apply to every
    /// upstream connection; SASL credentials to the proxy's own connections (metadata, engine) and, in
    /// `listener.auth.mode = "terminate"`, to every client connection. Secrets may be `file:`/`env:`
    /// references. Default: empty, PLAINTEXT.
    pub properties: crate::ClientProperties,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: Vec::new(),
            connect_timeout_ms: 10_000,
            metadata_refresh_interval_ms: 10_000,
            max_response_frame_bytes: 1024 * 1024 * 1024,
            api_versions_cache_ms: 30_000,
            properties: crate::ClientProperties::default(),
        }
    }
}

/// HTTP admin endpoint. `Debug` redacts the token.
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// `host:port` for `/healthz`, `/readyz`, `/metrics` and the `/v1` mirror management API.
    /// Default: unset, no admin endpoint.
    pub listen: Option<String>,
    /// Bearer token that authorizes mutating `/v1` routes from non-loopback callers
    /// (`Authorization: Bearer <token>`). Default: unset — only loopback callers may mutate.
    /// Inline, `file:<path>` or `env:<NAME>`; env `KMP_ADMIN_TOKEN`, or `KMP_ADMIN_TOKEN_FILE=<path>`.
    /// A secret: never logged or returned.
    pub token: Option<String>,
    /// HTTPS for the admin endpoint (`[admin.tls]`, same options as `[listener.tls]`; a client CA
    /// makes every admin caller present a certificate). Default: unset, plain HTTP.
    pub tls: Option<crate::TlsServerConfig>,
}

impl std::fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl ListenerConfig {
    /// The host clients are told to connect to (see [`ListenerConfig::advertised_host`]).
    pub fn effective_advertised_host(&self) -> String {
        self.advertised_host
            .clone()
            .unwrap_or_else(|| crate::listeners::default_advertised_host(&self.listen))
    }

    /// The first per-broker port (see [`ListenerConfig::node_port_base`]).
    pub fn effective_node_port_base(&self) -> Option<u16> {
        self.node_port_base.or_else(|| crate::listeners::default_node_port_base(&self.listen))
    }
}

/// Splits `host:port` (IPv6 hosts in brackets). Returns `None` when the port is missing or bad.
pub(crate) fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let port = port.parse().ok()?;
    // A comma means several addresses were given as one (list them separately).
    if host.is_empty() || host.contains(|c: char| c == ',' || c.is_whitespace()) {
        return None;
    }
    Some((host, port))
}
