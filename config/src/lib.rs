//! Configuration of kafka-mirror-proxy: the serde model, loading from a TOML file, environment
//! overrides (`KMP_*`) and command-line flags, and validation that reports every problem at once.
//!
//! This crate is pure data: no sockets, no tokio. Resolving host names, binding listeners and
//! anything else that touches the network belongs to the crates that use the config.

mod client_props;
mod jaas;
mod listener_security;
mod listeners;
mod load;
mod mirror;
mod model;
mod oauth;
mod parse;
mod security;
mod validate;

pub use client_props::{
    CLIENT_SECURITY_KEYS, ClientProperties, ClientSecurityProps, KeyStore, PemSource, PropsOrigin, REDACTED, SENSITIVE_KEYS, SaslMechanism, SaslProps,
    SecretRef, SecurityProtocol, is_client_security_key, is_sensitive, parse_client_props,
};
pub use jaas::{jaas_options, parse_jaas, parse_oauth_jaas};
pub use listener_security::{AuthMode, ClientAuthConfig, TlsServerConfig};
pub use listeners::{CHECKED_NODE_IDS, ClientListener, NamedListenerConfig, node_port_overlaps};
pub use load::{ENV_VARS, EnvSource, LoadError, Overrides, ProcessEnv, load};
pub use mirror::{
    DEFAULT_TOPIC_CONFIG_EXCLUDE, EngineConfig, EngineRole, MAX_REQUEST_PATTERN_LEN, MAX_REQUEST_PATTERNS, MirrorConfig, check_request_patterns, topic_pattern,
};
pub use model::{AdminConfig, Config, ListenerConfig, UpstreamConfig};
pub use oauth::{KAFKA_OAUTH_LOGIN_HANDLER, OAUTH_CLIENT_KEYS, OAuthClientProps, OAuthValidationConfig};
pub use parse::parse_toml;
pub use security::{LimitsConfig, SecurityConfig, in_network, is_loopback, parse_cidr, source_allowed};
pub use validate::{ConfigError, ConfigErrors};
