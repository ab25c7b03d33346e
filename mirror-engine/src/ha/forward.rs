//! Management requests through a standby (`engine.role = "auto"`): a standby runs no engine, so
//! a mutating mirror request (create, start, stop, pause, resume, delete) it receives is handed
//! to the active instance through the state topic both already read — the standby appends
//! `request/<id>` with the request frame, the active instance (which tails the topic from where
//! it loaded it) answers it as it answers its own clients and writes
//! `response/<id>` with the response frame (lease-fenced like every other state write, and
//! tombstoning the request), and the standby's follower delivers that answer to the waiting
//! caller, then tombstones it (an instance elected while its own forwarded request waits gets
//! the answer from its term directly). A request carries its caller's deadline: an instance that becomes
//! active reads the requests not answered yet from the state it loads, and carries out those
//! whose caller still waits. No address of the active instance, no credentials for its
//! listener and no network path between proxies are needed: only the destination cluster.
//!
//! Whoever can write the state topic can already change every mirror (the proxy refuses it to
//! its clients; the destination's ACLs must keep everyone but the proxy's principal from writing
//! it directly), so a request found there is trusted as much as the state itself; it is still
//! checked (id shape, size) and decoded by the protocol crate's hostile-input decoders, carried
//! out once however often it appears, and at most [`MAX_SERVED_AT_ONCE`] run at once. A request
//! nobody answers (no active instance, or it died meanwhile, or too many ran at once) times out
//! at the standby with a retriable error. Answering a request is `control::rpc`'s (the term hands
//! [`serve`] its `answer_for_standby`); following the topic on a standby is `follow`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use tokio::sync::{oneshot, watch};
use tracing::{debug, info, warn};

use crate::cluster::client::ClusterClient;
use crate::cluster::links::Lane;
use crate::error::MirrorError;
use crate::state::reader::StateReader;
use crate::state::records::{REQUEST_PREFIX, RESPONSE_PREFIX};
use crate::state::store::{RequestsAtLoad, StateStore, append};
use kmp_protocol::Backoff;

/// Largest request frame forwarded or served (mirror requests are small).
pub const MAX_FORWARDED_BYTES: usize = 1 << 20;
/// How long a standby waits for the active instance's answer.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tailing Fetch waits for a new entry.
const LONG_POLL_MS: i32 = 500;
/// The pause after a tailing Fetch that brought nothing new.
const IDLE_PAUSE: Duration = Duration::from_millis(20);

/// One instance's forwarding: the callers waiting for answers (as a standby) and the requests
/// being answered (as the active instance). Cheap to clone; shared by every term.
#[derive(Clone, Default)]
pub struct Forwarding {
    inner: Arc<Inner>,
}

struct Inner {
    pending: DashMap<String, oneshot::Sender<Bytes>>,
    /// Forwarded requests being carried out now (by id): one found twice runs once.
    serving: DashMap<String, ()>,
    /// Bounds how many forwarded requests run at once, whatever the state topic holds.
    slots: Arc<tokio::sync::Semaphore>,
}

/// How many forwarded requests the active instance carries out at once; more found meanwhile
/// are left unanswered (their callers time out with a retriable error).
pub const MAX_SERVED_AT_ONCE: usize = 32;

impl Default for Inner {
    fn default() -> Self {
        Self {
            pending: DashMap::new(),
            serving: DashMap::new(),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_SERVED_AT_ONCE)),
        }
    }
}

/// A caller's entry in `pending`, removed however its wait ends (answered, timed out, or the
/// caller's future dropped because its client went away).
struct Waiting<'a> {
    pending: &'a DashMap<String, oneshot::Sender<Bytes>>,
    id: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.pending.remove(self.id);
    }
}

/// A fresh request id: 32 lowercase hex digits, unique across instances (randomly keyed hashes
/// of the time, the process and a counter).
fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u64(n);
        h.finish()
    };
    format!("{:016x}{:016x}", half(1), half(2))
}

/// Whether `id` has the shape this module gives ids (32 lowercase hex digits).
fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Forwarding {
    /// A standby's follower read `response/<id>`: hands it to the caller waiting for it, if any.
    pub(crate) fn deliver(&self, id: &str, frame: &[u8]) {
        if let Some((_, waiting)) = self.inner.pending.remove(id) {
            let _ = waiting.send(Bytes::copy_from_slice(frame));
        }
    }

    /// Hands `frame` to the active instance through `topic` and waits (at most `limit`) for
    /// its answer.
    pub(crate) async fn forward(&self, destination: &ClusterClient, topic: &str, frame: Bytes, limit: Duration) -> Result<Bytes, ForwardError> {
        if frame.len() > MAX_FORWARDED_BYTES {
            return Err(ForwardError::TooLarge(frame.len()));
        }
        let id = new_id();
        let (tx, rx) = oneshot::channel();
        self.inner.pending.insert(id.clone(), tx);
        let waiting = Waiting {
            pending: &self.inner.pending,
            id: &id,
        };
        let deadline = tokio::time::Instant::now() + limit;
        // Retried while the state topic is being created or its leader moves, within `limit`.
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        // The value: the wall-clock deadline (ms, big-endian i64), then the frame; a request
        // found after its caller gave up is not carried out.
        let entry_frame_head = frame.get(..12).map(<[u8]>::to_vec).unwrap_or_default();
        let mut value = Vec::with_capacity(8 + frame.len());
        value.extend_from_slice(&(crate::state::status::now_ms() + i64::try_from(limit.as_millis()).unwrap_or(i64::MAX)).to_be_bytes());
        value.extend_from_slice(&frame);
        let entry = [(format!("{REQUEST_PREFIX}{id}"), Some(Bytes::from(value)))];
        while let Err(e) = append(destination, topic, &entry).await {
            if tokio::time::Instant::now() + backoff.peek() > deadline {
                return Err(ForwardError::Write(e));
            }
            debug!(error = %e, "cannot hand the request over yet; retrying");
            tokio::time::sleep(backoff.next_pause()).await;
        }
        let answer = tokio::time::timeout_at(deadline, rx).await;
        drop(waiting);
        match answer {
            Ok(Ok(frame)) if !answers(&entry_frame_head, &frame) => Err(ForwardError::Garbled),
            Ok(Ok(frame)) => {
                // The answer was for us alone: removed from the topic (best effort).
                let (destination, topic) = (destination.clone(), topic.to_owned());
                tokio::spawn(async move {
                    if let Err(e) = append(&destination, &topic, &[(format!("{RESPONSE_PREFIX}{id}"), None)]).await {
                        debug!(error = %e, "cannot remove a forwarded answer; compaction keeps it until then");
                    }
                });
                Ok(frame)
            }
            _ => Err(ForwardError::NoAnswer(limit)),
        }
    }
}

/// Why a forwarded request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("request of {0} bytes is too large to forward")]
    TooLarge(usize),
    #[error("cannot hand the request to the active instance: {0}")]
    Write(MirrorError),
    #[error("the active instance did not answer within {0:?} (none may be active right now); retry")]
    NoAnswer(Duration),
    #[error("the answer found for the request is not a response to it")]
    Garbled,
    /// Refused by the standby itself (the active instance would refuse it whatever its state);
    /// nothing was handed over.
    #[error("{message}")]
    Refused { code: i16, message: String },
}

/// Whether `response` is a whole response frame to the request frame starting with
/// `request_head` (size prefix, api key, version, correlation id): its size prefix matches its
/// length and it carries the request's correlation id. What the state topic hands back is
/// relayed to a client as is, so nothing else may pass.
fn answers(request_head: &[u8], response: &[u8]) -> bool {
    let (Some(size), Some(correlation)) = (response.get(..4), response.get(4..8)) else {
        return false;
    };
    let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
    usize::try_from(size).ok() == Some(response.len() - 4) && request_head.get(8..12) == Some(correlation)
}

/// The active instance's side: reads `topic` from where the load says and answers every request
/// found there with `answer` (below the load's end only those it found unanswered), until
/// `stop`. `answer` gives a request frame's response frame, `None` for a frame that is not a
/// request this instance answers (the standby times out).
pub(crate) async fn serve<A, F>(
    forwarding: Forwarding,
    store: Arc<StateStore>,
    destination: ClusterClient,
    topic: String,
    at_load: RequestsAtLoad,
    mut stop: watch::Receiver<bool>,
    answer: A,
) where
    A: Fn(Bytes) -> F,
    F: Future<Output = Option<Bytes>> + Send + 'static,
{
    let mut next = at_load.from.max(0);
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    info!(%topic, from = next, "answering management requests forwarded by standbys");
    let mut reader = StateReader::new(destination, topic.clone(), Lane::Fetch(0));
    loop {
        let read = reader.read(next, 4 << 20, LONG_POLL_MS);
        let fetched = tokio::select! {
            r = read => r,
            _ = stop.changed() => return,
        };
        match fetched {
            Ok(f) => {
                backoff.reset();
                let before = next;
                for (batch_end, entries) in f.batches {
                    let entries = match entries {
                        Ok(e) => e,
                        Err(e) => {
                            warn!(error = %e, offset = next, "undecodable state batch skipped while looking for forwarded requests");
                            Vec::new()
                        }
                    };
                    for (offset, key, value) in entries {
                        if offset < next || (offset < at_load.end && !at_load.pending.contains(&key)) {
                            continue;
                        }
                        if let (Some(id), Some(value)) = (key.strip_prefix(REQUEST_PREFIX), value) {
                            carry_out(&forwarding, &store, id, value, &answer);
                        }
                    }
                    next = next.max(batch_end);
                }
                if next == before {
                    // Nothing new (a long poll that ended empty, or a broker answering at once
                    // with nothing): a short pause, so no answer shape makes this spin.
                    tokio::select! {
                        _ = tokio::time::sleep(IDLE_PAUSE) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
            Err(e) => {
                debug!(error = %e, "cannot read the state topic for forwarded requests; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_pause()) => {}
                    _ = stop.changed() => return,
                }
            }
        }
    }
}

/// Splits a request value into its deadline and frame (`None`: malformed).
fn parse_request(value: &Bytes) -> Option<(i64, Bytes)> {
    let deadline = i64::from_be_bytes(value.get(..8)?.try_into().ok()?);
    let frame = value.slice(8..);
    (frame.len() <= MAX_FORWARDED_BYTES).then_some((deadline, frame))
}

/// Answers one forwarded request in its own task (a slow one never holds up the others).
fn carry_out<F>(forwarding: &Forwarding, store: &Arc<StateStore>, id: &str, value: Bytes, answer: impl Fn(Bytes) -> F)
where
    F: Future<Output = Option<Bytes>> + Send + 'static,
{
    let parsed = parse_request(&value).filter(|_| valid_id(id));
    let Some((deadline, frame)) = parsed else {
        warn!(key = %format!("{REQUEST_PREFIX}{id}"), bytes = value.len(), "malformed forwarded request ignored");
        return;
    };
    if crate::state::status::now_ms() > deadline {
        debug!(%id, "forwarded request found after its caller gave up; not carried out");
        return;
    }
    let Some(serving) = Serving::claim(&forwarding.inner, id) else {
        return;
    };
    let (store, id, answered, forwarding) = (store.clone(), id.to_owned(), answer(frame), forwarding.clone());
    tokio::spawn(async move {
        let _serving = serving;
        let Some(response) = answered.await else {
            warn!(%id, "forwarded request not answered: not a management request this instance answers");
            return;
        };
        match store.put_forwarded_answer(&id, response.clone()).await {
            Ok(()) => debug!(%id, "forwarded request answered"),
            Err(e) => warn!(%id, error = %e, "cannot store the answer to a forwarded request"),
        }
        // The caller may be this very instance: it handed the request over as a standby and was
        // elected before the answer came, so no follower of its own reads the answer any more.
        forwarding.deliver(&id, &response);
    });
}

/// One forwarded request being carried out: its slot and its id in `serving`, both given back
/// when it ends.
struct Serving {
    inner: Arc<Inner>,
    id: String,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Serving {
    /// Claims a slot for request `id`; `None` when it runs already or every slot is taken.
    fn claim(inner: &Arc<Inner>, id: &str) -> Option<Self> {
        use dashmap::mapref::entry::Entry;
        let Ok(slot) = inner.slots.clone().try_acquire_owned() else {
            warn!(%id, limit = MAX_SERVED_AT_ONCE, "too many forwarded requests at once; this one is left unanswered (its caller retries)");
            return None;
        };
        match inner.serving.entry(id.to_owned()) {
            Entry::Occupied(_) => {
                debug!(%id, "forwarded request found again while it runs; carried out once");
                None
            }
            Entry::Vacant(v) => {
                v.insert(());
                Some(Self {
                    inner: inner.clone(),
                    id: id.to_owned(),
                    _slot: slot,
                })
            }
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.inner.serving.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_of_the_shape_given_are_served() {
        let id = new_id();
        assert!(valid_id(&id), "{id}");
        assert!(!valid_id(""));
        assert!(!valid_id("../../etc"));
        assert!(!valid_id(&"A".repeat(32)));
        assert!(!valid_id(&"a".repeat(33)));
    }

    #[test]
    fn a_request_value_is_a_deadline_then_the_frame_and_anything_shorter_is_refused() {
        let mut v = 1234i64.to_be_bytes().to_vec();
        v.extend_from_slice(b"frame");
        assert_eq!(parse_request(&Bytes::from(v)), Some((1234, Bytes::from_static(b"frame"))));
        assert_eq!(parse_request(&Bytes::from_static(b"short")), None);
        let mut huge = vec![0u8; 8];
        huge.resize(8 + MAX_FORWARDED_BYTES + 1, 0);
        assert_eq!(parse_request(&Bytes::from(huge)), None);
    }

    #[test]
    fn only_a_whole_frame_with_the_requests_correlation_id_counts_as_its_answer() {
        // size 12, api key 94, version 0, correlation id 7, …
        let request = [0, 0, 0, 12, 0, 94, 0, 0, 0, 0, 0, 7];
        assert!(answers(&request, &[0, 0, 0, 6, 0, 0, 0, 7, 1, 2]));
        assert!(!answers(&request, &[0, 0, 0, 6, 0, 0, 0, 8, 1, 2]), "another correlation id");
        assert!(!answers(&request, &[0, 0, 0, 9, 0, 0, 0, 7, 1, 2]), "a size prefix that lies");
        assert!(!answers(&request, &[0, 0, 0]), "too short");
        assert!(!answers(&[0, 0], &[0, 0, 0, 4, 0, 0, 0, 7]), "no request head");
    }

    #[tokio::test]
    async fn an_answer_reaches_only_the_caller_waiting_for_it() {
        let f = Forwarding::default();
        let (tx, rx) = oneshot::channel();
        f.inner.pending.insert("a".repeat(32), tx);
        f.deliver(&"b".repeat(32), b"other");
        f.deliver(&"a".repeat(32), b"mine");
        assert_eq!(rx.await.unwrap(), Bytes::from_static(b"mine"));
        assert!(f.inner.pending.is_empty());
    }

    #[test]
    fn a_request_runs_once_however_often_it_is_found_and_never_more_than_the_limit_at_once() {
        let f = Forwarding::default();
        let first = Serving::claim(&f.inner, &"a".repeat(32)).expect("a free slot");
        assert!(Serving::claim(&f.inner, &"a".repeat(32)).is_none(), "the same id while it runs");
        drop(first);
        assert!(Serving::claim(&f.inner, &"a".repeat(32)).is_some(), "once it ended it may run again");
        let held: Vec<_> = (0..MAX_SERVED_AT_ONCE)
            .map(|i| Serving::claim(&f.inner, &format!("{i:032x}")).expect("within the limit"))
            .collect();
        assert!(Serving::claim(&f.inner, &"b".repeat(32)).is_none(), "past the limit");
        drop(held);
        assert!(f.inner.serving.is_empty(), "every id given back");
        assert!(Serving::claim(&f.inner, &"b".repeat(32)).is_some(), "slots given back");
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_leaves_no_waiting_entry_behind() {
        let f = Forwarding::default();
        // Nothing listens here: the append retries until the caller is dropped.
        let destination = ClusterClient::new("destination", vec!["127.0.0.1:1".into()], Duration::from_millis(50));
        let call = f.forward(
            &destination,
            "t",
            Bytes::from_static(&[0, 0, 0, 8, 0, 94, 0, 0, 0, 0, 0, 1]),
            Duration::from_secs(30),
        );
        let gave_up = tokio::time::timeout(Duration::from_millis(300), call).await;
        assert!(gave_up.is_err(), "still waiting when the caller went away");
        assert!(f.inner.pending.is_empty(), "the dropped caller's entry is gone");
    }
}
