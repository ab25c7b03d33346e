//! The offset-preserving plan, sans-io: given where the destination log ends and what a
//! read_uncommitted Fetch returned, decide what to write so every source record lands at its own
//! offset. Transactional data is written like any data (the writer replays it inside a
//! destination transaction of its source producer, `copy::txn`), a transaction marker becomes
//! [`Action::Marker`] (the writer ends that transaction there); offsets with no source record
//! (compaction gaps, empty batches, offsets below the source log start) become filler records. A batch is written whole when it can be; the part of a batch at and after the
//! destination log end, a batch with compaction holes, or a LogAppendTime batch (whose records
//! must carry the source's append time on a CreateTime destination), is re-encoded record by record
//! (`kmp_protocol::reencode`). Every plan is checked against the fetched data before anything
//! is written (`check`): a filler never covers a record. Doing the I/O belongs to `partition`.

pub(crate) mod action;
pub(crate) mod coalesce;

use bytes::Bytes;
use kmp_protocol::batch::{BatchHeader, verify_crc};
use kmp_protocol::control::Marker;
use kmp_protocol::reencode::{Piece, is_log_append_time, records, split_from};

use crate::copy::plan::action::Action;
use crate::error::MirrorError;

/// The writes for one fetch.
#[derive(Debug, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// The destination log end once every action is written.
    pub next: i64,
    /// Source batches that had to be re-encoded (holes, or the log end inside them).
    pub reencoded: u64,
    /// Writes merged into larger batches (`coalesce`).
    pub coalesced: u64,
}

/// Plans the writes for `batches` (in source order) when the destination log ends at `next`,
/// every source batch written on its own (the planner's own tests).
#[cfg(test)]
pub fn plan(next: i64, batches: Vec<(BatchHeader, Bytes)>) -> Result<Plan, MirrorError> {
    plan_coalesced(next, batches, 0)
}

/// Plans the writes for `batches` (in source order) when the destination log ends at `next`.
/// Batches entirely below `next` were written before (a re-fetch after a retry) and are
/// skipped; of a batch that starts below `next`, only the records at and after `next` are
/// written. Runs of small data writes are merged into batches of at most `coalesce_max_bytes`
/// (0: never). Fails (before anything is written) when the plan breaks an invariant.
pub fn plan_coalesced(next: i64, batches: Vec<(BatchHeader, Bytes)>, coalesce_max_bytes: usize) -> Result<Plan, MirrorError> {
    let start = next;
    let mut p = Plan { next, ..Plan::default() };
    // Batches with records the consumers of the source can read, for the check.
    let mut visible = Vec::new();
    for (h, batch) in batches {
        let end = h.next_offset();
        // The control bit, the producer id and the record count decide whether a batch becomes
        // a marker or fillers; all are covered by the CRC, checked here whenever the plan acts on
        // them without writing the batch (markers, even below the log end, whose type is read
        // from their record; every batch that becomes fillers). Written batches are checked
        // where their bytes are used (`rewrite_for_produce`, `reencode`), in the pass that also
        // computes their new CRC.
        // The cleaner keeps a marker's batch empty (no record) as a producer's last: a filler
        // (its CRC checked all the same, even below the log end). A negative count is no
        // marker either, and is checked the same way (a flipped bit there skipped the check).
        if h.is_control() && h.records_count <= 0 {
            verify_crc(&batch).map_err(MirrorError::Source)?;
        }
        let marker = if h.is_control() && h.records_count > 0 {
            Some(kmp_protocol::control::marker(&batch, &h).map_err(MirrorError::Source)?)
        } else {
            None
        };
        if end <= p.next {
            continue;
        }
        if h.base_offset > p.next {
            p.actions.push(Action::Fill {
                base: p.next,
                count: h.base_offset - p.next,
            });
            p.next = h.base_offset;
        }
        let from = p.next;
        let data = !(h.is_control() || h.records_count == 0);
        if let Some(m) = marker {
            if end != from + 1 {
                return Err(MirrorError::Source(kmp_protocol::ProtocolError::Malformed {
                    what: "record batch",
                    detail: format!("control batch at {} spans offsets {}..{end}; a marker takes one", h.base_offset, h.base_offset),
                    side: kmp_protocol::error::Side::Broker,
                }));
            }
            p.actions.push(Action::Marker {
                base: from,
                producer_id: h.producer_id,
                commit: m == Marker::Commit,
            });
        } else if !data {
            verify_crc(&batch).map_err(MirrorError::Source)?;
            p.actions.push(Action::Fill { base: from, count: end - from });
        } else if from == h.base_offset && h.is_contiguous() && !is_log_append_time(&h) {
            p.actions.push(Action::Write {
                base: from,
                header: h,
                batch: batch.clone(),
            });
        } else {
            for piece in split_from(&batch, &h, from).map_err(MirrorError::Source)? {
                p.actions.push(match piece {
                    Piece::Run { base, records, batch } => Action::Run {
                        base,
                        records,
                        max_timestamp: h.max_timestamp,
                        batch,
                    },
                    Piece::Gap { base, count } => Action::Fill { base, count },
                });
            }
            p.reencoded += 1;
        }
        if data {
            visible.push((h, batch));
        }
        p.next = end;
    }
    (p.actions, p.coalesced) = crate::copy::plan::coalesce::coalesce(std::mem::take(&mut p.actions), coalesce_max_bytes);
    check(start, &p, &visible)?;
    Ok(p)
}

/// The engine's invariants on a plan, computed from the fetched batches independently of how
/// the plan was made: the actions cover `start .. plan.next` exactly once, in order, and no
/// filler covers an offset at which a (non-control) batch holds a record.
fn check(start: i64, plan: &Plan, visible: &[(BatchHeader, Bytes)]) -> Result<(), MirrorError> {
    let mut at = start;
    for a in &plan.actions {
        let (from, to) = a.range();
        if from != at || to <= from {
            return Err(MirrorError::Invariant(format!(
                "plan writes {from}..{to} where the destination log ends at {at}"
            )));
        }
        at = to;
    }
    if at != plan.next {
        return Err(MirrorError::Invariant(format!("plan ends at {at}, expected {}", plan.next)));
    }
    let mut occupied: Vec<(i64, i64)> = Vec::new();
    for (h, batch) in visible {
        if h.is_contiguous() {
            occupied.push((h.base_offset.max(start), h.next_offset()));
        } else {
            let recs = records(batch, h).map_err(MirrorError::Source)?;
            occupied.extend(recs.iter().filter(|r| r.offset >= start).map(|r| (r.offset, r.offset + 1)));
        }
    }
    occupied.sort_unstable();
    // Merged into disjoint ranges, so their ends are sorted too (a hostile source may overlap them).
    let mut merged: Vec<(i64, i64)> = Vec::with_capacity(occupied.len());
    for (s, e) in occupied {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    for a in &plan.actions {
        let Action::Fill { base, count, .. } = a else { continue };
        let end = base + count;
        // The first occupied range ending after `base` overlaps the fill if it starts before its end.
        let i = merged.partition_point(|&(_, e)| e <= *base);
        if let Some(&(s, e)) = merged.get(i).filter(|&&(s, _)| s < end) {
            let offset = s.max(*base);
            return Err(MirrorError::Invariant(format!(
                "a filler over {base}..{end} would cover the source record at offset {offset} (fetched records at {s}..{e})"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
