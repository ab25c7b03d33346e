//! The sink against a fake destination leader that behaves like Kafka where it matters here: it
//! refuses the first `refuse` batches (NOT_LEADER_OR_FOLLOWER, as a broker that was fenced while
//! frozen) and appends every later one at its log end, accepting any sequence as the first batch
//! of a producer it holds no state for; later batches must continue the sequence (a repeat of
//! the last batch is answered as a duplicate with its offset, anything else is refused with
//! OUT_OF_ORDER_SEQUENCE_NUMBER), as Kafka's ProducerStateManager does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kmp_protocol::batch;
use kmp_protocol::codec::{decode_request, encode_response};
use kmp_protocol::kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kmp_protocol::kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId};
use tokio::io::AsyncWriteExt;

use super::*;
use crate::cluster::client::ClusterClient;
use crate::cluster::produce::PRODUCE_VERSION;
use crate::copy::produce::mux::ProduceSettings;

/// `(offset, base sequence)` of each batch the fake leader appended.
type Log = Arc<Mutex<Vec<(i64, i32)>>>;

async fn fake_leader(refuse: usize) -> (String, Log) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let log: Log = Arc::default();
    // (batches seen, log end, the last appended batch: first sequence, last sequence, offset)
    let state = Arc::new(Mutex::new((0usize, 0i64, None::<(i32, i32, i64)>)));
    let appended = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let (log, state) = (appended.clone(), state.clone());
            tokio::spawn(async move {
                loop {
                    let Some(frame) = crate::cluster::test_frames::read_request(&mut s).await else {
                        return;
                    };
                    let key = i16::from_be_bytes([frame[4], frame[5]]);
                    let out = if key == ApiKey::InitProducerId as i16 {
                        let (h, _): (_, InitProducerIdRequest) = decode_request(&frame, ApiKey::InitProducerId, 4).unwrap();
                        let mut r = InitProducerIdResponse::default();
                        r.producer_id = ProducerId(12);
                        encode_response(h.correlation_id, ApiKey::InitProducerId, 4, &r).unwrap()
                    } else {
                        let (h, req): (_, ProduceRequest) = decode_request(&frame, ApiKey::Produce, PRODUCE_VERSION).unwrap();
                        let mut resp = ProduceResponse::default();
                        for t in req.topic_data {
                            let mut tr = TopicProduceResponse::default();
                            tr.name = t.name.clone();
                            for p in t.partition_data {
                                let header = batch::parse_header(p.records.as_ref().unwrap()).unwrap();
                                let mut pr = PartitionProduceResponse::default();
                                pr.index = p.index;
                                let mut st = state.lock().unwrap();
                                st.0 += 1;
                                let (first, last) = (header.base_sequence, header.base_sequence + header.last_offset_delta);
                                match st.2 {
                                    _ if st.0 <= refuse => {
                                        pr.error_code = 6;
                                        pr.base_offset = -1;
                                    }
                                    Some((f, l, at)) if (f, l) == (first, last) => pr.base_offset = at, // duplicate
                                    Some((_, l, _)) if first != l + 1 => {
                                        pr.error_code = 45;
                                        pr.base_offset = -1;
                                    }
                                    _ => {
                                        pr.base_offset = st.1;
                                        log.lock().unwrap().push((st.1, header.base_sequence));
                                        st.2 = Some((first, last, st.1));
                                        st.1 += i64::from(header.last_offset_delta) + 1;
                                    }
                                }
                                tr.partition_responses.push(pr);
                            }
                            resp.responses.push(tr);
                        }
                        encode_response(h.correlation_id, ApiKey::Produce, PRODUCE_VERSION, &resp).unwrap()
                    };
                    s.write_all(&out).await.unwrap();
                }
            });
        }
    });
    (addr, log)
}

async fn sink_to(addr: &str, max_in_flight: usize) -> PartitionSink {
    sink_at(addr, max_in_flight, 0).await
}

/// A sink whose first batch carries sequence `next_sequence`.
async fn sink_at(addr: &str, max_in_flight: usize, next_sequence: i32) -> PartitionSink {
    let client = ClusterClient::new("destination", vec![addr.to_owned()], Duration::from_secs(5));
    let producers = Producers::new(client.clone(), ProduceSettings::default(), crate::lease::Lease::forever());
    let conn = SharedConnection::new(client.connect_to(addr, "t").await.unwrap());
    let producer = EngineProducer {
        producer_id: 12,
        producer_epoch: 0,
    };
    let txns = crate::copy::txn::Transactions::new(client, producers.clone(), "t", [0; 16], 0);
    PartitionSink::open(conn, producers, producer, next_sequence, txns, "t", 0, max_in_flight, 0)
}

#[tokio::test]
async fn batches_behind_a_refused_first_batch_are_never_sent_so_none_lands_at_its_offset() {
    let (addr, log) = fake_leader(2).await;
    let mut sink = sink_to(&addr, 5).await;
    // Four batches of ten that must land at 0, 10, 20, 30. Before the fix all four went out
    // together; the leader refused the first two and appended the third at offset 0.
    let mut result = Ok(());
    for base in [0, 10, 20, 30] {
        result = sink.write_fillers(10, base).await;
        if result.is_err() {
            break;
        }
    }
    let result = match result {
        Ok(()) => sink.flush().await,
        e => e,
    };
    let e = result.expect_err("the refused first batch fails the attempt");
    assert!(e.is_retriable(), "{e}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(*log.lock().unwrap(), vec![], "nothing behind the refused batch reached the leader");
    let (_, in_flight) = sink.abandon();
    assert_eq!(in_flight.iter().map(|w| w.base).collect::<Vec<_>>(), vec![0], "only the first batch was sent");
}

#[tokio::test]
async fn once_the_first_batch_is_acknowledged_the_rest_are_pipelined_in_order() {
    let (addr, log) = fake_leader(0).await;
    let mut sink = sink_to(&addr, 5).await;
    for base in [0, 10, 20, 30] {
        sink.write_fillers(10, base).await.expect("written");
    }
    sink.flush().await.expect("acknowledged");
    assert_eq!(*log.lock().unwrap(), vec![(0, 0), (10, 10), (20, 20), (30, 30)]);
    let acked: Vec<_> = sink.take_acknowledged().iter().map(|w| (w.base, w.sequence, w.producer_id)).collect();
    assert_eq!(acked, vec![(0, 0, 12), (10, 10, 12), (20, 20, 12), (30, 30, 12)]);
}

#[tokio::test]
async fn a_second_writer_whose_sequence_is_behind_the_leaders_is_refused_and_appends_nothing() {
    let (addr, log) = fake_leader(0).await;
    let mut active = sink_to(&addr, 5).await;
    for base in [0, 10] {
        active.write_fillers(10, base).await.expect("written");
    }
    active.flush().await.expect("acknowledged");
    // A former active engine woke up with the sequence it derived when the log ended at 10: its
    // batch for 10..19 repeats the last one exactly (answered as the duplicate it is).
    let mut stale = sink_at(&addr, 5, 10).await;
    stale.write_fillers(10, 10).await.expect("sent");
    stale.flush().await.expect("a repeat of the last batch is acknowledged at its own offset");
    // One that derived its sequence even earlier (log end 5) does not fit at all.
    let mut older = sink_at(&addr, 5, 5).await;
    older.write_fillers(10, 5).await.expect("sent");
    let e = older.flush().await.expect_err("a batch whose sequence is behind is refused");
    assert!(matches!(e, MirrorError::Broker { code: 45, .. }), "{e}");
    // The writer that is right goes on.
    active.write_fillers(10, 20).await.expect("written");
    active.flush().await.expect("acknowledged");
    assert_eq!(*log.lock().unwrap(), vec![(0, 0), (10, 10), (20, 20)], "every offset written once, in order");
}

#[tokio::test]
async fn an_attempt_continues_the_sequence_it_was_opened_with_whatever_the_offsets() {
    let (addr, log) = fake_leader(0).await;
    // Offsets 0..6 were written by other producers (a source transaction and its marker): the
    // engine's producer starts with no state on the leader, at sequence 0, and its batches
    // continue from there while landing at their own offsets.
    let mut sink = sink_at(&addr, 5, 0).await;
    sink.write_fillers(4, 0).await.expect("written");
    sink.write_fillers(3, 4).await.expect("written");
    sink.flush().await.expect("acknowledged");
    let acked: Vec<_> = sink.take_acknowledged().iter().map(|w| (w.base, w.sequence)).collect();
    assert_eq!(acked, vec![(0, 0), (4, 4)]);
    assert_eq!(*log.lock().unwrap(), vec![(0, 0), (4, 4)]);
}
