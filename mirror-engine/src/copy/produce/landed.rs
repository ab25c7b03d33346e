//! What a failed (or cancelled) attempt left on a destination partition: the batches it sent
//! without an answer are read back from the destination up to the settled log end and compared,
//! batch by batch, with what was sent (offset, record count, producer id, sequence). Only an
//! exact match is accepted as landed; anything else below the log end means the destination no
//! longer equals the source there, and the partition fails closed. Retrying and accounting
//! belong to `partition`; sending to `sink`.

use kmp_protocol::batch::BatchHeader;
use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::shared_client::SharedConnection;

use crate::cluster::fetch::{FetchAt, fetch};
use crate::copy::produce::sink::Written;
use crate::error::MirrorError;

/// Bytes asked for per read-back Fetch (a larger single batch still comes whole).
const READ_BYTES: i32 = 8 << 20;
/// REQUEST_TIMED_OUT: the read-back is retried with the attempt.
const RETRY_LATER: i16 = ResponseError::RequestTimedOut.code();

/// Where the uncertain batches of `topic`-`partition` are read back.
pub(crate) struct ReadBack<'a> {
    pub conn: &'a SharedConnection,
    pub topic: &'a str,
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub leader_epoch: i32,
}

/// The batches of `uncertain` (in the order sent) that landed below the settled destination
/// log end `end`, each verified on the destination from its log start `log_start` on; an error
/// if something else is there.
///
/// Batches wholly below the log start cannot be read back. They count as landed: a mirrored
/// topic is written only by its mirror, and its log start moves past offsets only once they
/// were written (DeleteRecords stops at the high watermark).
pub(crate) async fn verify(at: &ReadBack<'_>, uncertain: Vec<Written>, log_start: i64, end: i64) -> Result<Vec<Written>, MirrorError> {
    let gone = deleted(&uncertain, log_start);
    let (below, readable) = uncertain.split_at(gone);
    let Some(first) = readable.first() else { return Ok(uncertain) };
    if end <= first.base {
        return Ok(below.to_vec());
    }
    let mut check = Check {
        uncertain: readable,
        found: 0,
        next: first.base,
        end,
    };
    while check.next < end {
        let fetched = fetch(
            at.conn,
            FetchAt {
                side: "destination",
                topic: at.topic,
                topic_id: at.topic_id,
                partition: at.partition,
                // A batch the log start cuts into is still answered whole from its base.
                offset: check.next.max(log_start),
                leader_epoch: at.leader_epoch,
                max_bytes: READ_BYTES,
                max_wait_ms: 0,
            },
        )
        .await?;
        let headers: Vec<BatchHeader> = fetched.batches.iter().map(|(h, _)| *h).collect();
        if !check
            .take(&headers)
            .map_err(|why| MirrorError::Diverged(format!("{}-{}: {why}", at.topic, at.partition)))?
        {
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("{}-{}: reading back offsets {}..{end} returned no batch", at.topic, at.partition, check.next),
                code: RETRY_LATER,
            });
        }
    }
    Ok(uncertain[..gone + check.found].to_vec())
}

/// How many of `uncertain` (in offset order) lie wholly below the destination log start.
fn deleted(uncertain: &[Written], log_start: i64) -> usize {
    uncertain.iter().take_while(|w| w.base + i64::from(w.records) <= log_start).count()
}

/// Matching what the destination holds from the first uncertain batch on against what was sent.
struct Check<'a> {
    uncertain: &'a [Written],
    /// How many of `uncertain` were found, in order.
    found: usize,
    /// Offset the next destination batch must start at.
    next: i64,
    end: i64,
}

impl Check<'_> {
    /// Takes the destination batches of one read (those below the log end); false if the read
    /// brought none. The error says what is on the destination instead.
    fn take(&mut self, headers: &[BatchHeader]) -> Result<bool, String> {
        let below: Vec<&BatchHeader> = headers.iter().filter(|h| h.next_offset() > self.next && h.base_offset < self.end).collect();
        for h in &below {
            // A marker after every uncertain batch: an earlier attempt's EndTxn, landed after the
            // attempt gave up waiting (nothing is sent after an EndTxn before its marker lands,
            // so no uncertain batch follows one). Whether it is the source's marker is checked
            // when the next attempt starts (`copy::txn::markers::check_last`).
            if h.is_control() && h.base_offset == self.next && self.found == self.uncertain.len() {
                self.next = h.next_offset();
                continue;
            }
            match self.uncertain.get(self.found) {
                Some(w) if matches(h, w) => {
                    self.found += 1;
                    self.next = h.next_offset();
                }
                expected => return Err(describe(h, expected.copied(), self.end)),
            }
        }
        if self.next > self.end {
            return Err(format!(
                "the destination log ends at {}, inside a batch this mirror sent (which ends at {})",
                self.end, self.next
            ));
        }
        Ok(!below.is_empty())
    }
}

fn matches(h: &BatchHeader, w: &Written) -> bool {
    h.base_offset == w.base && h.next_offset() == w.base + i64::from(w.records) && h.producer_id == w.producer_id && h.base_sequence == w.sequence
}

fn describe(h: &BatchHeader, expected: Option<Written>, end: i64) -> String {
    let found = format!(
        "offsets {}..{} hold a batch of producer {} sequence {}",
        h.base_offset,
        h.next_offset(),
        h.producer_id,
        h.base_sequence
    );
    let wanted = match expected {
        Some(w) => format!(
            "this mirror sent offsets {}..{} there as producer {} sequence {}",
            w.base,
            w.base + i64::from(w.records),
            w.producer_id,
            w.sequence
        ),
        None => format!("this mirror sent nothing more below the log end {end}"),
    };
    format!("after a failed write, {found}, but {wanted}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(base: i64, count: i32, pid: i64, seq: i32) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: seq,
            records_count: count,
        }
    }

    fn written(base: i64, records: i32, pid: i64, seq: i32) -> Written {
        Written {
            base,
            records,
            bytes: 0,
            max_timestamp: 0,
            filler: false,
            producer_id: pid,
            sequence: seq,
        }
    }

    fn check(uncertain: &[Written], end: i64) -> Check<'_> {
        Check {
            uncertain,
            found: 0,
            next: uncertain[0].base,
            end,
        }
    }

    /// Four batches of producer 12 sent from offset 0, sequences following the offsets.
    fn sent() -> Vec<Written> {
        vec![
            written(0, 157, 12, 0),
            written(157, 253, 12, 157),
            written(410, 253, 12, 410),
            written(663, 253, 12, 663),
        ]
    }

    #[test]
    fn a_later_batch_that_landed_where_a_refused_one_belonged_is_divergence() {
        // Seen against a real 1-broker destination frozen past its session timeout: the first two
        // batches were refused (NOT_LEADER_OR_FOLLOWER), the next two accepted from offset 0,
        // and the log ended at 506 with the source's records 410..915 at offsets 0..505.
        let sent = sent();
        let mut c = check(&sent, 506);
        let err = c.take(&[header(0, 253, 12, 410), header(253, 253, 12, 663)]).unwrap_err();
        assert!(err.contains("offsets 0..253 hold a batch of producer 12 sequence 410"), "{err}");
        assert!(err.contains("this mirror sent offsets 0..157 there as producer 12 sequence 0"), "{err}");
    }

    #[test]
    fn the_batches_that_landed_in_order_are_found_up_to_the_log_end() {
        let sent = sent();
        let mut c = check(&sent, 410);
        assert_eq!(c.take(&[header(0, 157, 12, 0), header(157, 253, 12, 157)]), Ok(true));
        assert_eq!((c.found, c.next), (2, 410));
        // Batches at or past the log end (not yet settled when it was read) are not looked at.
        let mut c = check(&sent, 410);
        assert_eq!(c.take(&[header(0, 157, 12, 0), header(157, 253, 12, 157), header(410, 253, 12, 410)]), Ok(true));
        assert_eq!(c.found, 2);
    }

    #[test]
    fn a_read_in_pieces_continues_where_the_previous_one_ended() {
        let sent = sent();
        let mut c = check(&sent, 916);
        assert_eq!(c.take(&[header(0, 157, 12, 0)]), Ok(true));
        // The next read starts at 157; a broker may repeat nothing before it.
        assert_eq!(c.take(&[header(157, 253, 12, 157), header(410, 253, 12, 410)]), Ok(true));
        assert_eq!(c.take(&[header(663, 253, 12, 663)]), Ok(true));
        assert_eq!((c.found, c.next), (4, 916));
        assert_eq!(c.take(&[]), Ok(false), "an empty read is reported, not taken as the end");
    }

    #[test]
    fn another_producers_batch_or_one_beyond_what_was_sent_is_divergence() {
        let sent = sent();
        let err = check(&sent, 157).take(&[header(0, 157, 99, 0)]).unwrap_err();
        assert!(err.contains("producer 99"), "{err}");
        let one = [written(0, 157, 12, 0)];
        let err = check(&one, 300).take(&[header(0, 157, 12, 0), header(157, 143, 50, 0)]).unwrap_err();
        assert!(err.contains("sent nothing more below the log end 300"), "{err}");
    }

    #[test]
    fn a_log_end_inside_a_sent_batch_is_divergence() {
        let sent = sent();
        let err = check(&sent, 200).take(&[header(0, 157, 12, 0), header(157, 253, 12, 157)]).unwrap_err();
        assert!(err.contains("ends at 200, inside a batch"), "{err}");
    }

    #[test]
    fn batches_wholly_below_the_log_start_are_not_read_back() {
        // Seen in a differential history: a fill of offsets 0..15 was in flight when an attempt
        // failed, and the destination log start was 15 by the next one; reading from 0 was
        // answered OFFSET_OUT_OF_RANGE for ever.
        let sent = vec![written(0, 15, 12, 0), written(15, 6, 12, 15)];
        assert_eq!(deleted(&sent, 15), 1);
        assert_eq!(deleted(&sent, 14), 0, "a batch the log start cuts into is still read");
        assert_eq!(deleted(&sent, 21), 2);
        assert_eq!(deleted(&sent, 0), 0);
    }

    #[test]
    fn a_batch_matches_only_at_its_offset_with_its_producer_and_sequence() {
        let w = written(157, 253, 12, 157);
        assert!(matches(&header(157, 253, 12, 157), &w));
        assert!(!matches(&header(157, 253, 13, 157), &w), "another producer");
        assert!(!matches(&header(157, 252, 12, 157), &w), "another length");
        assert!(!matches(&header(157, 253, 12, 158), &w), "another sequence");
    }
}
