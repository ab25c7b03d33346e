//! Reaching one cluster (source or destination) with the internal client: connecting to any
//! bootstrap broker, looking up a topic's partitions and leaders, and opening a connection to a
//! partition leader. What is sent on those connections belongs to `fetch`, `produce`, `groups` and the copy path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kmp_config::{MirrorConfig, PropsOrigin};
use kmp_protocol::ProtocolError;
use kmp_protocol::client::Connection;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kmp_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kmp_protocol::kafka_protocol::messages::{BrokerId, ListOffsetsRequest, MetadataRequest, MetadataResponse, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::security::ClientSecurity;
use kmp_protocol::shared_client::SharedConnection;

use crate::cluster::links::{Lane, Links, Slots};
use crate::error::MirrorError;
use kmp_protocol::Backoff;

/// Partitions of one topic as a cluster reports them.
#[derive(Debug, Clone)]
pub struct TopicLayout {
    /// Kafka error code for the topic (0 = exists).
    pub error_code: i16,
    /// `(partition, leader node id, leader epoch)`, sorted by partition.
    pub partitions: Vec<(i32, i32, i32)>,
    /// `node id → host:port`.
    pub brokers: HashMap<i32, String>,
    /// The topic id (all zero if the topic does not exist).
    pub topic_id: [u8; 16],
}

/// One cluster reached through its bootstrap brokers.
#[derive(Debug, Clone)]
pub struct ClusterClient {
    side: &'static str,
    bootstrap: Vec<String>,
    timeout: Duration,
    /// How to connect (TLS, SASL), or why the cluster's security settings are unusable.
    security: Result<Arc<ClientSecurity>, String>,
    gate: Arc<AuthGate>,
    /// Connections shared by every user of this client (clones share them too).
    links: Arc<Links>,
    /// Recently read topic layouts (see [`ClusterClient::layout`]).
    layouts: Arc<Slots<String, (Instant, Arc<TopicLayout>)>>,
    /// The cluster id the last Metadata answer gave (see [`ClusterClient::cluster_id`]).
    cluster_id: Arc<Mutex<Option<String>>>,
}

/// The client id of the engine's connections to both clusters (metadata, Fetch, Produce, admin).
pub const ENGINE_CLIENT_ID: &str = "kafka-mirror-proxy-engine";

/// Longest cluster id kept from a Metadata answer (Kafka's are 22 characters of base64; a
/// longer one is not recorded rather than stored and shown).
const MAX_CLUSTER_ID_LEN: usize = 64;

/// How long a topic layout read from the cluster is reused.
const LAYOUT_TTL: Duration = Duration::from_millis(500);

/// Longest wait for a source broker's response after the request was queued (Kafka clients'
/// `request.timeout.ms` default). A late response closes the connection: a source that dribbles
/// its answers (or never finishes one) would otherwise hold every request queued behind it on
/// that connection — every partition fetched there — for as long as it likes. The Fetch long
/// poll (`copy::fetch::session`, 500 ms) is far below it; a 32 MiB answer must come at about 9 Mbit/s.
pub const SOURCE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Failed authentications to one cluster: after one, connections fail fast with the same error
/// until a back-off (1 s doubling to 60 s) has passed; then one connection tries (the others keep
/// failing fast until it is done), so a cluster refusing the credentials sees one attempt per
/// back-off, not one per partition. The failure is logged once (again only if it changes).
#[derive(Debug, Default)]
struct AuthGate {
    state: Mutex<Option<Refused>>,
}

#[derive(Debug)]
struct Refused {
    until: Instant,
    /// The pause the next refusal waits.
    backoff: Backoff,
    why: String,
    /// A connection is trying after the back-off.
    probing: bool,
}

const AUTH_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// One gate per cluster (side + bootstrap list), shared by every client of that cluster.
fn gate_for(side: &str, bootstrap: &[String]) -> Arc<AuthGate> {
    static GATES: Mutex<Option<HashMap<String, Arc<AuthGate>>>> = Mutex::new(None);
    let mut g = GATES.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(HashMap::new)
        .entry(format!("{side}|{}", bootstrap.join(",")))
        .or_default()
        .clone()
}

impl AuthGate {
    /// Why a connection must not be tried now, or `None` (it may: it is the probe, if any).
    fn closed(&self) -> Option<String> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let r = s.as_mut()?;
        if Instant::now() < r.until || r.probing {
            return Some(r.why.clone());
        }
        r.probing = true;
        None
    }

    fn record(&self, side: &str, result: &Result<Connection, ProtocolError>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Err(ProtocolError::Authentication { detail, .. }) => {
                let mut backoff = s.as_ref().map_or(Backoff::new(AUTH_BACKOFF.0, AUTH_BACKOFF.1), |r| r.backoff.clone());
                let pause = backoff.next_pause();
                if s.as_ref().is_none_or(|r| r.why != *detail) {
                    tracing::error!(side, error = %detail, "authentication to the {side} cluster failed; retrying with back-off (check the credentials)");
                }
                *s = Some(Refused {
                    until: Instant::now() + pause,
                    backoff,
                    why: detail.clone(),
                    probing: false,
                });
            }
            Ok(_) if s.is_some() => {
                tracing::info!(side, "authentication to the {side} cluster succeeds again");
                *s = None;
            }
            // Unreachable rather than refused: the next connection may probe again.
            _ => {
                if let Some(r) = s.as_mut() {
                    r.probing = false;
                }
            }
        }
    }
}

impl ClusterClient {
    /// `side` ("source"/"destination") labels errors. Plaintext, unauthenticated.
    pub fn new(side: &'static str, bootstrap: Vec<String>, timeout: Duration) -> Self {
        Self::with_security(side, bootstrap, timeout, Ok(Arc::new(ClientSecurity::plaintext())))
    }

    /// Like [`Self::new`], connecting as `security` says (or failing every connection with its
    /// error).
    pub fn with_security(side: &'static str, bootstrap: Vec<String>, timeout: Duration, security: Result<Arc<ClientSecurity>, String>) -> Self {
        let gate = gate_for(side, &bootstrap);
        Self {
            side,
            bootstrap,
            timeout,
            security,
            gate,
            links: Arc::default(),
            layouts: Arc::default(),
            cluster_id: Arc::default(),
        }
    }

    /// The cluster's id as its last Metadata answer gave it (any clone's), `None` before one
    /// did: known after the cluster went away, so a stop during a disaster still records which
    /// cluster its data came from.
    pub fn cluster_id(&self) -> Option<String> {
        self.cluster_id.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The source cluster of mirror `def`, with its `source_properties` (files and secret
    /// references are read now).
    pub fn source_of(def: &MirrorConfig, timeout: Duration) -> Self {
        let security = def
            .source_properties
            .parse(PropsOrigin::ConfigFile)
            .map_err(|e| e.join("; "))
            .and_then(|p| ClientSecurity::build(&p).map_err(|e| e.to_string()))
            .map(Arc::new)
            .map_err(|e| format!("source security settings of mirror {}: {e}", def.name));
        Self::with_security("source", def.source_bootstrap_servers.clone(), timeout, security)
    }

    /// A connection to `addr` (a broker of this cluster), with this cluster's security.
    pub async fn connect_to(&self, addr: &str, client_id: &str) -> Result<Connection, MirrorError> {
        let security = self.security.as_ref().map_err(|e| {
            self.wrap(ProtocolError::Connect {
                addr: addr.to_owned(),
                detail: e.clone(),
            })
        })?;
        if let Some(why) = self.gate.closed() {
            return Err(self.wrap(ProtocolError::Authentication {
                addr: addr.to_owned(),
                detail: format!("{why} (backing off)"),
            }));
        }
        let result = Connection::connect_with(addr, self.timeout, client_id, security).await;
        self.gate.record(self.side, &result);
        result.map_err(|e| self.wrap(e))
    }

    /// The bootstrap servers this client was configured with.
    pub fn bootstrap(&self) -> &[String] {
        &self.bootstrap
    }

    /// "source" or "destination".
    pub fn side(&self) -> &'static str {
        self.side
    }

    /// Connect timeout used for every connection to this cluster.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn wrap(&self, e: kmp_protocol::ProtocolError) -> MirrorError {
        side_error(self.side, e)
    }

    /// A connection to the first reachable bootstrap broker.
    pub async fn connect_any(&self) -> Result<Connection, MirrorError> {
        self.first_bootstrap(|addr| self.connect_to(addr, ENGINE_CLIENT_ID)).await
    }

    /// The first bootstrap broker `open` succeeds with; the last error if none does.
    async fn first_bootstrap<'a, T, F, Fut>(&'a self, open: F) -> Result<T, MirrorError>
    where
        F: Fn(&'a str) -> Fut,
        Fut: std::future::Future<Output = Result<T, MirrorError>>,
    {
        let mut last = None;
        for addr in &self.bootstrap {
            match open(addr).await {
                Ok(c) => return Ok(c),
                // Credentials are the cluster's, not the broker's: the next broker would refuse too.
                Err(e @ (MirrorError::Source(ProtocolError::Authentication { .. }) | MirrorError::Destination(ProtocolError::Authentication { .. }))) => {
                    return Err(e);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            self.wrap(ProtocolError::Connect {
                addr: "(none)".into(),
                detail: "no bootstrap servers".into(),
            })
        }))
    }

    /// Partitions, leaders and brokers of `topic` (no auto-creation), at most [`LAYOUT_TTL`]
    /// old: the partition tasks of a topic starting (or retrying) together share one Metadata
    /// request instead of sending one each (10,000 partitions would otherwise ask 10,000 times
    /// for a 10,000-partition answer).
    pub async fn layout(&self, topic: &str) -> Result<Arc<TopicLayout>, MirrorError> {
        let fresh = |(at, _): &(Instant, Arc<TopicLayout>)| at.elapsed() < LAYOUT_TTL;
        let read = || async { Ok((Instant::now(), Arc::new(self.read_layout(topic).await?))) };
        Ok(self.layouts.get(topic.to_owned(), fresh, read).await?.1)
    }

    /// [`Self::layout`] read now, whatever the age of the one known (kept for the others).
    pub async fn layout_now(&self, topic: &str) -> Result<Arc<TopicLayout>, MirrorError> {
        let read = || async { Ok((Instant::now(), Arc::new(self.read_layout(topic).await?))) };
        Ok(self.layouts.get(topic.to_owned(), |_| false, read).await?.1)
    }

    /// One Metadata request (v12, no auto-creation) for `topics`, or for every topic (`None`).
    async fn metadata(&self, topics: Option<&[&str]>) -> Result<MetadataResponse, MirrorError> {
        let conn = self.link_any().await?;
        let mut req = MetadataRequest::default();
        req.topics = topics.map(|names| {
            names
                .iter()
                .map(|t| {
                    let mut r = MetadataRequestTopic::default();
                    r.name = Some(TopicName(StrBytes::from_string((*t).to_owned())));
                    r
                })
                .collect()
        });
        req.allow_auto_topic_creation = false;
        let resp: MetadataResponse = self.call(&conn, &req, 12).await?;
        if let Some(id) = resp.cluster_id.as_ref().filter(|id| !id.is_empty() && id.len() <= MAX_CLUSTER_ID_LEN) {
            *self.cluster_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(id.to_string());
        }
        Ok(resp)
    }

    async fn read_layout(&self, topic: &str) -> Result<TopicLayout, MirrorError> {
        let resp = self.metadata(Some(&[topic])).await?;
        let brokers = resp.brokers.iter().map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port))).collect();
        let Some(t) = resp.topics.iter().find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic)) else {
            return Ok(TopicLayout {
                error_code: ResponseError::UnknownTopicOrPartition.code(),
                partitions: Vec::new(),
                brokers,
                topic_id: [0; 16],
            });
        };
        let mut partitions: Vec<_> = t.partitions.iter().map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch)).collect();
        partitions.sort_unstable();
        Ok(TopicLayout {
            error_code: t.error_code,
            partitions,
            brokers,
            topic_id: *t.topic_id.as_bytes(),
        })
    }

    /// Which of `topics` exist on the cluster, from one Metadata request naming just them.
    pub async fn existing_topics(&self, topics: &[&str]) -> Result<std::collections::HashSet<String>, MirrorError> {
        Ok(ids_in(&self.metadata(Some(topics)).await?).into_keys().collect())
    }

    /// Names of every topic on the cluster.
    pub async fn topic_names(&self) -> Result<Vec<String>, MirrorError> {
        Ok(self.topic_ids().await?.into_keys().collect())
    }

    /// Every topic on the cluster with its topic id, from one Metadata request.
    pub async fn topic_ids(&self) -> Result<HashMap<String, [u8; 16]>, MirrorError> {
        Ok(ids_in(&self.metadata(None).await?))
    }

    /// The shared connection to broker `addr` for `lane` (opened if there is none).
    pub async fn link(&self, addr: &str, lane: Lane) -> Result<SharedConnection, MirrorError> {
        let connect = || async {
            let conn = self.connect_to(addr, ENGINE_CLIENT_ID).await?;
            // Destination requests carry their own broker-side timeouts and are answered by the
            // cluster the proxy fronts; a source is a peer that may stall (see the constant).
            Ok(if self.side == "source" {
                SharedConnection::with_request_timeout(conn, SOURCE_REQUEST_TIMEOUT)
            } else {
                SharedConnection::new(conn)
            })
        };
        self.links.get((addr.to_owned(), lane), |c| !c.is_closed(), connect).await
    }

    /// The shared control connection to the first reachable bootstrap broker.
    pub async fn link_any(&self) -> Result<SharedConnection, MirrorError> {
        self.first_bootstrap(|addr| self.link(addr, Lane::Control)).await
    }

    /// Sends `req` on `conn` (a connection that failed is replaced on its next [`Self::link`]).
    pub async fn call<R: kmp_protocol::kafka_protocol::protocol::Request>(
        &self,
        conn: &SharedConnection,
        req: &R,
        version: i16,
    ) -> Result<R::Response, MirrorError> {
        conn.call(req, version).await.map_err(|e| self.wrap(e))
    }

    /// [`Self::call`], also telling when the response's first and last bytes arrived.
    pub async fn call_timed<R: kmp_protocol::kafka_protocol::protocol::Request>(
        &self,
        conn: &SharedConnection,
        req: &R,
        version: i16,
    ) -> Result<(R::Response, kmp_protocol::client::Arrival), MirrorError> {
        conn.call_timed(req, version).await.map_err(|e| self.wrap(e))
    }

    /// The shared control connection to the leader of `topic`-`partition`, and its epoch.
    pub async fn leader_link(&self, topic: &str, partition: i32) -> Result<(SharedConnection, i32), MirrorError> {
        let layout = self.layout(topic).await?;
        self.leader_link_in(&layout, topic, partition).await
    }

    /// Like [`Self::leader_link`], with a layout the caller already read.
    pub async fn leader_link_in(&self, layout: &TopicLayout, topic: &str, partition: i32) -> Result<(SharedConnection, i32), MirrorError> {
        let (addr, epoch) = self.leader_in(layout, topic, partition)?;
        Ok((self.link(&addr, Lane::Control).await?, epoch))
    }

    /// The address of the leader of `topic`-`partition` in `layout`, and its epoch.
    pub fn leader_in(&self, layout: &TopicLayout, topic: &str, partition: i32) -> Result<(String, i32), MirrorError> {
        if layout.error_code != 0 {
            return Err(MirrorError::Broker {
                side: self.side,
                what: format!("metadata of {topic}"),
                code: layout.error_code,
            });
        }
        let (leader, epoch) = layout
            .partitions
            .iter()
            .find(|(p, _, _)| *p == partition)
            .map(|&(_, l, e)| (l, e))
            .unwrap_or((-1, -1));
        let addr = layout.brokers.get(&leader).ok_or(MirrorError::Broker {
            side: self.side,
            what: format!("leader of {topic}-{partition}"),
            code: ResponseError::LeaderNotAvailable.code(),
        })?;
        Ok((addr.clone(), epoch))
    }

    /// A connection of its own to the current leader of `topic`-`partition`, and that leader's
    /// epoch (the state store's producer; partitions share [`Self::leader_link`]).
    pub async fn connect_leader(&self, topic: &str, partition: i32) -> Result<(Connection, i32), MirrorError> {
        let layout = self.layout(topic).await?;
        let (addr, epoch) = self.leader_in(&layout, topic, partition)?;
        let conn = self.connect_to(&addr, ENGINE_CLIENT_ID).await?;
        Ok((conn, epoch))
    }
}

/// A protocol error attributed to `side` ("source" or "destination"). A source error is shown as
/// a short class only (see [`MirrorError::Source`]); its full text goes to the debug log here.
pub(crate) fn side_error(side: &'static str, e: kmp_protocol::ProtocolError) -> MirrorError {
    if side == "source" {
        tracing::debug!(error = %e, "source cluster error (detail)");
        MirrorError::Source(e)
    } else {
        MirrorError::Destination(e)
    }
}

/// The topics a Metadata answer names without an error, with their ids.
fn ids_in(resp: &MetadataResponse) -> HashMap<String, [u8; 16]> {
    resp.topics
        .iter()
        .filter(|t| t.error_code == 0)
        .filter_map(|t| Some((t.name.as_ref()?.0.as_str().to_owned(), *t.topic_id.as_bytes())))
        .collect()
}

/// `(log start, high watermark)` of a partition, read on a connection to its leader.
pub async fn offsets(side: &'static str, conn: &SharedConnection, topic: &str, partition: i32) -> Result<(i64, i64), MirrorError> {
    let start = list_offset(side, conn, topic, partition, -2, READ_UNCOMMITTED, -1).await?;
    let end = list_offset(side, conn, topic, partition, -1, READ_UNCOMMITTED, -1).await?;
    Ok((start, end))
}

/// ListOffsets isolation levels: the high watermark, or the last stable offset for the end.
pub(crate) const READ_UNCOMMITTED: i8 = 0;
pub(crate) const READ_COMMITTED: i8 = 1;

/// One partition's offset for `timestamp` (-2 the log start, -1 the end as `isolation` sees it),
/// read on a connection to its leader (`leader_epoch` -1: unchecked).
pub(crate) async fn list_offset(
    side: &'static str,
    conn: &SharedConnection,
    topic: &str,
    partition: i32,
    timestamp: i64,
    isolation: i8,
    leader_epoch: i32,
) -> Result<i64, MirrorError> {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = partition;
    p.current_leader_epoch = leader_epoch;
    p.timestamp = timestamp;
    let mut t = ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_owned()));
    t.partitions = vec![p];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    req.isolation_level = isolation;
    req.topics = vec![t];
    let what = || format!("ListOffsets {topic}-{partition}");
    let resp = conn.call(&req, 7).await.map_err(|e| side_error(side, e))?;
    match resp.topics.iter().flat_map(|t| t.partitions.iter()).find(|p| p.partition_index == partition) {
        Some(p) if p.error_code == 0 => Ok(p.offset),
        Some(p) => Err(MirrorError::Broker {
            side,
            what: what(),
            code: p.error_code,
        }),
        None => Err(MirrorError::Broker {
            side,
            what: what(),
            code: ResponseError::UnknownTopicOrPartition.code(),
        }),
    }
}

/// The leader's log end offset for its current `leader_epoch` (OffsetForLeaderEpoch): unlike the
/// high watermark, it includes appended writes that the in-sync replicas have not confirmed yet
/// (e.g. while a follower is down but still in the ISR).
pub async fn leader_log_end(side: &'static str, conn: &SharedConnection, topic: &str, partition: i32, leader_epoch: i32) -> Result<i64, MirrorError> {
    match crate::cluster::epoch_end::epoch_end(side, conn, topic, partition, leader_epoch, leader_epoch).await? {
        (epoch, end) if epoch == leader_epoch && end >= 0 => Ok(end),
        // The epoch moved on between the metadata and this request: look the leader up again.
        _ => Err(MirrorError::Broker {
            side,
            what: format!("OffsetForLeaderEpoch {topic}-{partition} epoch {leader_epoch}"),
            code: ResponseError::FencedLeaderEpoch.code(),
        }),
    }
}

#[cfg(test)]
mod gate_tests {
    use super::*;

    fn refused() -> Result<Connection, ProtocolError> {
        Err(ProtocolError::Authentication {
            addr: "b:1".into(),
            detail: "authentication failed (error 58)".into(),
        })
    }

    #[test]
    fn after_a_refused_login_one_probe_per_back_off_reaches_the_cluster() {
        let gate = AuthGate::default();
        assert_eq!(gate.closed(), None, "nothing refused yet");
        gate.record("source", &refused());
        assert!(gate.closed().is_some_and(|w| w.contains("error 58")), "fails fast during the back-off");
        gate.state.lock().unwrap().as_mut().unwrap().until = Instant::now();
        assert_eq!(gate.closed(), None, "after the back-off one connection probes");
        assert!(gate.closed().is_some(), "the others wait for the probe");
        gate.record("source", &refused());
        let r = gate.state.lock().unwrap();
        let r = r.as_ref().unwrap();
        assert_eq!(
            r.backoff.peek(),
            AUTH_BACKOFF.0 * 4,
            "a second refusal doubled the back-off (the third waits 4 s)"
        );
        assert!(!r.probing);
    }

    #[test]
    fn an_unreachable_probe_lets_the_next_connection_probe() {
        let gate = AuthGate::default();
        gate.record("source", &refused());
        gate.state.lock().unwrap().as_mut().unwrap().until = Instant::now();
        assert_eq!(gate.closed(), None);
        gate.record(
            "source",
            &Err(ProtocolError::Connect {
                addr: "b:1".into(),
                detail: "refused".into(),
            }),
        );
        assert_eq!(gate.closed(), None, "the probe did not reach the broker: another may");
    }
}
