//! Filling offsets the source has no visible data for: compaction holes, transaction markers
//! and aborted data inside the log (uncompressed filler batches with no timestamp, so that a
//! lookup by time passes over them as it passes over the source's holes), and the source's
//! retention prefix — every offset below its log start, which
//! on a topic that has run for years is billions of offsets. A prefix goes as zstd batches of
//! up to [`MAX_COMPRESSED_FILLER_RECORDS`] fillers stamped 0 (one compressed section reused for
//! every full batch), and is deleted from the destination as it is written, so its disk use
//! stays a few seconds' worth of batches whatever its length.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kmp_protocol::batch::{MAX_COMPRESSED_FILLER_RECORDS, compressed_filler_section};
use tracing::info;

use super::PartitionTask;
use crate::copy::produce::sink::PartitionSink;
use crate::error::MirrorError;
use crate::state::status::PartitionState;

/// Shortest fill written compressed: below it a batch is small anyway.
const COMPRESS_FROM: i64 = 1_000;
/// Offsets per second a retention prefix is filled at, as measured by `bench/prefix_bench.py` on
/// the 2-core test machine (docs/mirroring.md): what a too-large fill's error estimates with.
const FILL_RATE: i64 = 5_000_000;
/// How often a prefix being filled is deleted up to where the fill has come.
const PREFIX_DELETE_EVERY: Duration = Duration::from_secs(5);

/// The compressed section of a full batch, made once per process.
fn full_section() -> Result<&'static Bytes, MirrorError> {
    static FULL: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    if let Some(s) = FULL.get() {
        return Ok(s);
    }
    let s = compressed_filler_section(MAX_COMPRESSED_FILLER_RECORDS).map_err(MirrorError::Destination)?;
    Ok(FULL.get_or_init(|| s))
}

impl PartitionTask {
    /// Sends `count` fillers from `base` in batches; returns the new planned log end. With
    /// `prefix` (the destination log start the caller tracks) the range lies below the source's
    /// log start: it is deleted from the destination every few seconds as the fill goes on.
    pub(super) async fn fill(&self, sink: &mut PartitionSink, base: i64, count: i64, mut prefix: Option<&mut i64>) -> Result<i64, MirrorError> {
        if count > self.max_fill_offsets {
            return Err(MirrorError::FillTooLarge {
                base,
                count,
                limit: self.max_fill_offsets,
                minutes: count / FILL_RATE / 60 + 1,
                rate: FILL_RATE / 1_000_000,
            });
        }
        let compressed = self.compressed_fillers && prefix.is_some() && count >= COMPRESS_FROM;
        let per_batch = if compressed {
            MAX_COMPRESSED_FILLER_RECORDS
        } else {
            self.max_filler_batch_records
        };
        let long = count > i64::from(per_batch);
        if long {
            info!(base, count, compressed, "filling offsets without visible source data");
            self.status.update(&self.key, |s| s.state = PartitionState::Filling);
        }
        let mut next = base;
        let end = base + count;
        let mut deleted_at = Instant::now();
        while next < end {
            let n = (end - next).min(i64::from(per_batch)) as i32;
            if compressed && n == MAX_COMPRESSED_FILLER_RECORDS {
                sink.write_compressed_fillers(n, next, full_section()?).await?;
            } else if compressed {
                let section = compressed_filler_section(n).map_err(MirrorError::Destination)?;
                sink.write_compressed_fillers(n, next, &section).await?;
            } else {
                sink.write_fillers(n, next).await?;
            }
            next += i64::from(n);
            self.account(sink.take_acknowledged());
            if let Some(log_start) = prefix.as_deref_mut()
                && deleted_at.elapsed() >= PREFIX_DELETE_EVERY
            {
                sink.delete_records_before(next).await?;
                self.account(sink.take_acknowledged());
                *log_start = next;
                deleted_at = Instant::now();
            }
        }
        if long {
            sink.flush().await?;
            self.account(sink.take_acknowledged());
            self.status.update(&self.key, |s| s.state = PartitionState::Mirroring);
        }
        Ok(next)
    }
}
