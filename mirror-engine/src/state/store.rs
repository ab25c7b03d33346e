//! The state store: the engine's one compacted state topic on the destination, loaded at boot
//! and written through (acks=all, lease-fenced), plus the flush loop that writes partition
//! progress ([`persist`]). What the keys hold is `records`' (the key schema).
//!
//! Where a partition resumes is *not* stored: offsets are identical, so the destination's high
//! watermark is the resume point. Loading, writing and the flush loop live here; deciding what the
//! records mean belongs to `engine::term` (startup) and `state::catalog` (ownership).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kmp_protocol::client::Connection;
use kmp_protocol::kafka_protocol::messages::TopicName;
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use kmp_protocol::records;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, watch};
use tracing::warn;

use super::reader::StateReader;
use crate::cluster::client::ClusterClient;
use crate::cluster::links::Lane;
use crate::cluster::produce::{PRODUCE_VERSION, produce_request};
use crate::error::MirrorError;
use crate::state::records::{FormerTopicRecord, MirrorRecord, PartitionRecord, REQUEST_PREFIX, RESPONSE_PREFIX, TopicRecord};
use crate::state::status::{PartitionState, StatusBoard, now_ms};
use crate::topics::create::{TopicSpec, create_topic};
use kmp_protocol::Backoff;

/// How long one state write is retried through leader moves and broker restarts.
const WRITE_RETRY: Duration = Duration::from_secs(20);

/// Forwarded management requests as the load found them (`forward::serve` reads from `from`;
/// below `end` it answers only the keys in `pending`, the others were answered before).
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestsAtLoad {
    pub(crate) from: i64,
    pub(crate) end: i64,
    pub(crate) pending: std::collections::HashSet<String>,
}

/// The loaded state plus a connection for writing more.
pub struct StateStore {
    destination: ClusterClient,
    topic: String,
    entries: std::sync::Mutex<HashMap<String, Bytes>>,
    writer: Mutex<Option<Connection>>,
    /// Nothing is written unless this holds (an instance no longer the active engine).
    lease: crate::lease::Lease,
    /// The forwarded requests found unanswered at load (see `requests_at_load`).
    requests_at_load: RequestsAtLoad,
    /// Called after a topic record changed in what copying it depends on (see `on_topic_change`).
    topic_changed: std::sync::OnceLock<TopicChanged>,
}

/// What [`StateStore::on_topic_change`] calls.
pub(crate) type TopicChanged = std::sync::Arc<dyn Fn() + Send + Sync>;

impl StateStore {
    /// Creates the state topic if needed and reads it to the end.
    pub async fn open(destination: ClusterClient, topic: &str, lease: crate::lease::Lease) -> Result<Self, MirrorError> {
        let spec = TopicSpec {
            name: topic,
            partitions: 1,
            replication_factor: -1,
            configs: vec![("cleanup.policy".into(), "compact".into()), ("min.compaction.lag.ms".into(), "0".into())],
        };
        let code = create_topic(&destination, &spec).await?;
        if code != 0 && code != crate::topics::create::TOPIC_ALREADY_EXISTS {
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("create state topic {topic}"),
                code,
            });
        }
        let mut store = Self {
            destination,
            topic: topic.to_owned(),
            entries: Default::default(),
            writer: Mutex::new(None),
            lease,
            requests_at_load: RequestsAtLoad::default(),
            topic_changed: std::sync::OnceLock::new(),
        };
        store.requests_at_load = store.load().await?;
        Ok(store)
    }

    /// Reads the state topic to its end; what it found of forwarded requests.
    async fn load(&self) -> Result<RequestsAtLoad, MirrorError> {
        let mut reader = StateReader::new(self.destination.clone(), self.topic.clone(), Lane::Control);
        let (start, end) = reader.bounds().await?;
        let mut next = start;
        let mut entries = HashMap::new();
        // Offsets of the forwarded requests not answered (tombstoned) yet.
        let mut requests: HashMap<String, i64> = HashMap::new();
        while next < end {
            let read = reader.read(next, 4 << 20, 100).await?;
            if read.batches.is_empty() {
                break;
            }
            next = read.next_offset(next);
            for (_, batch) in read.batches {
                for (offset, key, value) in batch? {
                    if key.starts_with(REQUEST_PREFIX) {
                        match value {
                            Some(_) => requests.insert(key.clone(), offset),
                            None => requests.remove(&key),
                        };
                    }
                    match value {
                        Some(v) => entries.insert(key, v),
                        None => entries.remove(&key),
                    };
                }
            }
        }
        // Forwarded management requests and answers are one-shot messages, not state.
        entries.retain(|k, _| !k.starts_with(REQUEST_PREFIX) && !k.starts_with(RESPONSE_PREFIX));
        *self.lock() = entries;
        // Requests not answered yet are read again by the active instance (`forward::serve`).
        Ok(RequestsAtLoad {
            from: requests.values().copied().min().unwrap_or(end).min(end),
            end,
            pending: requests.into_keys().collect(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Option<T> {
        let raw = self.lock().get(key).cloned()?;
        parse_value(key, &raw)
    }

    /// Who owns destination `topic`, if anyone.
    pub fn topic_owner(&self, topic: &str) -> Option<TopicRecord> {
        self.get(&format!("topic/{topic}"))
    }

    /// Every destination topic recorded as a mirror's.
    pub fn owned_topics(&self) -> Vec<(String, TopicRecord)> {
        let keys: Vec<String> = self.lock().keys().filter(|k| k.starts_with("topic/")).cloned().collect();
        keys.iter().filter_map(|k| Some((k.strip_prefix("topic/")?.to_owned(), self.get(k)?))).collect()
    }

    /// Topics that were mirror topics (their mirror was deleted).
    pub fn former_topics(&self) -> Vec<(String, FormerTopicRecord)> {
        let keys: Vec<String> = self.lock().keys().filter(|k| k.starts_with("former/")).cloned().collect();
        keys.iter()
            .filter_map(|k| Some((k.strip_prefix("former/")?.to_owned(), self.get(k)?)))
            .collect()
    }

    /// The stored state of `topic`-`partition`.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<PartitionRecord> {
        self.get(&format!("partition/{topic}/{partition}"))
    }

    /// Stores the state of `topic`-`partition` now, instead of with the next flush of the
    /// status board (a partition failed for good before it had a task, `fresh_topic`).
    pub(crate) async fn put_partition(&self, topic: &str, partition: i32, r: &PartitionRecord) -> Result<(), MirrorError> {
        self.write(vec![(format!("partition/{topic}/{partition}"), Some(json(r)?))]).await
    }

    /// The record stored under `key` (of the key schema, `records`), if it parses as `T`.
    pub(crate) fn record<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Option<T> {
        self.get(key)
    }

    /// Stores `value` under `key` (of the key schema, `records`).
    pub(crate) async fn put_record<T: Serialize>(&self, key: &str, value: &T) -> Result<(), MirrorError> {
        self.write(vec![(key.to_owned(), Some(json(value)?))]).await
    }

    /// Every stored mirror definition.
    pub fn mirrors(&self) -> Vec<MirrorRecord> {
        let keys: Vec<String> = self.lock().keys().filter(|k| k.starts_with("mirror/")).cloned().collect();
        keys.iter().filter_map(|k| self.get(k)).collect()
    }

    /// Stores a topic record. A new record, or one whose desired state or partition count
    /// changed, is announced to the `on_topic_change` hook once written (a writable flag alone
    /// is not: copying does not depend on it).
    pub async fn put_topic(&self, topic: &str, r: &TopicRecord) -> Result<(), MirrorError> {
        self.put_topic_recorded(topic, r).await.map(|_| ())
    }

    /// [`StateStore::put_topic`], returning an instant between the write's acknowledgement and
    /// the hook's call (what a shared-work barrier waits from, `share::Barrier::pass`).
    pub(crate) async fn put_topic_recorded(&self, topic: &str, r: &TopicRecord) -> Result<tokio::time::Instant, MirrorError> {
        let before = self.topic_owner(topic);
        self.write(vec![(format!("topic/{topic}"), Some(json(r)?))]).await?;
        let recorded = tokio::time::Instant::now();
        let copying_changed = before.is_none_or(|b| b.desired != r.desired || b.partitions != r.partitions || b.mirror != r.mirror);
        if copying_changed && let Some(hook) = self.topic_changed.get() {
            hook();
        }
        Ok(recorded)
    }

    /// Sets what is called after a topic record changed in what copying it depends on (the
    /// active instance of shared work starts a new generation then, so every member loads it).
    pub(crate) fn on_topic_change(&self, hook: TopicChanged) {
        let _ = self.topic_changed.set(hook);
    }

    /// Records a stopped topic writable (`r`) together with the final records of its partitions
    /// on `board` — each one's last copied offset and that offset's source epoch, the line a
    /// failback starts from — in one batch: no follower opens the topic before the line is
    /// stored. `board` is `None` where the partitions' owners recorded them (shared work).
    pub(crate) async fn put_stopped_topic(&self, topic: &str, r: &TopicRecord, board: Option<&StatusBoard>) -> Result<(), MirrorError> {
        let mut entries = vec![(format!("topic/{topic}"), Some(json(r)?))];
        for ((mirror, t, p), s) in board.map(StatusBoard::snapshot).unwrap_or_default() {
            if t == topic && mirror == r.mirror && p >= 0 && s.state != PartitionState::Preparing {
                entries.push((format!("partition/{topic}/{p}"), Some(json(&PartitionRecord::of(&mirror, &s))?)));
            }
        }
        self.write(entries).await
    }

    /// Stores a mirror definition; inline secrets of its source properties (config-file mirrors)
    /// are replaced by a placeholder — only `file:`/`env:` references reach the state topic.
    pub async fn put_mirror(&self, r: &MirrorRecord) -> Result<(), MirrorError> {
        let mut stored = r.clone();
        stored.definition.source_properties = r.definition.source_properties.for_storage();
        self.write(vec![(format!("mirror/{}", r.definition.name), Some(json(&stored)?))]).await
    }

    pub async fn delete_mirror(&self, name: &str) -> Result<(), MirrorError> {
        self.write(vec![(format!("mirror/{name}"), None)]).await
    }

    /// Removes a topic's ownership and partition records (its mirror was deleted) and records it
    /// as a former mirror topic.
    pub async fn detach_topic(&self, topic: &str, partitions: usize, former: &FormerTopicRecord) -> Result<(), MirrorError> {
        let mut entries = vec![(format!("topic/{topic}"), None), (format!("former/{topic}"), Some(json(former)?))];
        entries.extend((0..partitions).map(|p| (format!("partition/{topic}/{p}"), None)));
        self.write(entries).await
    }

    /// Writes `entries` (`None` = tombstone) as one batch, acks=all, and applies them locally.
    async fn write(&self, entries: Vec<(String, Option<Bytes>)>) -> Result<(), MirrorError> {
        if entries.is_empty() {
            return Ok(());
        }
        if !self.lease.holds() {
            return Err(MirrorError::Fenced);
        }
        let encoded: Vec<(Bytes, Option<Bytes>)> = entries.iter().map(|(k, v)| (Bytes::from(k.clone()), v.clone())).collect();
        let blob = records::encode(&encoded, now_ms()).map_err(MirrorError::Destination)?;
        let mut guard = self.writer.lock().await;
        // A leader move or a broker restart clears up by itself: retried (bounded). Writing a
        // batch twice after an unknown outcome is harmless (same keys and values, compacted).
        let deadline = tokio::time::Instant::now() + WRITE_RETRY;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            // Checked again before every attempt: the wait for the writer or a retry may
            // outlast the lease (a later holder may have written since).
            if !self.lease.holds() {
                return Err(MirrorError::Fenced);
            }
            let result = self.produce(&mut guard, blob.clone()).await;
            match result {
                Ok(()) => break,
                Err(e) => {
                    *guard = None; // reconnect to the (maybe new) leader
                    if !e.is_retriable() || tokio::time::Instant::now() + backoff.peek() > deadline {
                        return Err(e);
                    }
                    warn!(error = %e, topic = %self.topic, "state write failed; retrying");
                    tokio::time::sleep(backoff.next_pause()).await;
                }
            }
        }
        let mut map = self.lock();
        for (k, v) in entries {
            match v {
                Some(v) => map.insert(k, v),
                None => map.remove(&k),
            };
        }
        Ok(())
    }

    async fn produce(&self, conn: &mut Option<Connection>, blob: Bytes) -> Result<(), MirrorError> {
        if conn.is_none() {
            *conn = Some(self.destination.connect_leader(&self.topic, 0).await?.0);
        }
        let Some(c) = conn.as_mut() else { return Ok(()) };
        produce_to(c, &self.topic, blob).await
    }

    /// Stores the answer to a management request forwarded by a standby (`forward`) and
    /// removes the request.
    pub(crate) async fn put_forwarded_answer(&self, id: &str, frame: Bytes) -> Result<(), MirrorError> {
        let response = format!("{}{id}", RESPONSE_PREFIX);
        self.write(vec![(response.clone(), Some(frame)), (format!("{}{id}", REQUEST_PREFIX), None)])
            .await?;
        // Not kept in memory: only the standby that asked reads it (from the topic).
        self.lock().remove(&response);
        Ok(())
    }

    /// The forwarded requests the load found unanswered, and where reading for more starts.
    pub(crate) fn requests_at_load(&self) -> RequestsAtLoad {
        self.requests_at_load.clone()
    }

    /// Writes the records of partitions whose state or progress changed since the last call.
    async fn flush_partitions(&self, board: &StatusBoard, written: &mut HashMap<String, PartitionRecord>) -> Result<(), MirrorError> {
        let mut changed = Vec::new();
        for ((mirror, topic, partition), s) in board.snapshot() {
            if partition < 0 || s.state == PartitionState::Preparing {
                continue;
            }
            let key = format!("partition/{topic}/{partition}");
            let r = PartitionRecord::of(&mirror, &s);
            if written.get(&key) != Some(&r) {
                changed.push((key, r));
            }
        }
        let entries = changed
            .iter()
            .map(|(k, r)| Ok((k.clone(), Some(json(r)?))))
            .collect::<Result<Vec<_>, MirrorError>>()?;
        self.write(entries).await?;
        written.extend(changed);
        Ok(())
    }
}

/// Appends `entries` (`None` = tombstone) to partition 0 of `topic` as one batch, acks=all,
/// without the lease: a standby forwarding a management request (`forward`).
pub(crate) async fn append(destination: &ClusterClient, topic: &str, entries: &[(String, Option<Bytes>)]) -> Result<(), MirrorError> {
    let encoded: Vec<(Bytes, Option<Bytes>)> = entries.iter().map(|(k, v)| (Bytes::from(k.clone()), v.clone())).collect();
    let blob = records::encode(&encoded, now_ms()).map_err(MirrorError::Destination)?;
    let mut conn = destination.connect_leader(topic, 0).await?.0;
    produce_to(&mut conn, topic, blob).await
}

async fn produce_to(c: &mut Connection, topic: &str, blob: Bytes) -> Result<(), MirrorError> {
    let req = produce_request(TopicName(StrBytes::from_string(topic.to_owned())), 0, blob);
    let resp = c.send(&req, PRODUCE_VERSION).await.map_err(MirrorError::Destination)?;
    let code = resp
        .responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .map(|p| p.error_code)
        .next()
        .unwrap_or(3);
    if code != 0 {
        return Err(MirrorError::Broker {
            side: "destination",
            what: format!("write state to {topic}"),
            code,
        });
    }
    Ok(())
}

/// Parses a stored JSON value; `None` (logged) when it does not parse as `T`.
pub(crate) fn parse_value<T: for<'de> Deserialize<'de>>(key: &str, raw: &[u8]) -> Option<T> {
    match serde_json::from_slice(raw) {
        Ok(v) => Some(v),
        Err(e) => {
            warn!(key, error = %e, "unreadable state record ignored");
            None
        }
    }
}

fn json<T: Serialize>(v: &T) -> Result<Bytes, MirrorError> {
    serde_json::to_vec(v)
        .map(Bytes::from)
        .map_err(|e| MirrorError::Unsupported(format!("cannot serialise state: {e}")))
}

/// Writes changed partition state every `interval` until `stop`, then once more.
pub async fn persist(store: std::sync::Arc<StateStore>, board: StatusBoard, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut written = HashMap::new();
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(interval) => false,
            _ = stop.changed() => true,
        };
        if let Err(e) = store.flush_partitions(&board, &mut written).await {
            warn!(error = %e, "cannot write mirror state; retrying at the next interval");
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod empty;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_json_values_are_ignored_not_a_panic() {
        assert_eq!(parse_value::<TopicRecord>("topic/t", b"{not json"), None);
        assert_eq!(parse_value::<TopicRecord>("topic/t", b"[1,2]"), None);
    }
}
