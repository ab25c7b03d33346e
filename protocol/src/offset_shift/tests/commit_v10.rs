//! OffsetCommit v10 requests (topic ids), which kafka-protocol cannot encode: built by hand here,
//! from the v10 schema.

use proptest::prelude::*;

use super::*;

fn uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn compact(out: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        None => out.push(0),
        Some(s) => {
            uvarint(out, s.len() as u32 + 1);
            out.extend_from_slice(s);
        }
    }
}

/// A v10 frame committing `offset(t, p)` for every sample partition, and where each
/// `committed_offset` lies in it. One partition carries an unknown tagged field.
fn v10_frame(offset: impl Fn(Topic, i32) -> i64) -> (Bytes, Vec<(Topic, i32, usize)>) {
    let mut f = vec![0, 0, 0, 0];
    f.extend_from_slice(&(ApiKey::OffsetCommit as i16).to_be_bytes());
    f.extend_from_slice(&10i16.to_be_bytes());
    f.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    f.extend_from_slice(&4i16.to_be_bytes());
    f.extend_from_slice(b"test");
    f.push(0); // header tagged fields
    compact(&mut f, Some(b"readers"));
    f.extend_from_slice(&3i32.to_be_bytes());
    compact(&mut f, Some(b"member-1"));
    compact(&mut f, None); // group_instance_id
    uvarint(&mut f, TOPICS.len() as u32 + 1);
    let mut at = Vec::new();
    for t in TOPICS {
        f.extend_from_slice(t.id().as_bytes());
        uvarint(&mut f, t.partitions().len() as u32 + 1);
        for &p in t.partitions() {
            f.extend_from_slice(&p.to_be_bytes());
            at.push((t, p, f.len()));
            f.extend_from_slice(&offset(t, p).to_be_bytes());
            f.extend_from_slice(&2i32.to_be_bytes());
            compact(&mut f, Some(b"meta"));
            if p == 1 {
                f.extend_from_slice(&[1, 5, 3, 9, 9, 9]); // one tagged field: tag 5, 3 bytes
            } else {
                f.push(0);
            }
        }
        f.push(0);
    }
    f.push(0);
    let len = (f.len() - 4) as i32;
    f[0..4].copy_from_slice(&len.to_be_bytes());
    (Bytes::from(f), at)
}

#[test]
fn offset_commit_v10_offsets_move_down_in_place_and_nothing_else_changes() {
    let (frame, at) = v10_frame(|t, p| client(t, p, 0));
    let out = shift_request(&frame, ApiKey::OffsetCommit as i16, 10, &Catalog)
        .expect("translates")
        .expect("shifted partitions move");
    let mut want = frame.to_vec();
    for (t, p, pos) in at {
        want[pos..pos + 8].copy_from_slice(&sent(t, p, 0, 0).to_be_bytes());
    }
    assert_eq!(
        &out[..],
        &want[..],
        "only the committed offsets of shifted partitions change (below the start → 0, −1 kept)"
    );
    assert!(
        shift_request(&frame, ApiKey::OffsetCommit as i16, 10, &NoShifts).expect("translates").is_none(),
        "no shifted partition: None"
    );
}

#[test]
fn offset_commit_v10_matches_what_v9_does_for_the_same_commits() {
    let (frame, at) = v10_frame(|t, p| client(t, p, 0));
    let out = shift_request(&frame, ApiKey::OffsetCommit as i16, 10, &Catalog)
        .expect("translates")
        .expect("moves");
    for (t, p, pos) in at {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&out[pos..pos + 8]);
        let v10 = i64::from_be_bytes(raw);
        let v9 = to_destination(client(t, p, 0), Catalog.shift(TopicKey::Name(t.name()), p), BelowStart::Zero);
        assert_eq!(v10, v9, "{t:?}-{p}");
    }
}

#[test]
fn malformed_offset_commit_v10_frames_are_errors() {
    let (frame, _) = v10_frame(|t, p| client(t, p, 0));
    for cut in 0..frame.len() {
        let short = frame.slice(..cut);
        assert!(
            shift_request(&short, ApiKey::OffsetCommit as i16, 10, &Catalog).is_err(),
            "a frame cut at {cut} of {} must be refused",
            frame.len()
        );
    }
    let mut longer = frame.to_vec();
    longer.push(0);
    assert!(
        shift_request(&Bytes::from(longer), ApiKey::OffsetCommit as i16, 10, &Catalog).is_err(),
        "trailing bytes"
    );
    assert!(shift_request(&frame, ApiKey::OffsetCommit as i16, 11, &Catalog).is_err(), "an unknown version");
    let mut other = frame.to_vec();
    other[6..8].copy_from_slice(&9i16.to_be_bytes());
    assert!(
        shift_request(&Bytes::from(other), ApiKey::OffsetCommit as i16, 10, &Catalog).is_err(),
        "header v9, caller v10"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_offset_commit_v10_frames_never_panic(at in any::<prop::sample::Index>(), bytes in proptest::collection::vec(any::<u8>(), 1..6)) {
        let (frame, _) = v10_frame(|t, p| client(t, p, 0));
        let mut bad = frame.to_vec();
        let pos = at.index(bad.len() - 4) + 4;
        for (i, b) in bytes.iter().enumerate() {
            if let Some(slot) = bad.get_mut(pos + i) {
                *slot = *b;
            }
        }
        let _ = shift_request(&Bytes::from(bad), ApiKey::OffsetCommit as i16, 10, &Catalog);
    }
}
