//! `stream_copy` between real loopback sockets, where ranges move by `splice`: the client gets
//! exactly the bytes the copy path gives, pipelined frames after a spliced one are intact, and a
//! broker that closes inside a spliced range is a broker error.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::super::*;
use super::{fetch, response, stream_all};

/// Two connected loopback sockets.
async fn socket_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr")).await.expect("connect");
    let (b, _) = l.accept().await.expect("accept");
    (a, b)
}

/// The broker writes `bytes` in pieces of varying size (and closes), the proxy streams `frames`
/// (correlation id, scan) to the client, which reads everything: what the client got, the copy
/// results and the bytes spliced.
async fn through_sockets(bytes: Vec<u8>, frames: &[(i32, Scan)]) -> (Vec<u8>, Vec<Result<Option<usize>, CopyError>>, u64) {
    let (mut broker, proxy_up) = socket_pair().await;
    let (proxy_down, mut client) = socket_pair().await;
    let writer = tokio::spawn(async move {
        let mut at = 0;
        let mut step = 1_000;
        while at < bytes.len() {
            let k = step.min(bytes.len() - at);
            broker.write_all(&bytes[at..at + k]).await.expect("broker writes");
            at += k;
            step = step * 7 % 300_007 + 1;
            tokio::task::yield_now().await;
        }
    });
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.expect("client reads");
        got
    });
    let (up_r, _up_w) = proxy_up.into_split();
    let (_down_r, mut down_w) = proxy_down.into_split();
    let mut up = Upstream::new(up_r, 64 << 20);
    let mut results = Vec::new();
    for &(id, scan) in frames {
        let r = up.stream(&mut down_w, id, scan).await;
        let failed = r.is_err();
        results.push(r);
        if failed {
            break;
        }
    }
    let spliced = up.take_spliced();
    drop((up, down_w, _down_r));
    writer.await.expect("writer");
    (reader.await.expect("reader"), results, spliced)
}

#[tokio::test]
async fn a_large_response_between_plain_sockets_is_spliced_and_arrives_exactly_with_the_frames_after_it() {
    let big = response(5, &(0..3_000_000u32).map(|i| (i * 31 % 251) as u8).collect::<Vec<_>>());
    let small = response(6, b"after the spliced one");
    let bytes = [big.clone(), small.clone()].concat();
    let (got, results, spliced) = through_sockets(bytes.clone(), &[(5, Scan::Plain), (6, Scan::Plain)]).await;
    assert!(results.iter().all(|r| r.is_ok()), "copies: {results:?}");
    assert_eq!(got.len(), bytes.len(), "the client got every byte");
    assert!(got == bytes, "the client got the broker's bytes in order");
    // At most one small buffer of it (64 KiB) passes through user space.
    assert!(
        spliced >= 3_000_000 - 64 * 1024,
        "the large response moved by splice but for one buffer, got {spliced}"
    );
}

#[test]
fn a_fetch_response_s_record_sets_are_spliced_and_its_node_endpoints_still_neutralised() {
    let frame = fetch(17, true, 450_000);
    let expected = stream_all(&frame, &[], 1 << 20, 7, Scan::FetchEndpoints(17)).expect("copy path");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    assert_ne!(expected, frame, "the copy path neutralises node_endpoints");
    let (got, results, spliced) = rt.block_on(through_sockets(frame.clone(), &[(7, Scan::FetchEndpoints(17))]));
    assert!(results.iter().all(|r| r.is_ok()), "copy: {results:?}");
    assert!(
        got == expected,
        "the spliced copy equals the copy path's (same length {} vs {})",
        got.len(),
        expected.len()
    );
    assert!(
        spliced >= 900_000 - 2 * 64 * 1024,
        "both record sets moved by splice but for a buffer each, got {spliced}"
    );
}

#[tokio::test]
async fn a_broker_that_closes_inside_a_spliced_range_is_a_broker_error() {
    let big = response(5, &vec![7u8; 2_000_000]);
    let cut = big[..1_200_000].to_vec();
    let (got, results, _) = through_sockets(cut, &[(5, Scan::Plain)]).await;
    assert!(
        matches!(results.last(), Some(Err(CopyError::Broker(ProtocolError::TruncatedFrame { .. })))),
        "a truncated frame, got {results:?}"
    );
    assert!(got.len() <= 1_200_000, "never more than the broker sent");
}
