//! One mirrored partition: resume at the destination's high watermark (offsets are identical,
//! so that is also the source offset to read next), fetch read_committed from the source leader
//! (within the engine's memory budget, overlapping the previous Fetch's acknowledgements), plan,
//! pipeline fillers and batches through the partition's idempotent producer, and retry
//! transient failures with exponential backoff. A non-retriable error turns this partition
//! FAILED; the others keep going.

use kmp_protocol::kafka_protocol::ResponseError;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::cluster::client::{ClusterClient, leader_log_end, offsets};
use crate::cluster::links::Lane;
use crate::copy::answer_check;
use crate::copy::budget::Reservation;
use crate::copy::fetch::session::{FetchSessions, Heard, Wanted};
use crate::copy::fetch::size::next_fetch_size;
use crate::copy::fetch::stream::FetchStream;
use crate::copy::plan::action::Action;
use crate::copy::plan::{AbortTracker, Plan, plan_coalesced};
use crate::copy::produce::landed::{self, ReadBack};
use crate::copy::produce::mux::Producers;
use crate::copy::produce::sink::{PartitionSink, Written};
use crate::error::MirrorError;
use crate::state::records::Desired;
use crate::state::status::{PartitionKey, PartitionState, StatusBoard, now_ms};

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
    /// Produce requests pipelined to the destination leader.
    pub max_in_flight: usize,
    /// The source fetch sessions of this mirror (they hold the engine-wide memory budget).
    pub fetchers: FetchSessions,
    /// The destination's produce lanes.
    pub producers: Producers,
    pub status: StatusBoard,
    /// The destination topic was just created (or adopted empty) for the mirror: until this
    /// task's first write lands the partition must still be empty, from offset 0 on; a record
    /// there is not the mirror's and the partition fails (`fresh_topic`) instead of resuming
    /// after it.
    pub expect_empty: bool,
}

const OFFSET_OUT_OF_RANGE: i16 = ResponseError::OffsetOutOfRange.code();
const MESSAGE_TOO_LARGE: i16 = ResponseError::MessageTooLarge.code();
const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
const UNKNOWN_TOPIC_ID: i16 = ResponseError::UnknownTopicId.code();
/// How long the destination high watermark must stay unchanged before the engine trusts it as
/// the log end (a write of a previous run may still be replicating; see `settled_offsets`).
const SETTLE: Duration = Duration::from_millis(700);
/// Longest wait for the destination high watermark to reach the leader's log end before the
/// attempt fails (retriable) and reports why.
const UNSETTLED_LIMIT: Duration = Duration::from_secs(45);
const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// An attempt streaming this long without an error counts as healthy (its failure starts the
/// back-off afresh).
const HEALTHY_FOR: Duration = Duration::from_secs(10);

/// After a fill moved the partition past offsets no answer covered (the source's log start
/// moved): what was learnt before the jump is dropped. Fetches still in flight were asked before
/// it (an answer to one would be cut to the new position and could hide an aborted transaction
/// spanning it that no answer reported yet), and the abort state may name transactions whose
/// markers lay in the deleted range. The next Fetch, asked at the new position, reports every
/// aborted transaction spanning it again (Kafka returns those overlapping the fetched range).
fn forget_before_jump(fetches: &mut FetchStream, aborts: &mut AbortTracker) {
    fetches.reset();
    *aborts = AbortTracker::default();
}

/// Whether the source's `layout` of the topic shows it gone, or replaced by another topic of the
/// same name (another id) since the mirror took up the one with id `known`.
fn replaced(layout: &crate::cluster::client::TopicLayout, known: [u8; 16]) -> bool {
    layout.error_code == UNKNOWN_TOPIC_OR_PARTITION || (layout.error_code == 0 && known != [0; 16] && layout.topic_id != known)
}

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
                self.expect_empty = false;
            }
            let Some(result) = result else { continue };
            match result {
                Ok(()) => return,
                Err(MirrorError::Fenced) => {
                    info!("writes fenced: this instance is no longer the active mirror engine; partition stops here");
                    return;
                }
                // A merged batch can be larger than any source batch, and the destination topic's
                // `max.message.bytes` (copied from the source) may be below the merge limit: this
                // partition then copies the source's batches as they came, from the log end.
                // (Once per task: if a source batch itself is too large, the next attempt FAILs.)
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
                        s.last_error = Some(e.to_string());
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
                        s.last_error = Some(e.to_string());
                        s.sticky = e.is_sticky();
                    });
                    return;
                }
            }
        }
    }

    /// Stops copying for a pause or a stop: the copy was cancelled, so writes may still be in
    /// flight; once the destination log end has settled it is the last mirrored offset.
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
                let (log_start, e) = settled_offsets(&conn, topic, *partition, epoch).await?;
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
                        s.last_error = Some(e.to_string());
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
            }
            s.state = done;
            s.last_error = None;
        });
    }

    /// One attempt: settle the destination, check what the previous attempt left, then copy
    /// through a new producer (left in `slot` for the caller to abandon when this ends).
    async fn copy(&self, slot: &mut Option<PartitionSink>, uncertain: &mut Vec<Written>, heard: &Heard) -> Result<(), MirrorError> {
        let (_, topic, partition) = &self.key;
        let (topic, partition) = (topic.as_str(), *partition);
        let (dest_conn, epoch) = self.destination.leader_link(topic, partition).await?;
        let (dest_log_start, next) = settled_offsets(&dest_conn, topic, partition, epoch).await?;
        if self.expect_empty && uncertain.is_empty() && next > 0 {
            return Err(crate::copy::fresh_topic::forged(topic, partition, 0, next));
        }
        self.account_landed(&dest_conn, epoch, uncertain.clone(), dest_log_start, next).await?;
        uncertain.clear();
        let producer = self.producers.identity()?;
        let sink = slot.insert(PartitionSink::open(
            dest_conn,
            self.producers.clone(),
            producer,
            topic,
            partition,
            self.max_in_flight,
        ));
        self.stream(sink, dest_log_start, next, heard).await
    }

    /// Copies from `next` on through `sink` until an error (`heard`: when the source last
    /// answered a Fetch for the partition, see `copy::fetch::session::Wanted::heard`).
    async fn stream(&self, sink: &mut PartitionSink, mut dest_log_start: i64, mut next: i64, heard: &Heard) -> Result<(), MirrorError> {
        let (_, topic, partition) = &self.key;
        let (topic, partition) = (topic.as_str(), *partition);
        let layout = self.source.layout(topic).await?;
        let known = self.source_topic_id.get().copied();
        if known.is_some_and(|id| replaced(&layout, id)) {
            return Err(MirrorError::SourceTopicDeleted(topic.to_owned()));
        }
        let (leader, leader_epoch) = self.source.leader_in(&layout, topic, partition)?;
        let topic_id = *self.source_topic_id.get_or_init(|| layout.topic_id);
        // Aborted transactions reported by the answers so far, across answers. When a fill moves
        // the partition past offsets no answer covered (the source's log start moved), it starts
        // afresh: a transaction whose abort marker lay in the deleted range would otherwise leave
        // its producer marked aborted, and that producer's later committed batches would become
        // fillers. The next Fetch, at the new position, reports again every aborted transaction
        // spanning it (Kafka returns those overlapping the fetched range).
        let mut aborts = AbortTracker::default();
        info!(next, leader_epoch, "mirroring from the destination's high watermark");
        self.status.update(&self.key, |s| {
            s.state = PartitionState::Mirroring;
            s.destination_next_offset = next;
            s.last_error = None;
        });
        // The previous Fetch's planned writes, with its data's share of the engine budget (held
        // until the destination acknowledged all of it).
        let mut pending: Option<(Plan, i64, Reservation)> = None;
        // Bytes asked for: grows while catching up, shrinks while idle (`next_fetch_size`).
        let mut want = self.fetch_max_bytes;
        // Its place among the source's growing partitions (they share `fetch_grow_max_bytes`).
        let mut growth = self.fetchers.growth().slot();
        // The highest source high watermark and last stable offset answers reported.
        let mut source_ends = (-1i64, -1i64);
        let mut fetches = FetchStream::new(self.fetchers.clone(), &leader, &topic_id, partition, self.fetch_hedge_min_rtt);
        // Whether `next` is the end of a batch the source gave (`answer_check`): not known at the
        // start of an attempt (the destination may end inside a batch) nor after a fill.
        let mut aligned = false;
        loop {
            let want_now = Wanted {
                topic: topic.to_owned(),
                topic_id,
                partition,
                offset: next,
                leader_epoch,
                max_bytes: want,
                heard: Some(heard.clone()),
            };
            // The next Fetch (from the planned end of the previous one) runs while the previous
            // one's batches are written and acknowledged, so a distant source or a large backlog
            // keeps one Fetch in flight all the time. An idle partition's fetch waits until data
            // arrives: a failed write must not wait for it (try_join returns on the error and
            // withdraws the fetch).
            let written = pending.take();
            let (fetched, ()) = tokio::try_join!(async { Ok(fetches.next(&want_now).await) }, async {
                if let Some((planned, log_start, room)) = written {
                    self.write_planned(sink, planned, log_start, &mut dest_log_start).await?;
                    let r = sink.flush().await;
                    self.account(sink.take_acknowledged());
                    drop(room);
                    return r;
                }
                Ok(())
            })?;
            let fetched = match fetched {
                Err(MirrorError::Broker {
                    code: UNKNOWN_TOPIC_OR_PARTITION | UNKNOWN_TOPIC_ID,
                    ..
                }) if replaced(&*self.source.layout(topic).await?, topic_id) => {
                    // The topic existed when this task started: it was deleted on the source, or
                    // deleted and recreated (another topic under the same name).
                    return Err(MirrorError::SourceTopicDeleted(topic.to_owned()));
                }
                Err(MirrorError::Broker { code: OFFSET_OUT_OF_RANGE, .. }) => {
                    let src = self.source.link(&leader, Lane::Control).await?;
                    let (start, end) = offsets("source", &src, topic, partition).await?;
                    if next < start {
                        // The source deleted this range (retention/DeleteRecords): fill it.
                        next = self.fill(sink, next, start - next, 0).await?;
                        forget_before_jump(&mut fetches, &mut aborts);
                        aligned = false;
                        continue;
                    }
                    return Err(MirrorError::Unsupported(format!(
                        "destination is at offset {next} but the source ends at {end}: the source lost data (unclean election or recreated topic)"
                    )));
                }
                other => other?,
            };
            let (fetched, room): (_, Reservation) = fetched;
            // Before anything of the answer is planned or written: a source that relabels its
            // batches or claims offsets it does not have fails the partition here.
            let checked = answer_check::check(next, aligned, &fetched)?;
            if next < fetched.log_start_offset && fetched.batches.is_empty() {
                if fetched.log_start_offset - next > answer_check::CONFIRM_GAP {
                    self.confirm_source(&leader, Claim::LogStart(fetched.log_start_offset)).await?;
                }
                next = self.fill(sink, next, fetched.log_start_offset - next, 0).await?;
                forget_before_jump(&mut fetches, &mut aborts);
                aligned = false;
                continue;
            }
            if let Some(end) = checked.confirm_end {
                self.confirm_source(&leader, Claim::End(end)).await?;
            }
            let last_end = answer_check::last_end(&fetched);
            aborts.extend(fetched.aborted.iter().copied());
            let planned = plan_coalesced(next, fetched.batches, &mut aborts, self.coalesce_max_bytes)?;
            if planned.reencoded > 0 || planned.coalesced > 0 {
                self.status.update(&self.key, |s| {
                    s.reencoded_batches += planned.reencoded;
                    s.coalesced_batches += planned.coalesced;
                });
            }
            let source_end = if fetched.last_stable_offset >= 0 {
                fetched.last_stable_offset
            } else {
                fetched.high_watermark
            };
            let ceiling = growth.ceiling(self.fetch_grow_max_bytes, self.fetch_max_bytes);
            // An answer that left data on the source: catching up, bound by bandwidth (one
            // Fetch at a time, no duplicates). Sized by what the broker sent, duplicates included.
            let behind = source_end > planned.next;
            fetches.set_catching_up(behind);
            want = next_fetch_size(want, fetches.answered_bytes(), behind, self.fetch_max_bytes, ceiling).min(ceiling);
            growth.set_grown(want > self.fetch_max_bytes);
            // With a second Fetch in flight, answers may reach the broker and come back out of
            // order: the source's ends shown (and the lag derived from them) never go back
            // within an attempt.
            source_ends = (source_ends.0.max(fetched.high_watermark), source_ends.1.max(fetched.last_stable_offset));
            self.status.update(&self.key, |s| {
                // The progress watch may have read newer ends meanwhile (`progress_watch`).
                s.source_high_watermark = s.source_high_watermark.max(source_ends.0);
                s.source_last_stable_offset = s.source_last_stable_offset.max(source_ends.1);
                s.source_ends_read_ms = now_ms();
            });
            next = planned.next;
            aligned = answer_check::aligned_after(last_end, next, aligned);
            pending = Some((planned, fetched.log_start_offset, room));
        }
    }

    /// Confirms with the source leader's ListOffsets (on the control connection) what an answer
    /// claims before the fillers it implies are written (`answer_check`).
    async fn confirm_source(&self, leader: &str, claim: Claim) -> Result<(), MirrorError> {
        let (_, topic, partition) = &self.key;
        let src = self.source.link(leader, Lane::Control).await?;
        let (start, end) = offsets("source", &src, topic, *partition).await?;
        match claim {
            Claim::End(e) if end < e => Err(MirrorError::SourceContradiction(format!(
                "a Fetch answer holds data up to offset {e}, but ListOffsets says the source ends at {end}"
            ))),
            Claim::LogStart(s) if start < s => Err(MirrorError::SourceContradiction(format!(
                "a Fetch answer says the log starts at {s}, but ListOffsets says {start}"
            ))),
            _ => Ok(()),
        }
    }

    /// Writes one Fetch's planned actions (fillers, batches, re-encoded runs) through `sink`, then
    /// follows the source's retention: its log start `source_log_start` moved past data the
    /// destination keeps. Fails closed if the writes would not end where the plan said.
    async fn write_planned(&self, sink: &mut PartitionSink, planned: Plan, source_log_start: i64, dest_log_start: &mut i64) -> Result<(), MirrorError> {
        let planned_end = planned.next;
        let mut next = planned.actions.first().map_or(planned_end, |a| a.range().0);
        for action in planned.actions {
            match action {
                Action::Fill { base, count, timestamp } => next = self.fill(sink, base, count, timestamp).await?,
                Action::Write { base, header, batch } => {
                    sink.write_batch(&batch, header.records_count, base, header.max_timestamp).await?;
                    next = header.next_offset();
                }
                Action::Run {
                    base,
                    records,
                    max_timestamp,
                    batch,
                } => {
                    sink.write_batch(&batch, records, base, max_timestamp).await?;
                    next = base + i64::from(records);
                }
            }
        }
        if next != planned_end {
            return Err(MirrorError::Invariant(format!(
                "the writes of a fetch ended at offset {next}, its plan at {planned_end}"
            )));
        }
        let follow = source_log_start.min(next);
        if follow > *dest_log_start {
            sink.delete_records_before(follow).await?;
            self.account(sink.take_acknowledged());
            *dest_log_start = follow;
        }
        Ok(())
    }

    /// Checks on the destination (leader connection `conn`, leader epoch `epoch`) which batches of
    /// a failed or cancelled attempt landed between the log start `log_start` and the settled log
    /// end `end`, and accounts them;
    /// fails closed if anything else is there (`landed`).
    async fn account_landed(
        &self,
        conn: &kmp_protocol::shared_client::SharedConnection,
        epoch: i32,
        uncertain: Vec<Written>,
        log_start: i64,
        end: i64,
    ) -> Result<(), MirrorError> {
        if uncertain.is_empty() {
            return Ok(());
        }
        let (_, topic, partition) = &self.key;
        let topic_id = self.destination.layout(topic).await?.topic_id;
        let at = ReadBack {
            conn,
            topic,
            topic_id,
            partition: *partition,
            leader_epoch: epoch,
        };
        let landed = landed::verify(&at, uncertain, log_start, end).await?;
        debug!(end, ?landed, "batches of the previous attempt found on the destination");
        self.account(landed);
        Ok(())
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
        });
    }

    /// Sends `count` fillers from `base` in batches; returns the new planned log end.
    async fn fill(&self, sink: &mut PartitionSink, base: i64, count: i64, timestamp: i64) -> Result<i64, MirrorError> {
        if count > self.max_fill_offsets {
            return Err(MirrorError::FillTooLarge {
                base,
                count,
                limit: self.max_fill_offsets,
            });
        }
        let long = count > i64::from(self.max_filler_batch_records);
        if long {
            info!(base, count, "filling offsets without visible source data");
            self.status.update(&self.key, |s| s.state = PartitionState::Filling);
        }
        let mut next = base;
        let end = base + count;
        while next < end {
            let n = (end - next).min(i64::from(self.max_filler_batch_records)) as i32;
            sink.write_fillers(n, timestamp, next).await?;
            next += i64::from(n);
            self.account(sink.take_acknowledged());
        }
        if long {
            sink.flush().await?;
            self.account(sink.take_acknowledged());
            self.status.update(&self.key, |s| s.state = PartitionState::Mirroring);
        }
        Ok(next)
    }
}

/// What a Fetch answer claimed that ListOffsets must confirm.
#[derive(Debug, Clone, Copy)]
enum Claim {
    /// The source holds data up to this offset.
    End(i64),
    /// The source's log starts here (the offsets before it become fillers).
    LogStart(i64),
}

/// Aborts a spawned task when dropped (the task's owner ended, however it ended).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `(log start, high watermark)` once the high watermark has stopped moving and equals the
/// leader's log end. After a crash or a retried write, a batch the previous producer sent may
/// still be on its way to the followers: the leader has it but the high watermark does not yet —
/// for up to `replica.lag.time.max.ms` when an in-sync follower is down. Writing before it
/// settles would place the next batch after that one and break the identical-offset invariant,
/// so the engine waits (bounded by `UNSETTLED_LIMIT`, then retries with backoff).
async fn settled_offsets(conn: &kmp_protocol::shared_client::SharedConnection, topic: &str, partition: i32, epoch: i32) -> Result<(i64, i64), MirrorError> {
    let deadline = tokio::time::Instant::now() + UNSETTLED_LIMIT;
    let mut last = offsets("destination", conn, topic, partition).await?;
    loop {
        tokio::time::sleep(SETTLE).await;
        let now = offsets("destination", conn, topic, partition).await?;
        if now == last {
            // Epoch -1 (unknown) cannot be asked about; the high watermark alone then.
            let end = if epoch >= 0 {
                leader_log_end("destination", conn, topic, partition, epoch).await?
            } else {
                now.1
            };
            if end == now.1 {
                return Ok(now);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MirrorError::Broker {
                    side: "destination",
                    what: format!(
                        "{topic}-{partition}: the leader holds offsets up to {end} beyond the high watermark {} (an in-sync replica down?); waiting before writing",
                        now.1
                    ),
                    code: ResponseError::RequestTimedOut.code(), // retried with backoff
                });
            }
        }
        last = now;
    }
}
