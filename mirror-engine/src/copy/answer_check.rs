//! What a source's Fetch answer may say, checked before it is planned: a source (or anything
//! between it and the engine) that relabels its batches must not get records written at other
//! offsets than their own, nor millions of fillers for offsets it never had.
//!
//! Kafka answers a Fetch at offset `o` with batches in offset order, none overlapping, the first
//! one the batch holding `o` — which starts before `o` when `o` is inside it (after DeleteRecords
//! or a fill to a log start inside a batch, or a resume inside one) — or a later one (offsets the
//! log no longer has: compaction, retention). Batches keep their base and last offsets through
//! compaction, so once the partition's position is the end of a batch it was given
//! (`aligned`), no true batch starts before it; a hedged answer to an older offset is cut to the
//! position before it gets here (`copy::fetch::stream`). An answer's log start is not beyond its
//! high watermark.
//!
//! Batches may end beyond the high watermark of the same answer: a broker notes the partition's
//! high watermark (and last stable offset) before it reads the log, and the read is bounded by
//! where they are when it reads (Kafka's `Partition.readRecords`), so a record that became
//! committed in between is returned with the older mark (seen under load: a batch over 2018..2020
//! with a high watermark of 2018). Such an answer is not taken on its word either: like a jump of
//! more than [`CONFIRM_GAP`] offsets over data the answer does not explain by its log start
//! (fillers to write), its end is checked against the source's ListOffsets before anything is
//! written ([`Checked::confirm_end`], done by `partition`), which a source that invents records
//! beyond its end fails.

use crate::cluster::fetch::Fetched;
use crate::error::MirrorError;

/// Offsets skipped (above the log start) beyond which the source's end is confirmed with
/// ListOffsets before the fillers are written.
pub(crate) const CONFIRM_GAP: i64 = 1_000;

/// What the check found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// The source's high watermark must reach this (a large jump is in the answer).
    pub confirm_end: Option<i64>,
}

fn lie(what: String) -> MirrorError {
    MirrorError::SourceContradiction(what)
}

/// Checks answer `f` to a Fetch for the partition at `next` (`aligned`: `next` is the end of a
/// batch the source gave before).
pub(crate) fn check(next: i64, aligned: bool, f: &Fetched) -> Result<Checked, MirrorError> {
    let hw = f.high_watermark;
    if hw >= 0 && f.log_start_offset > hw {
        return Err(lie(format!(
            "log start {} beyond the high watermark {hw} of the same answer (fetched at {next})",
            f.log_start_offset
        )));
    }
    let mut out = Checked::default();
    let mut prev_end: Option<i64> = None;
    for (h, _) in &f.batches {
        let (base, end) = (h.base_offset, h.next_offset());
        if end <= next || h.last_offset_delta < 0 {
            return Err(lie(format!("a batch over {base}..{end} answers a Fetch at offset {next}")));
        }
        if let Some(pe) = prev_end
            && base < pe
        {
            return Err(lie(format!("a batch at {base} after one ending at {pe} (out of order or overlapping)")));
        }
        if prev_end.is_none() && base < next && aligned {
            return Err(lie(format!(
                "a batch over {base}..{end} for a Fetch at {next}, where an earlier batch of the source ended"
            )));
        }
        let from = prev_end.unwrap_or(next).max(f.log_start_offset);
        if base - from > CONFIRM_GAP || (hw >= 0 && end > hw) {
            out.confirm_end = Some(out.confirm_end.unwrap_or(end).max(end));
        }
        prev_end = Some(end);
    }
    Ok(out)
}

/// Where the last batch of answer `f` ends (`None`: no batches).
pub(crate) fn last_end(f: &Fetched) -> Option<i64> {
    f.batches.last().map(|(h, _)| h.next_offset())
}

/// Whether the partition's position is the end of a batch of an answer whose last batch ended at
/// `last_end`, once it is planned up to `planned_next` (`was`: whether it was before, for an
/// answer without batches).
pub(crate) fn aligned_after(last_end: Option<i64>, planned_next: i64, was: bool) -> bool {
    last_end.map_or(was, |e| e == planned_next)
}

#[cfg(test)]
mod tests;
