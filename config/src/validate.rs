//! Validation of a loaded [`Config`]: every rule runs and every failure is reported together, so
//! an operator fixes the whole file in one go. Parsing problems belong to `load`.

use crate::Config;
use crate::model::split_host_port;

/// One problem with the configuration, naming the offending key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    /// Dotted path of the setting, e.g. `upstream.bootstrap_servers`.
    pub key: String,
    /// What is wrong and what is expected.
    pub message: String,
}

/// All problems found in one configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration:\n{}", .0.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl Config {
    /// Checks every rule and returns all failures at once.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errors = Vec::new();
        let mut err = |key: &str, message: String| errors.push(ConfigError { key: key.to_owned(), message });
        self.listener_errors(&mut err);
        if self.listener.listen_backlog == 0 || self.listener.listen_backlog > 65535 {
            err("listener.listen_backlog", "must be between 1 and 65535".to_owned());
        }
        if self.listener.max_request_frame_bytes < 64 {
            err("listener.max_request_frame_bytes", "must be at least 64".to_owned());
        }
        if self.upstream.bootstrap_servers.is_empty() {
            err(
                "upstream.bootstrap_servers",
                "at least one host:port is required (flag --upstream, env KMP_UPSTREAM)".to_owned(),
            );
        }
        for (i, s) in self.upstream.bootstrap_servers.iter().enumerate() {
            if split_host_port(s).is_none() {
                err(&format!("upstream.bootstrap_servers[{i}]"), format!("`{s}` is not host:port"));
            }
        }
        if self.upstream.connect_timeout_ms == 0 {
            err("upstream.connect_timeout_ms", "must be greater than 0".to_owned());
        }
        if self.upstream.metadata_refresh_interval_ms < 100 {
            err("upstream.metadata_refresh_interval_ms", "must be at least 100".to_owned());
        }
        if self.upstream.api_versions_cache_ms > 3_600_000 {
            err("upstream.api_versions_cache_ms", "must be at most 3600000 (an hour)".to_owned());
        }
        if self.upstream.max_response_frame_bytes < 64 {
            err("upstream.max_response_frame_bytes", "must be at least 64".to_owned());
        }
        if let Some(a) = &self.admin.listen
            && split_host_port(a).is_none()
        {
            err("admin.listen", format!("`{a}` is not host:port"));
        }
        if let Err(list) = self.upstream.properties.parse(crate::PropsOrigin::ConfigFile) {
            for m in list {
                err("upstream.properties", m);
            }
        }
        if self.limits.buffered_response_bytes < 1024 * 1024 {
            err("limits.buffered_response_bytes", "must be at least 1048576".to_owned());
        }
        if self.limits.client_write_timeout_ms < 100 {
            err("limits.client_write_timeout_ms", "must be at least 100".to_owned());
        }
        let e = &self.engine;
        if e.state_topic.is_empty() || e.state_topic.len() > 249 || !e.state_topic.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            err("engine.state_topic", format!("`{}` is not a legal Kafka topic name", e.state_topic));
        }
        if e.max_in_flight_per_partition == 0 {
            err("engine.max_in_flight_per_partition", "must be at least 1".to_owned());
        }
        if e.state_flush_interval_ms < 100 {
            err("engine.state_flush_interval_ms", "must be at least 100".to_owned());
        }
        if !e.enabled && e.role == crate::EngineRole::Follower {
            err(
                "engine.role",
                "`follower` needs engine.enabled = true (enabled = false turns mirroring off: nothing is refused or masked)".to_owned(),
            );
        }
        if e.session_timeout_ms < 1_000 || e.session_timeout_ms > 1_800_000 {
            err("engine.session_timeout_ms", "must be between 1000 and 1800000".to_owned());
        }
        if e.heartbeat_interval_ms == 0 || e.heartbeat_interval_ms.saturating_mul(3) > e.session_timeout_ms {
            err(
                "engine.heartbeat_interval_ms",
                format!("must be at least 1 and at most a third of session_timeout_ms ({})", e.session_timeout_ms),
            );
        }
        if e.share_work && e.role != crate::EngineRole::Auto {
            err("engine.share_work", "only instances with engine.role = \"auto\" share the copying".to_owned());
        }
        if e.group_id.len() > 249 {
            err("engine.group_id", "longer than 249 characters".to_owned());
        }
        if !e.enabled && !self.mirrors.is_empty() {
            err("engine.enabled", "mirrors are declared but the engine is disabled".to_owned());
        }
        let mut names = std::collections::HashSet::new();
        for (i, m) in self.mirrors.iter().enumerate() {
            let key = |field: &str| format!("mirrors[{i}].{field}");
            if m.name.trim().is_empty() {
                err(&key("name"), "must not be empty".to_owned());
            } else if !names.insert(m.name.as_str()) {
                err(&key("name"), format!("`{}` is used by another mirror", m.name));
            }
            if m.source_bootstrap_servers.is_empty() {
                err(&key("source_bootstrap_servers"), "at least one host:port is required".to_owned());
            }
            for s in &m.source_bootstrap_servers {
                if split_host_port(s).is_none() {
                    err(&key("source_bootstrap_servers"), format!("`{s}` is not host:port"));
                }
            }
            if let Err(list) = m.source_properties.parse(crate::PropsOrigin::ConfigFile) {
                for msg in list {
                    err(&key("source_properties"), msg);
                }
            }
            if m.topics.is_empty() && m.include.is_empty() {
                err(&key("topics"), "name at least one topic or an `include` pattern".to_owned());
            }
            for (field, patterns) in [
                ("include", &m.include),
                ("exclude", &m.exclude),
                ("groups_include", &m.groups_include),
                ("groups_exclude", &m.groups_exclude),
                ("topic_config_exclude", &m.topic_config_exclude),
            ] {
                for p in patterns {
                    if let Err(e) = crate::topic_pattern(p) {
                        err(&key(field), format!("`{p}` is not a valid regular expression: {e}"));
                    }
                }
            }
            if m.topic_refresh_interval_ms < 100 {
                err(&key("topic_refresh_interval_ms"), "must be at least 100".to_owned());
            }
            for (field, v) in [
                ("group_offset_sync_interval_ms", m.group_offset_sync_interval_ms),
                ("topic_config_sync_interval_ms", m.topic_config_sync_interval_ms),
            ] {
                if v != 0 && v < 100 {
                    err(&key(field), "must be 0 (off) or at least 100".to_owned());
                }
            }
            if m.start_position != "earliest" {
                err(
                    &key("start_position"),
                    format!("`{}`: only `earliest` keeps offsets identical", m.start_position),
                );
            }
            if m.replication_factor == 0 || m.replication_factor < -1 {
                err(&key("replication_factor"), "must be -1 (destination default) or at least 1".to_owned());
            }
            if m.max_filler_batch_records < 1 {
                err(&key("max_filler_batch_records"), "must be at least 1".to_owned());
            }
            if m.coalesce_max_bytes != 0 && !(16 * 1024..=16 * 1024 * 1024).contains(&m.coalesce_max_bytes) {
                err(
                    &key("coalesce_max_bytes"),
                    format!("{}: must be 0 (off) or between 16384 and 16777216", m.coalesce_max_bytes),
                );
            }
            if m.max_fill_offsets < 1 {
                err(&key("max_fill_offsets"), "must be at least 1".to_owned());
            }
            if m.shift_prefix_from < 1 {
                err(&key("shift_prefix_from"), "must be at least 1".to_owned());
            }
            if m.fetch_max_bytes < 1024 {
                err(&key("fetch_max_bytes"), "must be at least 1024".to_owned());
            } else if u64::try_from(m.fetch_max_bytes).unwrap_or(0) > e.max_buffer_bytes {
                err(
                    &key("fetch_max_bytes"),
                    format!(
                        "{} is larger than engine.max_buffer_bytes = {}: the partition could never fetch",
                        m.fetch_max_bytes, e.max_buffer_bytes
                    ),
                );
            }
            match m.fetch_grow_max_bytes {
                Some(g) if g < m.fetch_max_bytes => {
                    err(
                        &key("fetch_grow_max_bytes"),
                        format!("{g} is smaller than fetch_max_bytes = {}", m.fetch_max_bytes),
                    );
                }
                Some(g) if u64::try_from(g).unwrap_or(0) > e.max_buffer_bytes => {
                    err(
                        &key("fetch_grow_max_bytes"),
                        format!("{g} is larger than engine.max_buffer_bytes = {}", e.max_buffer_bytes),
                    );
                }
                _ => {}
            }
        }
        for (i, n) in self.security.mirror_admin_networks.iter().enumerate() {
            if let Err(e) = crate::parse_cidr(n) {
                err(&format!("security.mirror_admin_networks[{i}]"), e);
            }
        }
        for (i, p) in self.security.mirror_source_allow.iter().enumerate() {
            if p.rsplit_once(':')
                .is_none_or(|(h, port)| h.is_empty() || (port != "*" && port.parse::<u16>().is_err()))
            {
                err(
                    &format!("security.mirror_source_allow[{i}]"),
                    format!("`{p}` is not host:port (either may contain `*`)"),
                );
            }
        }
        let l = &self.limits;
        if l.max_connections == 0 || l.max_connections_per_ip == 0 {
            err(
                "limits.max_connections",
                "max_connections and max_connections_per_ip must be at least 1".to_owned(),
            );
        }
        if l.max_admin_connections == 0 {
            err("limits.max_admin_connections", "must be at least 1".to_owned());
        }
        if l.buffered_request_bytes < u64::from(self.listener.max_request_frame_bytes) + 4 {
            err(
                "limits.buffered_request_bytes",
                format!(
                    "must be at least listener.max_request_frame_bytes + 4 = {}",
                    u64::from(self.listener.max_request_frame_bytes) + 4
                ),
            );
        }
        for (key, v) in [
            ("limits.frame_read_timeout_ms", l.frame_read_timeout_ms),
            ("limits.idle_timeout_ms", l.idle_timeout_ms),
            ("limits.http_header_read_timeout_ms", l.http_header_read_timeout_ms),
        ] {
            if v < 100 {
                err(key, "must be at least 100".to_owned());
            }
        }
        if l.max_admin_connections_per_ip == 0 {
            err("limits.max_admin_connections_per_ip", "must be at least 1".to_owned());
        }
        if l.max_security_file_bytes < 4096 {
            err("limits.max_security_file_bytes", "must be at least 4096".to_owned());
        }
        if errors.is_empty() { Ok(()) } else { Err(ConfigErrors(errors)) }
    }
}
