//! A mirror's settings under their KIP-1279 config names (§8.2): which names exist, parsing
//! them into a [`MirrorConfig`] (CreateClusterMirror), describing and altering them
//! (DescribeConfigs / IncrementalAlterConfigs on resource type 64). Launching mirrors and
//! starting topics is `mirrors`'.

use kmp_config::MirrorConfig;

use crate::control::{TermControl, codes, shown_servers};
use crate::error::MirrorError;
use crate::state::records::{MirrorRecord, Origin};
use crate::topics::select::TopicSelector;

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
    "mirror.fetch.hedge.min.rtt.ms",
];

/// Whether CreateClusterMirror understands `key`: a mirror setting or a client security property
/// of the source connection (`security.protocol`, `ssl.*`, `sasl.*`).
pub(crate) fn known_key(key: &str) -> bool {
    KNOWN_KEYS.contains(&key) || kmp_config::is_client_security_key(key)
}

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
        // `fetch_hedge_min_rtt_ms`: empty (or deleted) turns it off.
        "mirror.fetch.hedge.min.rtt.ms" => {
            let v = value.unwrap_or_default().trim();
            def.fetch_hedge_min_rtt_ms = match v.parse::<u32>() {
                _ if v.is_empty() => None,
                Ok(n) if n <= 60_000 => Some(n),
                _ => return Err(format!("{key} must be empty (off) or a number of milliseconds up to 60000, not `{v}`")),
            };
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Every pattern list of `def` compiles.
pub(crate) fn check_patterns(def: &MirrorConfig) -> Result<(), MirrorError> {
    TopicSelector::new(&def.topics, &def.include, &def.exclude)?;
    crate::topics::configs::check_filters(def)
}

/// Whether an API caller may point a mirror at `servers` (CreateClusterMirror, REST create, an
/// alter of `bootstrap.servers`): no credentials in any address (refused without echoing it), and
/// every address matches one of `allow` (`security.mirror_source_allow`; empty allows nothing).
/// Checked before anything connects to them. Mirrors declared in the config file are not checked.
pub(crate) fn check_sources(allow: &[String], servers: &[String]) -> Result<(), String> {
    if servers.iter().any(|s| s.contains('@')) {
        return Err("bootstrap.servers must not contain credentials (user:password@host); give host:port addresses only".into());
    }
    if allow.is_empty() {
        return Err("no source cluster is allowed for mirrors created or repointed through the API: \
             list host:port patterns in security.mirror_source_allow (or KMP_MIRROR_SOURCE_ALLOW) \
             on the proxy, or declare the mirror in its config file"
            .into());
    }
    match servers.iter().find(|s| !kmp_config::source_allowed(allow, s)) {
        Some(s) => Err(format!(
            "bootstrap.servers address `{s}` does not match security.mirror_source_allow (KMP_MIRROR_SOURCE_ALLOW) on the proxy"
        )),
        None => Ok(()),
    }
}

/// [`check_sources`] for everything an API-created mirror connects to: its bootstrap servers and,
/// with OAUTHBEARER source properties, the token endpoint (the proxy would otherwise send HTTP
/// requests wherever an API caller points it).
pub(crate) fn check_endpoints(allow: &[String], def: &MirrorConfig) -> Result<(), String> {
    check_sources(allow, &def.source_bootstrap_servers)?;
    let Some(url) = def.source_properties.0.get("sasl.oauthbearer.token.endpoint.url") else {
        return Ok(());
    };
    if !url.trim().starts_with("https://") {
        return Err("sasl.oauthbearer.token.endpoint.url of a mirror created through the API must be https:// (the client secret is sent to it)".into());
    }
    let addr = kmp_protocol::security::oauth::endpoint_address(url.trim()).map_err(|e| e.to_string())?;
    if kmp_config::source_allowed(allow, &addr) {
        Ok(())
    } else {
        Err(format!(
            "sasl.oauthbearer.token.endpoint.url address `{addr}` does not match security.mirror_source_allow (KMP_MIRROR_SOURCE_ALLOW) on the proxy"
        ))
    }
}

pub(crate) fn csv(v: Option<&str>) -> Vec<String> {
    v.map(|s| s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl TermControl {
    /// The mirror's configs as KIP-1279 names them (DescribeConfigs on resource type 64):
    /// `(name, value, sensitive)`; a secret's value is never returned (`None`, sensitive).
    pub(crate) fn mirror_configs(&self, name: &str) -> Option<Vec<(String, Option<String>, bool)>> {
        let d = self.definition(name)?;
        let mut out: Vec<(String, Option<String>, bool)> = [
            ("bootstrap.servers", shown_servers(&d.source_bootstrap_servers)),
            ("mirror.topics.include", d.include.join(",")),
            ("mirror.topics.exclude", d.exclude.join(",")),
            ("mirror.groups.include", d.groups_include.join(",")),
            ("mirror.groups.exclude", d.groups_exclude.join(",")),
            ("mirror.topic.properties.exclude", d.topic_config_exclude.join(",")),
            ("mirror.group.offset.sync.interval.ms", d.group_offset_sync_interval_ms.to_string()),
            ("mirror.topic.config.sync.interval.ms", d.topic_config_sync_interval_ms.to_string()),
            (
                "mirror.fetch.hedge.min.rtt.ms",
                d.fetch_hedge_min_rtt_ms.map(|n| n.to_string()).unwrap_or_default(),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Some(v), false))
        .collect();
        if !d.source_properties.0.contains_key("security.protocol") {
            out.push(("security.protocol".into(), Some("PLAINTEXT".into()), false));
        }
        for (k, v) in &d.source_properties.0 {
            let sensitive = kmp_config::is_sensitive(k);
            out.push((k.clone(), (!sensitive).then(|| v.clone()), sensitive));
        }
        Some(out)
    }

    /// IncrementalAlterConfigs on a mirror: `(name, operation, value)` with Kafka's operations
    /// (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT). Mirrors declared in the config file are changed
    /// there, not here. Returns the error code and message.
    pub(crate) async fn alter_mirror(&self, name: &str, ops: &[(String, i8, Option<String>)]) -> (i16, Option<String>) {
        let _ = self.booted_store().await;
        let Some(def) = self.definition(name) else {
            return (codes::UNKNOWN_CLUSTER_MIRROR, Some(format!("cluster mirror {name} does not exist")));
        };
        let Some(store) = self.store() else {
            return (codes::COORDINATOR_NOT_AVAILABLE, Some("the mirror engine is still starting".into()));
        };
        let origin = store
            .mirrors()
            .into_iter()
            .find(|m| m.definition.name == name)
            .map_or(Origin::Api.into(), |m| m.origin);
        if origin.is(Origin::Config) {
            return (
                INVALID_REQUEST,
                Some(format!("cluster mirror {name} is declared in the proxy's config file; change it there")),
            );
        }
        let def = match apply_ops(def, ops, self.source_allow()) {
            Ok(def) => def,
            Err(e) => return e,
        };
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

/// Applies IncrementalAlterConfigs operations to a copy of an API-created mirror's definition;
/// a new `bootstrap.servers` must pass [`check_sources`] against `allow`.
fn apply_ops(mut def: MirrorConfig, ops: &[(String, i8, Option<String>)], allow: &[String]) -> Result<MirrorConfig, (i16, Option<String>)> {
    let mut props = def.source_properties.clone();
    for (key, op, value) in ops {
        if kmp_config::is_client_security_key(key) {
            match (op, value.as_deref().map(str::trim).filter(|v| !v.is_empty())) {
                (0, Some(v)) => {
                    props.0.insert(key.clone(), v.to_owned());
                }
                (1, _) => {
                    props.0.remove(key);
                }
                _ => return Err((INVALID_CONFIG, Some(format!("{key} is changed by SET (with a value) or DELETE")))),
            }
            continue;
        }
        let items = csv(value.as_deref());
        if key == "bootstrap.servers" && *op == 0 && !items.is_empty() {
            // Repointing is creating anew: the same source rules, before anything connects.
            check_sources(allow, &items).map_err(|e| (INVALID_CONFIG, Some(e)))?;
            def.source_bootstrap_servers = items;
            continue;
        }
        if *op == 0 {
            match set_interval(&mut def, key, value.as_deref()) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => return Err((INVALID_CONFIG, Some(e))),
            }
        }
        let Some(list) = list_config(&mut def, key) else {
            return Err((
                INVALID_CONFIG,
                Some(format!(
                    "{key} cannot be changed this way (alterable: bootstrap.servers and the intervals by SET, the include/exclude lists by any operation)"
                )),
            ));
        };
        match op {
            0 => *list = items,
            1 => list.clear(),
            2 => list.extend(items.into_iter().filter(|i| !list.contains(i)).collect::<Vec<_>>()),
            3 => list.retain(|i| !items.contains(i)),
            _ => return Err((INVALID_REQUEST, Some(format!("unknown config operation {op}")))),
        }
    }
    if let Err(e) = check_patterns(&def) {
        return Err((INVALID_CONFIG, Some(e.to_string())));
    }
    if props != def.source_properties {
        source_properties(&props)?;
        def.source_properties = props;
    }
    check_endpoints(allow, &def).map_err(|e| (INVALID_CONFIG, Some(e)))?;
    Ok(def)
}

/// What CreateClusterMirror refuses in `configs` whatever the state: unknown keys, and source
/// security properties that do not parse or carry a secret inline (API secrets are `file:` or
/// `env:` references). A standby checks this before it hands a create to the active instance,
/// so what is refused is never written to the state topic.
pub(crate) fn refuse_configs(configs: &[(String, Option<String>)]) -> Result<(), (i16, Option<String>)> {
    let unknown: Vec<&str> = configs.iter().map(|(k, _)| k.as_str()).filter(|k| !known_key(k)).collect();
    if !unknown.is_empty() {
        return Err((
            INVALID_CONFIG,
            Some(format!(
                "unsupported mirror configs {unknown:?}; supported: {KNOWN_KEYS:?} and the client security properties {:?}",
                kmp_config::CLIENT_SECURITY_KEYS
            )),
        ));
    }
    source_properties(&security_properties(configs))
}

/// The source connection's security properties among `configs` (blank values dropped).
pub(crate) fn security_properties(configs: &[(String, Option<String>)]) -> kmp_config::ClientProperties {
    let mut props = kmp_config::ClientProperties::default();
    for (key, value) in configs {
        if kmp_config::is_client_security_key(key)
            && let Some(v) = value.as_deref().map(str::trim).filter(|v| !v.is_empty())
        {
            props.0.insert(key.clone(), v.to_owned());
        }
    }
    props
}

/// What a standby refuses itself instead of handing `frame` (a mutating mirror request) to the
/// active instance: a create whose configs [`refuse_configs`] refuses, or one that does not
/// decode. `None`: hand it over.
pub(crate) fn refuse_before_handover(frame: &[u8]) -> Option<(i16, String)> {
    use kmp_protocol::mirror_api as api;
    let (header, mut r) = api::read_request(frame).ok()?;
    if header.api_key != api::CREATE_CLUSTER_MIRROR {
        return None;
    }
    match api::CreateRequest::decode(&mut r) {
        Ok(req) => refuse_configs(&req.configs)
            .err()
            .map(|(code, message)| (code, message.unwrap_or_else(|| "mirror configs refused".into()))),
        Err(e) => Some((INVALID_REQUEST, format!("CreateClusterMirror request does not decode: {e}"))),
    }
}

/// Checks security properties given through the API (secrets only by reference).
pub(crate) fn source_properties(props: &kmp_config::ClientProperties) -> Result<(), (i16, Option<String>)> {
    props
        .parse(kmp_config::PropsOrigin::Api)
        .map(|_| ())
        .map_err(|e| (INVALID_CONFIG, Some(format!("source security properties: {}", e.join("; ")))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_created_mirror_may_only_fetch_oauth_tokens_from_an_allowed_address() {
        let allow = vec!["src.example:9092".to_owned(), "idp.example:443".to_owned()];
        let mut def = MirrorConfig::new("m", vec!["src.example:9092".into()]);
        def.source_properties
            .0
            .insert("sasl.oauthbearer.token.endpoint.url".into(), "https://idp.example/token".into());
        assert_eq!(check_endpoints(&allow, &def), Ok(()));
        def.source_properties
            .0
            .insert("sasl.oauthbearer.token.endpoint.url".into(), "https://169.254.169.254/latest/meta-data".into());
        let e = check_endpoints(&allow, &def).unwrap_err();
        assert!(e.contains("169.254.169.254:443") && e.contains("mirror_source_allow"), "{e}");
        def.source_properties
            .0
            .insert("sasl.oauthbearer.token.endpoint.url".into(), "http://idp.example:443/token".into());
        assert!(
            check_endpoints(&allow, &def).unwrap_err().contains("https"),
            "plain http is refused for API-created mirrors"
        );
    }

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
        assert_eq!(set_interval(&mut def, "mirror.fetch.hedge.min.rtt.ms", Some("20")), Ok(true));
        assert_eq!(def.fetch_hedge_min_rtt_ms, Some(20));
        assert!(set_interval(&mut def, "mirror.fetch.hedge.min.rtt.ms", Some("-1")).is_err());
        assert!(set_interval(&mut def, "mirror.fetch.hedge.min.rtt.ms", Some("60001")).is_err());
        assert_eq!(def.fetch_hedge_min_rtt_ms, Some(20), "a refused value changes nothing");
        assert_eq!(set_interval(&mut def, "mirror.fetch.hedge.min.rtt.ms", None), Ok(true));
        assert_eq!(def.fetch_hedge_min_rtt_ms, None, "empty: off");
        assert_eq!(set_interval(&mut def, "mirror.topics.include", Some("x")), Ok(false));
        def.groups_exclude = vec!["(".into()];
        assert!(check_patterns(&def).is_err(), "an invalid group pattern is refused");
    }

    #[test]
    fn api_sources_must_match_the_allow_list_and_carry_no_credentials() {
        let servers = |s: &str| csv(Some(s));
        let allow = vec!["*.dc2.example:9092".to_owned(), "10.0.4.*:*".to_owned()];
        assert_eq!(check_sources(&allow, &servers("k1.dc2.example:9092,10.0.4.7:19092")), Ok(()));
        let e = check_sources(&allow, &servers("k1.dc2.example:9092,evil.example:9092")).unwrap_err();
        assert!(e.contains("evil.example:9092") && e.contains("security.mirror_source_allow"), "{e}");
        let e = check_sources(&[], &servers("127.0.0.1:9092")).unwrap_err();
        assert!(e.contains("security.mirror_source_allow") && e.contains("KMP_MIRROR_SOURCE_ALLOW"), "{e}");
        for bad in ["alice:s3cret@k1.dc2.example:9092", "k1.dc2.example:9092,alice:s3cret@10.0.4.7:9092"] {
            let e = check_sources(&allow, &servers(bad)).unwrap_err();
            assert!(e.contains("credentials") && !e.contains("s3cret") && !e.contains("alice"), "{e}");
        }
        let e = check_sources(&[], &servers("alice:s3cret@h:1")).unwrap_err();
        assert!(e.contains("credentials"), "credentials are named before the empty list: {e}");
        assert_eq!(shown_servers(&servers("a:1,alice:s3cret@b:2")), "a:1,***@b:2");
    }

    #[test]
    fn repointing_a_mirror_follows_the_same_source_rules() {
        let def = MirrorConfig::new("m", vec!["k1.dc2.example:9092".into()]);
        let allow = vec!["*.dc2.example:9092".to_owned()];
        let set = |v: &str| vec![("bootstrap.servers".to_owned(), 0i8, Some(v.to_owned()))];
        let moved = apply_ops(def.clone(), &set("k2.dc2.example:9092"), &allow).expect("allowed");
        assert_eq!(moved.source_bootstrap_servers, vec!["k2.dc2.example:9092"]);
        let (code, msg) = apply_ops(def.clone(), &set("169.254.169.254:80"), &allow).unwrap_err();
        assert_eq!(code, INVALID_CONFIG);
        assert!(msg.unwrap().contains("security.mirror_source_allow"));
        let (_, msg) = apply_ops(def.clone(), &set("u:p4ss@k2.dc2.example:9092"), &allow).unwrap_err();
        assert!(!msg.unwrap().contains("p4ss"));
        assert!(apply_ops(def, &set("k2.dc2.example:9092"), &[]).is_err(), "an empty list allows nothing");
    }

    #[test]
    fn a_standby_refuses_a_create_with_an_inline_secret_or_an_unknown_config_before_handing_it_over() {
        use kmp_protocol::mirror_api as api;
        let create = |configs: &[(&str, &str)]| {
            let req = api::CreateRequest {
                mirror_name: "m".into(),
                configs: configs.iter().map(|(k, v)| ((*k).to_owned(), Some((*v).to_owned()))).collect(),
            };
            api::request_frame(api::CREATE_CLUSTER_MIRROR, 7, "t", req.encode()).to_vec()
        };
        let base = [
            ("bootstrap.servers", "s:1"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "u"),
        ];
        let inline = create(&[base.as_slice(), &[("sasl.password", "hunter2")]].concat());
        let (code, message) = refuse_before_handover(&inline).expect("an inline secret never reaches the state topic");
        assert_eq!(code, INVALID_CONFIG);
        assert!(!message.contains("hunter2"), "the refusal does not repeat the secret: {message}");
        let by_reference = create(&[base.as_slice(), &[("sasl.password", "env:SRC_PASSWORD")]].concat());
        assert_eq!(refuse_before_handover(&by_reference), None, "a reference is handed over");
        let (code, message) = refuse_before_handover(&create(&[("bootstrap.servers", "s:1"), ("mirror.frobnicate", "1")])).expect("unknown config");
        assert_eq!(code, INVALID_CONFIG);
        assert!(message.contains("mirror.frobnicate"), "{message}");
        let mut truncated = inline.clone();
        truncated.truncate(truncated.len() - 5);
        let size = u32::try_from(truncated.len() - 4).unwrap().to_be_bytes();
        truncated[..4].copy_from_slice(&size);
        assert_eq!(
            refuse_before_handover(&truncated).map(|r| r.0),
            Some(INVALID_REQUEST),
            "a create that does not decode"
        );
        let pause = api::request_frame(api::PAUSE_MIRROR_TOPICS, 7, "t", api::TopicsRequest::default().encode(api::PAUSE_MIRROR_TOPICS));
        assert_eq!(refuse_before_handover(&pause), None, "only a create is checked here");
    }
}
