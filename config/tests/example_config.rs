//! `config/example.toml` as users copy it: valid as shipped, and still valid with its commented
//! `admin.token` and `[[mirrors]]` example switched on (the README's quick start starts from it).

const EXAMPLE: &str = include_str!("../example.toml");

/// The example with `# token = ` and every commented line from `# [[mirrors]]` on uncommented.
fn with_examples_enabled() -> String {
    let mut out = String::new();
    let mut in_mirrors = false;
    for line in EXAMPLE.lines() {
        in_mirrors |= line.starts_with("# [[mirrors]]");
        let enabled = line.starts_with("# token = ") || (in_mirrors && line.starts_with("# "));
        out.push_str(if enabled { &line[2..] } else { line });
        out.push('\n');
    }
    out
}

#[test]
fn the_example_config_is_valid_as_shipped_and_declares_no_mirror() {
    let c = kmp_config::parse_toml(EXAMPLE).expect("config/example.toml parses");
    c.validate().expect("config/example.toml is valid");
    assert!(c.mirrors.is_empty(), "the shipped example must not start a mirror to a made-up source");
    assert_eq!(c.admin.token, None, "the shipped example must not set an admin token");
}

#[test]
fn the_commented_mirror_and_admin_token_of_the_example_are_valid_when_uncommented() {
    let text = with_examples_enabled();
    let c = kmp_config::parse_toml(&text).unwrap_or_else(|e| panic!("uncommented example does not parse: {e}\n{text}"));
    c.validate().unwrap_or_else(|e| panic!("uncommented example is invalid: {e}"));
    assert_eq!(c.admin.token.as_deref(), Some("file:/etc/kmp/admin-token"), "admin.token example not picked up");
    assert_eq!(c.mirrors.len(), 1, "one [[mirrors]] example expected");
    let m = &c.mirrors[0];
    assert_eq!(m.name, "dc1");
    assert_eq!(m.source_bootstrap_servers, ["source-1:9092"]);
    assert_eq!(m.topics, ["orders"]);
    assert_eq!(m.include, ["payments-.*"]);
    assert!(!m.source_properties.is_empty(), "[mirrors.source_properties] example not picked up");
}

/// The `[[listeners]]` example of docs/tls-sasl.md, as users copy it.
#[test]
fn the_several_listeners_example_of_the_docs_is_valid() {
    let doc = include_str!("../../docs/tls-sasl.md");
    let section = doc
        .split("## Several listeners")
        .nth(1)
        .expect("docs/tls-sasl.md has the Several listeners section");
    let toml = section
        .split("```toml\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a toml block in that section");
    let text = format!("{toml}\n[upstream]\nbootstrap_servers = [\"d:9092\"]\n");
    let c = kmp_config::parse_toml(&text).unwrap_or_else(|e| panic!("the docs' listeners example does not parse: {e}\n{text}"));
    c.validate().unwrap_or_else(|e| panic!("the docs' listeners example is invalid: {e}"));
    let names: Vec<_> = c
        .client_listeners()
        .into_iter()
        .map(|l| (l.name, l.node_port_base, l.mirror_management))
        .collect();
    assert_eq!(names, [("internal".to_owned(), 9193, true), ("external".to_owned(), 9393, false)]);
}
