//! One Fetch round of a broker session: the request's share of the memory budget, sending it,
//! a session the broker dropped (started again with a full request) or a request-wide error
//! (every waiting partition gets it, then a pause), the session id and epoch the answer sets,
//! and the delivery of each partition's answer with its share of the reservation.

use std::time::Duration;

use kmp_protocol::ProtocolError;
use kmp_protocol::kafka_protocol::ResponseError;
use tokio::time::Instant;
use tracing::debug;

use super::broker::{BrokerSession, position_of};
use super::closed;
use crate::cluster::fetch::{FETCH_VERSION, parse};
use crate::cluster::io_stats;
use crate::cluster::links::Lane;
use crate::error::MirrorError;

const FETCH_SESSION_ID_NOT_FOUND: i16 = ResponseError::FetchSessionIdNotFound.code();
const INVALID_FETCH_SESSION_EPOCH: i16 = ResponseError::InvalidFetchSessionEpoch.code();
/// Pause after a failed connection before the next request to that broker.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// Answers bringing fewer record bytes than this do not count towards the growth allowance.
const GROWTH_VOTE_BYTES: u64 = 1 << 20;

/// A copy of a request-wide error for each partition of the request.
fn each(e: &MirrorError) -> MirrorError {
    match e {
        MirrorError::Broker { side, what, code } => MirrorError::Broker {
            side,
            what: what.clone(),
            code: *code,
        },
        MirrorError::Source(ProtocolError::Authentication { addr, detail }) => MirrorError::Source(ProtocolError::Authentication {
            addr: addr.clone(),
            detail: detail.clone(),
        }),
        MirrorError::Source(ProtocolError::Connect { addr, detail }) => MirrorError::Source(ProtocolError::Connect {
            addr: addr.clone(),
            detail: detail.clone(),
        }),
        MirrorError::Source(ProtocolError::Io { source, side }) => MirrorError::Source(ProtocolError::Io {
            source: std::io::Error::new(source.kind(), source.to_string()),
            side: *side,
        }),
        other => closed(&other.detail()),
    }
}

impl BrokerSession {
    /// One Fetch request and the delivery of its answers.
    pub(super) async fn round(&mut self) {
        // A throttled connection sends nothing until its throttle is over (KIP-219); the
        // partitions keep waiting for their answers meanwhile.
        self.throttle.wait().await;
        let (mut req, sent) = self.request();
        let room = self.budget.reserve(u64::try_from(req.max_bytes).unwrap_or(0)).await;
        // A request asking more than the whole budget got the whole budget: it must not ask
        // for more than that (Kafka still answers one whole batch beyond it, accounted below).
        req.max_bytes = req.max_bytes.min(i32::try_from(room.bytes()).unwrap_or(i32::MAX)).max(1);
        io_stats::add(&io_stats::FETCH_REQUESTS, 1);
        let result = async {
            let conn = self.client.link(&self.addr, Lane::Fetch(self.lane)).await?;
            let asked = Instant::now();
            self.phase.note_sent(self.lane, asked);
            Ok::<_, MirrorError>((self.client.call_timed(&conn, &req, FETCH_VERSION).await?, asked))
        }
        .await;
        let (resp, latency_bound, asked, arrival) = match result {
            Ok(((resp, arrival), asked)) => {
                self.throttle.note(resp.throttle_time_ms, "fetch");
                (resp, self.round_trip.latency_bound(asked, arrival), asked, arrival)
            }
            Err(e) => {
                debug!(error = %e.detail(), "fetch request failed; every waiting partition retries");
                return self.fail_waiting(e).await;
            }
        };
        // A session error answering a request that had no session cannot be cured by starting
        // one: it is handled like any other error (with a pause), so a broker that keeps
        // answering it cannot make this task spin.
        if req.session_id != 0 && matches!(resp.error_code, FETCH_SESSION_ID_NOT_FOUND | INVALID_FETCH_SESSION_EPOCH) {
            debug!(code = resp.error_code, "the broker dropped the fetch session; starting a new one (full fetch)");
            io_stats::add(&io_stats::FETCH_SESSION_RESETS, 1);
            self.reset();
            return;
        }
        if resp.error_code != 0 {
            let e = MirrorError::Broker {
                side: "source",
                what: format!("fetch session on {}", self.addr),
                code: resp.error_code,
            };
            return self.fail_waiting(e).await;
        }
        let heard_at = crate::state::status::now_ms();
        for (k, at) in &sent {
            if let Some(h) = self
                .interests
                .get(k)
                .filter(|i| position_of(&i.want) == *at)
                .and_then(|i| i.want.heard.as_ref())
            {
                h.store(heard_at, std::sync::atomic::Ordering::Relaxed);
            }
        }
        // The session now holds what was sent.
        if self.id == 0 || resp.session_id != self.id {
            self.id = resp.session_id;
            self.epoch = if self.id == 0 { 0 } else { 1 };
        } else {
            self.epoch = if self.epoch == i32::MAX { 1 } else { self.epoch + 1 };
        }
        if self.id == 0 {
            // No session (the broker's cache is full): every request is a full one.
            self.known.clear();
        }
        let mut room = room;
        let now = Instant::now();
        let mut delivered = 0u64;
        for t in resp.responses {
            let topic_id = *t.topic_id.as_bytes();
            for p in t.partitions {
                let k = (topic_id, p.partition_index);
                // Only an answer for the position this request asked at is delivered: a
                // partition that withdrew and asked again elsewhere gets its own answer later.
                let Some(at) = sent.get(&k) else { continue };
                if self.interests.get(&k).map(|i| position_of(&i.want)) != Some(*at) {
                    continue;
                }
                let Some(i) = self.interests.remove(&k) else { continue };
                let answer = parse("source", &i.want.topic, at.offset, p).map(|f| {
                    let got: u64 = f.batches.iter().map(|(_, b)| b.len() as u64).sum();
                    delivered = delivered.saturating_add(got);
                    let mut share = room.split(got);
                    share.grow_to(got);
                    (f, share)
                });
                if matches!(&answer, Ok((f, _)) if !f.batches.is_empty()) {
                    self.busy.insert(k, now);
                }
                let _ = i.reply.send(answer);
            }
        }
        // Only answers that moved data say whether larger Fetches would help (an idle
        // long-poll's answer is always quick to transfer).
        if delivered > 0 {
            self.data_round_trip.note(asked, arrival);
        }
        if delivered >= GROWTH_VOTE_BYTES {
            self.growth.note_answer(latency_bound);
        }
    }

    /// Ends the session after a request-wide failure: every waiting partition gets `e` (and
    /// retries with its back-off), then a pause before the next request.
    async fn fail_waiting(&mut self, e: MirrorError) {
        self.reset();
        for (_, i) in self.interests.drain() {
            let _ = i.reply.send(Err(each(&e)));
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

#[cfg(test)]
mod tests;
