//! Merging a plan's runs of small data writes into fewer, larger destination batches, sans-io.
//! Kafka takes one batch per partition per Produce request, so a source holding one record per
//! batch would cost one request per record and partition; merged, a Fetch answer of a thousand
//! one-record batches is written as a few batches.
//!
//! Only consecutive data writes (`Write`, `Run`) that are small (under a sixteenth of the limit),
//! adjacent and of one codec (uncompressed batches among them too: producers send a batch
//! uncompressed when compressing would not shrink it) and not transactional (a transaction's batches
//! are written inside it, by its producer) are merged, up to `coalesce_max_bytes` per
//! batch; fillers, large batches and a second codec end a run. A merge that fails or comes out larger than the limit
//! leaves the run as it was: merging never turns a write that would have been made into an
//! error. How records are merged (and checked) is `kmp_protocol::merge`; planning what to write
//! is `plan`'s, which checks the coalesced plan like any other.

use bytes::Bytes;
use kmp_protocol::batch::parse_header;
use kmp_protocol::merge::merge;
use tracing::debug;

use crate::copy::plan::action::Action;

/// Batches smaller than `max_bytes / SMALL_PART` are merged.
const SMALL_PART: usize = 16;

/// The batch a data write produces (none for a filler).
fn batch_of(a: &Action) -> Option<&Bytes> {
    match a {
        Action::Write { batch, .. } | Action::Run { batch, .. } => Some(batch),
        Action::Fill { .. } | Action::Marker { .. } => None,
    }
}

/// The batch bytes and codec of a data write, if it may be merged under `max_bytes`.
fn mergeable(a: &Action, max_bytes: usize) -> Option<(&Bytes, i16)> {
    let batch = batch_of(a)?;
    let header = match a {
        Action::Write { header, .. } => *header,
        _ => parse_header(batch).ok()?,
    };
    // A transaction's batches are written inside it, one producer's, never merged with others.
    if header.is_transactional() {
        return None;
    }
    let codec = header.compression();
    (batch.len() < max_bytes / SMALL_PART).then_some((batch, codec))
}

/// `actions` with runs of small adjacent data writes merged into batches of at most `max_bytes`
/// (0: unchanged), and how many source writes went into merged batches.
pub(crate) fn coalesce(actions: Vec<Action>, max_bytes: usize) -> (Vec<Action>, u64) {
    if max_bytes == 0 {
        return (actions, 0);
    }
    let mut out = Vec::with_capacity(actions.len());
    let mut run: Vec<Action> = Vec::new();
    let (mut run_bytes, mut run_codec, mut merged) = (0usize, 0i16, 0u64);
    for a in actions {
        let Some((batch, codec)) = mergeable(&a, max_bytes) else {
            merged += flush(&mut run, &mut out, max_bytes);
            out.push(a);
            continue;
        };
        let follows = run.last().is_some_and(|last| last.range().1 == a.range().0);
        let other_codec = codec != 0 && run_codec != 0 && codec != run_codec;
        if !run.is_empty() && (other_codec || run_bytes + batch.len() > max_bytes || !follows) {
            merged += flush(&mut run, &mut out, max_bytes);
        }
        if run.is_empty() {
            (run_bytes, run_codec) = (0, 0);
        }
        if run_codec == 0 {
            run_codec = codec;
        }
        run_bytes += batch.len();
        run.push(a);
    }
    merged += flush(&mut run, &mut out, max_bytes);
    (out, merged)
}

/// How many bytes a merge's parts may decompress to, for a merged batch of at most `max_bytes`:
/// room for eight-fold compression, at most 64 MiB. A run over it is written as it came.
fn raw_limit(max_bytes: usize) -> usize {
    max_bytes.saturating_mul(8).min(64 * 1024 * 1024)
}

/// Moves `run` to `out`, as one merged batch if it holds several writes and the merge succeeds
/// within `max_bytes`; the number of writes merged.
fn flush(run: &mut Vec<Action>, out: &mut Vec<Action>, max_bytes: usize) -> u64 {
    if run.len() < 2 {
        out.append(run);
        return 0;
    }
    let parts: Vec<Bytes> = run.iter().filter_map(batch_of).cloned().collect();
    let base = run[0].range().0;
    match merge(&parts, raw_limit(max_bytes)) {
        Ok(m) if m.batch.len() <= max_bytes => {
            let n = run.len() as u64;
            run.clear();
            out.push(Action::Run {
                base,
                records: m.records,
                max_timestamp: m.max_timestamp,
                batch: m.batch,
            });
            n
        }
        Ok(m) => {
            debug!(base, bytes = m.batch.len(), max_bytes, "merged batch too large; written as it came");
            out.append(run);
            0
        }
        Err(e) => {
            debug!(base, error = %e, "batches not merged; written as they came");
            out.append(run);
            0
        }
    }
}

#[cfg(test)]
mod tests;
