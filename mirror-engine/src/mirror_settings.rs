//! A mirror's settings under their KIP-1279 config names (§8.2): which names exist, parsing
//! them into a [`MirrorConfig`] (CreateClusterMirror), describing and altering them
//! (DescribeConfigs / IncrementalAlterConfigs on resource type 64). Launching mirrors and
//! starting topics is `mirrors`'.

use kmp_config::MirrorConfig;

use crate::control::{Control, codes};
use crate::error::MirrorError;
use crate::select::TopicSelector;
use crate::state::MirrorRecord;

use codes::{INVALID_CONFIG, INVALID_REQUEST};

/// The config keys CreateClusterMirror understands (KIP-1279 §8.2 names; the two sync
/// intervals are the proxy's own, `mirror.metadata.refresh.interval.ms` sets both).
pub(crate) const KNOWN_KEYS: &[&str] = &[
    "bootstrap.servers",
    "mirror.source.cluster.id",
    "mirror.topics.include",
    "mirror.topics.exclude",
    "mirror.groups.include",
    "mirror.groups.exclude",
    "mirror.topic.properties.exclude",
    "mirror.metadata.refresh.interval.ms",
    "mirror.group.offset.sync.interval.ms",
    "mirror.topic.config.sync.interval.ms",
    "security.protocol",
];

/// The list-valued mirror config `key` of `def` (comma-separated on the wire).
pub(crate) fn list_config<'a>(def: &'a mut MirrorConfig, key: &str) -> Option<&'a mut Vec<String>> {
    match key {
        "mirror.topics.include" => Some(&mut def.include),
        "mirror.topics.exclude" => Some(&mut def.exclude),
        "mirror.groups.include" => Some(&mut def.groups_include),
        "mirror.groups.exclude" => Some(&mut def.groups_exclude),
        "mirror.topic.properties.exclude" => Some(&mut def.topic_config_exclude),
        _ => None,
    }
}

/// Sets the interval config `key` of `def`; `Ok(false)` if `key` is not an interval.
pub(crate) fn set_interval(def: &mut MirrorConfig, key: &str, value: Option<&str>) -> Result<bool, String> {
    let parse = || -> Result<u64, String> {
        let v = value.unwrap_or_default().trim();
        match v.parse::<u64>() {
            Ok(n) if n == 0 || n >= 100 => Ok(n),
            _ => Err(format!("{key} must be 0 (off) or a number of milliseconds of at least 100, not `{v}`")),
        }
    };
    match key {
        "mirror.metadata.refresh.interval.ms" => {
            let n = parse()?;
            (def.group_offset_sync_interval_ms, def.topic_config_sync_interval_ms) = (n, n);
        }
        "mirror.group.offset.sync.interval.ms" => def.group_offset_sync_interval_ms = parse()?,
        "mirror.topic.config.sync.interval.ms" => def.topic_config_sync_interval_ms = parse()?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// Every pattern list of `def` compiles.
pub(crate) fn check_patterns(def: &MirrorConfig) -> Result<(), MirrorError> {
    TopicSelector::new(&def.topics, &def.include, &def.exclude)?;
    crate::sync::check_filters(def)
}

pub(crate) fn csv(v: Option<&str>) -> Vec<String> {
    v.map(|s| s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl Control {
    /// The mirror's configs as KIP-1279 names them (DescribeConfigs on resource type 64).
    pub fn mirror_configs(&self, name: &str) -> Option<Vec<(&'static str, String)>> {
        let d = self.definition(name)?;
        Some(vec![
            ("bootstrap.servers", d.source_bootstrap_servers.join(",")),
            ("mirror.topics.include", d.include.join(",")),
            ("mirror.topics.exclude", d.exclude.join(",")),
            ("mirror.groups.include", d.groups_include.join(",")),
            ("mirror.groups.exclude", d.groups_exclude.join(",")),
            ("mirror.topic.properties.exclude", d.topic_config_exclude.join(",")),
            ("mirror.group.offset.sync.interval.ms", d.group_offset_sync_interval_ms.to_string()),
            ("mirror.topic.config.sync.interval.ms", d.topic_config_sync_interval_ms.to_string()),
        ])
    }

    /// IncrementalAlterConfigs on a mirror: `(name, operation, value)` with Kafka's operations
    /// (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT). Mirrors declared in the config file are changed
    /// there, not here. Returns the error code and message.
    pub async fn alter_mirror(&self, name: &str, ops: &[(String, i8, Option<String>)]) -> (i16, Option<String>) {
        let _ = self.booted_store().await;
        let Some(mut def) = self.definition(name) else {
            return (codes::UNKNOWN_CLUSTER_MIRROR, Some(format!("cluster mirror {name} does not exist")));
        };
        let Some(store) = self.store() else {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some("the mirror engine is still starting".into()));
        };
        let origin = store
            .mirrors()
            .into_iter()
            .find(|m| m.definition.name == name)
            .map_or("api".to_owned(), |m| m.origin);
        if origin == "config" {
            return (
                INVALID_REQUEST,
                Some(format!("cluster mirror {name} is declared in the proxy's config file; change it there")),
            );
        }
        for (key, op, value) in ops {
            let items = csv(value.as_deref());
            if key == "bootstrap.servers" && *op == 0 && !items.is_empty() {
                def.source_bootstrap_servers = items;
                continue;
            }
            if *op == 0 {
                match set_interval(&mut def, key, value.as_deref()) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => return (INVALID_CONFIG, Some(e)),
                }
            }
            let Some(list) = list_config(&mut def, key) else {
                return (
                    INVALID_CONFIG,
                    Some(format!(
                        "{key} cannot be changed this way (alterable: bootstrap.servers and the intervals by SET, the include/exclude lists by any operation)"
                    )),
                );
            };
            match op {
                0 => *list = items,
                1 => list.clear(),
                2 => list.extend(items.into_iter().filter(|i| !list.contains(i)).collect::<Vec<_>>()),
                3 => list.retain(|i| !items.contains(i)),
                _ => return (INVALID_REQUEST, Some(format!("unknown config operation {op}"))),
            }
        }
        if let Err(e) = check_patterns(&def) {
            return (INVALID_CONFIG, Some(e.to_string()));
        }
        if let Err(e) = store
            .put_mirror(&MirrorRecord {
                origin,
                definition: def.clone(),
            })
            .await
        {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some(format!("cannot record the mirror: {e}")));
        }
        self.set_definition(def);
        (codes::NONE, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kip_names_set_the_sync_settings_and_bad_values_are_refused() {
        let mut def = MirrorConfig::new("m", vec!["s:1".into()]);
        *list_config(&mut def, "mirror.groups.include").unwrap() = csv(Some("app-.*, billing"));
        *list_config(&mut def, "mirror.topic.properties.exclude").unwrap() = csv(Some("min.insync.replicas"));
        assert_eq!(def.groups_include, vec!["app-.*", "billing"]);
        assert_eq!(def.topic_config_exclude, vec!["min.insync.replicas"]);
        assert_eq!(set_interval(&mut def, "mirror.metadata.refresh.interval.ms", Some("30000")), Ok(true));
        assert_eq!((def.group_offset_sync_interval_ms, def.topic_config_sync_interval_ms), (30_000, 30_000));
        assert_eq!(set_interval(&mut def, "mirror.group.offset.sync.interval.ms", Some("0")), Ok(true));
        assert_eq!(def.group_offset_sync_interval_ms, 0, "0 turns the periodic sync off");
        assert!(
            set_interval(&mut def, "mirror.topic.config.sync.interval.ms", Some("50")).is_err(),
            "below 100 ms"
        );
        assert!(set_interval(&mut def, "mirror.topic.config.sync.interval.ms", Some("soon")).is_err());
        assert_eq!(set_interval(&mut def, "mirror.topics.include", Some("x")), Ok(false));
        def.groups_exclude = vec!["(".into()];
        assert!(check_patterns(&def).is_err(), "an invalid group pattern is refused");
    }
}
