//! `sasl.jaas.config` lines as Kafka writes them: `<LoginModule> required key="value" …;`, their
//! options, and the credentials of the PLAIN/SCRAM and OAUTHBEARER login modules. A JAAS line holds
//! a secret: no error here ever contains it.

use std::collections::BTreeMap;

/// The options of a JAAS line `<LoginModule> required key="value" key=value …;`. The error never
/// contains the line (it holds a secret).
pub fn jaas_options(text: &str) -> Result<BTreeMap<String, String>, String> {
    let rest = text.trim().trim_end_matches(';');
    let Some(opts) = rest.split_once(" required").map(|(_, o)| o) else {
        return Err("sasl.jaas.config is not `<LoginModule> required key=\"value\" …;`".into());
    };
    let mut out = BTreeMap::new();
    let mut s = opts.trim();
    while !s.is_empty() {
        let Some((key, after)) = s.split_once('=') else { break };
        let key = key.trim();
        let after = after.trim_start();
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.find('"') {
                Some(end) => (&q[..end], &q[end + 1..]),
                None => return Err("sasl.jaas.config has an unterminated quoted value".into()),
            }
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        out.insert(key.to_owned(), value.to_owned());
        s = next.trim();
    }
    Ok(out)
}

/// `clientId`, `clientSecret` and `scope` of an `OAuthBearerLoginModule` JAAS line.
pub fn parse_oauth_jaas(text: &str) -> Result<(String, String, Option<String>), String> {
    let mut o = jaas_options(text)?;
    match (o.remove("clientId"), o.remove("clientSecret")) {
        (Some(id), Some(secret)) if !id.is_empty() => Ok((id, secret, o.remove("scope").filter(|s| !s.is_empty()))),
        _ => Err("sasl.jaas.config for OAUTHBEARER must set clientId=\"…\" and clientSecret=\"…\"".into()),
    }
}

/// `username` and `password` from a JAAS line such as
/// `org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`.
/// The error never contains the line (it holds a password).
pub fn parse_jaas(text: &str) -> Result<(String, String), String> {
    let mut o = jaas_options(text)?;
    match (o.remove("username"), o.remove("password")) {
        (Some(u), Some(p)) if !u.is_empty() => Ok((u, p)),
        _ => Err("sasl.jaas.config must set username=\"…\" and password=\"…\"".into()),
    }
}
