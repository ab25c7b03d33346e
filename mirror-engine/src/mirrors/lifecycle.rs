//! One mirror topic's life cycle: make the claimed topic read-only for clients (before anything
//! is created: a created topic is writable at once), create or adopt the destination topic
//! (refusing one with foreign data, and lifting the guard then), register it read-only with its
//! topic id, verify that nothing but the mirror wrote to it (`fresh_topic`), record ownership,
//! hand it to the control plane, and start its partitions as the stored desired state says.
//! Copying a partition belongs to `partition`; operator transitions to `control`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{Instrument, info, info_span, warn};

use crate::context::TopicContext;
use crate::control;
use crate::copy::fresh_topic;
use crate::copy::partition::{PartitionTask, SourceTopicId};
use crate::error::MirrorError;
use crate::state::records::Desired;
use crate::state::records::{How, Named, Stored, TopicRecord, id_from_hex, id_to_hex};
use crate::state::status::{PartitionState, now_ms};
use crate::topics::create::{self as topics, Prepared};
use kmp_protocol::Backoff;

/// Prepares the destination topic, then spawns one task per partition.
pub(crate) fn start_topic(ctx: TopicContext, topic: String) {
    let span = info_span!("mirror", mirror = %ctx.mirror.name, %topic);
    tokio::spawn(
        async move {
            let status = ctx.shared.status.clone();
            let m = &ctx.mirror;
            if let Some(n) = all_partitions_failed_for_good(&ctx, &topic) {
                // E.g. the source topic was deleted before this restart: nothing to prepare.
                let (_, desired) = watch::channel(Desired::Mirroring);
                let identity = SourceTopicId::default();
                for p in 0..n as i32 {
                    start_partition(&ctx, &topic, p, desired.clone(), identity.clone(), None, 0);
                }
                return;
            }
            match prepare_topic(&ctx, &topic).await {
                Ok(ready) => run_topic(&ctx, &topic, ready),
                // The term ended (or lost its lease) while the topic was being prepared: the
                // next term takes it up; nothing failed.
                Err(MirrorError::Fenced) => info!("the engine term ended before the topic was prepared"),
                Err(e) => {
                    warn!(error = %e, "mirror topic FAILED");
                    status.update(&(m.name.clone(), topic.clone(), -1), |s| {
                        s.state = PartitionState::Failed;
                        s.last_error = Some(e.shown(&m.source_bootstrap_servers));
                    });
                }
            }
        }
        .instrument(span),
    );
}

/// A prepared mirror topic, ready to run.
struct Ready {
    partitions: usize,
    /// The source topic's id (when known).
    source_id: Option<[u8; 16]>,
    /// Created or adopted empty by this preparation: its partitions must still be empty when
    /// their tasks start (`PartitionTask::expect_end`).
    fresh: bool,
    /// Taken over by a failback: per partition, the end its task must find (the line).
    failback_ends: Vec<i64>,
    /// Per partition, source offset minus destination offset (`copy::shift`); none past the end.
    shifts: Vec<i64>,
}

/// Creates or adopts the destination topic (retrying transient errors) and records ownership.
async fn prepare_topic(ctx: &TopicContext, topic: &str) -> Result<Ready, MirrorError> {
    let m = &ctx.mirror;
    let owner = ctx.store.topic_owner(topic);
    let taken = |partitions, source_id| Ready {
        partitions,
        source_id,
        fresh: false,
        failback_ends: Vec::new(),
        shifts: owner
            .as_ref()
            .filter(|o| o.mirror == m.name)
            .map(|o| o.offset_shifts.clone())
            .unwrap_or_default(),
    };
    if ctx.shared.part.works_only() {
        // A term that only copies takes the topic as the state records it; it never creates
        // or adopts one (the active instance does, and the next generation brings it here).
        return Ok(match &owner {
            Some(o) if o.mirror == m.name => taken(o.partitions, id_from_hex(&o.source_topic_id)),
            _ => taken(0, None),
        });
    }
    if let Some(o) = &owner
        && o.mirror != m.name
    {
        return Err(MirrorError::DestinationConflict {
            topic: topic.to_owned(),
            reason: format!("the state topic records it as mirror `{}`'s", o.mirror),
        });
    }
    // A topic the state records as this mirror's, still on the destination, is taken back
    // without asking the source: after losing the source, a restarted proxy must still manage
    // (and fail over) its topics. Partition tasks then retry the source; growth is followed by
    // the discovery loop.
    if let Some(o) = &owner
        && let Ok(l) = ctx.shared.destination.layout(topic).await
        && l.error_code == 0
        && l.partitions.len() >= o.partitions
    {
        register_topic_id(ctx, topic, [0; 16]).await;
        return Ok(taken(o.partitions, id_from_hex(&o.source_topic_id)));
    }
    let filter = crate::topics::configs::ConfigFilter::new(&m.topic_config_exclude)?;
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    // While the topic cannot be prepared (source or destination unreachable, credentials refused)
    // it shows as RETRYING with the reason (topic level: partition -1), logged when it changes.
    let topic_key = (m.name.clone(), topic.to_owned(), -1);
    let mut last_error = String::new();
    let (prepared, source_id, destination_id, shifts, failback_ends) = loop {
        match create_or_adopt(ctx, topic, owner.is_some(), &filter).await {
            Ok(p) => break p,
            Err(e) if e.is_retriable() => {
                let why = e.shown(&m.source_bootstrap_servers);
                if why != last_error {
                    warn!(error = %why, "cannot prepare the destination topic yet; retrying");
                }
                ctx.shared.status.update(&topic_key, |s| {
                    s.state = PartitionState::Retrying;
                    s.last_error = Some(why.clone());
                });
                last_error = why;
                back_off(&ctx.shared.stop, backoff.next_pause()).await?;
            }
            Err(e) => {
                // Not created by this preparation: an existing topic that is not the mirror's
                // (or cannot be made so) keeps its own writers.
                ctx.shared.topics.unguard(topic, &m.name);
                return Err(e);
            }
        }
    };
    if !last_error.is_empty() {
        ctx.shared.status.remove(&topic_key);
    }
    register_topic_id(ctx, topic, destination_id).await;
    let how = match prepared {
        Prepared::Owned(n) => {
            let source_id = owner.as_ref().and_then(|o| id_from_hex(&o.source_topic_id)).or(Some(source_id));
            return Ok(taken(n, source_id));
        }
        Prepared::Created(_) => How::Created,
        Prepared::AdoptedEmpty(_) => How::Adopted,
        Prepared::FailedBack(_) => How::FailedBack,
    };
    let fresh = how != How::FailedBack;
    // Read-only now; what landed before (a writer that reached the destination directly) is
    // not the mirror's: those partitions are stored FAILED before the topic is recorded. A
    // failed-back topic holds its data already; its partitions resume at their ends, where the
    // copy's own checks apply.
    let forged = if fresh {
        fresh_topic::verify_empty(&ctx.shared.destination, topic, prepared.partitions(), &ctx.shared.stop).await?
    } else {
        Vec::new()
    };
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        match fresh_topic::record_forged(&ctx.store, &m.name, topic, &forged).await {
            Ok(()) => break,
            Err(MirrorError::Fenced) => return Err(MirrorError::Fenced),
            Err(e) => warn!(error = %e, "cannot record the partitions holding forged writes yet; retrying"),
        }
        back_off(&ctx.shared.stop, backoff.next_pause()).await?;
    }
    info!(how = how.as_str(), partitions = prepared.partitions(), "destination topic is the mirror's");
    let record = TopicRecord {
        mirror: m.name.clone(),
        partitions: prepared.partitions(),
        how: how.into(),
        at_ms: now_ms(),
        desired: Desired::Mirroring.into(),
        source_topic_id: id_to_hex(source_id),
        writable: Some(false),
        offset_shifts: shifts.clone(),
        source_cluster_id: ctx.source.cluster_id(),
    };
    // Without this record a restart would see a non-empty topic it does not own and refuse it.
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        match ctx.store.put_topic(topic, &record).await {
            Ok(()) => break,
            Err(MirrorError::Fenced) => return Err(MirrorError::Fenced),
            Err(e) => warn!(error = %e, "cannot record topic ownership yet; retrying"),
        }
        back_off(&ctx.shared.stop, backoff.next_pause()).await?;
    }
    Ok(Ready {
        partitions: prepared.partitions(),
        source_id: Some(source_id),
        fresh,
        failback_ends,
        shifts,
    })
}

/// What one attempt of [`create_or_adopt`] made of the topic: how it came to be the mirror's,
/// the source topic's id, the destination topic's id (all zero if not known), the partitions'
/// offset shifts, and for a failback taken over at its lines, the lines.
type Adopted = (Prepared, [u8; 16], [u8; 16], Vec<i64>, Vec<i64>);

/// One attempt to create or adopt the destination topic: reads the source topic, makes the
/// claim read-only for clients, then creates (or adopts, or takes back in a failback) the
/// topic. The partitions' offset shifts are decided here for a topic that is not owned yet,
/// before it exists (`copy::shift`).
async fn create_or_adopt(ctx: &TopicContext, topic: &str, owned: bool, filter: &crate::topics::configs::ConfigFilter) -> Result<Adopted, MirrorError> {
    let m = &ctx.mirror;
    let shape = topics::source_shape(&ctx.source, topic, filter).await?;
    let shifts = if owned {
        Vec::new()
    } else {
        crate::copy::shift::decide(&ctx.source, topic, shape.partitions, m.shift_prefix_from).await?
    };
    // A topic here that the source proxy copied from here and stopped is coming back (asked
    // before the guard: a loop refused must not stop the topic's own writers).
    let failback = if owned {
        None
    } else {
        crate::failback::lines(ctx, topic, shape.partitions).await?
    };
    // Before CreateTopics: a created topic takes writes at once, and one landing before the
    // mirror's first would hold offset 0.
    if !ctx.shared.topics.guard(topic, &m.name) {
        return Err(match ctx.shared.topics.owner(topic) {
            Some(other) => MirrorError::DestinationConflict {
                topic: topic.to_owned(),
                reason: format!("mirror `{other}` owns it"),
            },
            // The claim was dropped: this term ended.
            None => MirrorError::Fenced,
        });
    }
    // A client write the proxy let through just before the guard must meet no topic yet.
    if let Some(wait) = ctx.shared.topics.drain_before_create(topic) {
        info!(
            ?wait,
            "clients wrote to the topic name just before the mirror took it; waiting for those writes to be refused before creating it"
        );
        back_off(&ctx.shared.stop, wait).await?;
    }
    if let Some(lines) = failback {
        let fb = crate::failback::plan(&ctx.shared.destination, topic, lines).await?;
        if fb.incremental() {
            // Taken over where it ends: its offsets are this cluster's own, never shifted.
            crate::failback::restore::take_over(ctx, topic, &fb, shape.partitions).await?;
            ctx.shared.topics.set_shifts(topic, &[]);
            let ends = (0..shape.partitions)
                .map(|p| match fb.partitions.get(p) {
                    Some((_, _, crate::failback::plan::Path::Incremental { at })) => *at,
                    _ => 0, // grown on the source after the failover: new and empty here
                })
                .collect();
            return Ok((Prepared::FailedBack(shape.partitions), shape.topic_id, fb.topic_id, Vec::new(), ends));
        }
        // What lies past the line is kept in the quarantine topic; then the topic is created
        // again below and restored from the source.
        crate::failback::restore::quarantine_and_delete(ctx, topic, &fb).await?;
    }
    // Known to this instance's proxy before the topic exists: none of its offsets is ever shown
    // unshifted here (other instances learn them from the topic record, written before the
    // mirror's first record).
    ctx.shared.topics.set_shifts(topic, &shifts);
    let (prepared, destination_id) = topics::create_or_adopt(&ctx.shared.destination, topic, &shape, m.replication_factor, owned).await?;
    Ok((prepared, shape.topic_id, destination_id, shifts, Vec::new()))
}

/// Waits `backoff` before the next attempt, or fails with [`MirrorError::Fenced`] as soon as the
/// engine term stops: an ended term's retry loops end with it instead of creating or recording
/// a topic after another term took over.
async fn back_off(stop: &watch::Receiver<bool>, backoff: Duration) -> Result<(), MirrorError> {
    let mut stop = stop.clone();
    if *stop.borrow_and_update() {
        return Err(MirrorError::Fenced);
    }
    tokio::select! {
        () = tokio::time::sleep(backoff) => Ok(()),
        // A change is a stop (it is only ever set); a dropped sender ends the term too.
        _ = stop.changed() => Err(MirrorError::Fenced),
    }
}

/// Registers `topic` as read-only with its destination topic id (Produce v13+ names topics by
/// id): `known` when CreateTopics answered it, else looked up. A just-created topic may take a
/// moment to appear in metadata: retried for a while; until the id is known, Produce by name is
/// still refused (and by ids not known, retriably).
async fn register_topic_id(ctx: &TopicContext, topic: &str, known: [u8; 16]) {
    let m = &ctx.mirror;
    ctx.shared.topics.register(topic, &m.name, known);
    if known != [0; 16] {
        return;
    }
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    for _ in 0..40 {
        match ctx.shared.destination.layout(topic).await {
            Ok(l) if l.error_code == 0 && l.topic_id != [0; 16] => {
                ctx.shared.topics.register(topic, &m.name, l.topic_id);
                return;
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "cannot read the destination topic id yet"),
        }
        tokio::time::sleep(backoff.next_pause()).await;
    }
    warn!("destination topic id still unknown; Produce requests naming the topic by id are not checked");
}

/// The partition count of an owned topic whose every partition is stored as FAILED for good.
fn all_partitions_failed_for_good(ctx: &TopicContext, topic: &str) -> Option<usize> {
    let owner = ctx.store.topic_owner(topic).filter(|o| o.mirror == ctx.mirror.name)?;
    let all = (0..owner.partitions as i32).all(|p| ctx.store.partition(topic, p).is_some_and(|r| r.sticky && r.mirror == ctx.mirror.name));
    (all && owner.partitions > 0).then_some(owner.partitions)
}

/// Hands the topic to the control plane and starts its partitions as its stored desired state
/// says: copying (mirroring), or not copying and read-only (paused) or writable (stopped).
fn run_topic(ctx: &TopicContext, topic: &str, ready: Ready) {
    let Ready {
        partitions,
        source_id,
        fresh,
        failback_ends,
        shifts,
    } = ready;
    let shifts: Arc<[i64]> = Arc::from(shifts);
    let stored = ctx.store.topic_owner(topic);
    if let Some(Stored::Unknown(other)) = stored.as_ref().map(|r| &r.desired) {
        warn!(desired = %other, "the stored desired state is not one this version knows; copying as for mirroring");
    }
    let desired = stored.map_or(Desired::Mirroring, |r| r.desired_state());
    let (tx, rx) = watch::channel(desired);
    let identity = SourceTopicId::default();
    if let Some(id) = source_id {
        let _ = identity.set(id);
    }
    let (first_rx, first_identity) = (rx.clone(), identity.clone());
    let (spawn_ctx, spawn_topic, span) = (ctx.clone(), topic.to_owned(), tracing::Span::current());
    // Later spawns (a resume, new partitions) take the destination as they find it.
    let spawn_shifts = shifts.clone();
    let spawn: Arc<dyn Fn(i32) + Send + Sync> = Arc::new(move |p| {
        let _entered = span.enter();
        let shift = crate::copy::shift::of(&spawn_shifts, p);
        start_partition(&spawn_ctx, &spawn_topic, p, rx.clone(), identity.clone(), None, shift);
    });
    let rt = control::TopicRuntime {
        mirror: ctx.mirror.name.clone(),
        partitions,
        desired: tx,
        spawn: spawn.clone(),
    };
    ctx.shared.control.add_topic(topic, rt);
    if desired == Desired::Mirroring {
        for p in 0..partitions as i32 {
            let expect_end = if fresh { Some(0) } else { failback_ends.get(p as usize).copied() };
            start_partition(
                ctx,
                topic,
                p,
                first_rx.clone(),
                first_identity.clone(),
                expect_end,
                crate::copy::shift::of(&shifts, p),
            );
        }
        return;
    }
    info!(desired = desired.as_str(), "topic not copying (stored state)");
    if desired == Desired::Stopped && !ctx.shared.part.works_only() {
        open_stopped_topic(ctx, topic);
    }
    let state = if desired == Desired::Stopped {
        PartitionState::Stopped
    } else {
        PartitionState::Paused
    };
    // With shared work the partitions' owners in this generation record them (from the state
    // the generation loaded: the last owners wrote their final progress before it began).
    for p in (0..partitions as i32).filter(|&p| ctx.shared.part.copies(topic, p)) {
        let stored = ctx.store.partition(topic, p).filter(|r| r.mirror == ctx.mirror.name);
        ctx.shared.status.update(&(ctx.mirror.name.clone(), topic.to_owned(), p), |s| {
            if let Some(r) = &stored {
                r.restore_counters(s);
                s.destination_next_offset = r.next_offset;
                s.last_mirror_epoch = r.last_mirror_epoch;
                s.source_high_watermark = r.source_high_watermark;
            }
            s.state = state;
        });
    }
}

/// Makes a stopped topic writable after a restart. A stop interrupted before it recorded the
/// topic writable (a crash between halting and that record) is completed first: nothing copies
/// the topic any more, and followers open it only from that record.
fn open_stopped_topic(ctx: &TopicContext, topic: &str) {
    let Some(mut record) = ctx.store.topic_owner(topic).filter(|r| !r.is_writable()) else {
        ctx.shared.topics.set_writable(topic, true);
        return;
    };
    record.writable = Some(true);
    let (ctx, topic) = (ctx.clone(), topic.to_owned());
    tokio::spawn(
        async move {
            let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
            while let Err(e) = ctx.store.put_topic(&topic, &record).await {
                warn!(error = %e, "cannot record the stopped topic as writable yet; it stays read-only until then");
                let mut stop = ctx.shared.stop.clone();
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_pause()) => {}
                    _ = stop.changed() => return,
                }
            }
            ctx.shared.topics.set_writable(&topic, true);
        }
        .in_current_span(),
    );
}

/// Spawns one partition's task, or restores its sticky FAILED state from the state topic.
/// `expect_end`: the destination end the task must find until its first write (0: the topic
/// was just created or adopted empty; a failback's line);
/// `shift`: its source offset minus destination offset (`copy::shift`).
fn start_partition(
    ctx: &TopicContext,
    topic: &str,
    p: i32,
    desired: watch::Receiver<Desired>,
    source_topic_id: SourceTopicId,
    expect_end: Option<i64>,
    shift: i64,
) {
    if !ctx.shared.part.copies(topic, p) {
        return;
    }
    let m = &ctx.mirror;
    let key = (m.name.clone(), topic.to_owned(), p);
    let stored = ctx.store.partition(topic, p).filter(|r| r.mirror == m.name);
    if let Some(r) = &stored {
        ctx.shared.status.update(&key, |s| {
            r.restore_counters(s);
            if r.sticky {
                s.state = PartitionState::Failed;
                s.last_error = r.error.clone();
                s.sticky = true;
            }
        });
        if r.sticky {
            warn!(partition = p, error = ?r.error, "partition stays FAILED (stored state)");
            return;
        }
    }
    let task = PartitionTask {
        key,
        source: ctx.source.clone(),
        source_topic_id,
        destination: ctx.shared.destination.clone(),
        fetch_max_bytes: m.fetch_max_bytes,
        fetch_grow_max_bytes: m.effective_fetch_grow_max_bytes(ctx.shared.budget.limit()),
        fetch_hedge_min_rtt: m.fetch_hedge_min_rtt_ms.map(|ms| Duration::from_millis(u64::from(ms))),
        max_filler_batch_records: m.max_filler_batch_records,
        coalesce_max_bytes: usize::try_from(m.coalesce_max_bytes).unwrap_or(0),
        max_fill_offsets: m.max_fill_offsets,
        compressed_fillers: true,
        max_in_flight: ctx.shared.max_in_flight,
        fetchers: ctx.fetchers.clone(),
        producers: ctx.shared.producers.clone(),
        status: ctx.shared.status.clone(),
        expect_end,
        shift,
        epochs: std::sync::Mutex::default(),
        stored_line: stored.as_ref().map(|r| (r.last_mirror_epoch, r.next_offset)),
    };
    tokio::spawn(task.run(ctx.shared.stop.clone(), desired).instrument(info_span!("partition", partition = p)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_retry_back_off_ends_as_soon_as_the_term_stops() {
        let (tx, rx) = watch::channel(false);
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn(async move { back_off(&rx, Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.send(true).expect("the back-off still listens");
        let ended = waiting.await.expect("the back-off task ran");
        assert!(matches!(ended, Err(MirrorError::Fenced)), "a stopped term's retry ends fenced, got {ended:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "it ended when the term stopped, not after the back-off"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_back_off_of_a_running_term_waits_its_time_and_a_stopped_term_does_not_wait() {
        let (tx, rx) = watch::channel(false);
        let started = tokio::time::Instant::now();
        assert!(back_off(&rx, Duration::from_secs(2)).await.is_ok(), "a running term retries");
        assert_eq!(started.elapsed(), Duration::from_secs(2), "after the whole back-off");
        tx.send(true).expect("the receiver is alive");
        let again = tokio::time::Instant::now();
        assert!(matches!(back_off(&rx, Duration::from_secs(2)).await, Err(MirrorError::Fenced)));
        assert_eq!(again.elapsed(), Duration::ZERO, "an already stopped term does not wait");
        drop(tx);
        let (tx2, rx2) = watch::channel(false);
        drop(tx2);
        assert!(
            matches!(back_off(&rx2, Duration::from_secs(2)).await, Err(MirrorError::Fenced)),
            "a term whose stop sender is gone has ended"
        );
    }
}
