//! The audited API version table: which API keys and versions the proxy forwards, and how.
//!
//! Every client-visible ApiVersions answer is the intersection of what the broker announces and
//! this table; keys missing here are dropped. The table is an audit checklist:
//! * Adding a key or raising a max version: check whether any field of the new request or
//!   response carries a broker id, host or port (then it needs [`Handling::RewriteResponse`] and
//!   code in `rewrite`), or a topic name the proxy must police (later: read-only mirror topics).
//! * `tests::table_covers_every_version_kafka_protocol_knows` fails when kafka-protocol is
//!   upgraded and knows a version this table has not audited; the real-broker test
//!   `versions --check-upstream` fails when a broker announces one.
//!
//! Deciding *what* to do with a frame of a given key belongs to the proxy; this module only says
//! which versions are safe to pass.

use kafka_protocol::messages::ApiKey;

/// How the proxy treats an API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Forwarded as raw bytes both ways.
    PassThrough,
    /// Request forwarded raw; the response is decoded to rewrite broker addresses.
    RewriteResponse,
    /// Answered or post-processed by the proxy itself (ApiVersions).
    Proxy,
    /// Inter-broker or controller API: never offered to clients.
    NotOffered,
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Audited {
    /// API key.
    pub key: ApiKey,
    /// Lowest version forwarded.
    pub min: i16,
    /// Highest version audited and forwarded.
    pub max: i16,
    /// Treatment.
    pub handling: Handling,
}

use Handling::{NotOffered as N, PassThrough as P, Proxy as X, RewriteResponse as R};

macro_rules! table {
    ($($key:ident $min:literal ..= $max:literal $h:ident;)*) => {
        /// The table itself (kafka-protocol 0.18, Apache Kafka 4.1 schemas).
        pub const TABLE: &[Audited] = &[$(Audited { key: ApiKey::$key, min: $min, max: $max, handling: $h }),*];
    };
}

table! {
    // Produce v10+ responses carry node_endpoints (KIP-951) for a new leader: rewritten.
    Produce 3..=13 R;
    // Fetch v16+ responses carry node_endpoints (KIP-951): rewritten.
    Fetch 4..=18 R;
    ListOffsets 1..=10 P;
    // Broker list: host/port rewritten to the proxy's per-node listeners.
    Metadata 0..=13 R;
    OffsetCommit 2..=10 P;
    OffsetFetch 1..=10 P;
    // Coordinator host/port (v0-3 top-level, v4+ per key) rewritten.
    FindCoordinator 0..=6 R;
    JoinGroup 0..=9 P;
    Heartbeat 0..=4 P;
    LeaveGroup 0..=5 P;
    SyncGroup 0..=5 P;
    DescribeGroups 0..=6 P;
    ListGroups 0..=5 P;
    SaslHandshake 0..=1 P;
    ApiVersions 0..=4 X;
    CreateTopics 2..=7 P;
    DeleteTopics 1..=6 P;
    DeleteRecords 0..=2 P;
    InitProducerId 0..=6 P;
    OffsetForLeaderEpoch 2..=4 P;
    AddPartitionsToTxn 0..=5 P;
    AddOffsetsToTxn 0..=4 P;
    EndTxn 0..=5 P;
    WriteTxnMarkers 1..=1 N;
    TxnOffsetCommit 0..=5 P;
    DescribeAcls 1..=3 P;
    CreateAcls 1..=3 P;
    DeleteAcls 1..=3 P;
    DescribeConfigs 1..=4 P;
    AlterConfigs 0..=2 P;
    AlterReplicaLogDirs 1..=2 P;
    DescribeLogDirs 1..=4 P;
    SaslAuthenticate 0..=2 P;
    CreatePartitions 0..=3 P;
    CreateDelegationToken 1..=3 P;
    RenewDelegationToken 1..=2 P;
    ExpireDelegationToken 1..=2 P;
    DescribeDelegationToken 1..=3 P;
    DeleteGroups 0..=2 P;
    ElectLeaders 0..=2 P;
    IncrementalAlterConfigs 0..=1 P;
    AlterPartitionReassignments 0..=1 P;
    ListPartitionReassignments 0..=0 P;
    OffsetDelete 0..=0 P;
    DescribeClientQuotas 0..=1 P;
    AlterClientQuotas 0..=1 P;
    DescribeUserScramCredentials 0..=0 P;
    AlterUserScramCredentials 0..=0 P;
    Vote 0..=2 N;
    BeginQuorumEpoch 0..=1 N;
    EndQuorumEpoch 0..=1 N;
    // Answered by brokers for tools; lists controller endpoints for display, not for routing.
    DescribeQuorum 0..=2 P;
    AlterPartition 2..=3 N;
    UpdateFeatures 0..=2 P;
    Envelope 0..=0 N;
    FetchSnapshot 0..=1 N;
    // Broker list: host/port rewritten.
    DescribeCluster 0..=2 R;
    DescribeProducers 0..=0 P;
    BrokerRegistration 0..=4 N;
    BrokerHeartbeat 0..=1 N;
    UnregisterBroker 0..=0 P;
    DescribeTransactions 0..=0 P;
    ListTransactions 0..=2 P;
    AllocateProducerIds 0..=0 N;
    ConsumerGroupHeartbeat 0..=1 P;
    ConsumerGroupDescribe 0..=1 P;
    ControllerRegistration 0..=0 N;
    GetTelemetrySubscriptions 0..=0 P;
    PushTelemetry 0..=0 P;
    AssignReplicasToDirs 0..=0 N;
    ListConfigResources 0..=1 P;
    DescribeTopicPartitions 0..=0 P;
    ShareGroupHeartbeat 1..=1 P;
    ShareGroupDescribe 1..=1 P;
    // node_endpoints for new leaders: rewritten.
    ShareFetch 1..=1 R;
    ShareAcknowledge 1..=1 R;
    AddRaftVoter 0..=0 N;
    RemoveRaftVoter 0..=0 N;
    UpdateRaftVoter 0..=0 N;
    InitializeShareGroupState 0..=0 N;
    ReadShareGroupState 0..=0 N;
    WriteShareGroupState 0..=0 N;
    DeleteShareGroupState 0..=0 N;
    ReadShareGroupStateSummary 0..=0 N;
    DescribeShareGroupOffsets 0..=0 P;
    AlterShareGroupOffsets 0..=0 P;
    DeleteShareGroupOffsets 0..=0 P;
}

/// The row for raw key `key`, if audited.
pub fn lookup(key: i16) -> Option<&'static Audited> {
    TABLE.iter().find(|a| a.key as i16 == key)
}

/// The version range clients are offered for `key` when the broker announces `min..=max`:
/// `None` drops the key (unknown, not offered, or no overlap).
pub fn clamp(key: i16, min: i16, max: i16) -> Option<(i16, i16)> {
    let a = lookup(key).filter(|a| a.handling != Handling::NotOffered)?;
    let (lo, hi) = (min.max(a.min), max.min(client_max(key, a.max)));
    (lo <= hi).then_some((lo, hi))
}

/// Whether the proxy can handle a request of `key`/`version` (audited and offered).
pub fn is_supported(key: i16, version: i16) -> bool {
    lookup(key).is_some_and(|a| a.handling != Handling::NotOffered && (a.min..=client_max(key, a.max)).contains(&version))
}

/// Versions of client APIs that only brokers may use: audited in the table, never offered.
/// AddPartitionsToTxn v4+ is the broker-to-broker batch form (KIP-890: `transactions` with
/// `verify_only`); a client offered it could add a mirror topic to a transaction unchecked.
const BROKER_ONLY_FROM: &[(ApiKey, i16)] = &[(ApiKey::AddPartitionsToTxn, 4)];

/// The highest version clients are offered for `key` (the table's max unless broker-only
/// versions start below it).
fn client_max(key: i16, max: i16) -> i16 {
    BROKER_ONLY_FROM
        .iter()
        .find(|(k, _)| *k as i16 == key)
        .map_or(max, |&(_, from)| max.min(from - 1))
}

/// Something a broker announces that the table has not audited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unaudited {
    /// An API key the table does not have.
    UnknownKey { key: i16, max: i16 },
    /// A version above the audited max.
    NewerVersion { key: ApiKey, audited_max: i16, announced_max: i16 },
}

/// Compares a broker's announced `(key, min, max)` list with the table.
pub fn unaudited(announced: &[(i16, i16, i16)]) -> Vec<Unaudited> {
    let mut out = Vec::new();
    for &(key, _min, max) in announced {
        // The KIP-1279 mirror RPCs the proxy answers itself are audited in `mirror_api`.
        if let Some(&(_, _, own_max)) = crate::mirror_api::ANSWERED.iter().find(|&&(k, _, _)| k == key) {
            if max > own_max {
                out.push(Unaudited::UnknownKey { key, max });
            }
            continue;
        }
        match lookup(key) {
            None => out.push(Unaudited::UnknownKey { key, max }),
            Some(a) if max > a.max => out.push(Unaudited::NewerVersion {
                key: a.key,
                audited_max: a.max,
                announced_max: max,
            }),
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_covers_every_version_kafka_protocol_knows() {
        for key in ApiKey::iter() {
            let a = lookup(key as i16).unwrap_or_else(|| panic!("{key:?} is not in the audited table: audit it"));
            let v = key.valid_versions();
            assert_eq!(
                (a.min, a.max),
                (v.min, v.max),
                "{key:?}: table audits {}..={} but kafka-protocol knows {}..={}; audit the new versions",
                a.min,
                a.max,
                v.min,
                v.max
            );
        }
        assert_eq!(TABLE.len(), ApiKey::iter().count(), "no duplicate or stale rows");
    }

    #[test]
    fn clamp_intersects_and_drops_what_is_not_offered() {
        assert_eq!(clamp(ApiKey::Metadata as i16, 0, 20), Some((0, 13)), "newer broker versions are clamped");
        assert_eq!(clamp(ApiKey::Produce as i16, 0, 11), Some((3, 11)));
        assert_eq!(clamp(ApiKey::Vote as i16, 0, 2), None, "raft APIs are never offered");
        assert_eq!(clamp(9999, 0, 1), None, "unknown keys are dropped");
    }

    #[test]
    fn broker_only_add_partitions_to_txn_versions_are_never_offered_to_clients() {
        let key = ApiKey::AddPartitionsToTxn as i16;
        assert_eq!(clamp(key, 0, 5), Some((0, 3)));
        assert!(is_supported(key, 3));
        assert!(!is_supported(key, 4) && !is_supported(key, 5), "v4+ is the broker-to-broker form");
    }

    #[test]
    fn unaudited_reports_new_keys_and_versions() {
        let found = unaudited(&[(3, 0, 14), (1, 4, 18), (200, 0, 0)]);
        assert_eq!(
            found,
            vec![
                Unaudited::NewerVersion {
                    key: ApiKey::Metadata,
                    audited_max: 13,
                    announced_max: 14
                },
                Unaudited::UnknownKey { key: 200, max: 0 }
            ]
        );
    }
}
