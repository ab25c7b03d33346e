//! One partition's Fetches to its source leader, and the second Fetch kept in flight for a
//! caught-up partition of a distant source.
//!
//! With one Fetch at a time, a record that reaches the source just after the broker answered waits
//! a whole round trip for the next Fetch to arrive, then half a round trip to come back: the
//! mirror's lag at steady load is about 1.5 round trips at worst. Kafka cannot park a Fetch past
//! the log end, so the next Fetch cannot be sent before the answer says where it starts. Instead,
//! once the round trip is at least `fetch_hedge_min_rtt_ms` and the partition has caught up, a
//! second Fetch of the same partition runs on the broker's other fetch session, and each Fetch is
//! asked again as soon as its answer is in. The broker's two sessions keep their requests half a
//! round trip apart while they carry such Fetches (`copy::fetch::session`'s `Phase`: a session sends one
//! request at a time for all its partitions, so the phase is the sessions', not each partition's).
//! (Caught up means the last answer reached the source's high watermark, or last stable offset, as
//! the broker reported it with that answer; the source may well hold a few newer records by the
//! time it arrives.) Whichever answer arrives is used; the part of it the partition already has (an
//! answer to a Fetch asked at an older offset) is cut off here. A record then waits at most about
//! half a round trip for a Fetch to reach the broker. The cost is up to twice the source bytes
//! while the partition is caught up; a partition catching up (answers that leave data on the
//! source) reads with one Fetch (bandwidth-bound, duplicates would halve it). The partition sizes
//! its Fetches by the answers as the broker sent them, duplicates included
//! ([`FetchStream::answered_bytes`]), so that an answer to an older offset is not cut short by a
//! size fitted to new data alone.
//!
//! What is cut off: batches that end at or before the partition's next offset (an earlier answer
//! brought them). That holds while the position moves through answers; when it jumps past offsets no answer covered (a fill after the
//! source's log start moved), the partition drops the Fetches in flight ([`FetchStream::reset`]).
//! An error answering a Fetch asked at an older offset (e.g. that offset left the source's
//! retention) says nothing about the partition's position and is dropped; the Fetch is asked again
//! at the current one. The planning of what was fetched belongs to `plan`, the sessions to
//! `copy::fetch::session`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::fetch::Fetched;
use crate::cluster::io_stats;
use crate::copy::fetch::session::{Answer, FetchSessions, SESSIONS_PER_BROKER, Wanted, lane_of};

/// Data-bearing answers the round trip is estimated from (the shortest time to answer).
const ROUND_TRIP_SAMPLES: usize = 8;

type Pending = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// One outstanding Fetch: the offset it asked at, when it was sent and its answer to come.
struct InFlight {
    asked: i64,
    sent: Instant,
    answer: Pending,
}

/// A partition's Fetches to one source leader (one per copy attempt).
pub(crate) struct FetchStream {
    sessions: FetchSessions,
    addr: String,
    /// The partition's own session, and the other one the second Fetch uses.
    lanes: [u8; 2],
    flights: [Option<InFlight>; 2],
    /// The round trip at and above which a caught-up partition keeps two Fetches in flight
    /// (`None`: never).
    hedge_min_rtt: Option<Duration>,
    /// Times to answer of recent data-bearing answers (the shortest is the round trip).
    samples: [Duration; ROUND_TRIP_SAMPLES],
    seen: usize,
    /// Whether the last answer left data on the source (catching up, bound by bandwidth).
    catching_up: bool,
    /// Record bytes of the last answer as the broker sent it (before the cut).
    answered: usize,
}

impl FetchStream {
    pub(crate) fn new(sessions: FetchSessions, addr: &str, topic_id: &[u8; 16], partition: i32, hedge_min_rtt: Option<Duration>) -> Self {
        let own = lane_of(topic_id, partition, SESSIONS_PER_BROKER);
        let other = u8::try_from((usize::from(own) + 1) % SESSIONS_PER_BROKER).unwrap_or(0);
        Self {
            sessions,
            addr: addr.to_owned(),
            lanes: [own, other],
            flights: [None, None],
            hedge_min_rtt,
            samples: [Duration::ZERO; ROUND_TRIP_SAMPLES],
            seen: 0,
            catching_up: true,
            answered: 0,
        }
    }

    /// Tells whether the last answer left data on the source: the partition is catching up,
    /// bound by bandwidth, and reads with one Fetch (a second would only bring duplicates).
    pub(crate) fn set_catching_up(&mut self, catching_up: bool) {
        self.catching_up = catching_up;
    }

    /// The round trip to the leader as measured so far (the shortest time to a data answer).
    fn round_trip(&self) -> Option<Duration> {
        let n = self.seen.min(ROUND_TRIP_SAMPLES);
        self.samples[..n].iter().min().copied()
    }

    fn hedging(&self) -> bool {
        let far = match (self.hedge_min_rtt, self.round_trip()) {
            (Some(min), Some(rt)) => rt >= min,
            _ => false,
        };
        SESSIONS_PER_BROKER > 1 && !self.catching_up && far
    }

    /// Sends Fetch `i` for `want`. While hedging, both Fetches are staggered: the sessions keep
    /// their requests half a round trip apart (`copy::fetch::session::broker::Phase`), which keeps this
    /// partition's two Fetches apart too.
    fn send(&mut self, i: usize, want: &Wanted) {
        let start = Instant::now();
        let staggered = i == 1 || self.hedging();
        let (sessions, addr, lane, asked) = (self.sessions.clone(), self.addr.clone(), self.lanes[i], want.offset);
        let want = want.clone();
        if i == 1 {
            io_stats::add(&io_stats::FETCH_SECOND_SENT, 1);
        }
        let answer = Box::pin(async move { sessions.fetch_in(&addr, lane, want, staggered).await });
        tracing::trace!(fetch = i, asked, hedging = self.hedging(), round_trip = ?self.round_trip(), catching_up = self.catching_up, "fetch sent");
        self.flights[i] = Some(InFlight { asked, sent: start, answer });
    }

    /// Record bytes of the last answer as the broker sent it, duplicates included: what the
    /// partition's Fetch size must hold (an answer to an older offset starts with them).
    pub(crate) fn answered_bytes(&self) -> usize {
        self.answered
    }

    /// Drops the Fetches in flight (withdrawn): the partition jumped past offsets no answer
    /// covered, so nothing asked before the jump may be used after it.
    pub(crate) fn reset(&mut self) {
        self.flights = [None, None];
    }

    /// The next answer for the partition at `want.offset`: new data (possibly from the second
    /// Fetch), an empty long-poll answer, or an error for this position.
    pub(crate) async fn next(&mut self, want: &Wanted) -> Answer {
        loop {
            if self.flights[0].is_none() {
                self.send(0, want);
            }
            if self.flights[1].is_none() && self.hedging() {
                self.send(1, want);
            }
            let (i, answer) = self.first_answer().await;
            let Some(done) = self.flights[i].take() else {
                return answer;
            };
            if let Ok((f, _)) = &answer {
                let end = f.batches.last().map_or(-1, |(h, _)| h.next_offset());
                tracing::trace!(fetch = i, asked = done.asked, position = want.offset, took = ?done.sent.elapsed(), batches = f.batches.len(), end, hedging = self.hedging(), "fetch answered");
            }
            match answer {
                Err(_) if done.asked < want.offset => continue,
                Err(e) => return Err(e),
                Ok((fetched, room)) => {
                    self.answered = fetched.batches.iter().map(|(_, b)| b.len()).sum();
                    if !fetched.batches.is_empty() {
                        self.samples[self.seen % ROUND_TRIP_SAMPLES] = done.sent.elapsed();
                        self.seen = self.seen.wrapping_add(1);
                    }
                    if done.asked >= want.offset {
                        return Ok((fetched, room));
                    }
                    let fetched = cut_to(fetched, want.offset);
                    if fetched.batches.is_empty() {
                        continue;
                    }
                    io_stats::add(&io_stats::FETCH_ANSWERS_CUT, 1);
                    return Ok((fetched, room));
                }
            }
        }
    }

    /// Waits for whichever outstanding Fetch answers first.
    async fn first_answer(&mut self) -> (usize, Answer) {
        let [a, b] = &mut self.flights;
        match (a.as_mut(), b.as_mut()) {
            (Some(a), Some(b)) => tokio::select! {
                r = &mut a.answer => (0, r),
                r = &mut b.answer => (1, r),
            },
            (Some(a), None) => (0, (&mut a.answer).await),
            (None, Some(b)) => (1, (&mut b.answer).await),
            // Not reached: `next` sends the first Fetch before it waits.
            (None, None) => (0, Err(crate::error::MirrorError::aborted("source", "no fetch in flight"))),
        }
    }
}

/// `fetched` without what lies before `next`: the batches that end at or before it (see the
/// module doc).
fn cut_to(mut fetched: Fetched, next: i64) -> Fetched {
    fetched.batches.retain(|(h, _)| h.next_offset() > next);
    fetched
}

#[cfg(test)]
mod tests;
