"""Issue 11, finding 10: the admin HTTP endpoint with a mirror behind it: REST `start` with an
invalid regex is a 400. The rest of finding 10 (loopback on `[::]`, the token for non-loopback
readers, `admin_read_open`, a config file that cannot be parsed never printing the token) needs
no broker and is checked in-process: proxy/tests/admin_endpoint_auth.rs."""

from sec_support import rest, running_proxy, unique


def test_rest_start_with_an_invalid_regex_is_a_400_with_a_message(clusters, workdir):
    """Patterns are whole-name regexes; one that is not a regex on its own must not be accepted
    because wrapping it happens to balance it (`)(` or `a)|(b` inside `^(?:...)$` escape the anchors)."""
    source, destination = clusters
    with running_proxy(destination, workdir) as proxy:
        name = unique("regex")
        status, body = rest(proxy, "POST", "/v1/mirrors", {"name": name, "configs": {"bootstrap.servers": source.bootstrap}})
        assert status == 201, f"creating a mirror over REST from loopback answered {status}: {body}"
        for pattern in ("(unclosed", ")(", "a)|(b"):
            for field in ("include", "exclude"):
                status, body = rest(proxy, "POST", f"/v1/mirrors/{name}/start", {"topics": [], field: [pattern]})
                assert status == 400, f"REST start with the invalid {field} regex {pattern!r} answered {status}: {body}"
                assert isinstance(body, dict) and body.get("message"), f"the 400 for {pattern!r} says what is wrong: {body}"
