//! Reading a TOML document into the model: every key the model does not know is reported, not
//! only the first, and no error quotes the source text around it (a line may hold a secret).

use std::ops::Range;

use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use crate::model::Config;

/// Parses a TOML document into the model without validating it. The error says where (line,
/// column) and what, never the source text around it: the offending line may hold `admin.token`.
///
/// Keys the model does not know are reported together, one line each (the model denies unknown
/// fields, so serde stops at the first: each is taken out of the document and the rest parsed
/// again, up to [`MAX_UNKNOWN_KEYS`]); a syntax error is reported alone.
pub fn parse_toml(text: &str) -> Result<Config, String> {
    let mut document = DeTable::parse(text).map_err(|e| describe_parse_error(text, &e))?;
    let mut unknown = Vec::new();
    loop {
        match Config::deserialize(toml::de::Deserializer::from(document.clone())) {
            Ok(config) if unknown.is_empty() => return Ok(config),
            Ok(_) => return Err(report(&unknown)),
            Err(e) => {
                unknown.push(describe_parse_error(text, &e));
                let taken_out = e.message().starts_with("unknown field")
                    && unknown.len() < MAX_UNKNOWN_KEYS
                    && e.span().is_some_and(|at| take_out_key(document.get_mut(), &at));
                if !taken_out {
                    return Err(report(&unknown));
                }
            }
        }
    }
}

/// One problem as it is; several as a list, one per line (as the validation's errors are shown).
fn report(problems: &[String]) -> String {
    match problems {
        [one] => one.clone(),
        several => format!(
            "{} problems:\n{}",
            several.len(),
            several.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
        ),
    }
}

/// Most unknown keys reported from one document (each costs a parse of the rest).
const MAX_UNKNOWN_KEYS: usize = 50;

/// Removes the key whose name is at `at` from `table` or any table nested in it (arrays of
/// tables included); `false` when no key is there.
fn take_out_key(table: &mut DeTable<'_>, at: &Range<usize>) -> bool {
    let found = table.iter().map(|(k, _)| k).find(|k| k.span() == *at).cloned();
    if let Some(key) = found {
        table.remove(&key);
        return true;
    }
    table.iter_mut().any(|(_, v)| take_out_in_value(v.get_mut(), at))
}

fn take_out_in_value(v: &mut DeValue<'_>, at: &Range<usize>) -> bool {
    match v {
        DeValue::Table(t) => take_out_key(t, at),
        DeValue::Array(items) => items.iter_mut().any(|i| take_out_in_value(i.get_mut(), at)),
        _ => false,
    }
}

/// A TOML error as shown to the operator. toml's own `Display` quotes the offending source line,
/// and serde messages can quote a value (`invalid type: integer `12345``), so: position and
/// message only, and the message is withheld when the error touches a line that mentions a token
/// or quotes a value from such a line.
fn describe_parse_error(text: &str, e: &toml::de::Error) -> String {
    const WITHHELD: &str = "invalid value (details withheld: the line holds a secret)";
    let message = e.message().trim();
    const SECRET_KEYS: [&str; 4] = ["token", "password", "jaas", "keystore.key"];
    let secret_at = |l: &str| {
        let lower = l.to_ascii_lowercase();
        SECRET_KEYS.iter().find_map(|k| lower.find(k))
    };
    let secret_lines: Vec<(usize, &str)> = text.lines().enumerate().filter(|(_, l)| secret_at(l).is_some()).collect();
    let quotes_a_secret = secret_lines.iter().any(|(_, line)| {
        let after_key = secret_at(line).map_or(*line, |at| &line[at..]);
        let value = after_key.split_once('=').map_or("", |(_, v)| v);
        let value = value
            .trim()
            .trim_matches(|c: char| c == '"' || c == '\'' || c == '}' || c == ',' || c.is_whitespace());
        !value.is_empty() && message.contains(value)
    });
    let Some(span) = e.span() else {
        return if quotes_a_secret { WITHHELD.to_owned() } else { message.to_owned() };
    };
    let start = span.start.min(text.len());
    let end = span.end.clamp(start, text.len());
    let line_of = |at: usize| text.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
    let (first, last) = (line_of(start), line_of(end));
    let column = text[..start].rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let touches_secret = secret_lines.iter().any(|(i, _)| (first..=last).contains(i));
    let message = if touches_secret || quotes_a_secret { WITHHELD } else { message };
    format!("line {}, column {column}: {message}", first + 1)
}

#[cfg(test)]
mod tests {
    use super::parse_toml;

    #[test]
    fn every_unknown_key_is_reported_at_once_with_its_line() {
        let text = "[listener]\nlisen = \"x:1\"\n\n[upstream]\nbootstrap_servers = [\"d:1\"]\nbootstrp = 1\n\n\
                    [[mirrors]]\nname = \"m\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"t\"]\nstart_postion = \"earliest\"\n\n\
                    [[mirrors]]\nname = \"n\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"u\"]\n\n[engin]\nrole = \"auto\"\n";
        let err = parse_toml(text).expect_err("four unknown keys");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 5, "a head line and one line per unknown key:\n{err}");
        assert_eq!(lines[0], "4 problems:");
        for (line, key) in [(2, "lisen"), (6, "bootstrp"), (12, "start_postion"), (19, "engin")] {
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with(&format!("  - line {line},")) && l.contains(&format!("`{key}`"))),
                "`{key}` on line {line} is reported:\n{err}"
            );
        }
    }

    #[test]
    fn an_unknown_key_and_a_wrong_value_are_reported_together_and_a_clean_document_parses() {
        let err = parse_toml("[listener]\nlisen = \"x:1\"\nnode_port_base = \"many\"\n").expect_err("two problems");
        assert!(err.contains("`lisen`") && err.lines().count() == 3, "{err}");
        assert!(err.lines().nth(2).is_some_and(|l| l.starts_with("  - line 3,")), "{err}");
        parse_toml("[listener]\nlisten = \"127.0.0.1:9192\"\n[[mirrors]]\nname = \"m\"\nsource_bootstrap_servers = [\"s:1\"]\ntopics = [\"t\"]\n")
            .expect("a document without problems parses");
    }

    #[test]
    fn a_syntax_error_is_reported_alone() {
        let err = parse_toml("[listener\nlisen = 1\n").expect_err("syntax");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
