//! The request pipeline: every request and every response passes an ordered chain of filters.
//! Each filter declares, from the API key and version alone (and what it knows about the
//! connection), whether it must see a frame — its decode predicate. A frame no filter asks for
//! stays raw bytes from client to broker and back; a filter that asks decodes only what it needs.
//!
//! Request filters may answer a request themselves (it is then not forwarded), reduce it (take
//! refused parts out) and register a merge that adds their answer for those parts to the broker's
//! response, or let it continue. Response filters rewrite what the broker answered.
//!
//! This file is the chain only. The folder holds: `api` (the [`Filter`] trait and what a filter
//! sees and decides: every filter imports it), `identity` (the per-connection filter state a
//! [`Conn`] carries), `refuse/` (the shared refusals: decisions, taking refused parts out of a
//! request, merging their answers) and one file or folder per policy or rewrite. A policy imports
//! `api`, `identity` and `refuse` only — never this file nor another policy.
//!
//! Adding a policy means adding one file here and one line in [`Chain::new`]. Moving frames
//! belongs to `session`; what a filter decides belongs to the filter.

use bytes::Bytes;
use kmp_protocol::ProtocolError;

use kmp_config::Config;

use crate::error::ProxyError;
use api::{Conn, Exchange, Filter, Flow, Merge, Outcome};

pub(crate) mod addresses;
pub(crate) mod api;
pub(crate) mod api_versions;
pub(crate) mod authz;
pub(crate) mod broker_configs;
pub(crate) mod engine_identity;
pub(crate) mod fillers;
pub(crate) mod identity;
pub(crate) mod mirror_configs;
pub(crate) mod mirror_rpc;
pub(crate) mod mirror_topics;
pub(crate) mod offset_shift;
pub(crate) mod refuse;
pub(crate) mod sasl;
pub(crate) mod sasl_terminate;
pub(crate) mod security_admin;
pub(crate) mod startup;
pub(crate) mod state_topic;
pub(crate) mod topic_ids;

/// The ordered filters.
pub(crate) struct Chain {
    filters: Vec<Box<dyn Filter>>,
}

impl Chain {
    /// The proxy's chain. Order matters: versions first (unsupported requests close the
    /// connection before anything is decoded), then what the connection is (SASL), then policies
    /// that refuse, then what the proxy answers itself, then the guards of mirror topics, then the
    /// offset shift of shifted partitions; on the way back ApiVersions clamping, SASL outcome,
    /// filler masking, offset shifts, then address rewriting.
    /// `terminate`: the proxy authenticates clients itself (`sasl_terminate`) instead of
    /// watching their exchange with the broker (`sasl`).
    ///
    /// Built to match the configuration: the mirror policies — the start-up gate, the guards of
    /// the state topic, of mirror topics and of broker-level topic defaults, cluster-mirror config
    /// resources, filler masking, offset shifts and topic-id learning — are in the chain only when the mirror
    /// engine is enabled (`engine.enabled`: it runs, or this instance follows its state topic);
    /// `authz` then also covers cluster-mirror config resources. Without the engine only the
    /// mirror RPCs (answered by the idle engine), the engine-identity guard and the protocol
    /// filters remain.
    pub(crate) fn new(config: &Config, terminate: Option<sasl_terminate::SaslTerminator>) -> Self {
        let mirroring = config.engine.enabled;
        let terminating = terminate.is_some();
        let sasl: Box<dyn Filter> = match terminate {
            Some(t) => Box::new(t),
            None => Box::new(sasl::SaslObserver),
        };
        let mut filters: Vec<Box<dyn Filter>> = vec![Box::new(api_versions::Versions), sasl];
        if terminating {
            // Every client acts as the proxy toward the brokers: security administration is
            // for the configured admin principals only.
            filters.push(Box::new(security_admin::SecurityAdminGuard));
        }
        if mirroring {
            filters.push(Box::new(startup::StartupGate));
        }
        filters.extend([
            Box::new(authz::MirrorAdminAuthz { config_resources: mirroring }) as Box<dyn Filter>,
            Box::new(mirror_rpc::MirrorRpc),
        ]);
        if mirroring {
            filters.push(Box::new(state_topic::StateTopicGuard));
        }
        filters.push(Box::new(engine_identity::EngineIdentityGuard));
        if mirroring {
            filters.extend([
                Box::new(mirror_configs::MirrorConfigs) as Box<dyn Filter>,
                Box::new(broker_configs::BrokerConfigGuard),
                Box::new(mirror_topics::MirrorTopicWrites::default()),
                Box::new(fillers::FillerMasking),
                Box::new(offset_shift::OffsetShift),
                Box::new(topic_ids::TopicIdLearner),
            ]);
        }
        filters.push(Box::new(addresses::AddressRewrite));
        Self { filters }
    }

    /// Runs a request through the chain.
    pub(crate) async fn request(&self, mut x: Exchange, conn: &Conn) -> Result<Outcome, ProxyError> {
        for f in &self.filters {
            if !f.wants_request(&x, conn) {
                continue;
            }
            if let Flow::Answer(response) = f.on_request(&mut x, conn).await? {
                let response = match response {
                    Some(r) => Some(Exchange::apply(std::mem::take(&mut x.merges), r)?),
                    None => None,
                };
                return Ok(Outcome::Answer(response));
            }
        }
        let merges = std::mem::take(&mut x.merges);
        let merge: Option<Merge> = if merges.is_empty() {
            None
        } else {
            Some(Box::new(move |resp| Exchange::apply(merges, resp)))
        };
        Ok(Outcome::Forward { frame: x.into_frame(), merge })
    }

    /// Whether any filter may change the response to this forwarded request (see
    /// [`Filter::may_change_response`]).
    pub(crate) fn may_change_response(&self, api_key: i16, api_version: i16, request: Option<&Bytes>, conn: &Conn) -> bool {
        self.filters.iter().any(|f| f.may_change_response(api_key, api_version, request, conn))
    }

    /// Whether a filter must see this forwarded request again when its response arrives (see
    /// [`Filter::keeps_request`]): the session then keeps a copy while the response is awaited.
    pub(crate) fn keeps_request(&self, api_key: i16, api_version: i16, conn: &Conn) -> bool {
        self.filters.iter().any(|f| f.keeps_request(api_key, api_version, conn))
    }

    /// Runs a broker's response through the chain.
    pub(crate) fn response(&self, mut frame: Bytes, api_key: i16, api_version: i16, conn: &Conn) -> Result<Bytes, ProtocolError> {
        for f in &self.filters {
            if f.wants_response(api_key, api_version, conn) {
                frame = f.on_response(frame, api_key, api_version, conn)?;
            }
        }
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(engine: bool, terminate: bool) -> usize {
        let mut config = Config::default();
        config.engine.enabled = engine;
        let terminate = terminate.then(|| sasl_terminate::SaslTerminator::new(&[], None, 0, None));
        Chain::new(&config, terminate).filters.len()
    }

    #[test]
    fn the_mirror_policies_are_in_the_chain_only_when_the_engine_is_enabled() {
        // Versions, SASL, authz, mirror RPCs, engine identities, addresses.
        assert_eq!(chain(false, false), 6);
        // + start-up gate, state topic, mirror configs, broker configs, mirror topics, fillers,
        // offset shifts, topic ids.
        assert_eq!(chain(true, false), 14);
        // + security administration in termination mode.
        assert_eq!(chain(true, true), 15);
    }
}
