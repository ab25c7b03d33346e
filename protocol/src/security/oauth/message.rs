//! The OAUTHBEARER client message (RFC 7628 §3.1, as Kafka's `OAuthBearerClientInitialResponse`
//! writes it): a GS2 header (`n,` with an optional `a=<authzid>`, then `,`), then
//! `\x01`-separated `key=value` pairs of which `auth=Bearer <token>` is required, closed by
//! `\x01\x01`. Other pairs are SASL extensions (accepted, not used).

/// Separator of the key/value pairs.
const SEP: u8 = 0x01;

/// The message carrying `token`.
pub fn client_message(token: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(token.len() + 24);
    m.extend_from_slice(b"n,,\x01auth=Bearer ");
    m.extend_from_slice(token.as_bytes());
    m.extend_from_slice(b"\x01\x01");
    m
}

/// The token of a client message, or why the message is not one.
pub fn parse_client_message(msg: &[u8]) -> Result<&str, &'static str> {
    let text = std::str::from_utf8(msg).map_err(|_| "the OAUTHBEARER message is not UTF-8")?;
    let body = text
        .strip_suffix("\x01\x01")
        .ok_or("the OAUTHBEARER message does not end with two separators")?;
    let (gs2, pairs) = body.split_once(SEP as char).ok_or("the OAUTHBEARER message has no key/value pairs")?;
    let mut header = gs2.splitn(3, ',');
    match (header.next(), header.next(), header.next()) {
        (Some("n" | "y"), Some(authz), Some("")) if authz.is_empty() || authz.starts_with("a=") => {}
        _ => return Err("the OAUTHBEARER message has no valid GS2 header"),
    }
    let mut token = None;
    for pair in pairs.split(SEP as char) {
        let (k, v) = pair.split_once('=').ok_or("an OAUTHBEARER key/value pair has no `=`")?;
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err("an OAUTHBEARER key is not alphabetic");
        }
        if k == "auth" {
            if token.is_some() {
                return Err("the OAUTHBEARER message has two auth pairs");
            }
            let t = v
                .strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
                .ok_or("the auth value is not `Bearer <token>`")?;
            token = Some(t.trim());
        }
    }
    token.filter(|t| !t.is_empty()).ok_or("the OAUTHBEARER message has no auth=Bearer token")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_message_round_trips_and_extensions_are_accepted() {
        assert_eq!(client_message("abc.def.ghi"), b"n,,\x01auth=Bearer abc.def.ghi\x01\x01");
        assert_eq!(parse_client_message(&client_message("abc.def.ghi")), Ok("abc.def.ghi"));
        assert_eq!(parse_client_message(b"n,a=alice,\x01auth=Bearer t\x01logicalCluster=lkc-1\x01\x01"), Ok("t"));
    }

    #[test]
    fn malformed_messages_are_refused() {
        for bad in [
            &b""[..],
            b"n,,\x01\x01",
            b"n,,\x01auth=Basic x\x01\x01",
            b"p=x,,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
            b"n,,\x01k3y=v\x01auth=Bearer t\x01\x01",
            b"\xff,,\x01auth=Bearer t\x01\x01",
        ] {
            assert!(parse_client_message(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
