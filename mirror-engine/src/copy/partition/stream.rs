//! The steady copy loop of one attempt: fetch from the source leader, check the answer, plan,
//! write (fillers, batches, merged runs) while the next Fetch is in flight, confirm with
//! ListOffsets what an answer claims before filling, and follow the source's retention.

use kmp_protocol::kafka_protocol::ResponseError;

use tracing::info;

use super::PartitionTask;
use crate::cluster::client::offsets;
use crate::cluster::links::Lane;
use crate::copy::answer_check;
use crate::copy::budget::Reservation;
use crate::copy::fetch::session::{Heard, Wanted};
use crate::copy::fetch::size::next_fetch_size;
use crate::copy::fetch::stream::FetchStream;
use crate::copy::plan::action::Action;
use crate::copy::plan::{Plan, plan_coalesced};
use crate::copy::produce::sink::PartitionSink;
use crate::error::MirrorError;
use crate::state::status::{PartitionState, now_ms};

const OFFSET_OUT_OF_RANGE: i16 = ResponseError::OffsetOutOfRange.code();
const UNKNOWN_TOPIC_OR_PARTITION: i16 = ResponseError::UnknownTopicOrPartition.code();
const UNKNOWN_TOPIC_ID: i16 = ResponseError::UnknownTopicId.code();

/// After a fill moved the partition past offsets no answer covered (the source's log start
/// moved): Fetches still in flight were asked before it, and their answers are dropped.
fn forget_before_jump(fetches: &mut FetchStream) {
    fetches.reset();
}

/// Whether the source's `layout` of the topic shows it gone, or replaced by another topic of the
/// same name (another id) since the mirror took up the one with id `known`.
fn replaced(layout: &crate::cluster::client::TopicLayout, known: [u8; 16]) -> bool {
    layout.error_code == UNKNOWN_TOPIC_OR_PARTITION || (layout.error_code == 0 && known != [0; 16] && layout.topic_id != known)
}

impl PartitionTask {
    /// Copies from `next` on through `sink` until an error (`heard`: when the source last
    /// answered a Fetch for the partition, see `copy::fetch::session::Wanted::heard`).
    pub(super) async fn stream(&self, sink: &mut PartitionSink, mut dest_log_start: i64, mut next: i64, heard: &Heard) -> Result<(), MirrorError> {
        let (_, topic, partition) = &self.key;
        let (topic, partition) = (topic.as_str(), *partition);
        let layout = self.source.layout(topic).await?;
        let known = self.source_topic_id.get().copied();
        if known.is_some_and(|id| replaced(&layout, id)) {
            return Err(MirrorError::SourceTopicDeleted(topic.to_owned()));
        }
        let (leader, leader_epoch) = self.source.leader_in(&layout, topic, partition)?;
        let topic_id = *self.source_topic_id.get_or_init(|| layout.topic_id);
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
                        next = sink.abort_before_jump(next, start).await?;
                        next = self.fill(sink, next, start - next, Some(&mut dest_log_start)).await?;
                        forget_before_jump(&mut fetches);
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
                next = sink.abort_before_jump(next, fetched.log_start_offset).await?;
                next = self.fill(sink, next, fetched.log_start_offset - next, Some(&mut dest_log_start)).await?;
                forget_before_jump(&mut fetches);
                aligned = false;
                continue;
            }
            if let Some(end) = checked.confirm_end {
                self.confirm_source(&leader, Claim::End(end)).await?;
            }
            let last_end = answer_check::last_end(&fetched);
            {
                // The source epochs of what this answer copies (the line a stop records).
                let mut line = self.epochs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                for (h, _) in fetched.batches.iter().filter(|(h, _)| h.next_offset() > next) {
                    line.observe(h.partition_leader_epoch, h.base_offset.max(next));
                }
            }
            let planned = plan_coalesced(next, fetched.batches, self.coalesce_max_bytes)?;
            if planned.reencoded > 0 || planned.coalesced > 0 {
                self.status.update(&self.key, |s| {
                    s.reencoded_batches += planned.reencoded;
                    s.coalesced_batches += planned.coalesced;
                });
            }
            // Copied up to the high watermark, open transactions included (`copy::txn`).
            let source_end = fetched.high_watermark;
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
                Action::Fill { base, count } => next = self.fill(sink, base, count, None).await?,
                Action::Write { base, header, batch } if header.is_transactional() => {
                    let span = header.last_offset_delta + 1;
                    sink.write_txn_batch(header.producer_id, &batch, header.records_count, base, span, header.max_timestamp)
                        .await?;
                    next = header.next_offset();
                }
                Action::Write { base, header, batch } => {
                    sink.write_batch(&batch, header.records_count, base, header.max_timestamp).await?;
                    next = header.next_offset();
                }
                Action::Marker { base, producer_id, commit } => {
                    sink.end_txn(producer_id, commit, base).await?;
                    self.account(sink.take_acknowledged());
                    next = base + 1;
                    self.status.update(&self.key, |s| {
                        s.destination_next_offset = s.destination_next_offset.max(next);
                        s.last_mirror_epoch = self.epoch_before(s.destination_next_offset, s.last_mirror_epoch);
                    });
                }
                Action::Run {
                    base,
                    records,
                    max_timestamp,
                    batch,
                } => {
                    match kmp_protocol::batch::parse_header(&batch).map_err(MirrorError::Source)? {
                        h if h.is_transactional() => sink.write_txn_batch(h.producer_id, &batch, records, base, records, max_timestamp).await?,
                        _ => sink.write_batch(&batch, records, base, max_timestamp).await?,
                    }
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
}

/// What a Fetch answer claimed that ListOffsets must confirm.
#[derive(Debug, Clone, Copy)]
enum Claim {
    /// The source holds data up to this offset.
    End(i64),
    /// The source's log starts here (the offsets before it become fillers).
    LogStart(i64),
}
