//! One mirrored partition: resume at the destination's high watermark (offsets are identical,
//! so that is also the source offset to read next), fetch read_uncommitted from the source leader
//! (within the engine's memory budget, overlapping the previous Fetch's acknowledgements), plan,
//! pipeline fillers and batches through the partition's idempotent producer (a source
//! transaction's batches and markers through its destination transaction, `copy::txn`), and retry
//! transient failures with exponential backoff. A non-retriable error turns this partition
//! FAILED; the others keep going.
//!
//! This file owns the task and its life: the attempts, their retries and failure, halting for a
//! pause or a stop, and the counters it keeps. Where an attempt starts is `resume`'s; the steady
//! copy loop of an attempt is `stream`'s.

use kmp_protocol::kafka_protocol::ResponseError;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::cluster::client::ClusterClient;
use crate::copy::fetch::session::{FetchSessions, Heard};
use crate::copy::produce::mux::Producers;
use crate::copy::produce::sink::{PartitionSink, Written};
use crate::error::MirrorError;
use crate::state::records::Desired;
use crate::state::status::{PartitionKey, PartitionState, StatusBoard, now_ms};
use kmp_protocol::Backoff;

mod fill;
mod resume;
pub(crate) use resume::settled_offsets;
mod stream;

/// The source topic's id as the mirror knows it, shared by the topic's partition tasks: set
/// from the state topic, or by the first task that reaches the source.
pub type SourceTopicId = Arc<OnceLock<[u8; 16]>>;

/// What a partition task needs.
pub struct PartitionTask {
    pub key: PartitionKey,
    pub source: ClusterClient,
    pub source_topic_id: SourceTopicId,
    pub destination: ClusterClient,
    pub fetch_max_bytes: i32,
    /// Largest Fetch size the partition grows to while its Fetches come back full.
    pub fetch_grow_max_bytes: i32,
    /// The round trip from which a caught-up partition keeps a second Fetch in flight (`None`:
    /// never; see `copy::fetch::stream`).
    pub fetch_hedge_min_rtt: Option<Duration>,
    pub max_filler_batch_records: i32,
    /// Most bytes of a destination batch merged from small source batches (0: no merging).
    pub coalesce_max_bytes: usize,
    pub max_fill_offsets: i64,
    /// Long runs of fillers stamped 0 (a retention prefix) go as zstd batches of up to
    /// `batch::MAX_COMPRESSED_FILLER_RECORDS` records (`stream::fill`); off once the destination
    /// refused one as too large (a topic with `compression.type=uncompressed` stores them
    /// uncompressed, over its `max.message.bytes`).
    pub compressed_fillers: bool,
    /// Produce requests pipelined to the destination leader.
    pub max_in_flight: usize,
    /// The source fetch sessions of this mirror (they hold the engine-wide memory budget).
    pub fetchers: FetchSessions,
    /// The destination's produce lanes.
    pub producers: Producers,
    pub status: StatusBoard,
    /// The destination log end (destination offset) this task must find until its first write
    /// lands: 0 for a topic just created (or adopted empty) for the mirror, the line for one a
    /// failback took over (`failback`). Anything else there is not the mirror's and the
    /// partition fails (`fresh_topic`) instead of resuming after it.
    pub expect_end: Option<i64>,
    /// Source offset minus destination offset (`copy::shift`): 0 unless the source's log start
    /// was too far out to fill when the mirror created the topic. The task works in source
    /// offsets; `resume` and the sink convert where they talk to the destination.
    pub shift: i64,
    /// The source leader epochs of what this task copied (`copy::epochs`), and the partition's
    /// stored `(last mirror epoch, next offset)` an attempt resumes the line from.
    pub epochs: std::sync::Mutex<crate::copy::epochs::EpochLine>,
    pub stored_line: Option<(i32, i64)>,
}

const MESSAGE_TOO_LARGE: i16 = ResponseError::MessageTooLarge.code();
const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// An attempt streaming this long without an error counts as healthy (its failure starts the
/// back-off afresh).
const HEALTHY_FOR: Duration = Duration::from_secs(10);

impl PartitionTask {
    /// Mirrors until `stop` is set, a non-retriable error, or `desired` leaves mirroring.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>, mut desired: watch::Receiver<Desired>) {
        let mut backoff = Backoff::new(INITIAL_BACKOFF, MAX_BACKOFF);
        // Batches sent by a failed attempt whose outcome is unknown; the next attempt's settled
        // log end tells which of them landed, so the counters stay exact across retries.
        let mut uncertain = Vec::new();
        // The producer of the current attempt: kept here so that what it had in flight is known
        // whether the attempt failed or was cancelled (a pause or stop).
        let mut sink: Option<PartitionSink> = None;
        // Reads the source's real ends when no answer brings them, and reports a partition that
        // makes no progress while the source grows (`progress_watch`); ends with this task.
        let heard: Heard = Arc::new(std::sync::atomic::AtomicI64::new(-1));
        let watch = tokio::spawn(crate::copy::progress_watch::run(
            self.key.clone(),
            self.source.clone(),
            self.status.clone(),
            heard.clone(),
        ));
        let _watch = AbortOnDrop(watch);
        loop {
            let want = *desired.borrow_and_update();
            if want != Desired::Mirroring {
                return self.halt(want, uncertain).await;
            }
            let (started, written_before) = (tokio::time::Instant::now(), self.written());
            let result = tokio::select! {
                r = self.copy(&mut sink, &mut uncertain, &heard) => Some(r),
                _ = stop.changed() => return,
                _ = desired.changed() => None,
            };
            // An attempt that copied something, or ran healthy for a while, earns the next
            // failure a fresh back-off: a leader change after an hour of mirroring is retried
            // after 100 ms, not after the 5 s the start-up retries reached.
            if sink.is_some() && (self.written() > written_before || started.elapsed() >= HEALTHY_FOR) {
                backoff.reset();
            }
            if let Some(mut gone) = sink.take() {
                let (acknowledged, in_flight) = gone.abandon();
                debug!(
                    ?acknowledged,
                    ?in_flight,
                    "attempt ended: acknowledged batches counted, those in flight uncertain"
                );
                self.account(acknowledged);
                uncertain.extend(in_flight);
            }
            if self.written() > written_before || !uncertain.is_empty() {
                // The mirror wrote (or may have): what the destination holds is checked
                // against what it sent from now on (`landed`).
                self.expect_end = None;
            }
            let Some(result) = result else { continue };
            match result {
                Ok(()) => return,
                Err(MirrorError::Fenced) if self.producers.term_over() => {
                    info!("writes fenced: this instance is no longer the active mirror engine; partition stops here");
                    return;
                }
                // The lease lapsed without the term ending: an acknowledgement of the election's
                // heartbeat came late (a loaded machine), and the next one extends it again, or
                // the election revokes it. Nothing was written meanwhile (every write checks the
                // lease); the partition retries like after any retriable error, resuming from the
                // destination's settled log end. Before, it stopped here for good while the
                // instance stayed the active engine (found by the long tier, 2,000 partitions).
                Err(e @ MirrorError::Fenced) => {
                    warn!(backoff = ?backoff.peek(), "writes refused: the engine's lease lapsed for now; retrying once it holds again");
                    self.status.update(&self.key, |s| {
                        s.state = PartitionState::Retrying;
                        s.last_error = Some(e.to_string());
                    });
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_pause()) => {}
                        _ = stop.changed() => return,
                        _ = desired.changed() => {}
                    }
                }
                // A merged batch can be larger than any source batch, and the destination topic's
                // `max.message.bytes` (copied from the source) may be below the merge limit: this
                // partition then copies the source's batches as they came, from the log end.
                // (Once per task: if a source batch itself is too large, the next attempt FAILs.)
                // Compressed fillers first: a topic that stores its batches uncompressed holds 100,000
                // of them in one batch of 3.4 MB.
                Err(
                    e @ MirrorError::Broker {
                        side: "destination",
                        code: MESSAGE_TOO_LARGE,
                        ..
                    },
                ) if self.compressed_fillers => {
                    warn!(error = %e, "the destination refused a batch as too large; fillers are written uncompressed for this partition");
                    self.status.update(&self.key, |s| {
                        s.last_error = Some(format!("{e}; compressed fillers turned off for this partition"));
                    });
                    self.compressed_fillers = false;
                }
                Err(
                    e @ MirrorError::Broker {
                        side: "destination",
                        code: MESSAGE_TOO_LARGE,
                        ..
                    },
                ) if self.coalesce_max_bytes > 0 => {
                    warn!(
                        error = %e,
                        coalesce_max_bytes = self.coalesce_max_bytes,
                        "the destination refused a batch as too large; merging is off for this partition, source batches are written as they came"
                    );
                    self.status.update(&self.key, |s| {
                        s.last_error = Some(format!("{e}; merging turned off for this partition"));
                    });
                    self.coalesce_max_bytes = 0;
                }
                Err(e) if e.is_retriable() => {
                    warn!(error = %e, backoff = ?backoff.peek(), "retrying");
                    self.status.update(&self.key, |s| {
                        s.state = PartitionState::Retrying;
                        s.last_error = Some(e.shown(self.source.bootstrap()));
                    });
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_pause()) => {}
                        _ = stop.changed() => return,
                        _ = desired.changed() => {}
                    }
                }
                Err(e) => {
                    warn!(error = %e, "partition FAILED");
                    let invariant = matches!(e, MirrorError::Invariant(_) | MirrorError::Diverged(_));
                    self.status.update(&self.key, |s| {
                        s.invariant_violations += u64::from(invariant);
                        s.state = PartitionState::Failed;
                        s.last_error = Some(e.shown(self.source.bootstrap()));
                        s.sticky = e.is_sticky();
                    });
                    return;
                }
            }
        }
    }

    /// Stops copying for a pause or a stop: the copy was cancelled, so writes may still be in
    /// flight; once the destination log end has settled it is the last mirrored offset. The
    /// destination transactions still open stay so here: a stop aborts them once every
    /// partition halted, before the topic becomes writable (`copy::txn::abort_topic`).
    async fn halt(&self, to: Desired, uncertain: Vec<Written>) {
        let (transitional, done) = match to {
            Desired::Stopped => (PartitionState::Stopping, PartitionState::Stopped),
            _ => (PartitionState::Pausing, PartitionState::Paused),
        };
        self.status.update(&self.key, |s| s.state = transitional);
        let (_, topic, partition) = &self.key;
        let mut backoff = Backoff::new(INITIAL_BACKOFF, MAX_BACKOFF);
        let mut end = None;
        for _ in 0..8 {
            let settled = async {
                let (conn, epoch) = self.destination.leader_link(topic, *partition).await?;
                let (log_start, e) = self.settled(&conn, epoch).await?;
                self.account_landed(&conn, epoch, uncertain.clone(), log_start, e).await?;
                Ok::<_, MirrorError>(e)
            };
            match settled.await {
                Ok(e) => {
                    end = Some(e);
                    break;
                }
                Err(e) if !e.is_retriable() => {
                    warn!(error = %e, "partition FAILED while halting");
                    self.status.update(&self.key, |s| {
                        s.state = PartitionState::Failed;
                        s.last_error = Some(e.shown(self.source.bootstrap()));
                        s.sticky = e.is_sticky();
                    });
                    return;
                }
                Err(e) => {
                    warn!(error = %e, "cannot read the destination log end while halting; retrying");
                    tokio::time::sleep(backoff.next_pause()).await;
                }
            }
        }
        info!(state = done.as_str(), last_offset = ?end, "partition halted");
        self.status.update(&self.key, |s| {
            if let Some(e) = end {
                s.destination_next_offset = e;
                s.last_mirror_epoch = self.epoch_before(e, s.last_mirror_epoch);
            }
            s.state = done;
            s.last_error = None;
        });
    }

    /// Records and fillers this partition has written so far.
    fn written(&self) -> u64 {
        self.status.get(&self.key).map_or(0, |s| s.records_mirrored + s.filler_records)
    }

    /// Accounts batches the destination acknowledged (in offset order).
    fn account(&self, acknowledged: Vec<Written>) {
        if acknowledged.is_empty() {
            return;
        }
        let now = now_ms();
        self.status.update(&self.key, |s| {
            for w in &acknowledged {
                if w.filler {
                    s.filler_records += w.records as u64;
                } else {
                    s.records_mirrored += w.records as u64;
                    s.bytes_mirrored += w.bytes as u64;
                    s.record_write(w.max_timestamp, now);
                    s.rate.add(now, w.records as u64, w.bytes as u64);
                }
                s.destination_next_offset = s.destination_next_offset.max(w.base + i64::from(w.records));
            }
            s.last_mirror_epoch = self.epoch_before(s.destination_next_offset, s.last_mirror_epoch);
        });
    }

    /// The source epoch of the offset before `end` (what was copied last), or `known` where the
    /// line does not know it.
    pub(super) fn epoch_before(&self, end: i64, known: i32) -> i32 {
        let line = self.epochs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match line.epoch_at(end - 1) {
            -1 => known,
            e => e,
        }
    }
}

/// Aborts a spawned task when dropped (the task's owner ended, however it ended).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
