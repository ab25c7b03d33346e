//! Batch base offsets in records blobs: real batches move and stay valid, hostile blobs never
//! panic.

use kafka_protocol::records::RecordBatchDecoder;
use proptest::prelude::*;

use super::super::records::{shift_in_place, shifted};
use super::*;

fn compression(n: u8) -> Compression {
    match n % 5 {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        _ => Compression::Zstd,
    }
}

/// Consecutive batches from `base` on, one per `(records, compression)` spec.
fn blob_of(base: i64, specs: &[(i64, u8)]) -> Bytes {
    let mut out = BytesMut::new();
    let mut at = base;
    for &(n, c) in specs {
        out.extend_from_slice(&batch(at, n, compression(c)));
        at += n;
    }
    out.freeze()
}

/// Every record of every batch in `blob`: (offset, key, value), each batch's CRC checked.
fn records_of(blob: &Bytes) -> Vec<(i64, Option<Bytes>, Option<Bytes>)> {
    let mut buf = blob.clone();
    let mut out = Vec::new();
    while !buf.is_empty() {
        let set = RecordBatchDecoder::decode(&mut buf).unwrap_or_else(|e| panic!("a batch does not decode (CRC or layout broken): {e}"));
        out.extend(set.records.into_iter().map(|r| (r.offset, r.key, r.value)));
    }
    out
}

/// How many whole batches a blob of real batches cut at `len` holds.
fn whole_batches(specs_blob: &Bytes, len: usize) -> usize {
    let mut at = 0;
    let mut n = 0;
    while at + 12 <= len {
        let size = 12 + i32::from_be_bytes([specs_blob[at + 8], specs_blob[at + 9], specs_blob[at + 10], specs_blob[at + 11]]) as usize;
        if at + size > len {
            break;
        }
        at += size;
        n += 1;
    }
    n
}

#[test]
fn negative_base_offsets_stay_and_sums_past_i64_max_saturate() {
    let mut b = BytesMut::from(&batch(0, 2, Compression::None)[..]);
    b[0..8].copy_from_slice(&(-1i64).to_be_bytes());
    assert_eq!(shift_in_place(&mut b, DELTA), 0, "a negative base offset is a sentinel");
    assert_eq!(shifted(&b.clone().freeze(), DELTA), None, "nothing moves: no copy");
    b[0..8].copy_from_slice(&(i64::MAX - 5).to_be_bytes());
    assert_eq!(shift_in_place(&mut b, DELTA), 1);
    assert_eq!(&b[0..8], &i64::MAX.to_be_bytes(), "saturates at i64::MAX");
}

#[test]
fn hostile_lengths_end_the_walk_without_panic() {
    let mut huge = vec![0u8; 12];
    huge[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    assert_eq!(shift_in_place(&mut huge, DELTA), 0, "a length past the end is a partial batch");
    let mut negative = vec![0u8; 40];
    negative[8..12].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(shift_in_place(&mut negative, DELTA), 0, "a negative length ends the walk");
    let mut empty_entries = vec![0u8; 36];
    assert_eq!(
        shift_in_place(&mut empty_entries, DELTA),
        3,
        "three 12-byte entries of length 0, each walked once"
    );
    assert_eq!(shifted(&Bytes::new(), DELTA), None);
    assert_eq!(shifted(&Bytes::from_static(&[0; 11]), DELTA), None, "shorter than a length field");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_batch_of_a_real_blob_moves_by_delta_with_its_crc_still_valid(
        base in 0i64..1 << 50,
        specs in proptest::collection::vec((1i64..6, any::<u8>()), 1..6),
        delta in 1i64..=1_000_000_000_000,
    ) {
        let blob = blob_of(base, &specs);
        let moved = shifted(&blob, delta).expect("real batches move");
        prop_assert_eq!(moved.len(), blob.len());
        prop_assert_eq!(&moved, &blob_of(base + delta, &specs), "byte for byte the batches written at base + Δ");
        let want: Vec<_> = records_of(&blob).into_iter().map(|(o, k, v)| (o + delta, k, v)).collect();
        prop_assert_eq!(records_of(&moved), want, "every record's offset + Δ, keys and values unchanged");
    }

    #[test]
    fn a_cut_blob_moves_exactly_its_whole_batches_and_leaves_the_rest(
        specs in proptest::collection::vec((1i64..4, any::<u8>()), 1..5),
        cut_at in any::<prop::sample::Index>(),
    ) {
        let blob = blob_of(100, &specs);
        let cut = cut_at.index(blob.len() + 1);
        let mut prefix = blob[..cut].to_vec();
        let whole = whole_batches(&blob, cut);
        prop_assert_eq!(shift_in_place(&mut prefix, DELTA), whole);
        let moved_end = blob_of(100 + DELTA, &specs[..whole]).len();
        prop_assert_eq!(&prefix[..moved_end], &blob_of(100 + DELTA, &specs[..whole])[..]);
        prop_assert_eq!(&prefix[moved_end..], &blob[moved_end..cut], "the partial batch is untouched");
    }

    #[test]
    fn random_bytes_never_panic_and_keep_their_length(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), delta in any::<i64>()) {
        let original = Bytes::from(bytes.clone());
        let n = shift_in_place(&mut bytes, delta);
        prop_assert_eq!(bytes.len(), original.len());
        match shifted(&original, delta) {
            Some(moved) => prop_assert_eq!(&moved[..], &bytes[..]),
            None => prop_assert_eq!(n, 0),
        }
    }

    #[test]
    fn hostile_length_fields_in_real_blobs_never_panic(
        specs in proptest::collection::vec((1i64..4, any::<u8>()), 1..4),
        at in any::<prop::sample::Index>(),
        length in any::<i32>(),
    ) {
        let blob = blob_of(7, &specs);
        let mut bad = blob.to_vec();
        let pos = at.index(bad.len().saturating_sub(3).max(1));
        let end = (pos + 4).min(bad.len());
        bad[pos..end].copy_from_slice(&length.to_be_bytes()[..end - pos]);
        let _ = shift_in_place(&mut bad, DELTA);
        let _ = shifted(&Bytes::from(bad), i64::MAX);
    }
}
