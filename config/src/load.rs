//! Loading: defaults, then the TOML file, then `KMP_*` environment variables, then command-line
//! flags (later wins), then [`Config::validate`]. The environment is read through [`EnvSource`]
//! so tests pass a map instead of mutating the process environment.

use std::collections::HashMap;
use std::path::Path;

use crate::{Config, ConfigError, ConfigErrors};

/// Where environment overrides come from.
pub trait EnvSource {
    /// The value of variable `name`, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl EnvSource for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// Values given as command-line flags; `None` leaves the file/env value in place.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--upstream host:port[,host:port…]`
    pub upstream: Option<String>,
    /// `--listen host:port`
    pub listen: Option<String>,
    /// `--advertised-host host`
    pub advertised_host: Option<String>,
    /// `--node-port-base port`
    pub node_port_base: Option<u16>,
    /// `--admin-listen host:port`
    pub admin_listen: Option<String>,
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    /// The file is not valid TOML for the model (unknown keys are errors).
    #[error("cannot parse config file {path}: {message}")]
    Parse { path: String, message: String },
    /// The merged configuration breaks one or more rules.
    #[error(transparent)]
    Invalid(#[from] ConfigErrors),
}

/// Environment variables that override settings, with the setting each one sets.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("KMP_UPSTREAM", "upstream.bootstrap_servers (comma-separated)"),
    ("KMP_LISTEN", "listener.listen"),
    ("KMP_ADVERTISED_HOST", "listener.advertised_host"),
    ("KMP_NODE_PORT_BASE", "listener.node_port_base"),
    ("KMP_ADMIN_LISTEN", "admin.listen"),
    ("KMP_ADMIN_TOKEN", "admin.token"),
    ("KMP_MIRROR_SOURCE_ALLOW", "security.mirror_source_allow (comma-separated host:port patterns)"),
];

/// Loads file (optional) + env + flags and validates the result.
pub fn load(file: Option<&Path>, env: &dyn EnvSource, flags: &Overrides) -> Result<Config, LoadError> {
    let mut config = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
                path: path.display().to_string(),
                source,
            })?;
            parse_toml(&text).map_err(|message| LoadError::Parse {
                path: path.display().to_string(),
                message,
            })?
        }
        None => Config::default(),
    };
    let mut errors = Vec::new();
    let env_flags = Overrides {
        upstream: env.var("KMP_UPSTREAM"),
        listen: env.var("KMP_LISTEN"),
        advertised_host: env.var("KMP_ADVERTISED_HOST"),
        node_port_base: env.var("KMP_NODE_PORT_BASE").and_then(|v| match v.parse() {
            Ok(p) => Some(p),
            Err(_) => {
                errors.push(ConfigError {
                    key: "KMP_NODE_PORT_BASE".into(),
                    message: format!("`{v}` is not a port number"),
                });
                None
            }
        }),
        admin_listen: env.var("KMP_ADMIN_LISTEN"),
    };
    apply(&mut config, &env_flags);
    apply(&mut config, flags);
    // A secret: only from the file or the environment (never a flag, which `ps` would show).
    if let Some(t) = env.var("KMP_ADMIN_TOKEN") {
        config.admin.token = Some(t);
    }
    if let Some(list) = env.var("KMP_MIRROR_SOURCE_ALLOW") {
        config.security.mirror_source_allow = list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    }
    match config.validate() {
        Ok(()) if errors.is_empty() => Ok(config),
        Ok(()) => Err(ConfigErrors(errors).into()),
        Err(ConfigErrors(more)) => {
            errors.extend(more);
            Err(ConfigErrors(errors).into())
        }
    }
}

/// Parses a TOML document into the model without validating it.
pub fn parse_toml(text: &str) -> Result<Config, String> {
    toml::from_str(text).map_err(|e| e.to_string())
}

fn apply(config: &mut Config, o: &Overrides) {
    if let Some(u) = &o.upstream {
        config.upstream.bootstrap_servers = u.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    }
    if let Some(l) = &o.listen {
        config.listener.listen = l.clone();
    }
    if let Some(h) = &o.advertised_host {
        config.listener.advertised_host = Some(h.clone());
    }
    if let Some(p) = o.node_port_base {
        config.listener.node_port_base = Some(p);
    }
    if let Some(a) = &o.admin_listen {
        config.admin.listen = Some(a.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn flags_alone_make_a_valid_config() {
        let flags = Overrides {
            upstream: Some("a:9092,b:9092".into()),
            listen: Some("0.0.0.0:9192".into()),
            ..Default::default()
        };
        let c = load(None, &env(&[]), &flags).expect("valid");
        assert_eq!(c.upstream.bootstrap_servers, vec!["a:9092", "b:9092"]);
        assert_eq!(c.listener.effective_advertised_host(), "localhost");
        assert_eq!(c.listener.effective_node_port_base(), Some(9193));
    }

    #[test]
    fn flags_override_env_which_overrides_file() {
        let dir = std::env::temp_dir().join(format!("kmp-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "[listener]\nlisten = \"127.0.0.1:1000\"\nadvertised_host = \"file\"\n[upstream]\nbootstrap_servers = [\"f:1\"]\n",
        )
        .unwrap();
        let e = env(&[("KMP_ADVERTISED_HOST", "env"), ("KMP_UPSTREAM", "e:1")]);
        let flags = Overrides {
            upstream: Some("flag:1".into()),
            ..Default::default()
        };
        let c = load(Some(&file), &e, &flags).expect("valid");
        assert_eq!(c.listener.listen, "127.0.0.1:1000", "file value kept when nothing overrides it");
        assert_eq!(c.listener.advertised_host.as_deref(), Some("env"), "env beats file");
        assert_eq!(c.upstream.bootstrap_servers, vec!["flag:1"], "flag beats env");
    }

    #[test]
    fn validate_reports_every_error_at_once() {
        let flags = Overrides {
            listen: Some("nonsense".into()),
            admin_listen: Some("also-bad".into()),
            ..Default::default()
        };
        let e = env(&[("KMP_NODE_PORT_BASE", "x")]);
        let Err(LoadError::Invalid(ConfigErrors(errs))) = load(None, &e, &flags) else {
            panic!("expected validation errors");
        };
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        for k in [
            "KMP_NODE_PORT_BASE",
            "listener.listen",
            "listener.node_port_base",
            "upstream.bootstrap_servers",
            "admin.listen",
        ] {
            assert!(keys.contains(&k), "missing error for {k}; got {keys:?}");
        }
    }

    #[test]
    fn several_addresses_in_one_list_entry_are_rejected() {
        let c = parse_toml(
            "[upstream]\nbootstrap_servers = [\"a:1,b:2\"]\n[[mirrors]]\nname = \"m\"\nsource_bootstrap_servers = [\"x:1, y:2\"]\ntopics = [\"t\"]\n",
        )
        .unwrap();
        let ConfigErrors(errs) = c.validate().expect_err("comma-joined addresses are invalid");
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, vec!["upstream.bootstrap_servers[0]", "mirrors[0].source_bootstrap_servers"]);
    }

    #[test]
    fn unknown_keys_in_file_are_rejected() {
        let err = parse_toml("[listener]\nlisen = \"x:1\"\n").expect_err("typo must be an error");
        assert!(err.contains("lisen"), "error names the unknown key: {err}");
    }
}

#[cfg(test)]
mod mirror_rules {
    use crate::ConfigErrors;

    #[test]
    fn bad_patterns_and_empty_selections_are_reported_together() {
        let text = "[upstream]\nbootstrap_servers = [\"d:1\"]\n\
            [[mirrors]]\nname = \"a\"\nsource_bootstrap_servers = [\"s:1\"]\ninclude = [\"(unclosed\"]\nexclude = [\"[z-a]\"]\n\
            [[mirrors]]\nname = \"a\"\nsource_bootstrap_servers = [\"s:1\"]\n";
        let ConfigErrors(errs) = super::parse_toml(text).unwrap().validate().expect_err("invalid mirrors");
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, vec!["mirrors[0].include", "mirrors[0].exclude", "mirrors[1].name", "mirrors[1].topics"]);
    }

    #[test]
    fn engine_settings_are_checked_with_the_mirrors_that_depend_on_them() {
        let text = "[upstream]\nbootstrap_servers = [\"d:1\"]\n\
            [engine]\nstate_topic = \"bad name\"\nmax_buffer_bytes = 1000000\nmax_in_flight_per_partition = 0\n\
            [[mirrors]]\nname = \"a\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"t\"]\nfetch_max_bytes = 2000000\n";
        let ConfigErrors(errs) = super::parse_toml(text).unwrap().validate().expect_err("invalid engine");
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            vec!["engine.state_topic", "engine.max_in_flight_per_partition", "mirrors[0].fetch_max_bytes"]
        );
    }
}

#[cfg(test)]
mod secrets {
    #[test]
    fn the_admin_token_comes_from_the_environment_and_never_shows_in_debug_output() {
        let env: std::collections::HashMap<String, String> = [("KMP_UPSTREAM", "d:1"), ("KMP_ADMIN_TOKEN", "s3cret")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let c = super::load(None, &env, &super::Overrides::default()).expect("valid");
        assert_eq!(c.admin.token.as_deref(), Some("s3cret"));
        assert!(!format!("{c:?}").contains("s3cret"), "Debug redacts the token");
    }
}

#[cfg(test)]
mod example_file {
    #[test]
    fn the_shipped_example_config_parses_and_validates() {
        let c = super::parse_toml(include_str!("../example.toml")).expect("example.toml parses");
        c.validate().expect("example.toml is valid");
        assert_eq!(c.listener.effective_node_port_base(), Some(9200));
        assert_eq!(c.admin.listen.as_deref(), Some("127.0.0.1:9180"));
    }
}
