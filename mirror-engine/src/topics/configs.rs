//! Which topic configs a mirror copies and how the destination is brought in line: reading a
//! cluster's topic configs (DescribeConfigs), deciding what is copied (the mirror's
//! `topic_config_exclude` plus the settings identical offsets need), and planning the changes
//! that make the destination match (sans-io, tested here). When and for which topics this runs
//! is `sync::configs`' business; creating topics is `create`'s.

use std::collections::{BTreeMap, HashMap};

use kmp_protocol::kafka_protocol::messages::DescribeConfigsRequest;
use kmp_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kmp_protocol::kafka_protocol::protocol::StrBytes;
use regex::Regex;

use crate::cluster::client::ClusterClient;
use crate::error::MirrorError;
use crate::topics::select::GroupFilter;

/// Topic settings every mirror topic gets, whatever the source has.
pub const FORCED_CONFIGS: &[(&str, &str)] = &[
    ("compression.type", "producer"),
    ("message.timestamp.type", "CreateTime"),
    ("message.timestamp.before.max.ms", "9223372036854775807"),
    ("message.timestamp.after.max.ms", "9223372036854775807"),
];

/// Source topic configs never copied whatever the mirror's exclude list says: the forced ones
/// and the deprecated timestamp window that would reject old source records.
pub const NEVER_COPIED: &[&str] = &[
    "compression.type",
    "message.timestamp.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
];

pub(crate) const TOPIC_RESOURCE: i8 = 2;
/// `config_source` of a value set on the topic itself.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

/// Which source topic configs a mirror copies.
#[derive(Debug, Clone)]
pub struct ConfigFilter {
    exclude: Vec<Regex>,
}

impl ConfigFilter {
    /// `exclude`: the mirror's `topic_config_exclude` (whole-name regexes).
    pub fn new(exclude: &[String]) -> Result<Self, MirrorError> {
        Ok(Self {
            exclude: crate::topics::select::compile("topic config", exclude)?,
        })
    }

    /// Whether the config `name` is copied from the source.
    pub fn copies(&self, name: &str) -> bool {
        !NEVER_COPIED.contains(&name) && !self.exclude.iter().any(|r| r.is_match(name))
    }
}

/// One config of a topic as a cluster describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub value: Option<String>,
    /// Set on the topic itself (not a broker or default value).
    pub dynamic: bool,
    pub sensitive: bool,
}

/// Every config of one topic, by name.
pub type TopicConfigs = BTreeMap<String, ConfigEntry>;

/// DescribeConfigs for `topics` (one request); per topic its configs or the Kafka error code.
pub async fn describe(cluster: &ClusterClient, topics: &[String]) -> Result<HashMap<String, Result<TopicConfigs, i16>>, MirrorError> {
    let mut req = DescribeConfigsRequest::default();
    req.resources = topics
        .iter()
        .map(|t| {
            let mut r = DescribeConfigsResource::default();
            r.resource_type = TOPIC_RESOURCE;
            r.resource_name = StrBytes::from_string(t.clone());
            r.configuration_keys = None; // all
            r
        })
        .collect();
    let mut conn = cluster.connect_any().await?;
    let resp = conn.send(&req, 4).await.map_err(|e| cluster.wrap(e))?;
    Ok(resp
        .results
        .into_iter()
        .map(|r| {
            let name = r.resource_name.as_str().to_owned();
            if r.error_code != 0 {
                return (name, Err(r.error_code));
            }
            let configs = r
                .configs
                .into_iter()
                .map(|c| {
                    let entry = ConfigEntry {
                        value: c.value.map(|v| v.as_str().to_owned()),
                        dynamic: c.config_source == DYNAMIC_TOPIC_CONFIG,
                        sensitive: c.is_sensitive,
                    };
                    (c.name.as_str().to_owned(), entry)
                })
                .collect();
            (name, Ok(configs))
        })
        .collect())
}

/// The source topic's configs a new destination topic gets: set on the source topic itself,
/// not sensitive, copied by `filter`.
pub fn copied(source: &TopicConfigs, filter: &ConfigFilter) -> Vec<(String, String)> {
    source
        .iter()
        .filter(|(name, e)| e.dynamic && !e.sensitive && filter.copies(name))
        .filter_map(|(name, e)| Some((name.clone(), e.value.clone()?)))
        .collect()
}

/// One change to a destination topic's configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    /// IncrementalAlterConfigs SET.
    Set(String, String),
    /// IncrementalAlterConfigs DELETE: the source no longer sets it, so the destination falls
    /// back to its default too.
    Delete(String),
}

/// What makes the destination topic's copied configs equal the source's: every copied source
/// value that differs is SET; a copied config set on the destination topic but no longer on the
/// source is DELETEd (only the mirror changes mirror topics' configs: the proxy refuses
/// clients' changes). Configs the filter does not copy are never touched.
pub fn plan(source: &TopicConfigs, destination: &TopicConfigs, filter: &ConfigFilter) -> Vec<ConfigChange> {
    let want: BTreeMap<String, String> = copied(source, filter).into_iter().collect();
    let mut changes: Vec<ConfigChange> = want
        .iter()
        .filter(|(name, value)| destination.get(*name).and_then(|e| e.value.as_ref()) != Some(*value) || !destination.get(*name).is_some_and(|e| e.dynamic))
        .map(|(name, value)| ConfigChange::Set(name.clone(), value.clone()))
        .collect();
    changes.extend(
        destination
            .iter()
            .filter(|(name, e)| e.dynamic && !e.sensitive && filter.copies(name) && !want.contains_key(*name))
            .map(|(name, _)| ConfigChange::Delete(name.clone())),
    );
    changes
}

/// Whether the mirror's group and topic config patterns compile.
pub(crate) fn check_filters(def: &kmp_config::MirrorConfig) -> Result<(), MirrorError> {
    GroupFilter::new(&def.groups_include, &def.groups_exclude)?;
    ConfigFilter::new(&def.topic_config_exclude).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(value: &str, dynamic: bool) -> ConfigEntry {
        ConfigEntry {
            value: Some(value.to_owned()),
            dynamic,
            sensitive: false,
        }
    }

    fn filter() -> ConfigFilter {
        let defaults: Vec<String> = kmp_config::DEFAULT_TOPIC_CONFIG_EXCLUDE.iter().map(|s| (*s).to_owned()).collect();
        ConfigFilter::new(&defaults).unwrap()
    }

    #[test]
    fn forced_and_cluster_local_configs_are_never_copied() {
        let f = filter();
        for (k, _) in FORCED_CONFIGS {
            assert!(!f.copies(k), "{k} is forced, not copied");
        }
        assert!(
            !ConfigFilter::new(&[]).unwrap().copies("compression.type"),
            "forced configs stay excluded with an empty list"
        );
        assert!(!f.copies("min.insync.replicas"));
        assert!(!f.copies("confluent.placement.constraints"));
        assert!(f.copies("retention.ms") && f.copies("cleanup.policy") && f.copies("max.message.bytes"));
    }

    #[test]
    fn changed_and_new_source_values_are_set_and_equal_ones_are_left_alone() {
        let source: TopicConfigs = [
            ("retention.ms".into(), entry("1000", true)),
            ("segment.bytes".into(), entry("2000", true)),
            ("cleanup.policy".into(), entry("delete", false)), // a default, not copied
            ("min.insync.replicas".into(), entry("2", true)),  // excluded
        ]
        .into();
        let destination: TopicConfigs = [
            ("retention.ms".into(), entry("999", true)),
            ("segment.bytes".into(), entry("2000", true)),
            ("cleanup.policy".into(), entry("delete", false)),
            ("min.insync.replicas".into(), entry("1", false)),
        ]
        .into();
        assert_eq!(
            plan(&source, &destination, &filter()),
            vec![ConfigChange::Set("retention.ms".into(), "1000".into())]
        );
    }

    #[test]
    fn a_default_value_equal_to_the_source_override_is_still_set_so_it_sticks() {
        let source: TopicConfigs = [("retention.ms".into(), entry("604800000", true))].into();
        let destination: TopicConfigs = [("retention.ms".into(), entry("604800000", false))].into();
        assert_eq!(
            plan(&source, &destination, &filter()),
            vec![ConfigChange::Set("retention.ms".into(), "604800000".into())]
        );
    }

    #[test]
    fn a_config_removed_on_the_source_is_deleted_but_forced_and_excluded_ones_stay() {
        let source: TopicConfigs = [("retention.ms".into(), entry("1000", false))].into();
        let destination: TopicConfigs = [
            ("retention.ms".into(), entry("5000", true)),
            ("compression.type".into(), entry("producer", true)),
            ("min.insync.replicas".into(), entry("2", true)),
        ]
        .into();
        assert_eq!(plan(&source, &destination, &filter()), vec![ConfigChange::Delete("retention.ms".into())]);
    }

    #[test]
    fn sensitive_values_are_neither_copied_nor_deleted() {
        let secret = ConfigEntry {
            value: None,
            dynamic: true,
            sensitive: true,
        };
        let source: TopicConfigs = [("x.password".into(), secret.clone())].into();
        let destination: TopicConfigs = [("y.password".into(), secret)].into();
        assert!(plan(&source, &destination, &filter()).is_empty());
    }
}
