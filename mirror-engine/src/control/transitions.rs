//! The operator's state changes of mirror topics — pause, resume and stop (failover), with the
//! graceful stop's wait for the copy to catch up — each persisted as the topic's desired state
//! before the partition tasks follow it, and the checks that decide whether a change is allowed.
//! The registry of mirrors and topics these act on, and the list/describe views, are the parent
//! module's; copying data belongs to `partition`.

use std::time::Duration;

use tracing::{info, warn};

use tokio::sync::oneshot;

use super::{BOOT_WAIT, HALT_TIMEOUT, LOADING, TermCommand, TermControl, TopicResult, codes};
use crate::state::records::Desired;
use crate::state::status::PartitionState;

/// How a pause's or stop's wait for the partition tasks ended.
#[derive(Debug, PartialEq, Eq)]
enum Halt {
    /// Every partition reached the state.
    Reached,
    /// Not within `HALT_TIMEOUT`.
    TimedOut,
    /// The term ended first.
    TermEnded,
}

impl TermControl {
    /// Pauses topics: copying stops, they stay read-only.
    pub(crate) async fn pause_topics(&self, mirror: &str, topics: &[String]) -> Vec<TopicResult> {
        let mut out = Vec::new();
        for t in topics {
            out.push(self.transition(mirror, t, Desired::Paused).await);
        }
        out
    }

    /// Resumes paused topics.
    pub(crate) async fn resume_topics(&self, mirror: &str, topics: &[String]) -> Vec<TopicResult> {
        let mut out = Vec::new();
        for t in topics {
            out.push(self.transition(mirror, t, Desired::Mirroring).await);
        }
        out
    }

    /// Stops topics (failover): copying stops after the in-flight writes, one more consumer- and
    /// share-group offset sync runs for the topics stopped now, then they become writable. With
    /// `graceful`, first waits (at most that long) until every partition is
    /// mirroring with no lag; if it does not get there (still lagging, paused, failed) the topic
    /// is left as it was and the result says so (REQUEST_TIMED_OUT).
    pub(crate) async fn stop_topics(&self, mirror: &str, topics: &[String], graceful: Option<Duration>) -> Vec<TopicResult> {
        let (mut out, mut halted) = (Vec::new(), Vec::new());
        for t in topics {
            if let Some(limit) = graceful
                && let Err(r) = self.wait_caught_up(mirror, t, limit).await
            {
                out.push(r);
                continue;
            }
            let r = self.transition(mirror, t, Desired::Stopped).await;
            // Stopped now, or earlier without becoming writable (recording that failed).
            if r.error_code == codes::NONE && self.catalog().is_read_only(t) {
                halted.push((out.len(), t.clone()));
            }
            out.push(r);
        }
        if !halted.is_empty() {
            // Copying has settled: the groups' latest source positions go over (one pass for
            // every topic stopped now) before producers may write to the topics.
            let (done, synced) = oneshot::channel();
            let topics = halted.iter().map(|(_, t)| t.clone()).collect();
            let sync = TermCommand::FinalSync {
                mirror: mirror.to_owned(),
                topics,
                done,
            };
            let mut undecided = Vec::new();
            if self.command(sync).await {
                undecided = synced.await.unwrap_or_default();
            }
            for (i, t) in &halted {
                if let Some((_, why)) = undecided.iter().find(|(u, _)| u == t) {
                    out[*i] = TopicResult::err(
                        t,
                        codes::REQUEST_TIMED_OUT,
                        format!(
                            "{t} stopped copying but a destination transaction still open could not be aborted ({why}); it stays read-only, retry the stop"
                        ),
                    );
                    continue;
                }
                // Recorded first: proxies following the state topic open the topic from this
                // record, so none of them does before copying has stopped here.
                if let Err(e) = self.record_writable(mirror, t).await {
                    out[*i] = TopicResult::err(
                        t,
                        codes::COORDINATOR_NOT_AVAILABLE,
                        format!("{t} stopped copying but cannot be recorded as writable ({e}); it stays read-only, retry the stop"),
                    );
                    continue;
                }
                self.catalog().set_writable(t, true);
            }
        }
        out
    }

    /// Records in the state topic that clients may write to `topic` (its stop has finished),
    /// with the line each partition stopped at and the source cluster's id (KIP-1279's last
    /// mirror offset and epoch, what a failback starts from) in the same write.
    async fn record_writable(&self, mirror: &str, topic: &str) -> Result<(), crate::error::MirrorError> {
        let Some(store) = self.inner.store.as_ref() else { return Ok(()) };
        let Some(mut record) = store.topic_owner(topic) else { return Ok(()) };
        record.writable = Some(true);
        if let Some(id) = self.definition(mirror).and_then(|def| self.source_client(&def).cluster_id()) {
            record.source_cluster_id = Some(id);
        }
        // With shared work each partition's owner recorded its final state when it halted.
        let board = self.barrier().is_none().then_some(&self.inner.common.status);
        store.put_stopped_topic(topic, &record, board).await
    }

    /// The topic's desired state and partition count. A topic the mirror has claimed but is
    /// still preparing (creating the destination topic, reading its id) is waited for.
    async fn check(&self, mirror: &str, topic: &str) -> Result<(Desired, usize), TopicResult> {
        if self.booted_store().await.is_none() {
            return Err(TopicResult::err(topic, codes::COORDINATOR_LOAD_IN_PROGRESS, LOADING.into()));
        }
        if !self.has_mirror(mirror) {
            return Err(TopicResult::err(
                topic,
                codes::UNKNOWN_CLUSTER_MIRROR,
                format!("cluster mirror {mirror} does not exist"),
            ));
        }
        let deadline = tokio::time::Instant::now() + BOOT_WAIT;
        // Subscribed before looking, so a change between the look and the wait is not missed.
        let (mut runtimes, mut owners) = (self.runtime_changes(), self.catalog().changes());
        loop {
            match self.inner.runtimes.topics.get(topic) {
                Some(rt) if rt.mirror == mirror => return Ok((*rt.desired.borrow(), rt.partitions)),
                // Owned and being prepared — a stored topic is registered from boot, before the
                // mirror's discovery loop takes it up after a restart.
                None if self.claimed_by(topic).as_deref() == Some(mirror) => {}
                _ => {
                    return Err(TopicResult::err(
                        topic,
                        codes::TOPIC_NOT_IN_CLUSTER_MIRROR,
                        format!("topic {topic} does not belong to cluster mirror {mirror}"),
                    ));
                }
            }
            let changed = async {
                tokio::select! {
                    r = runtimes.changed() => r.is_ok(),
                    r = owners.changed() => r.is_ok(),
                }
            };
            if !matches!(tokio::time::timeout_at(deadline, changed).await, Ok(true)) {
                return Err(TopicResult::err(
                    topic,
                    codes::TOPIC_NOT_IN_CLUSTER_MIRROR,
                    format!("topic {topic} does not belong to cluster mirror {mirror}"),
                ));
            }
        }
    }

    /// Graceful stop: waits until `topic` copied what the source held when the stop arrived
    /// (`graceful`); the topic is left as it was otherwise.
    async fn wait_caught_up(&self, mirror: &str, topic: &str, limit: Duration) -> Result<(), TopicResult> {
        let (_, partitions) = self.check(mirror, topic).await?;
        let Some(def) = self.definition(mirror) else {
            return Err(TopicResult::err(
                topic,
                codes::UNKNOWN_CLUSTER_MIRROR,
                format!("cluster mirror {mirror} does not exist"),
            ));
        };
        let source = self.source_client(&def);
        crate::control::graceful::wait_copied(self.progress_board(), &source, mirror, topic, partitions, limit)
            .await
            .map_err(|why| {
                TopicResult::err(
                    topic,
                    codes::REQUEST_TIMED_OUT,
                    format!("{why}; the topic was left as it was (stop without a graceful timeout to fail over anyway)"),
                )
            })
    }

    async fn transition(&self, mirror: &str, topic: &str, to: Desired) -> TopicResult {
        let (from, partitions) = match self.check(mirror, topic).await {
            Ok(v) => v,
            Err(r) => return r,
        };
        match (from, to) {
            (a, b) if a == b => {
                // Shared work: a pause or stop recorded before whose barrier did not pass (the
                // request timed out, or the active instance changed since) passes one now, so no
                // member still copies the topic.
                let unsettled = self.inner.runtimes.unsettled.contains(topic) || (to == Desired::Stopped && self.catalog().is_read_only(topic));
                if let Some(barrier) = self.barrier()
                    && to != Desired::Mirroring
                    && unsettled
                {
                    if !barrier.again(HALT_TIMEOUT).await {
                        return Self::not_handed_over(topic);
                    }
                    self.inner.runtimes.unsettled.remove(topic);
                }
                return TopicResult::ok(topic);
            }
            (Desired::Stopped, Desired::Paused) => {
                return TopicResult::err(
                    topic,
                    codes::MIRROR_TOPIC_BEING_STOPPED,
                    format!("topic {topic} is stopped; it cannot be paused"),
                );
            }
            (Desired::Stopped, Desired::Mirroring) => {
                return TopicResult::err(
                    topic,
                    codes::MIRROR_TOPIC_NOT_PAUSED,
                    format!("topic {topic} is stopped, not paused; it cannot be resumed"),
                );
            }
            _ => {}
        }
        // Persist first: after a crash the topic comes back in the state the operator asked for.
        let recorded = match self.persist(topic, to).await {
            Ok(at) => at,
            Err(e) => return TopicResult::err(topic, codes::COORDINATOR_NOT_AVAILABLE, format!("cannot record the new state of {topic}: {e}")),
        };
        let Some(rt) = self.inner.runtimes.topics.get(topic) else {
            return TopicResult::ok(topic);
        };
        let _ = rt.desired.send(to);
        info!(%topic, from = from.as_str(), to = to.as_str(), "mirror topic state change");
        if let Some(barrier) = self.barrier() {
            drop(rt);
            return self.shared_transition(barrier, topic, to, recorded).await;
        }
        if to == Desired::Mirroring {
            for p in 0..partitions as i32 {
                (rt.spawn)(p);
            }
            return TopicResult::ok(topic);
        }
        drop(rt);
        let target = if to == Desired::Stopped {
            PartitionState::Stopped
        } else {
            PartitionState::Paused
        };
        // Partitions without a running copy task (paused, failed) take the new state at once;
        // running ones halt themselves (in-flight writes settle) and report it.
        for p in 0..partitions as i32 {
            self.inner.common.status.update(&(mirror.to_owned(), topic.to_owned(), p), |s| {
                if matches!(s.state, PartitionState::Paused | PartitionState::Failed) {
                    s.state = target;
                }
            });
        }
        match self.wait_all(mirror, topic, partitions, target).await {
            Halt::Reached => {}
            Halt::TimedOut => {
                warn!(%topic, "partition tasks did not finish in time");
                return TopicResult::err(
                    topic,
                    codes::REQUEST_TIMED_OUT,
                    format!("{topic}: partitions did not reach {} within {HALT_TIMEOUT:?}", target.as_str()),
                );
            }
            // The change is recorded and this term's copying ended with the term: the next
            // term (here or on another instance) loads the topic paused or stopped. A pause
            // has nothing left to do; a stop still has its last group offset sync and the
            // writable record, which this term can no longer write — the next term finishes
            // them, and a retry confirms it.
            Halt::TermEnded if to == Desired::Paused => {
                info!(%topic, "the engine term ended while the topic paused; the next term loads it paused");
            }
            Halt::TermEnded => {
                info!(%topic, "the engine term ended while the topic stopped; the next term finishes the stop");
                return TopicResult::err(
                    topic,
                    codes::REQUEST_TIMED_OUT,
                    format!(
                        "{topic}: the stop is recorded, but the engine term handling it ended before it finished; the next term finishes it — retry the stop to confirm"
                    ),
                );
            }
        }
        // A stopped topic becomes writable in `stop_topics`, after the last group offset sync.
        TopicResult::ok(topic)
    }

    /// The rest of a state change where every member copies a share: recording it started a
    /// new generation (`StateStore::put_topic_recorded`); a pause or stop waits until that
    /// generation is in place — no member of an earlier one writes any more, and every member
    /// of the new one loaded the change (its owners record the partitions paused or stopped).
    async fn shared_transition(&self, barrier: &crate::ha::share::Barrier, topic: &str, to: Desired, recorded: tokio::time::Instant) -> TopicResult {
        // Normally the record's hook asked already; a concurrent request for the same change
        // (whose record changed nothing) asks here, so a generation after `recorded` comes.
        barrier.reassign();
        if to == Desired::Mirroring {
            self.inner.runtimes.unsettled.remove(topic);
            return TopicResult::ok(topic);
        }
        self.inner.runtimes.unsettled.insert(topic.to_owned());
        if barrier.pass(recorded, HALT_TIMEOUT).await {
            self.inner.runtimes.unsettled.remove(topic);
            return TopicResult::ok(topic);
        }
        warn!(%topic, "no new generation of the engine group within the halt timeout");
        Self::not_handed_over(topic)
    }

    fn not_handed_over(topic: &str) -> TopicResult {
        TopicResult::err(
            topic,
            codes::REQUEST_TIMED_OUT,
            format!("{topic}: the engine instances did not all stop copying it within {HALT_TIMEOUT:?}; retry"),
        )
    }

    /// Waits (at most `HALT_TIMEOUT`) until every partition of the topic reached `target`,
    /// woken by the board's state changes, or until this term ends (its board then never
    /// changes again: the next term has a board of its own).
    async fn wait_all(&self, mirror: &str, topic: &str, partitions: usize, target: PartitionState) -> Halt {
        let deadline = tokio::time::Instant::now() + HALT_TIMEOUT;
        let mut changes = self.inner.common.status.state_changes();
        let mut ended = self.inner.ended.clone();
        loop {
            if ended.as_ref().is_some_and(|e| *e.borrow()) {
                return Halt::TermEnded;
            }
            let done = (0..partitions as i32).all(|p| {
                let s = self.inner.common.status.get(&(mirror.to_owned(), topic.to_owned(), p));
                s.is_some_and(|s| s.state == target)
            });
            if done {
                return Halt::Reached;
            }
            let woken = async {
                match ended.as_mut() {
                    Some(e) => tokio::select! {
                        r = changes.changed() => r.map(|()| false),
                        // A dropped sender ends the term too (its engine is gone).
                        r = e.changed() => Ok(r.is_err()),
                    },
                    None => changes.changed().await.map(|()| false),
                }
            };
            match tokio::time::timeout_at(deadline, woken).await {
                Ok(Ok(false)) => {}
                Ok(Ok(true)) => return Halt::TermEnded,
                Ok(Err(_)) | Err(_) => return Halt::TimedOut,
            }
        }
    }

    /// Records the topic's new desired state; when it was recorded (see `put_topic_recorded`).
    async fn persist(&self, topic: &str, to: Desired) -> Result<tokio::time::Instant, crate::error::MirrorError> {
        let now = tokio::time::Instant::now();
        let Some(store) = self.inner.store.as_ref() else { return Ok(now) };
        let Some(mut record) = store.topic_owner(topic) else { return Ok(now) };
        record.desired = to.into();
        // Writable only once a stop has finished (`record_writable`), never on the request.
        record.writable = Some(false);
        store.put_topic_recorded(topic, &record).await
    }
}

#[cfg(test)]
mod tests;
