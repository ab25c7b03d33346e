//! The `[security]` and `[limits]` sections: who may manage mirrors over the Kafka port, which
//! source clusters API-created mirrors may reach, who may read the admin API, and the resource
//! limits that keep one peer from exhausting the proxy. Pure data; enforcement lives in `proxy`
//! (authorization, limits) and `mirror-engine` (source allow-list).

use serde::Deserialize;

/// `[security]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SecurityConfig {
    /// Whether the KIP-1279 mirror RPCs (API keys 94-104) and cluster-mirror config resources
    /// (resource type 64) are served on the Kafka port at all. `false`: every such request gets
    /// CLUSTER_MIRROR_AUTHORIZATION_FAILED; mirrors are then managed over REST only. Default `true`.
    pub kafka_mirror_admin: bool,
    /// Whether connections from loopback peers (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) may manage
    /// mirrors over the Kafka port without further credentials (the CLI on the proxy's host, the
    /// demo). Default `true`.
    pub mirror_admin_loopback: bool,
    /// Further networks (CIDR, e.g. `10.1.0.0/16`, `fd00::/8`; a bare address means one host)
    /// whose connections may manage mirrors over the Kafka port. Default empty.
    pub mirror_admin_networks: Vec<String>,
    /// SASL principals (the authenticated user name) whose connections may manage mirrors over
    /// the Kafka port once the broker accepted their SaslAuthenticate. Never applies before
    /// authentication completed. Default empty.
    pub mirror_admin_principals: Vec<String>,
    /// `host:port` patterns that every address in an API-created mirror's `bootstrap.servers`
    /// must match (`*` matches any run of characters in the host, or any port: `*.dc2.example:9092`,
    /// `10.0.4.*:*`). Mirrors declared in this file are not checked. Default empty: mirrors can
    /// only be created or repointed by editing this file.
    pub mirror_source_allow: Vec<String>,
    /// Whether admin HTTP read endpoints (`GET /v1/...`, `/metrics`) answer non-loopback callers
    /// without the admin token. `/healthz` and `/readyz` are always open. Default `false`.
    pub admin_read_open: bool,
    /// Whether loopback callers of the admin endpoint (`/v1`, `/metrics`, the dashboard) are let
    /// in without the admin token. Behind a sidecar (Envoy/Istio inbound traffic arrives from
    /// 127.0.0.6) or a reverse proxy on the same host, remote callers are loopback too: turn this
    /// off there (and `mirror_admin_loopback` for the Kafka port). Default `true`.
    pub admin_loopback: bool,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        Self {
            kafka_mirror_admin: true,
            mirror_admin_loopback: true,
            mirror_admin_networks: Vec::new(),
            mirror_admin_principals: Vec::new(),
            mirror_source_allow: Vec::new(),
            admin_read_open: false,
            admin_loopback: true,
        }
    }
}

/// `[limits]`: bounds on what peers can make the proxy hold.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Client connections open at once (all listeners); further connections are accepted and
    /// closed at once, counted in `kmp_connections_refused_total`. Default 10000.
    pub max_connections: u32,
    /// Client connections open at once from one IP address. Default 1000.
    pub max_connections_per_ip: u32,
    /// Admin endpoint (HTTP) connections open at once, from anyone; further connections are
    /// accepted and closed at once, so callers that need no token (`/healthz`) cannot take the
    /// file descriptors the Kafka listeners need. Default 256; at least 1.
    pub max_admin_connections: u32,
    /// Admin endpoint connections open at once from one IP address (IPv6: one /64 network);
    /// further ones from it are closed at accept, so one host cannot take the slots health
    /// probes need. Default 32; at least 1.
    pub max_admin_connections_per_ip: u32,
    /// Admin endpoint connections kept for loopback callers (a probe inside the container, the
    /// CLI): non-loopback callers together hold at most `max_admin_connections` minus this (at
    /// least one). Default 16.
    pub admin_loopback_reserve: u32,
    /// Largest certificate, key, client-CA or credentials file the proxy reads (bytes); a larger
    /// file is refused (at start: the proxy stops; on reload: the previous version stays in use).
    /// Default 16777216 (16 MiB); at least 4096.
    pub max_security_file_bytes: u64,
    /// Bytes of partly or wholly received request frames all connections may hold together
    /// (bytes). A connection whose next frame does not fit waits until others release theirs
    /// (backpressure; nothing is aborted). A frame larger than the whole budget cannot be read.
    /// Default 536870912 (512 MiB); must be at least `listener.max_request_frame_bytes`.
    pub buffered_request_bytes: u64,
    /// Time (milliseconds) a client has to deliver the rest of a frame once its first byte
    /// arrived; then the connection is closed. Default 60000.
    pub frame_read_timeout_ms: u64,
    /// Bytes of broker responses the proxy reads whole (to rewrite or merge them: filler masking
    /// on mirror topics, merged refusals, addresses) that all connections may hold together until
    /// they are written to their clients. A response that does not fit waits (backpressure).
    /// Default 536870912 (512 MiB); at least 1048576.
    pub buffered_response_bytes: u64,
    /// Time (milliseconds) a response write to a client may make no progress (the client reads
    /// nothing) before the connection is closed and what it held is released. Default 60000.
    pub client_write_timeout_ms: u64,
    /// Time (milliseconds) a client connection may stay without any request and without a
    /// request in flight before it is closed (Kafka's `connections.max.idle.ms`). Default 600000.
    pub idle_timeout_ms: u64,
    /// Time (milliseconds) an HTTP client of the admin endpoint has to send its request headers;
    /// a `/v1` request's body then has as long again to arrive (408 after it), and a connection
    /// whose answer the client takes no byte of for as long is closed. Default 10000.
    pub http_header_read_timeout_ms: u64,
    /// Time (milliseconds) a request that could write waits for the mirror engine to load its
    /// state at start-up before it is answered with a retriable error. Default 30000.
    pub startup_write_wait_ms: u64,
    /// Whether the soft open-file limit is raised to the hard limit at start. Default `true`.
    pub raise_fd_limit: bool,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            max_admin_connections: 256,
            max_admin_connections_per_ip: 32,
            admin_loopback_reserve: 16,
            max_security_file_bytes: 16 * 1024 * 1024,
            buffered_request_bytes: 512 * 1024 * 1024,
            frame_read_timeout_ms: 60_000,
            buffered_response_bytes: 512 * 1024 * 1024,
            client_write_timeout_ms: 60_000,
            idle_timeout_ms: 600_000,
            http_header_read_timeout_ms: 10_000,
            startup_write_wait_ms: 30_000,
            raise_fd_limit: true,
        }
    }
}

/// Whether `addr` (`host:port`) matches one of `patterns` (see
/// [`SecurityConfig::mirror_source_allow`]). Hosts compare case-insensitively.
pub fn source_allowed(patterns: &[String], addr: &str) -> bool {
    let Some((host, port)) = addr.rsplit_once(':') else { return false };
    patterns.iter().any(|p| {
        let Some((ph, pp)) = p.rsplit_once(':') else { return false };
        (pp == "*" || pp == port) && glob(&ph.to_ascii_lowercase(), &host.to_ascii_lowercase())
    })
}

/// `*` matches any run of characters; everything else literally.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(tail) = text.strip_prefix(head) else { return false };
            (0..=tail.len()).any(|i| tail.is_char_boundary(i) && glob(rest, &tail[i..]))
        }
    }
}

/// Parses a CIDR (`10.0.0.0/8`, `fd00::/8`) or a bare address into (network, prefix length).
pub fn parse_cidr(s: &str) -> Result<(std::net::IpAddr, u8), String> {
    let (ip, len) = match s.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (s, None),
    };
    let ip: std::net::IpAddr = ip.trim().parse().map_err(|e| format!("`{s}`: {e}"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l.trim().parse::<u8>().map_err(|e| format!("`{s}`: prefix length: {e}"))?,
        None => max,
    };
    if len > max {
        return Err(format!("`{s}`: prefix length {len} is longer than {max}"));
    }
    Ok((ip, len))
}

/// Whether `ip` lies in the network `(net, len)`; IPv4-mapped IPv6 addresses count as IPv4.
pub fn in_network(ip: std::net::IpAddr, net: (std::net::IpAddr, u8)) -> bool {
    use std::net::IpAddr;
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match (ip, net.0) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if net.1 == 0 { 0 } else { u32::MAX << (32 - net.1) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if net.1 == 0 { 0 } else { u128::MAX << (128 - net.1) };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Whether `ip` is a loopback address, IPv4-mapped loopback (`::ffff:127.0.0.1`) included.
pub fn is_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        v4 => v4.is_loopback(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_patterns_match_host_globs_and_ports() {
        let p = vec!["*.dc2.example:9092".to_owned(), "10.0.4.*:*".to_owned()];
        assert!(source_allowed(&p, "kafka-1.dc2.example:9092"));
        assert!(source_allowed(&p, "KAFKA-1.DC2.example:9092"));
        assert!(!source_allowed(&p, "kafka-1.dc2.example:9093"));
        assert!(!source_allowed(&p, "evil.example:9092"));
        assert!(source_allowed(&p, "10.0.4.7:19092"));
        assert!(!source_allowed(&p, "10.0.5.7:19092"));
        assert!(!source_allowed(&[], "127.0.0.1:9092"), "an empty list allows nothing");
    }

    #[test]
    fn networks_and_loopback_include_ipv4_mapped_addresses() {
        let net = parse_cidr("10.1.0.0/16").unwrap();
        assert!(in_network("10.1.2.3".parse().unwrap(), net));
        assert!(in_network("::ffff:10.1.2.3".parse().unwrap(), net));
        assert!(!in_network("10.2.0.1".parse().unwrap(), net));
        assert!(in_network("fd00::5".parse().unwrap(), parse_cidr("fd00::/8").unwrap()));
        assert!(in_network("192.0.2.9".parse().unwrap(), parse_cidr("192.0.2.9").unwrap()));
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(is_loopback("127.3.0.1".parse().unwrap()));
        assert!(!is_loopback("192.0.2.2".parse().unwrap()));
    }
}
