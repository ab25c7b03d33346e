//! Who may manage mirrors over the Kafka port: the KIP-1279 mirror RPCs (API keys 94-104) and
//! cluster-mirror config resources (type 64 in DescribeConfigs, IncrementalAlterConfigs,
//! AlterConfigs). The rule (`[security]`): never while SASL is started but not completed; a
//! connection authenticated as a listed principal (SASL user, or the
//! subject of its client certificate under mutual TLS) may; otherwise loopback peers (IPv4, IPv6,
//! IPv4-mapped) when `mirror_admin_loopback`, and peers in `mirror_admin_networks`. Everything
//! else — and everything when `kafka_mirror_admin = false` — gets
//! CLUSTER_MIRROR_AUTHORIZATION_FAILED (144), and so does everything on a client listener with
//! `mirror_management = false`. Answering the authorized requests belongs to
//! `mirror_rpc` and `mirror_configs`.

use kmp_protocol::mirror_api::{self, errors};

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::identity::SaslState;
use super::refuse;
use super::refuse::configs::{self, CLUSTER_MIRROR, is_config_api};
use crate::error::ProxyError;

/// Why `conn` may not manage mirrors, or `None` when it may.
pub(crate) fn refusal(conn: &Conn) -> Option<String> {
    if !conn.listener.mirror_management {
        return Some(format!(
            "mirror management is not allowed on listener `{}` (mirror_management = false); use a listener that allows it or the admin REST API",
            conn.listener.name
        ));
    }
    let sasl = conn.sasl.lock().unwrap_or_else(|e| e.into_inner()).clone();
    decide(&conn.shared.config.security, conn.peer.ip(), &sasl, conn.tls_principal.as_deref())
}

/// The rule itself (see the module docs).
/// `tls_principal`: the client certificate's subject (mutual TLS), used when SASL gave none.
fn decide(sec: &kmp_config::SecurityConfig, ip: std::net::IpAddr, sasl: &SaslState, tls_principal: Option<&str>) -> Option<String> {
    if !sec.kafka_mirror_admin {
        return Some("mirror management over the Kafka port is disabled (security.kafka_mirror_admin = false); use the admin REST API".to_owned());
    }
    if sasl.in_progress() {
        return Some("not authorized: SASL authentication has not completed on this connection".to_owned());
    }
    if let Some(p) = sasl.principal.as_deref().or(tls_principal)
        && sec.mirror_admin_principals.iter().any(|a| a == p)
    {
        return None;
    }
    if sec.mirror_admin_loopback && kmp_config::is_loopback(ip) {
        return None;
    }
    if sec
        .mirror_admin_networks
        .iter()
        .filter_map(|n| kmp_config::parse_cidr(n).ok())
        .any(|net| kmp_config::in_network(ip, net))
    {
        return None;
    }
    Some(format!(
        "not authorized to manage cluster mirrors from {ip}: allowed are loopback peers, security.mirror_admin_networks and SASL principals in security.mirror_admin_principals"
    ))
}

/// The authorization filter.
pub(crate) struct MirrorAdminAuthz {
    /// Whether cluster-mirror config resources are decided here too (the engine is enabled, so
    /// `mirror_configs` answers them); the mirror RPCs always are.
    pub(crate) config_resources: bool,
}

impl Filter for MirrorAdminAuthz {
    fn wants_request(&self, x: &Exchange, _conn: &Conn) -> bool {
        let (api_key, api_version) = (x.api_key, x.api_version);
        let mirror_rpc = mirror_api::is_answered(api_key) && api_version == 0;
        let config = self.config_resources && is_config_api(api_key);
        // Whether the connection may is decided once, in `on_request`.
        mirror_rpc || config
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let Some(why) = refusal(conn) else { return Ok(Flow::Continue) };
            let code = errors::CLUSTER_MIRROR_AUTHORIZATION_FAILED;
            if mirror_api::is_answered(x.api_key) {
                conn.shared.metrics.refused("mirror_admin_unauthorized", 1);
                tracing::warn!(peer = %conn.peer, api_key = x.api_key, "mirror RPC refused: {why}");
                return Ok(Flow::Answer(Some(mirror_api::error_response(x.api_key, x.correlation_id, code, &why))));
            }
            let pick = |r: &configs::Resource<'_>| (r.kind == CLUSTER_MIRROR).then(|| why.clone());
            let decision = configs::refuse_any(x.frame(), x.api_key, x.api_version, code, &pick)?;
            refuse::apply(decision, x, |n| conn.shared.metrics.refused("mirror_admin_unauthorized", n))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> std::net::IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_networks_and_listed_principals_may_manage_mirrors_and_nobody_mid_authentication() {
        let mut sec = kmp_config::SecurityConfig::default();
        let none = SaslState::default();
        assert_eq!(decide(&sec, ip("127.0.0.1"), &none, None), None);
        assert_eq!(decide(&sec, ip("::1"), &none, None), None);
        assert_eq!(decide(&sec, ip("::ffff:127.0.0.1"), &none, None), None, "IPv4-mapped loopback");
        assert!(decide(&sec, ip("192.0.2.2"), &none, None).is_some_and(|m| m.contains("192.0.2.2")));
        let half = SaslState {
            started: true,
            ..SaslState::default()
        };
        assert!(decide(&sec, ip("127.0.0.1"), &half, None).is_some(), "never before authentication completed");
        sec.mirror_admin_networks = vec!["192.0.2.0/24".into()];
        assert_eq!(decide(&sec, ip("192.0.2.2"), &none, None), None);
        assert_eq!(decide(&sec, ip("::ffff:192.0.2.2"), &none, None), None);
        sec.mirror_admin_networks.clear();
        sec.mirror_admin_principals = vec!["ops".into()];
        let ops = SaslState {
            started: true,
            principal: Some("ops".into()),
            ..SaslState::default()
        };
        let other = SaslState {
            principal: Some("app".into()),
            ..ops.clone()
        };
        assert_eq!(decide(&sec, ip("192.0.2.2"), &ops, None), None);
        assert!(decide(&sec, ip("192.0.2.2"), &other, None).is_some());
        let cn = "CN=mirror-admin,O=kmp-test";
        sec.mirror_admin_principals.push(cn.into());
        assert_eq!(decide(&sec, ip("192.0.2.2"), &none, Some(cn)), None, "a listed certificate subject may");
        assert!(decide(&sec, ip("192.0.2.2"), &none, Some("CN=app,O=kmp-test")).is_some());
        sec.kafka_mirror_admin = false;
        assert!(decide(&sec, ip("127.0.0.1"), &none, None).is_some_and(|m| m.contains("kafka_mirror_admin")));
    }
}
