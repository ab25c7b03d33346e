use super::*;
use bytes::BytesMut;
use kmp_protocol::batch::{parse_header, split};
use kmp_protocol::kafka_protocol::records::{Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use proptest::prelude::*;

fn record(o: i64, pid: i64, txn: bool) -> Record {
    Record {
        transactional: txn,
        control: false,
        partition_leader_epoch: 0,
        producer_id: pid,
        producer_epoch: 0,
        timestamp_type: TimestampType::Creation,
        offset: o,
        sequence: 0,
        timestamp: 1_000 + o,
        key: Some(Bytes::from(format!("k{o}"))),
        value: Some(Bytes::from(format!("v{o}"))),
        headers: Default::default(),
        delete_horizon: false,
    }
}

/// A real batch over `first..=last` holding records at `offsets` (holes where compaction
/// removed the others), as a broker returns it.
pub(crate) fn batch_with(offsets: &[i64], first: i64, last: i64, pid: i64, txn: bool, compression: Compression) -> (BatchHeader, Bytes) {
    // The encoder keeps records in one batch while offset - sequence stays the same; without a
    // producer id the batch's base sequence must come out as -1.
    let records: Vec<Record> = offsets
        .iter()
        .map(|&o| Record {
            sequence: (o - first) as i32 + if pid < 0 { -1 } else { 0 },
            ..record(o, pid, txn)
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression }).unwrap();
    let mut b = buf.to_vec();
    b[0..8].copy_from_slice(&first.to_be_bytes());
    // Offsets in the records are relative to the batch base.
    assert_eq!(offsets[0], first, "first record at the batch base");
    b[23..27].copy_from_slice(&((last - first) as i32).to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let b = Bytes::from(b);
    (parse_header(&b).unwrap(), b)
}

pub(crate) fn batch(base: i64, count: i64) -> (BatchHeader, Bytes) {
    let offsets: Vec<i64> = (base..base + count).collect();
    batch_with(&offsets, base, base + count - 1, -1, false, Compression::Lz4)
}

pub(crate) fn txn_batch(base: i64, count: i64, pid: i64) -> (BatchHeader, Bytes) {
    let offsets: Vec<i64> = (base..base + count).collect();
    batch_with(&offsets, base, base + count - 1, pid, true, Compression::Zstd)
}

/// A COMMIT marker of producer `pid` at `offset`, as a broker writes it.
pub(crate) fn marker(offset: i64, pid: i64) -> (BatchHeader, Bytes) {
    marker_of(offset, pid, true)
}

/// An ABORT marker of producer `pid` at `offset`.
pub(crate) fn abort_marker(offset: i64, pid: i64) -> (BatchHeader, Bytes) {
    marker_of(offset, pid, false)
}

fn marker_of(offset: i64, pid: i64, commit: bool) -> (BatchHeader, Bytes) {
    let r = Record {
        control: true,
        transactional: true,
        sequence: -1,
        key: Some(Bytes::from(vec![0, 0, 0, u8::from(commit)])),
        value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        ..record(0, pid, true)
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [r].iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    let mut b = buf.to_vec();
    b[0..8].copy_from_slice(&offset.to_be_bytes());
    let b = Bytes::from(b);
    (parse_header(&b).unwrap(), b)
}

pub(crate) fn kinds(p: &Plan) -> Vec<(char, i64, i64)> {
    p.actions
        .iter()
        .map(|a| match a {
            Action::Fill { base, count, .. } => ('F', *base, *count),
            Action::Write { base, header, .. } => ('W', *base, i64::from(header.records_count)),
            Action::Run { base, records, .. } => ('R', *base, i64::from(*records)),
            Action::Marker { base, commit, .. } => (if *commit { 'C' } else { 'A' }, *base, 1),
        })
        .collect()
}

/// `(offset, key)` of every record the plan writes (whole batches and re-encoded runs).
fn written(p: &Plan) -> Vec<(i64, Bytes)> {
    let mut out = Vec::new();
    for a in &p.actions {
        let (base, blob) = match a {
            Action::Write { base, batch, .. } | Action::Run { base, batch, .. } => (*base, batch),
            Action::Fill { .. } | Action::Marker { .. } => continue,
        };
        let (h, _) = split(blob).unwrap().remove(0);
        assert_eq!(h.base_offset, base, "a batch is produced at its own base offset");
        for r in RecordBatchDecoder::decode(&mut blob.clone()).unwrap().records {
            out.push((r.offset, r.key.unwrap()));
        }
    }
    out
}

fn keys(offsets: impl IntoIterator<Item = i64>) -> Vec<(i64, Bytes)> {
    offsets.into_iter().map(|o| (o, Bytes::from(format!("k{o}")))).collect()
}

fn run(next: i64, batches: Vec<(BatchHeader, Bytes)>) -> Plan {
    plan(next, batches).unwrap()
}

#[test]
fn gaps_before_batches_are_filled() {
    let p = run(0, vec![batch(5, 3), batch(10, 1)]);
    assert_eq!(kinds(&p), vec![('F', 0, 5), ('W', 5, 3), ('F', 8, 2), ('W', 10, 1)]);
    assert_eq!(p.next, 11);
}

#[test]
fn transactions_are_written_and_their_markers_replayed() {
    let p = run(0, vec![txn_batch(0, 2, 7), marker(2, 7)]);
    assert_eq!(kinds(&p), vec![('W', 0, 2), ('C', 2, 1)]);
    assert_eq!(p.next, 3);
    assert!(matches!(p.actions[1], Action::Marker { producer_id: 7, .. }), "the marker names its producer");
}

#[test]
fn aborted_transactional_data_is_written_like_any_data_and_its_marker_replayed_as_an_abort() {
    let (mut plain, b) = batch(2, 1);
    plain.producer_id = 8;
    let p = run(0, vec![txn_batch(0, 2, 7), (plain, b), abort_marker(3, 7), txn_batch(4, 1, 7)]);
    assert_eq!(kinds(&p), vec![('W', 0, 2), ('W', 2, 1), ('A', 3, 1), ('W', 4, 1)]);
    assert_eq!(written(&p), keys([0, 1, 2, 4]), "read_uncommitted readers see the aborted records too");
}

#[test]
fn a_control_batch_spanning_more_than_one_offset_is_refused() {
    let (_, b) = marker(3, 7);
    let mut m = b.to_vec();
    m[23..27].copy_from_slice(&1i32.to_be_bytes());
    let crc = crc32c::crc32c(&m[21..]);
    m[17..21].copy_from_slice(&crc.to_be_bytes());
    let m = Bytes::from(m);
    let r = plan(0, vec![txn_batch(0, 3, 7), (parse_header(&m).unwrap(), m)]);
    assert!(r.is_err(), "planned as {:?}", r.map(|p| kinds(&p)));
}

#[test]
fn refetched_batches_below_the_log_end_are_skipped() {
    let p = run(10, vec![batch(0, 10), batch(10, 2)]);
    assert_eq!(kinds(&p), vec![('W', 10, 2)]);
    assert_eq!(p.next, 12);
}

#[test]
fn empty_retained_batches_are_filled() {
    let (mut h, b) = batch(0, 5);
    h.records_count = 0;
    let p = run(0, vec![(h, b)]);
    assert_eq!(kinds(&p), vec![('F', 0, 5)]);
}

// ---- the log end inside a batch (source log start moved into it, or a resumed re-encode) ----

#[test]
fn a_log_end_inside_the_first_fetched_batch_keeps_every_record_after_it() {
    let p = run(37, vec![batch(0, 100), batch(100, 50)]);
    assert_eq!(kinds(&p), vec![('R', 37, 63), ('W', 100, 50)], "records 37..99 are data, not fillers");
    assert_eq!(written(&p), keys(37..150));
    assert_eq!(p.reencoded, 1);
}

#[test]
fn a_log_end_inside_a_later_batch_keeps_every_record_after_it() {
    let p = run(150, vec![batch(0, 100), batch(100, 100), batch(200, 10)]);
    assert_eq!(kinds(&p), vec![('R', 150, 50), ('W', 200, 10)]);
    assert_eq!(written(&p), keys(150..210));
}

#[test]
fn a_log_end_at_a_batch_boundary_writes_whole_batches() {
    let p = run(100, vec![batch(0, 100), batch(100, 100)]);
    assert_eq!(kinds(&p), vec![('W', 100, 100)]);
    let p = run(99, vec![batch(0, 100), batch(100, 100)]);
    assert_eq!(kinds(&p), vec![('R', 99, 1), ('W', 100, 100)], "the batch's last record alone");
    assert_eq!(written(&p), keys(99..200));
}

#[test]
fn a_log_end_inside_a_compacted_batch_keeps_later_runs_and_fills_only_holes() {
    let compacted = || batch_with(&[10, 11, 14, 15, 16, 19], 10, 21, -1, false, Compression::Gzip);
    let p = run(15, vec![compacted(), batch(22, 2)]);
    assert_eq!(kinds(&p), vec![('R', 15, 2), ('F', 17, 2), ('R', 19, 1), ('F', 20, 2), ('W', 22, 2)]);
    assert_eq!(written(&p), keys([15, 16, 19, 22, 23]));
    let p = run(12, vec![compacted()]);
    assert_eq!(
        kinds(&p),
        vec![('F', 12, 2), ('R', 14, 3), ('F', 17, 2), ('R', 19, 1), ('F', 20, 2)],
        "a log end on a hole"
    );
    let p = run(10, vec![compacted()]);
    assert_eq!(
        kinds(&p),
        vec![('R', 10, 2), ('F', 12, 2), ('R', 14, 3), ('F', 17, 2), ('R', 19, 1), ('F', 20, 2)]
    );
}

#[test]
fn a_log_end_inside_a_transactional_batch_keeps_its_records() {
    for end in [marker(10, 7), abort_marker(10, 7)] {
        let p = run(4, vec![txn_batch(0, 10, 7), end, batch(11, 1)]);
        assert_eq!(kinds(&p)[0], ('R', 4, 6));
        assert_eq!(kinds(&p)[2], ('W', 11, 1));
        assert_eq!(written(&p), keys((4..10).chain([11])));
    }
}

#[test]
fn a_log_append_time_batch_is_re_encoded_with_the_append_time_on_every_record() {
    let (mut h, b) = batch(0, 5);
    let mut b = b.to_vec();
    // What the source broker does for a LogAppendTime topic: the attribute and max timestamp only.
    let attributes = h.attributes | (1 << 3);
    b[21..23].copy_from_slice(&attributes.to_be_bytes());
    b[35..43].copy_from_slice(&9_999i64.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let b = Bytes::from(b);
    h = parse_header(&b).unwrap();
    let p = run(0, vec![(h, b)]);
    assert_eq!(kinds(&p), vec![('R', 0, 5)]);
    let Action::Run { batch, .. } = &p.actions[0] else { panic!("a run") };
    let (rh, _) = split(batch).unwrap().remove(0);
    assert_eq!(rh.attributes & (1 << 3), 0, "CreateTime on the destination");
    let set = RecordBatchDecoder::decode(&mut batch.clone()).unwrap();
    assert!(
        set.records.iter().all(|r| r.timestamp == 9_999),
        "every record carries the source's append time"
    );
    assert_eq!(written(&p), keys(0..5));
}

// ---- the invariant check ----

/// A plan made of fills `(base, count)` only, ending at `next`.
fn fills(ranges: &[(i64, i64)], next: i64) -> Plan {
    let actions = ranges.iter().map(|&(base, count)| Action::Fill { base, count }).collect();
    Plan {
        actions,
        next,
        reencoded: 0,
        coalesced: 0,
    }
}

#[test]
fn the_check_refuses_a_filler_over_a_visible_record() {
    let (h, b) = batch(0, 100);
    let bad = fills(&[(37, 63)], 100);
    let e = check(37, &bad, &[(h, b)]).unwrap_err();
    assert!(matches!(e, MirrorError::Invariant(_)), "{e}");
    assert!(e.to_string().contains("offset 37"), "the reason names the record: {e}");
    assert!(!e.is_retriable(), "a violation turns the partition FAILED");
}

#[test]
fn the_check_refuses_a_filler_over_a_record_inside_a_compacted_batch_and_allows_holes() {
    let (h, b) = batch_with(&[10, 11, 14, 15, 16, 19], 10, 21, -1, false, Compression::Snappy);
    let holes = fills(&[(12, 2)], 14);
    check(12, &holes, &[(h, b.clone())]).expect("filling a hole is allowed");
    let bad = fills(&[(17, 3)], 20);
    let e = check(17, &bad, &[(h, b)]).unwrap_err();
    assert!(e.to_string().contains("offset 19"), "{e}");
}

#[test]
fn the_check_refuses_plans_with_gaps_or_overlaps() {
    let gap = fills(&[(5, 2)], 7);
    assert!(check(3, &gap, &[]).is_err(), "offsets 3..5 would be skipped");
    let overlap = fills(&[(3, 2), (4, 2)], 6);
    assert!(check(3, &overlap, &[]).is_err());
}

// ---- every shape, generated ----

/// One generated batch: (gap before it, length, kind) where kind 0 = plain, 1 = compacted
/// (every third record removed), 2 = committed transactional, 3 = aborted transactional,
/// 4 = marker.
/// Generated batches and the offsets of their records (what a read_uncommitted reader sees).
pub(crate) type History = (Vec<(BatchHeader, Bytes)>, Vec<i64>);

pub(crate) fn history(spec: &[(i64, i64, u8)]) -> History {
    let (mut at, mut batches, mut visible) = (0i64, Vec::new(), Vec::new());
    for (i, &(gap, len, kind)) in spec.iter().enumerate() {
        at += gap;
        let pid = 100 + i as i64;
        let (h, b) = match kind {
            0 => batch(at, len),
            1 => {
                let offsets: Vec<i64> = (at..at + len).filter(|o| o == &at || (o - at) % 3 != 1).collect();
                batch_with(&offsets, at, at + len - 1, -1, false, Compression::Lz4)
            }
            2 | 3 => txn_batch(at, len, pid),
            _ if i % 2 == 0 => marker(at, 1),
            _ => abort_marker(at, 1),
        };
        if kind != 4 {
            let recs = kmp_protocol::reencode::records(&b, &h).unwrap();
            visible.extend(recs.iter().map(|r| r.offset));
        }
        at = h.next_offset();
        batches.push((h, b));
    }
    (batches, visible)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// From any destination log end, inside a batch or not, the plan writes exactly the visible
    /// records at and after it, each at its own offset, and fills only what holds none.
    #[test]
    fn every_visible_record_after_the_log_end_is_written_at_its_offset(
        spec in proptest::collection::vec((0i64..4, 1i64..12, 0u8..5), 1..8),
        cut in 0usize..1000,
        split_at in 0usize..8,
    ) {
        let (batches, visible) = history(&spec);
        let end = batches.last().map_or(0, |(h, _)| h.next_offset());
        let next = (cut as i64) % (end + 1);
        // The same history over two fetches plans the same writes.
        let split_at = split_at.min(batches.len());
        let (first, second) = (batches[..split_at].to_vec(), batches[split_at..].to_vec());
        let p1 = plan(next, first).unwrap();
        let p2 = plan(p1.next, second).unwrap();
        let mut got = written(&p1);
        got.extend(written(&p2));
        prop_assert_eq!(got, keys(visible.into_iter().filter(|&o| o >= next)));
        prop_assert_eq!(p2.next, end.max(next));
    }
}

/// `b` with `f` applied and its CRC left as it was: corrupted on its way from the source.
fn corrupted(b: &Bytes, f: impl Fn(&mut BytesMut)) -> (BatchHeader, Bytes) {
    let mut m = BytesMut::from(&b[..]);
    f(&mut m);
    let b = m.freeze();
    (parse_header(&b).expect("still parses"), b)
}

const CONTROL_BIT: u8 = 1 << 5;

#[test]
fn a_data_batch_turned_into_a_marker_on_its_way_is_refused_not_filled() {
    for limit in [0, 256 * 1024] {
        let (_, b) = batch(1, 5);
        let batches = vec![batch(0, 1), corrupted(&b, |m| m[22] |= CONTROL_BIT), batch(6, 1)];
        let r = plan_coalesced(0, batches, limit);
        assert!(r.is_err(), "limit {limit}: a batch failing its CRC became {:?}", r.map(|p| kinds(&p)));
    }
}

#[test]
fn a_data_batch_whose_record_count_was_zeroed_on_its_way_is_refused_not_filled() {
    let (_, b) = batch(1, 5);
    let batches = vec![batch(0, 1), corrupted(&b, |m| m[57..61].copy_from_slice(&0i32.to_be_bytes())), batch(6, 1)];
    let r = plan_coalesced(0, batches, 256 * 1024);
    assert!(r.is_err(), "a batch failing its CRC became {:?}", r.map(|p| kinds(&p)));
}

#[test]
fn a_data_batch_turned_into_a_marker_on_its_way_is_refused_even_below_the_log_end() {
    let (_, b) = txn_batch(2, 1, 8);
    let batches = vec![batch(0, 1), txn_batch(1, 1, 8), corrupted(&b, |m| m[22] |= CONTROL_BIT), txn_batch(3, 2, 8)];
    for next in [0, 3] {
        let r = plan_coalesced(next, batches.clone(), 256 * 1024);
        // Unchecked, the fake marker would end producer 8's destination transaction at offset 2.
        assert!(r.is_err(), "from {next}: planned as {:?}", r.map(|p| kinds(&p)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// One bit flipped anywhere the CRC covers, in any batch of a generated history: the plan
    /// refuses the fetch, or hands the corrupted bytes unchanged to a Write (whose rewrite
    /// checks the CRC), or skips the batch as written before; it never fills or merges it.
    #[test]
    fn a_batch_corrupted_anywhere_the_crc_covers_is_never_filled_or_merged(
        spec in proptest::collection::vec((0i64..4, 1i64..12, 0u8..5), 1..8),
        which in 0usize..8,
        bit in 0usize..1_000_000,
        cut in 0usize..1000,
        limit in prop_oneof![Just(0usize), Just(256 * 1024)],
    ) {
        let (mut batches, _) = history(&spec);
        let which = which % batches.len();
        let (h, b) = batches[which].clone();
        let covered = (b.len() - 21) * 8;
        let at = 21 * 8 + bit % covered;
        let mut m = BytesMut::from(&b[..]);
        m[at / 8] ^= 1 << (at % 8);
        let Ok(bad_h) = parse_header(&m) else { return Ok(()) }; // refused before planning
        if bad_h.next_offset() != h.next_offset() {
            return Ok(()); // a count change the split of the Fetch answer already notices
        }
        let bad = m.freeze();
        batches[which] = (bad_h, bad.clone());
        let end = batches.last().map_or(0, |(h, _)| h.next_offset());
        let next = (cut as i64) % (end + 1);
        if let Ok(p) = plan_coalesced(next, batches, limit) {
            let unchanged_write = p.actions.iter().any(|a| matches!(a, Action::Write { batch, .. } if *batch == bad));
            let skipped = h.next_offset() <= next && !bad_h.is_control();
            prop_assert!(unchanged_write || skipped, "batch {} corrupted at bit {}: {:?}", which, at, kinds(&p));
        }
    }
}
