//! Loading: defaults, then the TOML file, then `KMP_*` environment variables, then command-line
//! flags (later wins), then [`Config::validate`]. The environment is read through [`EnvSource`]
//! so tests pass a map instead of mutating the process environment.

use std::collections::HashMap;
use std::path::Path;

use crate::{Config, ConfigError, ConfigErrors, parse_toml};

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
    ("KMP_ADMIN_TOKEN_FILE", "admin.token read from this file (same as KMP_ADMIN_TOKEN=file:<path>)"),
    ("KMP_MIRROR_SOURCE_ALLOW", "security.mirror_source_allow (comma-separated host:port patterns)"),
    ("KMP_ENGINE_ROLE", "engine.role (`engine`, `follower` or `auto`)"),
    ("KMP_INSTANCE_ID", "engine.instance_id"),
    ("KMP_ENGINE_SESSION_TIMEOUT_MS", "engine.session_timeout_ms"),
    ("KMP_ENGINE_SHARE_WORK", "engine.share_work (`true` or `false`)"),
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
    // `KMP_ADMIN_TOKEN_FILE` (the container-secrets convention) is `KMP_ADMIN_TOKEN=file:<path>`.
    match (env.var("KMP_ADMIN_TOKEN"), env.var("KMP_ADMIN_TOKEN_FILE")) {
        (Some(_), Some(_)) => errors.push(ConfigError {
            key: "KMP_ADMIN_TOKEN_FILE".into(),
            message: "KMP_ADMIN_TOKEN is set too: give the admin token one way".into(),
        }),
        (Some(t), None) => config.admin.token = Some(t),
        (None, Some(path)) => config.admin.token = Some(format!("file:{path}")),
        (None, None) => {}
    }
    // `file:`/`env:` references (like every secret): resolved once, here.
    if let Some(t) = config.admin.token.clone() {
        let r = crate::SecretRef::parse(&t);
        if !r.is_inline() {
            match r.resolve() {
                Ok(v) if !v.is_empty() => config.admin.token = Some(v),
                Ok(_) => errors.push(ConfigError {
                    key: "admin.token".into(),
                    message: "the referenced secret is empty".into(),
                }),
                Err(e) => errors.push(ConfigError {
                    key: "admin.token".into(),
                    message: e,
                }),
            }
        }
    }
    if let Some(list) = env.var("KMP_MIRROR_SOURCE_ALLOW") {
        config.security.mirror_source_allow = list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    }
    if let Some(role) = env.var("KMP_ENGINE_ROLE") {
        match crate::EngineRole::parse(&role) {
            Some(r) => config.engine.role = r,
            None => errors.push(ConfigError {
                key: "KMP_ENGINE_ROLE".into(),
                message: format!("`{role}` is not a role: `engine`, `follower` or `auto`"),
            }),
        }
    }
    if let Some(id) = env.var("KMP_INSTANCE_ID") {
        config.engine.instance_id = id;
    }
    if let Some(ms) = env.var("KMP_ENGINE_SESSION_TIMEOUT_MS") {
        match ms.trim().parse() {
            Ok(v) => config.engine.session_timeout_ms = v,
            Err(_) => errors.push(ConfigError {
                key: "KMP_ENGINE_SESSION_TIMEOUT_MS".into(),
                message: format!("`{ms}` is not a number of milliseconds"),
            }),
        }
    }
    if let Some(v) = env.var("KMP_ENGINE_SHARE_WORK") {
        match v.trim() {
            "true" => config.engine.share_work = true,
            "false" => config.engine.share_work = false,
            _ => errors.push(ConfigError {
                key: "KMP_ENGINE_SHARE_WORK".into(),
                message: format!("`{v}` is not `true` or `false`"),
            }),
        }
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
        let _ = std::fs::remove_dir_all(&dir);
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
        let ConfigErrors(errs) = crate::parse_toml(text).unwrap().validate().expect_err("invalid mirrors");
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, vec!["mirrors[0].include", "mirrors[0].exclude", "mirrors[1].name", "mirrors[1].topics"]);
    }

    #[test]
    fn fetch_growth_bounds_are_checked_and_the_default_fits_the_budget() {
        let text = "[upstream]\nbootstrap_servers = [\"d:1\"]\n\
            [engine]\nmax_buffer_bytes = 8000000\n\
            [[mirrors]]\nname = \"a\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"t\"]\nfetch_grow_max_bytes = 1000\n\
            [[mirrors]]\nname = \"b\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"t\"]\nfetch_grow_max_bytes = 9000000\n\
            [[mirrors]]\nname = \"c\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"t\"]\n";
        let config = crate::parse_toml(text).unwrap();
        let ConfigErrors(errs) = config.clone().validate().expect_err("growth bounds");
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, vec!["mirrors[0].fetch_grow_max_bytes", "mirrors[1].fetch_grow_max_bytes"]);
        // Unset: 16 MiB, capped by the engine budget, never below fetch_max_bytes.
        assert_eq!(config.mirrors[2].effective_fetch_grow_max_bytes(8_000_000), 8_000_000);
        assert_eq!(config.mirrors[2].effective_fetch_grow_max_bytes(1 << 30), 16 * 1024 * 1024);
        assert_eq!(config.mirrors[2].effective_fetch_grow_max_bytes(1000), 1024 * 1024);
    }

    #[test]
    fn engine_settings_are_checked_with_the_mirrors_that_depend_on_them() {
        let text = "[upstream]\nbootstrap_servers = [\"d:1\"]\n\
            [engine]\nstate_topic = \"bad name\"\nmax_buffer_bytes = 1000000\nmax_in_flight_per_partition = 0\n\
            [[mirrors]]\nname = \"a\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"t\"]\nfetch_max_bytes = 2000000\n";
        let ConfigErrors(errs) = crate::parse_toml(text).unwrap().validate().expect_err("invalid engine");
        let keys: Vec<_> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            vec!["engine.state_topic", "engine.max_in_flight_per_partition", "mirrors[0].fetch_max_bytes"]
        );
    }
}

#[cfg(test)]
mod session_lifetime {
    #[test]
    fn a_client_session_lifetime_is_at_least_a_second_and_only_in_termination_mode() {
        let base = "[upstream]\nbootstrap_servers = [\"d:1\"]\n[listener.auth]\n";
        let ok = crate::parse_toml(&format!("{base}mode = \"terminate\"\nmechanisms = []\nsession_lifetime_ms = 10000\n")).unwrap();
        assert_eq!(ok.listener.auth.session_lifetime_ms, 10_000);
        let crate::ConfigErrors(errs) = crate::parse_toml(&format!("{base}mode = \"terminate\"\nmechanisms = []\nsession_lifetime_ms = 500\n"))
            .unwrap()
            .validate()
            .expect_err("below a second");
        assert!(errs.iter().any(|e| e.key == "listener.auth.session_lifetime_ms"), "{errs:?}");
        let crate::ConfigErrors(errs) = crate::parse_toml(&format!("{base}session_lifetime_ms = 10000\n"))
            .unwrap()
            .validate()
            .expect_err("pass-through");
        assert!(
            errs.iter()
                .any(|e| e.key == "listener.auth.session_lifetime_ms" && e.message.contains("terminate")),
            "{errs:?}"
        );
        assert_eq!(crate::parse_toml(base).unwrap().listener.auth.session_lifetime_ms, 0, "off by default");
    }
}

#[cfg(test)]
mod role {
    use std::collections::HashMap;

    use crate::{EngineRole, Overrides};

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_role_comes_from_the_file_or_kmp_engine_role_and_a_follower_needs_the_engine_enabled() {
        let file = |text: &str| {
            let path = std::env::temp_dir().join(format!("kmp-role-{}-{}.toml", std::process::id(), text.len()));
            std::fs::write(&path, text).unwrap();
            path
        };
        let base = "[upstream]\nbootstrap_servers = [\"d:1\"]\n";
        let plain = file(base);
        let loaded = crate::load(Some(&plain), &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(loaded.engine.role, EngineRole::Auto, "the default is the elected mode");
        let loaded = crate::load(Some(&plain), &env(&[("KMP_ENGINE_ROLE", "follower")]), &Overrides::default()).unwrap();
        assert_eq!(loaded.engine.role, EngineRole::Follower, "the environment overrides the file");
        let err = crate::load(Some(&plain), &env(&[("KMP_ENGINE_ROLE", "leader")]), &Overrides::default()).expect_err("unknown role");
        assert!(err.to_string().contains("KMP_ENGINE_ROLE"), "{err}");
        let follower = file(&format!("{base}[engine]\nrole = \"follower\"\n"));
        assert_eq!(
            crate::load(Some(&follower), &env(&[]), &Overrides::default()).unwrap().engine.role,
            EngineRole::Follower
        );
        let off = file(&format!("{base}[engine]\nenabled = false\nrole = \"follower\"\n\n"));
        let err = crate::load(Some(&off), &env(&[]), &Overrides::default()).expect_err("follower without the engine");
        assert!(err.to_string().contains("engine.role"), "{err}");
        let disabled = file(&format!("{base}[engine]\nenabled = false\n\n\n\n"));
        let loaded = crate::load(Some(&disabled), &env(&[]), &Overrides::default()).expect("enabled = false with the default role");
        assert!(!loaded.engine.enabled);
        for p in [plain, follower, off, disabled] {
            let _ = std::fs::remove_file(p);
        }
    }

    #[test]
    fn shared_work_comes_from_the_file_or_kmp_engine_share_work_and_needs_the_auto_role() {
        let text = "[upstream]\nbootstrap_servers = [\"d:1\"]\n[engine]\nrole = \"auto\"\n";
        let path = std::env::temp_dir().join(format!("kmp-share-{}.toml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let loaded = crate::load(Some(&path), &env(&[]), &Overrides::default()).unwrap();
        assert!(!loaded.engine.share_work, "off by default");
        let loaded = crate::load(Some(&path), &env(&[("KMP_ENGINE_SHARE_WORK", "true")]), &Overrides::default()).unwrap();
        assert!(loaded.engine.share_work, "the environment turns it on");
        let err = crate::load(Some(&path), &env(&[("KMP_ENGINE_SHARE_WORK", "yes")]), &Overrides::default()).expect_err("not a boolean");
        assert!(err.to_string().contains("KMP_ENGINE_SHARE_WORK"), "{err}");
        let lone = crate::parse_toml("[upstream]\nbootstrap_servers = [\"d:1\"]\n[engine]\nrole = \"engine\"\nshare_work = true\n").unwrap();
        let crate::ConfigErrors(errs) = lone.validate().expect_err("share_work without role auto");
        assert_eq!(errs.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), vec!["engine.share_work"]);
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod secrets {
    #[test]
    fn the_admin_token_may_be_a_file_reference_and_a_missing_file_is_reported_by_key() {
        let path = std::env::temp_dir().join(format!("kmp-token-{}", std::process::id()));
        std::fs::write(&path, "t0ken-from-file\n").unwrap();
        let dir = std::env::temp_dir().join(format!("kmp-token-cfg-{}", std::process::id()));
        std::fs::write(
            &dir,
            format!("[upstream]\nbootstrap_servers = [\"d:1\"]\n[admin]\ntoken = \"file:{}\"\n", path.display()),
        )
        .unwrap();
        let no_env = std::collections::HashMap::<String, String>::new();
        let c = super::load(Some(&dir), &no_env, &super::Overrides::default()).unwrap();
        assert_eq!(c.admin.token.as_deref(), Some("t0ken-from-file"));
        std::fs::remove_file(&path).unwrap();
        let e = super::load(Some(&dir), &no_env, &super::Overrides::default()).unwrap_err().to_string();
        assert!(e.contains("admin.token") && e.contains("cannot read secret file"), "{e}");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn a_parse_error_never_shows_a_password_line() {
        let e = crate::parse_toml("[upstream.properties]\n\"sasl.password\" = 12345678\n\"x\" = [\n").unwrap_err();
        assert!(!e.contains("12345678"), "{e}");
    }

    #[test]
    fn a_parse_error_never_shows_the_token_or_the_source_lines() {
        let cases = [
            // an unterminated string on the token's line
            ("[upstream]\nbootstrap_servers = [\"d:1\"]\n[admin]\ntoken = \"s3cret-value\n", "line 4"),
            // a value of the wrong type, which serde quotes
            ("[admin]\ntoken = 918273645\n", "line 2"),
            ("admin = { token = 918273645 }\n", "line 1"),
            // an error elsewhere in a file holding the token
            ("[admin]\ntoken = \"s3cret-value\"\n[listener]\nlisen = \"x:1\"\n", "line 4"),
            ("[admin]\ntoken = \"s3cret-value\"\nlisten = [\n", "line 3"),
        ];
        for (text, at) in cases {
            let err = crate::parse_toml(text).expect_err("invalid");
            assert!(!err.contains("s3cret") && !err.contains("918273645"), "{err}");
            assert!(!err.contains('|') && !err.contains("token ="), "no source snippet: {err}");
            assert!(err.starts_with(at), "position given: {err}");
        }
        let err = crate::parse_toml("[admin]\ntoken = \"s3cret-value\"\n[listener]\nlisen = \"x:1\"\n").unwrap_err();
        assert!(err.contains("lisen"), "an error away from the token keeps its message: {err}");
        let file = std::env::temp_dir().join(format!("kmp-token-parse-{}.toml", std::process::id()));
        std::fs::write(&file, "[admin]\ntoken = \"s3cret-value\n").unwrap();
        let err = super::load(Some(&file), &std::collections::HashMap::new(), &super::Overrides::default()).unwrap_err();
        let _ = std::fs::remove_file(&file);
        assert!(matches!(err, super::LoadError::Parse { .. }) && !err.to_string().contains("s3cret"), "{err}");
    }

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

    #[test]
    fn the_admin_token_file_variable_reads_the_token_from_that_file() {
        let file = std::env::temp_dir().join(format!("kmp-token-file-{}", std::process::id()));
        let path = file.display().to_string();
        let load = |pairs: &[(&str, &str)]| {
            let env: std::collections::HashMap<String, String> = [("KMP_UPSTREAM", "d:1"), ("KMP_ADMIN_TOKEN_FILE", path.as_str())]
                .iter()
                .chain(pairs)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            super::load(None, &env, &super::Overrides::default())
        };
        std::fs::write(&file, "from-a-file\n").unwrap();
        let read = load(&[]);
        let both = load(&[("KMP_ADMIN_TOKEN", "x")]);
        std::fs::write(&file, "\n").unwrap();
        let empty = load(&[]);
        let _ = std::fs::remove_file(&file);
        let missing = load(&[]);
        assert_eq!(read.expect("valid").admin.token.as_deref(), Some("from-a-file"), "one trailing newline dropped");
        let both = both.expect_err("both set").to_string();
        assert!(both.contains("KMP_ADMIN_TOKEN_FILE") && both.contains("one way"), "{both}");
        let empty = empty.expect_err("empty file").to_string();
        assert!(empty.contains("admin.token") && empty.contains("empty"), "{empty}");
        let missing = missing.expect_err("missing file").to_string();
        assert!(missing.contains("cannot read secret file") && missing.contains(&path), "{missing}");
    }
}

#[cfg(test)]
mod example_file {
    #[test]
    fn the_shipped_example_config_parses_and_validates() {
        let c = crate::parse_toml(include_str!("../example.toml")).expect("example.toml parses");
        c.validate().expect("example.toml is valid");
        assert_eq!(c.listener.effective_node_port_base(), Some(9200));
        assert_eq!(c.admin.listen.as_deref(), Some("127.0.0.1:9180"));
    }
}
