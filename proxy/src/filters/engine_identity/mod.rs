//! The engine's own identities on the destination are refused to clients. Its HA election group
//! (`engine.group_id`, by default `kmp-engine.<state topic>`; every group named `kmp-engine.…`,
//! which is how every instance names its group by default, and every JoinGroup of protocol type
//! `kmp-mirror-engine`) is refused for every group API on the client port: FindCoordinator for
//! it, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, DeleteGroups, OffsetCommit,
//! OffsetFetch, OffsetDelete, AddOffsetsToTxn, TxnOffsetCommit, ConsumerGroupHeartbeat,
//! ConsumerGroupDescribe, ShareGroupHeartbeat, ShareGroupDescribe and the share-group offset
//! APIs get GROUP_AUTHORIZATION_FAILED (30) for it, and ListGroups answers do not list it. A
//! client that could join the group could make itself the active engine, or make the real
//! instances take over from each other, by leaving them from the group, as often as it likes.
//! (ShareFetch and ShareAcknowledge name a share group too, but a share group of that id can only
//! come from ShareGroupHeartbeat, which is refused.)
//!
//! Requests naming several groups (DescribeGroups, DeleteGroups, OffsetFetch v8+,
//! FindCoordinator v4+, the Describe APIs of the new protocols) lose only the engine's groups;
//! the rest goes to the broker and both answers are merged.
//!
//! AlterClientQuotas entries whose entity names the engine's or the proxy's client id
//! (`kafka-mirror-proxy-engine`, `kafka-mirror-proxy-election`, `kafka-mirror-proxy`) or the
//! user the proxy authenticates to the destination as (`upstream.properties` `sasl.username`)
//! get POLICY_VIOLATION (44): a quota there throttles mirroring for everybody. Other entries
//! (and DescribeClientQuotas) go to the broker.
//!
//! The engine's transactional ids (`kmp-engine.txn.…`) are refused in every transaction API
//! (`txns`).
//!
//! Cost: a group request is decoded only when its raw bytes contain an engine group's name (or,
//! for JoinGroup, the protocol type), found by a SIMD substring search after the API key said it
//! is a group API; ordinary group traffic stays raw. ListGroups answers are decoded only when they
//! contain one.

use bytes::Bytes;
use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use memchr::memmem;

use super::api::{BoxFuture, Conn, Exchange, Filter, Flow};
use super::refuse::{self, Decision};
use crate::error::ProxyError;

mod groups;
mod quotas;
mod txns;

use groups::{group_api, unlisted};

/// How every instance names its election group unless `engine.group_id` says otherwise.
const GROUP_PREFIX: &str = "kmp-engine.";
/// The client id of the proxy's own connections to the destination (metadata refreshes).
pub(crate) const PROXY_CLIENT_ID: &str = "kafka-mirror-proxy";
/// Client ids a quota must not name: the engine's, the election's and the proxy's.
const CLIENT_IDS: [&str; 3] = [kmp_mirror_engine::ENGINE_CLIENT_ID, kmp_mirror_engine::ELECTION_CLIENT_ID, PROXY_CLIENT_ID];

/// What this proxy protects: the configured election group and the quota users.
pub(crate) struct Protected {
    /// `engine.group_id` as the engine uses it.
    group: String,
    /// The user names the proxy (and engine) authenticate to the destination as.
    users: Vec<String>,
}

impl Protected {
    fn of(conn: &Conn) -> Self {
        let users = conn
            .shared
            .config
            .upstream
            .properties
            .parse(kmp_config::PropsOrigin::ConfigFile)
            .ok()
            .and_then(|p| p.sasl)
            .map(|s| vec![s.username])
            .unwrap_or_default();
        Self {
            group: conn.shared.config.engine.effective_group_id(),
            users,
        }
    }

    fn is_engine_group(&self, group: &str) -> bool {
        group == self.group || group.starts_with(GROUP_PREFIX)
    }

    /// Whether an entity component (`entity_type`, `entity_name`) of a quota names the proxy.
    fn quota_entity(&self, kind: &str, name: &str) -> bool {
        match kind {
            "client-id" => CLIENT_IDS.contains(&name),
            "user" => self.users.iter().any(|u| u == name),
            _ => false,
        }
    }
}

/// Whether `frame` may name an engine group, `configured` being `engine.group_id` as written
/// (empty: the default, which starts with [`GROUP_PREFIX`]), or (`protocol`) the election's
/// protocol type. Allocation-free.
fn may_name_group(frame: &[u8], configured: &str, protocol: bool) -> bool {
    memmem::find(frame, GROUP_PREFIX.as_bytes()).is_some()
        || (!configured.is_empty() && memmem::find(frame, configured.as_bytes()).is_some())
        || (protocol && memmem::find(frame, kmp_mirror_engine::ELECTION_PROTOCOL_TYPE.as_bytes()).is_some())
}

/// The guard of the engine's identities.
pub(crate) struct EngineIdentityGuard;

impl Filter for EngineIdentityGuard {
    fn wants_request(&self, x: &Exchange, conn: &Conn) -> bool {
        match ApiKey::try_from(x.api_key) {
            Ok(ApiKey::AlterClientQuotas) => true,
            Ok(k) if txns::txn_api(k) && txns::may_name(x.frame()) => true,
            Ok(k) if group_api(k) => may_name_group(x.frame(), &conn.shared.config.engine.group_id, k == ApiKey::JoinGroup),
            _ => false,
        }
    }

    fn on_request<'a>(&'a self, x: &'a mut Exchange, conn: &'a Conn) -> BoxFuture<'a, Result<Flow, ProxyError>> {
        Box::pin(async move {
            let decision = check(x.frame(), x.api_key, x.api_version, &Protected::of(conn))?;
            refuse::apply(decision, x, |n| conn.shared.metrics.refused("engine_identity", n))
        })
    }

    fn wants_response(&self, api_key: i16, _api_version: i16, _conn: &Conn) -> bool {
        api_key == ApiKey::ListGroups as i16
    }

    fn on_response(&self, frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        if api_key != ApiKey::ListGroups as i16 {
            return Ok(frame);
        }
        if !may_name_group(&frame, &conn.shared.config.engine.group_id, true) {
            return Ok(frame);
        }
        let protected = Protected {
            group: conn.shared.config.engine.effective_group_id(),
            users: Vec::new(),
        };
        unlisted(frame, api_version, &protected)
    }
}

/// Decides one request the predicate let through.
fn check(frame: &Bytes, api_key: i16, version: i16, who: &Protected) -> Result<Decision, ProtocolError> {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::AlterClientQuotas) => quotas::check(frame, version, who),
        Ok(ApiKey::FindCoordinator) => match txns::find_coordinator(frame, version)? {
            Decision::Forward => groups::check(frame, ApiKey::FindCoordinator, version, who),
            refused => Ok(refused),
        },
        Ok(key) if txns::txn_api(key) => match txns::check(frame, key, version)? {
            Decision::Forward if group_api(key) => groups::check(frame, key, version, who),
            decided => Ok(decided),
        },
        Ok(key) => groups::check(frame, key, version, who),
        Err(_) => Ok(Decision::Forward),
    }
}

#[cfg(test)]
mod tests;
