//! Prometheus metrics of the proxy. Handles are created once here and cloned into sessions, so
//! the request path never looks anything up by label. The registry also holds the collectors
//! `admin` registers for the mirror engine's families, so `/metrics` is one encode of it; serving
//! `/metrics` belongs to `admin`.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use kmp_protocol::codec::ApiKeyName;
use kmp_protocol::kafka_protocol::messages::ApiKey;
use kmp_protocol::mirror_api;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabel {
    api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabel {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SideLabel {
    side: &'static str,
}

/// Per-API handles.
#[derive(Clone)]
pub(crate) struct ApiMetrics {
    pub(crate) requests: Counter,
    pub(crate) latency: Histogram,
}

/// All metric handles plus the registry they are registered in.
pub(crate) struct Metrics {
    /// Locked only to add a collector and to encode a scrape, never on the request path.
    registry: Mutex<Registry>,
    requests: Family<ApiLabel, Counter>,
    latency: Family<ApiLabel, Histogram>,
    /// Indexed by API key; filled on first use so `/metrics` lists only APIs that were used.
    per_api: Vec<OnceLock<ApiMetrics>>,
    /// The KIP-1279 RPCs the proxy answers itself, by their place in `mirror_api::ANSWERED`.
    mirror_api: Vec<OnceLock<ApiMetrics>>,
    unknown_api: OnceLock<ApiMetrics>,
    pub(crate) bytes_from_clients: Counter,
    pub(crate) bytes_to_clients: Counter,
    /// Response bytes moved broker socket to client socket by splice(2) (part of `bytes_to_clients`).
    pub(crate) spliced_bytes: Counter,
    pub(crate) open_connections: Gauge,
    pub(crate) connections: Counter,
    pub(crate) client_frame_errors: Counter,
    pub(crate) broker_frame_errors: Counter,
    pub(crate) upstream_connect_errors: Counter,
    /// First ApiVersions requests answered from a kept answer while the upstream connection opened.
    pub(crate) api_versions_answered_early: Counter,
    pub(crate) metadata_refreshes: Counter,
    pub(crate) metadata_refresh_errors: Counter,
    pub(crate) known_brokers: Gauge,
    pub(crate) masked_fetch_responses: Counter,
    pub(crate) refused_mirror_topic_changes: Counter,
    /// Termination mode: logins clients renewed on their connections (KIP-368).
    pub(crate) client_reauthentications: Counter,
    /// Produce partitions refused per mirror topic (only mirror topics: bounded by the catalog).
    refused_produces: Family<TopicLabel, Counter>,
    refused_requests: Family<ReasonLabel, Counter>,
    connections_refused: Family<ReasonLabel, Counter>,
    connections_closed: Family<ReasonLabel, Counter>,
    /// Bytes of request frames currently held by all connections (the `[limits]` budget).
    pub(crate) buffered_request_bytes: Gauge,
    /// Times a connection waited for the request-byte budget.
    pub(crate) buffer_waits: Counter,
}

impl Metrics {
    /// Creates and registers every metric.
    pub(crate) fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("kmp");
        let requests = Family::<ApiLabel, Counter>::default();
        let latency = Family::<ApiLabel, Histogram>::new_with_constructor(|| Histogram::new(exponential_buckets(0.000_05, 2.0, 18)));
        registry.register("requests", "Requests forwarded or answered, by Kafka API", requests.clone());
        registry.register(
            "request_duration_seconds",
            "Time from a request's arrival to its response being written to the client, by Kafka API",
            latency.clone(),
        );
        let max_key = ApiKey::iter().map(|k| k as i16).max().unwrap_or(0) as usize;
        let per_api = (0..=max_key).map(|_| OnceLock::new()).collect();

        let bytes = Family::<DirectionLabel, Counter>::default();
        registry.register("bytes", "Bytes moved through the proxy", bytes.clone());
        let frame_errors = Family::<SideLabel, Counter>::default();
        registry.register(
            "frame_errors",
            "Malformed, oversized or unexpected frames, by the side that sent them",
            frame_errors.clone(),
        );
        let spliced_bytes = Counter::default();
        registry.register(
            "spliced_bytes",
            "Response bytes moved from a broker's socket to a client's socket by splice(2), never entering the proxy's memory (included in kmp_bytes{direction=\"to_clients\"})",
            spliced_bytes.clone(),
        );
        let open_connections = Gauge::default();
        registry.register("open_connections", "Client connections currently open", open_connections.clone());
        let connections = Counter::default();
        registry.register("connections", "Client connections accepted", connections.clone());
        let upstream_connect_errors = Counter::default();
        registry.register(
            "upstream_connect_errors",
            "Failed connection attempts to upstream brokers",
            upstream_connect_errors.clone(),
        );
        let api_versions_answered_early = Counter::default();
        registry.register(
            "api_versions_answered_early",
            "ApiVersions requests answered from a broker's kept answer while the connection's upstream opened (upstream.api_versions_cache_ms)",
            api_versions_answered_early.clone(),
        );
        let metadata_refreshes = Counter::default();
        registry.register("metadata_refreshes", "Successful background metadata refreshes", metadata_refreshes.clone());
        let metadata_refresh_errors = Counter::default();
        registry.register(
            "metadata_refresh_errors",
            "Failed background metadata refreshes",
            metadata_refresh_errors.clone(),
        );
        let known_brokers = Gauge::default();
        registry.register(
            "known_brokers",
            "Brokers listed in the upstream cluster's latest metadata refresh",
            known_brokers.clone(),
        );

        let masked_fetch_responses = Counter::default();
        registry.register(
            "masked_fetch_responses",
            "Fetch and ShareFetch responses in which mirror filler batches were replaced by transaction marker batches",
            masked_fetch_responses.clone(),
        );
        let refused_mirror_topic_changes = Counter::default();
        registry.register(
            "refused_mirror_topic_changes",
            "Produce partitions and admin topic changes refused because the topic is a read-only mirror topic",
            refused_mirror_topic_changes.clone(),
        );

        let client_reauthentications = Counter::default();
        registry.register(
            "client_reauthentications",
            "Termination mode: SASL logins clients renewed on their connections before their session ended (KIP-368)",
            client_reauthentications.clone(),
        );

        let refused_produces = Family::<TopicLabel, Counter>::default();
        registry.register(
            "mirror_topic_produces_refused",
            "Produce partitions refused because the topic is a read-only mirror topic, by topic",
            refused_produces.clone(),
        );

        let refused_requests = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "refused_requests",
            "Requests or parts of requests refused by a policy filter, by reason",
            refused_requests.clone(),
        );
        let connections_refused = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "connections_refused",
            "Client connections closed at accept because a connection limit was reached, by limit",
            connections_refused.clone(),
        );
        let connections_closed = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "connections_closed_by_limit",
            "Client connections closed by the proxy for a timeout, by reason",
            connections_closed.clone(),
        );
        let buffered_request_bytes = Gauge::default();
        registry.register(
            "buffered_request_bytes",
            "Bytes of request frames currently held by all client connections",
            buffered_request_bytes.clone(),
        );
        let buffer_waits = Counter::default();
        registry.register(
            "request_buffer_waits",
            "Times a connection waited because the request-byte budget was exhausted",
            buffer_waits.clone(),
        );

        let bytes_from_clients = bytes.get_or_create(&DirectionLabel { direction: "from_clients" }).clone();
        let bytes_to_clients = bytes.get_or_create(&DirectionLabel { direction: "to_clients" }).clone();
        let client_frame_errors = frame_errors.get_or_create(&SideLabel { side: "client" }).clone();
        let broker_frame_errors = frame_errors.get_or_create(&SideLabel { side: "broker" }).clone();
        Arc::new(Self {
            requests,
            latency,
            per_api,
            mirror_api: mirror_api::ANSWERED.iter().map(|_| OnceLock::new()).collect(),
            unknown_api: OnceLock::new(),
            bytes_from_clients,
            bytes_to_clients,
            spliced_bytes,
            client_frame_errors,
            broker_frame_errors,
            open_connections,
            connections,
            upstream_connect_errors,
            api_versions_answered_early,
            metadata_refreshes,
            metadata_refresh_errors,
            known_brokers,
            masked_fetch_responses,
            refused_mirror_topic_changes,
            client_reauthentications,
            refused_produces,
            refused_requests,
            connections_refused,
            connections_closed,
            buffered_request_bytes,
            buffer_waits,
            registry: Mutex::new(registry),
        })
    }

    /// Counts `n` requests (or request parts) refused by a policy filter.
    pub(crate) fn refused(&self, reason: &'static str, n: u64) {
        self.refused_requests.get_or_create(&ReasonLabel { reason }).inc_by(n);
    }

    /// Counts `n` Produce partitions of mirror topic `topic` refused.
    pub(crate) fn refused_produce(&self, topic: &str, n: u64) {
        self.refused_produces.get_or_create(&TopicLabel { topic: topic.to_owned() }).inc_by(n);
    }

    /// Counts a connection refused at accept by limit `reason`.
    pub(crate) fn connection_refused(&self, reason: &'static str) {
        self.connections_refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Counts a connection the proxy closed for `reason` (idle, partial frame, TLS handshake,
    /// request before authentication).
    pub(crate) fn connection_closed(&self, reason: &'static str) {
        self.connections_closed.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Handles for raw API key `key`.
    pub(crate) fn api(&self, key: i16) -> &ApiMetrics {
        let known = ApiKey::try_from(key)
            .ok()
            .and_then(|k| Some((k, self.per_api.get(usize::try_from(key).ok()?)?)));
        if let Some((k, cell)) = known {
            return cell.get_or_init(|| self.handles(k.name()));
        }
        let answered = mirror_api::ANSWERED.iter().position(|&(k, _, _)| k == key);
        match (answered.and_then(|i| self.mirror_api.get(i)), mirror_api::api_name(key)) {
            (Some(cell), Some(name)) => cell.get_or_init(|| self.handles(name)),
            _ => self.unknown_api.get_or_init(|| self.handles("unknown")),
        }
    }

    fn handles(&self, api: &str) -> ApiMetrics {
        // `get_or_create` returns a lock guard: each handle is cloned out in its own statement so
        // no guard is alive when the next one is taken.
        let label = ApiLabel { api: api.to_owned() };
        let requests = self.requests.get_or_create(&label).clone();
        let latency = self.latency.get_or_create(&label).clone();
        ApiMetrics { requests, latency }
    }

    /// Adds `collector`'s families to every later scrape, after the proxy's own metrics and the
    /// collectors added before it (names get the `kmp_` prefix).
    pub(crate) fn register_collector(&self, collector: Box<dyn Collector>) {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner).register_collector(collector);
    }

    /// The Prometheus text exposition.
    pub(crate) fn encode(&self) -> String {
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_created_and_exported_with_the_kmp_prefix() {
        let m = Metrics::new();
        m.api(ApiKey::Produce as i16).requests.inc();
        m.api(-5).requests.inc();
        m.api(mirror_api::DESCRIBE_CLUSTER_MIRRORS).requests.inc();
        m.bytes_from_clients.inc_by(10);
        let text = m.encode();
        assert!(text.contains("kmp_requests_total{api=\"Produce\"} 1"), "{text}");
        assert!(text.contains("kmp_requests_total{api=\"unknown\"} 1"), "{text}");
        assert!(
            text.contains("kmp_requests_total{api=\"DescribeClusterMirrors\"} 1"),
            "the proxy's own mirror RPCs are counted by name: {text}"
        );
        assert!(text.contains("kmp_bytes_total{direction=\"from_clients\"} 10"), "{text}");
        assert!(text.contains("kmp_request_duration_seconds_bucket"), "{text}");
    }
}
