//! Carrying out a failback's plan. Incremental: the topic is taken over where it ends (the
//! mirror's forced configs set, grown to the source's partition count, the plan recorded) and
//! its partitions copy from their lines. Restore, in steps each recorded in the state topic
//! before the next so a restarted engine resumes rather than repeats: record the plan
//! (`quarantining`, naming the quarantine topic), copy the records past the line there
//! (`quarantined`, with the counts), delete the topic (`restoring`); then the mirror creates it
//! again and fills it from the source like any new mirror topic.

use std::time::Duration;

use kmp_protocol::kafka_protocol::ResponseError;
use kmp_protocol::kafka_protocol::messages::{DeleteTopicsRequest, TopicName};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use tracing::{info, warn};

use super::{Failback, key, quarantine};
use crate::context::TopicContext;
use crate::error::MirrorError;
use crate::state::records::{FailbackRecord, id_to_hex};
use crate::topics::configs::FORCED_CONFIGS;
use crate::topics::create::{self as topics, TOPIC_ALREADY_EXISTS, TopicSpec};
use kmp_protocol::Backoff;

/// Prefix of a quarantine topic's name: `kmp-quarantine.<unix ms of the plan>.<topic>`.
pub const QUARANTINE_PREFIX: &str = "kmp-quarantine.";
/// Kafka's longest topic name.
const MAX_TOPIC_NAME: usize = 249;
/// Largest batch the quarantine topic takes: a source batch plus the headers each of its records
/// gains.
const QUARANTINE_MAX_MESSAGE_BYTES: &str = "16777216";
/// How long a deleted topic may take to leave the metadata before the step is retried.
const DELETE_WAIT: Duration = Duration::from_secs(60);

/// Takes the topic over where it ends (every partition [`Path::Incremental`]); `partitions`:
/// the source's count.
pub(crate) async fn take_over(ctx: &TopicContext, topic: &str, fb: &Failback, partitions: usize) -> Result<(), MirrorError> {
    // A transaction still open here ends later with a marker its coordinator writes, where the
    // mirror's next record goes: wait for it (the topic is read-only through the proxy).
    if let Some((p, (_, here, _))) = fb.partitions.iter().enumerate().find(|(_, (_, h, _))| h.stable < h.end) {
        return Err(MirrorError::Broker {
            side: "destination",
            what: format!(
                "{topic}-{p}: a transaction is still open here (stable offset {} < end {}); the failback waits until its coordinator ends it",
                here.stable, here.end
            ),
            code: ResponseError::RequestTimedOut.code(), // retried
        });
    }
    let destination = &ctx.shared.destination;
    if partitions > fb.partitions.len() {
        // The topic grew on the other side after the failover: the new partitions start empty.
        topics::add_partitions(destination, topic, fb.partitions.len(), partitions).await?;
    }
    topics::set_forced_configs(destination, topic).await?;
    ctx.store.put_record(&key(topic), &fb.record(&ctx.mirror.name, "incremental")).await?;
    info!("failback: every partition continues from its line; nothing quarantined");
    Ok(())
}

/// Quarantines what lies past the line and deletes the topic, resuming a restore this engine
/// (or an earlier run of it) began; the caller then creates the topic.
pub(crate) async fn quarantine_and_delete(ctx: &TopicContext, topic: &str, fb: &Failback) -> Result<(), MirrorError> {
    let destination = &ctx.shared.destination;
    let begun = ctx
        .store
        .record::<FailbackRecord>(&key(topic))
        .filter(|r| r.topic_id == id_to_hex(fb.topic_id) && (r.phase == "quarantining" || r.phase == "quarantined"));
    let mut rec = match begun {
        Some(r) => {
            info!(phase = %r.phase, quarantine_topic = %r.quarantine_topic, "failback: resuming the restore recorded before");
            r
        }
        None => {
            let mut r = fb.record(&ctx.mirror.name, "quarantining");
            r.quarantine_topic = format!("{QUARANTINE_PREFIX}{}.{topic}", r.at_ms);
            if r.quarantine_topic.len() > MAX_TOPIC_NAME {
                return Err(MirrorError::Failback {
                    topic: topic.to_owned(),
                    reason: format!("the quarantine topic's name {} would be longer than Kafka allows", r.quarantine_topic),
                });
            }
            ctx.store.put_record(&key(topic), &r).await?;
            r
        }
    };
    if rec.phase == "quarantining" {
        create_quarantine_topic(ctx, &rec.quarantine_topic, rec.partitions.len()).await?;
        for part in &mut rec.partitions {
            let counts = quarantine::copy_tail(
                destination,
                topic,
                fb.topic_id,
                part.partition,
                part.quarantined_from..part.end,
                &rec.quarantine_topic,
            )
            .await?;
            (part.records, part.markers, part.fillers) = (counts.records, counts.markers, counts.fillers);
        }
        rec.phase = "quarantined".into();
        ctx.store.put_record(&key(topic), &rec).await?;
        let records: u64 = rec.partitions.iter().map(|p| p.records).sum();
        warn!(
            quarantine_topic = %rec.quarantine_topic,
            records,
            "failback: the records past the line are in the quarantine topic; the topic is re-created and restored from the source"
        );
    }
    delete_topic(ctx, topic).await?;
    rec.phase = "restoring".into();
    ctx.store.put_record(&key(topic), &rec).await
}

/// Creates the quarantine topic (kept forever, timestamps as written), or finds it created.
async fn create_quarantine_topic(ctx: &TopicContext, name: &str, partitions: usize) -> Result<(), MirrorError> {
    let mut configs: Vec<(String, String)> = FORCED_CONFIGS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    configs.push(("retention.ms".into(), "-1".into()));
    configs.push(("max.message.bytes".into(), QUARANTINE_MAX_MESSAGE_BYTES.into()));
    let spec = TopicSpec {
        name,
        partitions: partitions as i32,
        replication_factor: ctx.mirror.replication_factor,
        configs,
    };
    match topics::create_topic(&ctx.shared.destination, &spec).await? {
        0 | TOPIC_ALREADY_EXISTS => {}
        code => {
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("create the quarantine topic {name}"),
                code,
            });
        }
    }
    // Its partitions must be known before the copy asks for their leaders.
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    for _ in 0..50 {
        let l = ctx.shared.destination.layout_now(name).await?;
        if l.error_code == 0 && l.partitions.len() == partitions && l.partitions.iter().all(|&(_, leader, _)| leader >= 0) {
            return Ok(());
        }
        tokio::time::sleep(backoff.next_pause()).await;
    }
    Err(MirrorError::Broker {
        side: "destination",
        what: format!("the quarantine topic {name} to appear with {partitions} partitions"),
        code: ResponseError::LeaderNotAvailable.code(), // retried
    })
}

/// Deletes `topic` and waits until the metadata no longer shows it.
async fn delete_topic(ctx: &TopicContext, topic: &str) -> Result<(), MirrorError> {
    let destination = &ctx.shared.destination;
    let mut req = DeleteTopicsRequest::default();
    req.topic_names = vec![TopicName(StrBytes::from_string(topic.to_owned()))];
    req.timeout_ms = 30_000;
    let conn = destination.link_any().await?;
    let resp = conn.call(&req, 5).await.map_err(|e| destination.wrap(e))?;
    match resp.responses.first().map_or(0, |r| r.error_code) {
        0 | 3 => {}
        code => {
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("delete {topic} (to restore it from the source)"),
                code,
            });
        }
    }
    let deadline = tokio::time::Instant::now() + DELETE_WAIT;
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        if destination.layout_now(topic).await?.error_code != 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(MirrorError::Broker {
                side: "destination",
                what: format!("{topic} to leave the metadata after its deletion"),
                code: ResponseError::RequestTimedOut.code(), // retried
            });
        }
        tokio::time::sleep(backoff.next_pause()).await;
    }
}
