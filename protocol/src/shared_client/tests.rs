//! Unit tests of the shared connection against fake brokers.
use std::time::Duration;

use kafka_protocol::messages::ApiVersionsRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// A fake broker answering every request with an ApiVersions v0 response (error code = the
/// request's sequence number on the connection), each after `delay`; closes after `limit`.
async fn fake_broker(delay: Duration, limit: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        for seq in 0..limit {
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            s.read_exact(&mut body).await.unwrap();
            tokio::time::sleep(delay).await;
            // correlation id, error code, empty api_keys array
            let mut resp = body[4..8].to_vec();
            resp.extend_from_slice(&(seq as i16).to_be_bytes());
            resp.extend_from_slice(&0i32.to_be_bytes());
            let mut frame = (resp.len() as u32).to_be_bytes().to_vec();
            frame.extend_from_slice(&resp);
            s.write_all(&frame).await.unwrap();
        }
    });
    addr
}

async fn open(addr: &str) -> SharedConnection {
    SharedConnection::new(Connection::connect(addr, Duration::from_secs(5), "t").await.unwrap())
}

#[tokio::test]
async fn concurrent_callers_each_get_their_own_response_in_wire_order() {
    let conn = open(&fake_broker(Duration::ZERO, 1000).await).await;
    let calls = (0..64).map(|_| {
        let c = conn.clone();
        tokio::spawn(async move { c.call(&ApiVersionsRequest::default(), 0).await.map(|r| r.error_code) })
    });
    let mut seen: Vec<i16> = Vec::new();
    for c in calls {
        seen.push(c.await.unwrap().expect("every caller is answered"));
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..64).collect::<Vec<i16>>(), "64 distinct responses, none lost or duplicated");
}

#[tokio::test]
async fn a_caller_that_gives_up_does_not_shift_the_responses_of_the_others() {
    let conn = open(&fake_broker(Duration::from_millis(30), 1000).await).await;
    let impatient = tokio::time::timeout(Duration::from_millis(5), conn.call(&ApiVersionsRequest::default(), 0)).await;
    assert!(impatient.is_err(), "the first caller gave up before its answer");
    let next = conn.call(&ApiVersionsRequest::default(), 0).await.expect("answered");
    assert_eq!(next.error_code, 1, "the second caller gets the second response, not the abandoned first");
    let pending = conn.submit(&ApiVersionsRequest::default(), 0).await.unwrap();
    drop(pending);
    assert_eq!(conn.call(&ApiVersionsRequest::default(), 0).await.unwrap().error_code, 3);
}

#[tokio::test]
async fn a_closed_connection_fails_every_waiting_caller_and_every_later_one() {
    let conn = open(&fake_broker(Duration::from_millis(20), 1).await).await;
    let a = tokio::spawn({
        let c = conn.clone();
        async move { c.call(&ApiVersionsRequest::default(), 0).await.map(|r| r.error_code) }
    });
    let b = tokio::spawn({
        let c = conn.clone();
        async move { c.call(&ApiVersionsRequest::default(), 0).await.map(|r| r.error_code) }
    });
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert!(a.is_ok() != b.is_ok(), "one answered, the other failed: {a:?} {b:?}");
    tokio::time::timeout(Duration::from_secs(5), async {
        while !conn.is_closed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the connection reports closed");
    assert!(conn.call(&ApiVersionsRequest::default(), 0).await.is_err());
}

#[tokio::test]
async fn a_response_later_than_the_request_timeout_closes_the_connection_and_fails_its_callers() {
    let addr = fake_broker(Duration::from_secs(30), 1000).await;
    let conn = SharedConnection::with_request_timeout(
        Connection::connect(&addr, Duration::from_secs(5), "t").await.unwrap(),
        Duration::from_millis(200),
    );
    let started = std::time::Instant::now();
    let err = conn
        .call(&ApiVersionsRequest::default(), 0)
        .await
        .expect_err("a broker 30 s late must time out");
    assert!(started.elapsed() < Duration::from_secs(5), "the caller waited {:?}", started.elapsed());
    assert!(err.to_string().contains("no complete response"), "the error says why: {err}");
    assert!(
        conn.is_closed(),
        "a connection whose response is late is closed: later requests would queue behind it"
    );
    let later = conn.submit(&ApiVersionsRequest::default(), 0).await;
    assert!(later.is_err(), "a closed connection takes no more requests");
}

/// A stream that takes at most `step` bytes per write, vectored or not.
struct Trickle {
    got: Vec<u8>,
    step: usize,
}

impl AsyncWrite for Trickle {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let n = buf.len().min(self.step);
        self.got.extend_from_slice(&buf[..n]);
        std::task::Poll::Ready(Ok(n))
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(self.step - n);
            self.got.extend_from_slice(&b[..take]);
            n += take;
            if n == self.step {
                break;
            }
        }
        std::task::Poll::Ready(Ok(n))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

proptest::proptest! {
    #[test]
    fn segments_are_written_whole_and_in_order_however_little_each_write_takes(
        sizes in proptest::collection::vec(0usize..300, 0..150),
        step in 1usize..700,
    ) {
        let segs: Vec<Bytes> = sizes.iter().enumerate().map(|(i, &n)| Bytes::from(vec![i as u8; n])).collect();
        let want: Vec<u8> = segs.iter().flat_map(|s| s.iter().copied()).collect();
        let mut w = Trickle { got: Vec::new(), step };
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(write_segments(&mut w, &segs)).expect("written");
        proptest::prop_assert_eq!(w.got, want);
    }
}
