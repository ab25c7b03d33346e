use bytes::Bytes;
use kmp_protocol::batch::{BatchHeader, split};
use kmp_protocol::kafka_protocol::records::{Compression, RecordBatchDecoder};
use proptest::prelude::*;

use crate::copy::plan::action::Action;
use crate::copy::plan::tests::{abort_marker, batch, batch_with, history, kinds, marker, txn_batch};
use crate::copy::plan::{Plan, plan_coalesced};

const LIMIT: usize = 256 * 1024;

/// What a read of the destination shows at each offset a plan writes: a record's timestamp,
/// key, value and headers, or a filler.
#[derive(Debug, PartialEq)]
enum At {
    Record(i64, Option<Bytes>, Option<Bytes>, Vec<(String, Option<Bytes>)>),
    Filler,
    Marker(bool),
}

fn contents(p: &Plan) -> Vec<(i64, At)> {
    let mut out = Vec::new();
    for a in &p.actions {
        match a {
            Action::Fill { base, count, .. } => out.extend((*base..base + count).map(|o| (o, At::Filler))),
            Action::Write { base, batch, .. } | Action::Run { base, batch, .. } => {
                let (h, _) = split(batch).unwrap().remove(0);
                assert_eq!(h.base_offset, *base, "a batch is produced at its own base offset");
                for r in RecordBatchDecoder::decode(&mut batch.clone()).unwrap().records {
                    let headers = r.headers.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
                    out.push((r.offset, At::Record(r.timestamp, r.key, r.value, headers)));
                }
            }
            Action::Marker { base, commit, .. } => out.push((*base, At::Marker(*commit))),
        }
    }
    out
}

fn coalesced(next: i64, batches: Vec<(BatchHeader, Bytes)>, limit: usize) -> Plan {
    plan_coalesced(next, batches, limit).unwrap()
}

#[test]
fn a_fetch_of_one_record_batches_is_written_as_one_batch_with_every_record_at_its_offset() {
    let batches: Vec<_> = (0..500).map(|o| batch(o, 1)).collect();
    let alone = coalesced(0, batches.clone(), 0);
    let merged = coalesced(0, batches, LIMIT);
    assert_eq!(kinds(&merged), vec![('R', 0, 500)], "500 one-record batches, one write");
    assert_eq!(merged.coalesced, 500);
    assert_eq!((alone.actions.len(), alone.coalesced), (500, 0), "0 turns merging off");
    assert_eq!(contents(&merged), contents(&alone), "the same records at the same offsets");
}

#[test]
fn fillers_large_batches_and_codec_changes_end_a_run() {
    let zstd = |o| batch_with(&[o], o, o, -1, false, Compression::Zstd);
    let big = batch(20, 3000); // ~30 KB of records, over a sixteenth of the limit
    assert!(big.1.len() >= LIMIT / 16, "the test's large batch is large: {}", big.1.len());
    let batches = vec![
        batch(0, 1),
        batch(1, 2),
        batch(5, 1),
        batch(6, 1),
        zstd(7),
        zstd(8),
        batch(9, 1),
        big,
        batch(3020, 1),
    ];
    let p = coalesced(0, batches.clone(), LIMIT);
    assert_eq!(
        kinds(&p),
        vec![
            ('R', 0, 3),
            ('F', 3, 2),
            ('R', 5, 2),
            ('R', 7, 2),
            ('W', 9, 1),
            ('F', 10, 10),
            ('W', 20, 3000),
            ('W', 3020, 1)
        ]
    );
    assert_eq!(p.coalesced, 6);
    assert_eq!(contents(&p), contents(&coalesced(0, batches, 0)));
}

#[test]
fn merged_batches_stay_within_the_limit() {
    let batches: Vec<_> = (0..2000).map(|o| batch(o * 10, 10)).collect();
    let limit = 16 * 1024;
    let p = coalesced(0, batches.clone(), limit);
    assert!(p.actions.len() > 1, "split over several batches: {}", p.actions.len());
    for a in &p.actions {
        let Action::Run { batch, .. } = a else { panic!("every write merged: {a:?}") };
        assert!(batch.len() <= limit, "a merged batch of {} bytes over the limit {limit}", batch.len());
    }
    assert_eq!(contents(&p), contents(&coalesced(0, batches, 0)));
}

#[test]
fn transactional_batches_and_markers_are_never_merged() {
    let batches = vec![
        batch(0, 1),
        txn_batch(1, 1, 7),
        txn_batch(2, 1, 7),
        marker(3, 7),
        txn_batch(4, 2, 8),
        abort_marker(6, 8),
        batch(7, 1),
        batch(8, 1),
    ];
    let p = plan_coalesced(0, batches, LIMIT).unwrap();
    assert_eq!(
        kinds(&p),
        vec![('W', 0, 1), ('W', 1, 1), ('W', 2, 1), ('C', 3, 1), ('W', 4, 2), ('A', 6, 1), ('R', 7, 2)]
    );
}

#[test]
fn a_destination_log_end_inside_a_batch_keeps_only_what_follows_it() {
    let batches: Vec<_> = (0..10).map(|o| batch(o * 3, 3)).collect();
    let p = coalesced(4, batches.clone(), LIMIT);
    assert_eq!(kinds(&p), vec![('R', 4, 26)]);
    assert_eq!(contents(&p), contents(&coalesced(4, batches, 0)));
}

#[test]
fn a_corrupt_batch_is_not_merged_and_is_left_for_the_write_to_refuse() {
    let mut batches: Vec<_> = (0..4).map(|o| batch(o, 1)).collect();
    let (h, b) = batches[2].clone();
    let mut bad = b.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    batches[2] = (h, Bytes::from(bad));
    let p = coalesced(0, batches, LIMIT);
    assert_eq!(
        kinds(&p),
        vec![('W', 0, 1), ('W', 1, 1), ('W', 2, 1), ('W', 3, 1)],
        "the run is written as it came"
    );
    let Action::Write { batch, .. } = &p.actions[2] else { panic!("a write") };
    let fields = kmp_protocol::batch::ProducerFields {
        producer_id: 1,
        producer_epoch: 0,
        base_sequence: 2,
    };
    assert!(kmp_protocol::batch::rewrite_for_produce(batch, fields).is_err(), "and the write refuses it");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any generated history (plain, compacted, committed and aborted transactional batches,
    /// markers, gaps), from any destination log end, with any limit: the coalesced plan writes
    /// exactly what the uncoalesced one writes, offset for offset, record for record.
    #[test]
    fn coalescing_never_changes_what_lands_at_any_offset(
        spec in proptest::collection::vec((0i64..3, 1i64..6, 0u8..5), 1..40),
        cut in 0usize..1000,
        limit in prop_oneof![Just(16 * 1024usize), Just(LIMIT), 2048usize..8192],
    ) {
        let (batches, _) = history(&spec);
        let end = batches.last().map_or(0, |(h, _)| h.next_offset());
        let next = (cut as i64) % (end + 1);
        let alone = plan_coalesced(next, batches.clone(), 0).unwrap();
        let merged = plan_coalesced(next, batches, limit).unwrap();
        prop_assert_eq!(merged.next, alone.next);
        prop_assert_eq!(contents(&merged), contents(&alone));
        prop_assert!(merged.actions.len() <= alone.actions.len());
        for a in &merged.actions {
            if let Action::Run { batch, .. } = a {
                prop_assert!(batch.len() <= limit.max(LIMIT), "merged batch of {} bytes", batch.len());
            }
        }
    }
}
