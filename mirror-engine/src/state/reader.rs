//! The one reader of the state topic: a cursor over its single partition on the destination that
//! finds the leader (the topic's layout is kept while reads succeed, so a steady reader sends no
//! Metadata request per poll), reads from a position, and decodes each batch into keyed entries.
//! The store's load, a follower, and the active instance's server of forwarded requests read
//! through it; what each one does with the entries is its own business.

use std::sync::Arc;

use bytes::Bytes;

use crate::cluster::client::{ClusterClient, TopicLayout, offsets};
use crate::cluster::fetch::{FetchAt, fetch};
use crate::cluster::links::Lane;
use crate::error::MirrorError;
use kmp_protocol::records;

/// One keyed entry of the state topic: `(offset, key, value)`, `None` a tombstone.
pub(crate) type Entry = (i64, String, Option<Bytes>);

/// What one read returned.
#[derive(Debug)]
pub(crate) struct StateRead {
    /// The partition's high watermark as the leader answered it.
    pub(crate) high_watermark: i64,
    /// Each batch read, in order: the offset after it, and its entries (or why they do not
    /// decode; what to do then is the caller's).
    pub(crate) batches: Vec<(i64, Result<Vec<Entry>, MirrorError>)>,
}

impl StateRead {
    /// Where the next read starts: after the last batch, or `from` when nothing was read.
    pub(crate) fn next_offset(&self, from: i64) -> i64 {
        self.batches.last().map_or(from, |(next, _)| (*next).max(from))
    }
}

/// A cursor over the state topic's partition 0 on the destination.
#[derive(Debug)]
pub(crate) struct StateReader {
    destination: ClusterClient,
    topic: String,
    /// Kept while reads succeed; any failure drops it, so the next read looks the leader up again.
    layout: Option<Arc<TopicLayout>>,
    /// The connection to the leader that reads go on: a long-polling reader has its own
    /// (`Lane::Fetch(0)`), a one-off read (the store's load) shares the control connection, so
    /// it opens no extra connection to the broker.
    lane: Lane,
}

impl StateReader {
    pub(crate) fn new(destination: ClusterClient, topic: impl Into<String>, lane: Lane) -> Self {
        Self {
            destination,
            topic: topic.into(),
            layout: None,
            lane,
        }
    }

    /// The topic's layout: the kept one, or a Metadata answer (kept only when it names no error;
    /// one with an error, such as a state topic not created yet, is returned for the caller to
    /// read).
    pub(crate) async fn layout(&mut self) -> Result<Arc<TopicLayout>, MirrorError> {
        if let Some(l) = &self.layout {
            return Ok(l.clone());
        }
        let layout = self.destination.layout(&self.topic).await?;
        self.layout = (layout.error_code == 0).then(|| layout.clone());
        Ok(layout)
    }

    /// Drops the kept layout: the next read looks the leader up again.
    pub(crate) fn forget_layout(&mut self) {
        self.layout = None;
    }

    /// The partition's log start and end offsets, asked of its leader.
    pub(crate) async fn bounds(&mut self) -> Result<(i64, i64), MirrorError> {
        let r = self.bounds_once().await;
        if r.is_err() {
            self.layout = None;
        }
        r
    }

    async fn bounds_once(&mut self) -> Result<(i64, i64), MirrorError> {
        let layout = self.layout().await?;
        let (addr, _) = self.destination.leader_in(&layout, &self.topic, 0)?;
        let conn = self.destination.link(&addr, Lane::Control).await?;
        offsets("destination", &conn, &self.topic, 0).await
    }

    /// One Fetch from `offset` (up to `max_bytes`, waiting up to `max_wait_ms` for data).
    pub(crate) async fn read(&mut self, offset: i64, max_bytes: i32, max_wait_ms: i32) -> Result<StateRead, MirrorError> {
        let r = self.read_once(offset, max_bytes, max_wait_ms).await;
        if r.is_err() {
            self.layout = None;
        }
        r
    }

    async fn read_once(&mut self, offset: i64, max_bytes: i32, max_wait_ms: i32) -> Result<StateRead, MirrorError> {
        let layout = self.layout().await?;
        let (addr, epoch) = self.destination.leader_in(&layout, &self.topic, 0)?;
        let conn = self.destination.link(&addr, self.lane).await?;
        let at = FetchAt {
            side: "destination",
            topic: &self.topic,
            topic_id: layout.topic_id,
            partition: 0,
            offset,
            leader_epoch: epoch,
            max_bytes,
            max_wait_ms,
        };
        let fetched = fetch(&conn, at).await?;
        Ok(StateRead {
            high_watermark: fetched.high_watermark,
            batches: fetched
                .batches
                .iter()
                .map(|(header, batch)| (header.next_offset(), decode_entries(batch)))
                .collect(),
        })
    }
}

/// The entries of one state-topic batch: `(offset, key, value)`, `None` a tombstone. Control
/// records and records whose key is missing or not UTF-8 are skipped; a batch that does not
/// decode is an error (nothing of it is used).
pub(crate) fn decode_entries(batch: &Bytes) -> Result<Vec<Entry>, MirrorError> {
    Ok(records::decode(batch)
        .map_err(MirrorError::Destination)?
        .into_iter()
        .filter_map(|(offset, key, value)| Some((offset, String::from_utf8(key?.to_vec()).ok()?, value)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_batches_decode_to_keyed_entries_and_garbage_is_an_error_not_a_panic() {
        let blob = records::encode(
            &[
                (Bytes::from_static(b"topic/t"), Some(Bytes::from_static(b"{}"))),
                (Bytes::from_static(b"mirror/m"), None),
            ],
            7,
        )
        .unwrap();
        let got = decode_entries(&blob).unwrap();
        assert_eq!(
            got,
            vec![(0, "topic/t".to_owned(), Some(Bytes::from_static(b"{}"))), (1, "mirror/m".to_owned(), None)]
        );
        for cut in [1, 20, blob.len() - 1] {
            assert!(decode_entries(&blob.slice(..cut)).is_err(), "a batch cut at {cut} bytes is refused");
        }
        let mut flipped = blob.to_vec();
        let last = flipped.len() - 3;
        flipped[last] ^= 0xff;
        let _ = decode_entries(&Bytes::from(flipped)); // any answer, never a panic
    }

    #[test]
    fn the_next_read_starts_after_the_last_batch_and_never_goes_back() {
        let read = |ends: &[i64]| StateRead {
            high_watermark: 0,
            batches: ends.iter().map(|&e| (e, Ok(Vec::new()))).collect(),
        };
        assert_eq!(read(&[]).next_offset(5), 5, "nothing read: stay");
        assert_eq!(read(&[7, 9]).next_offset(5), 9, "after the last batch");
        assert_eq!(read(&[3]).next_offset(5), 5, "a batch ending below the position does not move it back");
    }
}
