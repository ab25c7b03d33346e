//! Frames from a hostile peer: random bodies and mutated real frames are errors or translations,
//! never panics, for every API and version that may be translated.

use proptest::prelude::*;

use super::fetch::fetch_response;
use super::*;

/// Every (API key, version) either translator looks at.
fn translated() -> Vec<(ApiKey, i16)> {
    ApiKey::iter()
        .filter(|k| request_may_shift(*k as i16) || response_may_shift(*k as i16))
        .flat_map(|k| {
            let r = k.valid_versions();
            (r.min..=r.max).map(move |v| (k, v))
        })
        .collect()
}

/// A request frame of `key`/`v` with a valid header and `body` after it.
fn request_with_body(key: ApiKey, v: i16, body: &[u8]) -> Bytes {
    let mut f = vec![0, 0, 0, 0];
    f.extend_from_slice(&(key as i16).to_be_bytes());
    f.extend_from_slice(&v.to_be_bytes());
    f.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    if key.request_header_version(v) >= 2 {
        f.push(0);
    }
    f.extend_from_slice(body);
    let len = (f.len() - 4) as i32;
    f[0..4].copy_from_slice(&len.to_be_bytes());
    Bytes::from(f)
}

/// A response frame of `key`/`v` with a valid header and `body` after it.
fn response_with_body(key: ApiKey, v: i16, body: &[u8]) -> Bytes {
    let mut f = vec![0, 0, 0, 0];
    f.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    if key.response_header_version(v) >= 1 {
        f.push(0);
    }
    f.extend_from_slice(body);
    let len = (f.len() - 4) as i32;
    f[0..4].copy_from_slice(&len.to_be_bytes());
    Bytes::from(f)
}

#[test]
fn every_cut_of_a_fetch_response_with_records_is_an_error_or_a_translation() {
    for v in [4, 11, 12, 13, 18] {
        let frame = response_frame(ApiKey::Fetch, v, &fetch_response(v));
        for cut in 0..frame.len() {
            let _ = shift_response(&frame.slice(..cut), ApiKey::Fetch as i16, v, &Catalog);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bodies_never_panic(which in any::<prop::sample::Index>(), body in proptest::collection::vec(any::<u8>(), 0..160)) {
        let all = translated();
        let (key, v) = all[which.index(all.len())];
        let _ = shift_request(&request_with_body(key, v, &body), key as i16, v, &Catalog);
        let _ = shift_response(&response_with_body(key, v, &body), key as i16, v, &Catalog);
    }

    #[test]
    fn mutated_fetch_responses_never_panic(
        v in 4i16..=18,
        at in any::<prop::sample::Index>(),
        bytes in proptest::collection::vec(any::<u8>(), 1..9),
    ) {
        let frame = response_frame(ApiKey::Fetch, v, &fetch_response(v));
        let mut bad = frame.to_vec();
        let pos = at.index(bad.len() - 4) + 4;
        for (i, b) in bytes.iter().enumerate() {
            if let Some(slot) = bad.get_mut(pos + i) {
                *slot = *b;
            }
        }
        let _ = shift_response(&Bytes::from(bad), ApiKey::Fetch as i16, v, &Catalog);
    }
}
