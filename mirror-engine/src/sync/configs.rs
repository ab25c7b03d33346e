//! Topic config sync, one pass for one mirror (KIP-1279 §6): the source topics' configs are
//! read, compared with the destination topics' and the differences applied with
//! IncrementalAlterConfigs (SET changed values, DELETE values the source no longer sets). Which
//! configs are copied is `topics::configs`' decision; when passes run is `sync`'s.

use kmp_protocol::kafka_protocol::messages::IncrementalAlterConfigsRequest;
use kmp_protocol::kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use tracing::info;

use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;
use crate::topics::configs::{self as topic_configs, ConfigChange, ConfigFilter, TOPIC_RESOURCE};

/// The outcome of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigReport {
    /// Topics compared.
    pub topics: usize,
    /// Config changes applied to destination topics.
    pub changes_applied: u64,
    /// Per-topic problems (the other topics were still synced).
    pub errors: Vec<String>,
}

/// One pass over `topics` (mirror topics that are mirroring).
pub async fn sync(source: &ClusterClient, destination: &ClusterClient, filter: &ConfigFilter, topics: &[String]) -> Result<ConfigReport, MirrorError> {
    let mut report = ConfigReport::default();
    if topics.is_empty() {
        return Ok(report);
    }
    let src = topic_configs::describe(source, topics).await?;
    let dst = topic_configs::describe(destination, topics).await?;
    let mut resources = Vec::new();
    for topic in topics {
        let (Some(s), Some(d)) = (src.get(topic), dst.get(topic)) else { continue };
        let (s, d) = match (s, d) {
            (Ok(s), Ok(d)) => (s, d),
            // A deleted source topic fails its partitions elsewhere; nothing to sync.
            (Err(3), _) => continue,
            (Err(code), _) => {
                report.errors.push(format!("topic {topic}: source DescribeConfigs error {code}"));
                continue;
            }
            (_, Err(code)) => {
                report.errors.push(format!("topic {topic}: destination DescribeConfigs error {code}"));
                continue;
            }
        };
        report.topics += 1;
        let changes = topic_configs::plan(s, d, filter);
        if changes.is_empty() {
            continue;
        }
        info!(%topic, ?changes, "applying source topic config changes to the destination");
        let mut r = AlterConfigsResource::default();
        r.resource_type = TOPIC_RESOURCE;
        r.resource_name = StrBytes::from_string(topic.clone());
        r.configs = changes
            .iter()
            .map(|c| {
                let mut a = AlterableConfig::default();
                let (name, op, value) = match c {
                    ConfigChange::Set(n, v) => (n, 0, Some(v)),
                    ConfigChange::Delete(n) => (n, 1, None),
                };
                a.name = StrBytes::from_string(name.clone());
                a.config_operation = op;
                a.value = value.map(|v| StrBytes::from_string(v.clone()));
                a
            })
            .collect();
        resources.push((r, changes.len() as u64));
    }
    if resources.is_empty() {
        return Ok(report);
    }
    let counts: Vec<(String, u64)> = resources.iter().map(|(r, n)| (r.resource_name.as_str().to_owned(), *n)).collect();
    let mut req = IncrementalAlterConfigsRequest::default();
    req.resources = resources.into_iter().map(|(r, _)| r).collect();
    let conn = destination.link_any().await?;
    let resp = conn.call(&req, 1).await.map_err(|e| destination.wrap(e))?;
    for r in resp.responses {
        let topic = r.resource_name.as_str();
        if r.error_code == 0 {
            report.changes_applied += counts.iter().find(|(t, _)| t == topic).map_or(0, |(_, n)| *n);
        } else {
            let msg = r.error_message.as_ref().map_or(String::new(), |m| format!(": {}", m.as_str()));
            report
                .errors
                .push(format!("topic {topic}: destination IncrementalAlterConfigs error {}{msg}", r.error_code));
        }
    }
    Ok(report)
}
