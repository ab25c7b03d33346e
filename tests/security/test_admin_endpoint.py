"""Issue 11, finding 10: the admin HTTP endpoint. A caller on 127.0.0.1 is loopback also when the
listener is `[::]` (it arrives as ::ffff:127.0.0.1); read endpoints (`GET /v1/...`, `/metrics`)
need the token from non-loopback callers unless `admin_read_open = true`; a config file that
cannot be parsed never has its token printed; REST `start` with an invalid regex is a 400."""

import subprocess

from kmp_common import PROXY_BIN
from sec_support import non_loopback_ipv4, rest, running_proxy, unique

TOKEN = "tok-Hd93-admin-secret"


def test_a_loopback_caller_may_mutate_when_the_admin_listener_is_the_ipv6_wildcard(destination, workdir):
    with running_proxy(destination, workdir, admin_host="[::]") as proxy:
        for host in ("127.0.0.1", "[::1]"):
            status, body = rest(proxy, "POST", "/v1/mirrors/no-such-mirror/pause", {"topics": ["t"]}, host=host)
            assert status != 403, f"a POST from {host} to an admin listener on [::] was refused as non-loopback: {status} {body}"
            assert status == 404, f"the POST from {host} reaches the route (unknown mirror: 404): {status} {body}"


def test_read_endpoints_need_the_token_from_a_non_loopback_address(destination, workdir):
    ip = non_loopback_ipv4()
    with running_proxy(destination, workdir, admin_host="0.0.0.0", env={"KMP_ADMIN_TOKEN": TOKEN}) as proxy:
        for path in ("/v1/mirrors", "/metrics"):
            status, body = rest(proxy, "GET", path, host=ip)
            assert status in (401, 403), f"GET {path} from {ip} without a token answered {status}, not 401/403"
            status, body = rest(proxy, "GET", path, host=ip, token="wrong-token")
            assert status in (401, 403), f"GET {path} from {ip} with a wrong token answered {status}, not 401/403"
            status, body = rest(proxy, "GET", path, host=ip, token=TOKEN)
            assert status == 200, f"GET {path} from {ip} with the admin token answered {status}: {str(body)[:300]}"
            status, _ = rest(proxy, "GET", path)
            assert status == 200, f"GET {path} from loopback without a token answered {status}"
        for path in ("/healthz", "/readyz"):
            assert rest(proxy, "GET", path, host=ip)[0] == 200, f"{path} stays open to everyone"


def test_admin_read_open_lets_non_loopback_callers_read_without_the_token(destination, workdir):
    ip = non_loopback_ipv4()
    with running_proxy(destination, workdir, {"security": {"admin_read_open": True}}, admin_host="0.0.0.0", env={"KMP_ADMIN_TOKEN": TOKEN}) as proxy:
        for path in ("/v1/mirrors", "/metrics"):
            status, body = rest(proxy, "GET", path, host=ip)
            assert status == 200, f"GET {path} from {ip} with admin_read_open = true answered {status}: {str(body)[:300]}"
        status, _ = rest(proxy, "POST", "/v1/mirrors/no-such-mirror/pause", {"topics": ["t"]}, host=ip)
        assert status in (401, 403), f"admin_read_open opens reads only: a POST from {ip} without the token answered {status}"


def test_a_config_file_that_cannot_be_parsed_never_prints_the_admin_token(workdir):
    broken = {
        "trailing garbage after the token": f'[admin]\ntoken = "{TOKEN}" oops\n',
        "unterminated token string": f'[admin]\nlisten = "127.0.0.1:1"\ntoken = "{TOKEN}\n',
        "token of the wrong type": f'[admin]\ntoken = ["{TOKEN}"]\n',
        "token given twice": f'[admin]\ntoken = "{TOKEN}"\ntoken = "{TOKEN}"\n',
    }
    for what, text in broken.items():
        path = workdir / f"{unique('broken')}.toml"
        path.write_text(text)
        out = subprocess.run([str(PROXY_BIN), "run", "--config", str(path), "--upstream", "127.0.0.1:1"], capture_output=True, text=True, timeout=30)
        printed = out.stdout + out.stderr
        assert out.returncode != 0, f"a config file with {what} was accepted"
        assert TOKEN not in printed, f"the parse error for a config file with {what} prints the admin token:\n{printed}"
        assert str(path) in printed or "parse" in printed.lower(), f"the parse error for {what} still says what is wrong where:\n{printed}"


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
