//! Several client listeners on one proxy (`[[listeners]]`), e.g. an internal plaintext one and an
//! external TLS + SCRAM one, each with its own address, advertised host, node ports, TLS, client
//! authentication and whether mirror management is allowed on it. Without `[[listeners]]` the
//! single `[listener]` section is the one listener (named `default`), as before.
//!
//! [`Config::client_listeners`] is what the proxy serves either way; the checks of one listener's
//! settings (shared by both forms) live here too. Pure data: binding belongs to `proxy`.

use serde::Deserialize;

use crate::model::split_host_port;
use crate::{AuthMode, ClientAuthConfig, Config, ListenerConfig, TlsServerConfig};

/// One entry of `[[listeners]]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamedListenerConfig {
    /// Name in logs, metrics and error messages (letters, digits, `-`, `_`). Required, unique.
    pub name: String,
    /// `host:port` of this listener's bootstrap address. Required, unique.
    pub listen: String,
    /// As `listener.advertised_host`, for this listener. Default: the host of `listen`
    /// (`localhost` for a wildcard address).
    #[serde(default)]
    pub advertised_host: Option<String>,
    /// As `listener.node_port_base`, for this listener: broker N at `node_port_base + N`. Default:
    /// the port of `listen` plus one. Listeners on the same host need ranges that do not overlap.
    #[serde(default)]
    pub node_port_base: Option<u16>,
    /// TLS on this listener (`[listeners.tls]`, as `[listener.tls]`). Default: plaintext.
    #[serde(default)]
    pub tls: Option<TlsServerConfig>,
    /// Client authentication on this listener (`[listeners.auth]`, as `[listener.auth]`).
    #[serde(default)]
    pub auth: ClientAuthConfig,
    /// Whether the KIP-1279 mirror RPCs and cluster-mirror config resources may be used on this
    /// listener at all (then `[security]` decides who). `false`: every such request is refused
    /// with CLUSTER_MIRROR_AUTHORIZATION_FAILED naming the listener. Default `true`.
    #[serde(default = "allowed")]
    pub mirror_management: bool,
}

fn allowed() -> bool {
    true
}

/// One client listener as the proxy serves it, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientListener {
    /// `default` for the `[listener]` form.
    pub name: String,
    /// Bootstrap `host:port`.
    pub listen: String,
    /// Host in every broker address handed to this listener's clients.
    pub advertised_host: String,
    /// Broker N at `node_port_base + N`.
    pub node_port_base: u16,
    /// TLS, if any.
    pub tls: Option<TlsServerConfig>,
    /// Client authentication.
    pub auth: ClientAuthConfig,
    /// See [`NamedListenerConfig::mirror_management`].
    pub mirror_management: bool,
}

/// The advertised host for `listen` when none is set: its host, or `localhost` for a wildcard.
pub(crate) fn default_advertised_host(listen: &str) -> String {
    match split_host_port(listen) {
        Some((host, _)) if host != "0.0.0.0" && host != "::" && host != "[::]" => host.to_owned(),
        _ => "localhost".to_owned(),
    }
}

/// The node port base for `listen` when none is set: its port plus one.
pub(crate) fn default_node_port_base(listen: &str) -> Option<u16> {
    split_host_port(listen).and_then(|(_, p)| p.checked_add(1))
}

impl Config {
    /// The client listeners to serve, in configuration order: the `[[listeners]]` entries, or the
    /// `[listener]` section as one listener named `default`. Call on a validated configuration
    /// (an underivable node port base falls back to 9193).
    pub fn client_listeners(&self) -> Vec<ClientListener> {
        if self.listeners.is_empty() {
            let l = &self.listener;
            return vec![ClientListener {
                name: "default".to_owned(),
                listen: l.listen.clone(),
                advertised_host: l.effective_advertised_host(),
                node_port_base: l.effective_node_port_base().unwrap_or(9193),
                tls: l.tls.clone(),
                auth: l.auth.clone(),
                mirror_management: true,
            }];
        }
        self.listeners
            .iter()
            .map(|l| ClientListener {
                name: l.name.clone(),
                listen: l.listen.clone(),
                advertised_host: l.advertised_host.clone().unwrap_or_else(|| default_advertised_host(&l.listen)),
                node_port_base: l.node_port_base.or_else(|| default_node_port_base(&l.listen)).unwrap_or(9193),
                tls: l.tls.clone(),
                auth: l.auth.clone(),
                mirror_management: l.mirror_management,
            })
            .collect()
    }

    /// The problems of the listener settings: `[listener]`'s or every `[[listeners]]` entry's,
    /// and `[[listeners]]` beside per-listener settings in `[listener]`.
    pub(crate) fn listener_errors(&self, err: &mut dyn FnMut(&str, String)) {
        if self.listeners.is_empty() {
            let l = &self.listener;
            check_one(
                "listener",
                &l.listen,
                l.advertised_host.as_deref(),
                l.node_port_base,
                l.tls.as_ref(),
                &l.auth,
                err,
            );
            return;
        }
        let default = ListenerConfig::default();
        for (key, set) in [
            ("listen", self.listener.listen != default.listen),
            ("advertised_host", self.listener.advertised_host.is_some()),
            ("node_port_base", self.listener.node_port_base.is_some()),
            ("tls", self.listener.tls.is_some()),
            ("auth", self.listener.auth != default.auth),
        ] {
            if set {
                err(
                    &format!("listener.{key}"),
                    "set per listener in [[listeners]] (with [[listeners]], [listener] keeps only max_request_frame_bytes, listen_backlog and drain_timeout_ms; \
                     KMP_LISTEN, KMP_ADVERTISED_HOST, KMP_NODE_PORT_BASE and their flags set [listener])"
                        .to_owned(),
                );
            }
        }
        let mut names = std::collections::HashSet::new();
        let mut addresses = std::collections::HashSet::new();
        let mut node_ports = std::collections::HashMap::new();
        for (i, l) in self.listeners.iter().enumerate() {
            let key = format!("listeners[{i}]");
            if l.name.is_empty() || !l.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                err(&format!("{key}.name"), format!("`{}` is not a name (letters, digits, `-`, `_`)", l.name));
            } else if !names.insert(l.name.as_str()) {
                err(&format!("{key}.name"), format!("`{}` is used by another listener", l.name));
            }
            if !addresses.insert(l.listen.as_str()) {
                err(&format!("{key}.listen"), format!("`{}` is used by another listener", l.listen));
            }
            check_one(&key, &l.listen, l.advertised_host.as_deref(), l.node_port_base, l.tls.as_ref(), &l.auth, err);
            if let (Some((host, _)), Some(base)) = (split_host_port(&l.listen), l.node_port_base.or_else(|| default_node_port_base(&l.listen)))
                && let Some(other) = node_ports.insert((host.to_owned(), base), l.name.as_str())
            {
                err(
                    &format!("{key}.node_port_base"),
                    format!("{base} on {host} is listener `{other}`'s too; give each listener its own range of node ports"),
                );
            }
        }
    }
}

/// Node ids the layout check of [`node_port_overlaps`] assumes (0 to 99).
pub const CHECKED_NODE_IDS: u16 = 100;

/// Where one listener's node ports (for node ids below [`CHECKED_NODE_IDS`]) would take another
/// listener's bootstrap port or node ports on an overlapping address (the same host, or a wildcard):
/// one sentence each, for a warning at start. Binding then fails for those brokers and they are
/// hidden from that listener's clients (`/readyz` says so) — not an error here, because node ids
/// that high may not exist.
pub fn node_port_overlaps(listeners: &[ClientListener]) -> Vec<String> {
    let host = |l: &ClientListener| split_host_port(&l.listen).map(|(h, p)| (h.trim_matches(['[', ']']).to_owned(), p));
    let wildcard = |h: &str| h == "0.0.0.0" || h == "::";
    let mut out = Vec::new();
    for a in listeners {
        let Some((ha, _)) = host(a) else { continue };
        let range = u32::from(a.node_port_base)..u32::from(a.node_port_base) + u32::from(CHECKED_NODE_IDS);
        for b in listeners.iter().filter(|b| b.name != a.name) {
            let Some((hb, pb)) = host(b) else { continue };
            if !(ha == hb || wildcard(&ha) || wildcard(&hb)) {
                continue;
            }
            if range.contains(&u32::from(pb)) {
                out.push(format!(
                    "listener `{}`'s broker with node id {} would listen on {pb}, listener `{}`'s bootstrap port: give `{}` a node_port_base whose range (node ids 0-{}) is free",
                    a.name,
                    u32::from(pb) - range.start,
                    b.name,
                    a.name,
                    CHECKED_NODE_IDS - 1
                ));
            }
            if a.node_port_base <= b.node_port_base && range.contains(&u32::from(b.node_port_base)) {
                out.push(format!(
                    "listeners `{}` and `{}` share node ports from {} on (node_port_base {} and {}): brokers with high node ids would collide",
                    a.name, b.name, b.node_port_base, a.node_port_base, b.node_port_base
                ));
            }
        }
    }
    out
}

/// The rules of one listener's settings; `key` is `listener` or `listeners[i]`.
fn check_one(
    key: &str,
    listen: &str,
    advertised_host: Option<&str>,
    node_port_base: Option<u16>,
    tls: Option<&TlsServerConfig>,
    auth: &ClientAuthConfig,
    err: &mut dyn FnMut(&str, String),
) {
    if split_host_port(listen).is_none() {
        err(&format!("{key}.listen"), format!("`{listen}` is not host:port"));
    }
    if let Some(h) = advertised_host
        && (h.trim().is_empty() || h.contains(char::is_whitespace))
    {
        err(&format!("{key}.advertised_host"), format!("`{h}` is not a host name"));
    }
    if node_port_base.is_none() && default_node_port_base(listen).is_none() {
        err(&format!("{key}.node_port_base"), format!("cannot be derived from {key}.listen; set it"));
    }
    if auth.max_receive_bytes < 64 {
        err(&format!("{key}.auth.max_receive_bytes"), "must be at least 64".to_owned());
    }
    if auth.timeout_ms < 100 {
        err(&format!("{key}.auth.timeout_ms"), "must be at least 100".to_owned());
    }
    if auth.session_lifetime_ms != 0 && auth.session_lifetime_ms < 1_000 {
        // Kafka refuses re-authenticating more than once a second.
        err(
            &format!("{key}.auth.session_lifetime_ms"),
            "must be 0 (sessions never end) or at least 1000".to_owned(),
        );
    }
    if auth.session_lifetime_ms != 0 && auth.mode != AuthMode::Terminate {
        err(
            &format!("{key}.auth.session_lifetime_ms"),
            "only with mode = \"terminate\" (in pass-through the broker's connections.max.reauth.ms decides)".to_owned(),
        );
    }
    if auth.mode == AuthMode::Terminate {
        let mut oauth = false;
        let mut password = false;
        for m in &auth.mechanisms {
            match crate::SaslMechanism::parse(m) {
                None => err(
                    &format!("{key}.auth.mechanisms"),
                    format!("`{m}` is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"),
                ),
                Some(crate::SaslMechanism::OAuthBearer) => oauth = true,
                Some(_) => password = true,
            }
        }
        if password && auth.credentials_file.is_none() {
            err(
                &format!("{key}.auth.credentials_file"),
                format!("required when {key}.auth.mode = \"terminate\" offers PLAIN or SCRAM"),
            );
        }
        match &auth.oauthbearer {
            Some(o) => o.errors(&format!("{key}.auth.oauthbearer"), err),
            None if oauth => err(
                &format!("{key}.auth.oauthbearer"),
                "required when mechanisms offers OAUTHBEARER (jwks_endpoint_url, expected_audience, expected_issuer)".to_owned(),
            ),
            None => {}
        }
        if auth.mechanisms.is_empty() && tls.and_then(|t| t.client_ca_file.as_ref()).is_none() {
            err(
                &format!("{key}.auth.mechanisms"),
                format!("empty (clients authenticate by certificate) needs {key}.tls.client_ca_file"),
            );
        }
    } else if auth.oauthbearer.is_some() {
        err(
            &format!("{key}.auth.oauthbearer"),
            "only with mode = \"terminate\" (in pass-through the broker checks tokens)".to_owned(),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::parse_toml;

    const UPSTREAM: &str = "[upstream]\nbootstrap_servers = [\"d:1\"]\n";

    #[test]
    fn without_listeners_the_listener_section_is_the_one_listener_named_default() {
        let c = parse_toml(&format!("{UPSTREAM}[listener]\nlisten = \"0.0.0.0:7000\"\n")).unwrap();
        let l = c.client_listeners();
        assert_eq!(l.len(), 1);
        assert_eq!(
            (l[0].name.as_str(), l[0].listen.as_str(), l[0].advertised_host.as_str(), l[0].node_port_base),
            ("default", "0.0.0.0:7000", "localhost", 7001)
        );
        assert!(l[0].mirror_management, "mirror management stays allowed on the one listener");
    }

    #[test]
    fn listeners_each_get_their_address_tls_auth_and_mirror_management() {
        let c = parse_toml(&format!(
            "{UPSTREAM}[listener]\nmax_request_frame_bytes = 1000\n\
             [[listeners]]\nname = \"internal\"\nlisten = \"127.0.0.1:9192\"\n\
             [[listeners]]\nname = \"external\"\nlisten = \"0.0.0.0:9292\"\nadvertised_host = \"kafka.example.com\"\nnode_port_base = 9300\nmirror_management = false\n\
             [listeners.tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n\
             [listeners.auth]\nmode = \"terminate\"\ncredentials_file = \"users.toml\"\nsession_lifetime_ms = 60000\n"
        ))
        .unwrap();
        let l = c.client_listeners();
        assert_eq!(l.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(), ["internal", "external"]);
        assert_eq!(
            (l[0].advertised_host.as_str(), l[0].node_port_base, l[0].tls.is_some(), l[0].mirror_management),
            ("127.0.0.1", 9193, false, true)
        );
        assert_eq!(
            (l[1].advertised_host.as_str(), l[1].node_port_base, l[1].tls.is_some(), l[1].mirror_management),
            ("kafka.example.com", 9300, true, false)
        );
        assert_eq!(l[1].auth.mode, crate::AuthMode::Terminate);
        assert_eq!(l[1].auth.session_lifetime_ms, 60_000);
        assert_eq!(c.listener.max_request_frame_bytes, 1000, "the shared settings stay in [listener]");
    }

    #[test]
    fn every_listener_problem_is_reported_at_once_with_its_key() {
        let crate::ConfigErrors(errs) = parse_toml(&format!(
            "{UPSTREAM}[listener]\nlisten = \"127.0.0.1:1\"\n\
             [[listeners]]\nname = \"a b\"\nlisten = \"127.0.0.1:9192\"\n\
             [[listeners]]\nname = \"x\"\nlisten = \"127.0.0.1:9192\"\n[listeners.auth]\nmode = \"terminate\"\n\
             [[listeners]]\nname = \"x\"\nlisten = \"nowhere\"\nnode_port_base = 9193\n"
        ))
        .unwrap()
        .validate()
        .unwrap_err();
        let has = |key: &str, text: &str| errs.iter().any(|e| e.key == key && e.message.contains(text));
        assert!(has("listener.listen", "set per listener in [[listeners]]"), "{errs:?}");
        assert!(has("listeners[0].name", "is not a name"), "{errs:?}");
        assert!(has("listeners[1].listen", "used by another listener"), "{errs:?}");
        assert!(has("listeners[1].auth.credentials_file", "required when listeners[1].auth.mode"), "{errs:?}");
        assert!(has("listeners[2].name", "used by another listener"), "{errs:?}");
        assert!(has("listeners[2].listen", "is not host:port"), "{errs:?}");
        assert!(has("listeners[1].node_port_base", "listener `a b`'s too"), "{errs:?}");
    }

    #[test]
    fn overlapping_node_port_ranges_are_named() {
        let c = parse_toml(&format!(
            "{UPSTREAM}[[listeners]]\nname = \"a\"\nlisten = \"0.0.0.0:9092\"\n[[listeners]]\nname = \"b\"\nlisten = \"127.0.0.1:9094\"\n\
             [[listeners]]\nname = \"c\"\nlisten = \"10.0.0.1:9300\"\nnode_port_base = 9400\n"
        ))
        .unwrap();
        let warnings = super::node_port_overlaps(&c.client_listeners());
        assert!(
            warnings.iter().any(|w| w.contains("`a`'s broker with node id 1 would listen on 9094")),
            "{warnings:?}"
        );
        assert!(warnings.iter().any(|w| w.contains("share node ports from 9095")), "{warnings:?}");
        assert!(!warnings.iter().any(|w| w.contains("`c`")), "c's ranges are free: {warnings:?}");
        let apart = parse_toml(&format!(
            "{UPSTREAM}[[listeners]]\nname = \"a\"\nlisten = \"0.0.0.0:9092\"\n[[listeners]]\nname = \"b\"\nlisten = \"0.0.0.0:9292\"\n"
        ))
        .unwrap();
        assert_eq!(super::node_port_overlaps(&apart.client_listeners()), Vec::<String>::new());
    }

    #[test]
    fn an_unknown_key_in_a_listener_is_an_error() {
        let err = parse_toml(&format!(
            "{UPSTREAM}[[listeners]]\nname = \"a\"\nlisten = \"127.0.0.1:1\"\nmirror_managment = false\n"
        ))
        .unwrap_err();
        assert!(err.contains("mirror_managment"), "{err}");
    }
}
