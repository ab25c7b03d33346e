"""Issue 11, finding 4: an API-created mirror may only reach sources that `mirror_source_allow`
lists (the test proxies allow 127.0.0.1:* and localhost:*). A source outside the list is refused
with a message naming the setting, and the proxy never connects there; credentials inside
`bootstrap.servers` are refused and never echoed anywhere; connect and decode failures are
reported as short classes, never with the raw bytes a non-Kafka service sent."""

import time

import sec_wire as wire
from kmp_common import free_port
from sec_support import (
    TcpServer,
    cli,
    closing_handler,
    http_like_handler,
    mirror_names,
    rest,
    running_proxy,
    unique,
)

PASSWORD = "pw-Zq81-never-shown"
RAW_HTTP_AS_LENGTH = str(int.from_bytes(b"HTTP", "big"))  # 1213486160


def json_strings(value, key: str):
    """Every string value of ``key`` anywhere in a JSON document."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key and isinstance(v, str):
                yield v
            else:
                yield from json_strings(v, key)
    elif isinstance(value, list):
        for v in value:
            yield from json_strings(v, key)


def create_rpc(proxy, name: str, servers: str) -> tuple[int, str | None]:
    frame = wire.create_cluster_mirror(1, name, {"bootstrap.servers": servers, "mirror.topics.include": ".*"})
    return wire.parse_simple_response(wire.roundtrip("127.0.0.1", proxy.port, frame, flexible_header=True))


def test_a_source_outside_mirror_source_allow_is_refused_and_never_contacted(clusters, workdir):
    _, destination = clusters
    trap = TcpServer(host="127.0.0.2")  # loopback, but not 127.0.0.1: outside the test allow-list
    try:
        with running_proxy(destination, workdir) as proxy:
            name = unique("ssrf")
            code, msg = create_rpc(proxy, name, trap.addr)
            assert code != 0, f"CreateClusterMirror with bootstrap.servers={trap.addr} (not in mirror_source_allow) was accepted"
            assert msg and "mirror_source_allow" in msg, f"the refusal must name mirror_source_allow: {msg!r}"
            status, body = rest(proxy, "POST", "/v1/mirrors", {"name": name + "-rest", "configs": {"bootstrap.servers": trap.addr,
                                                                                                   "mirror.topics.include": ".*"}})
            assert status >= 400 and "mirror_source_allow" in str(body), f"REST create of a source outside the allow-list answered {status}: {body}"
            listed = mirror_names(proxy)
            assert name not in listed and name + "-rest" not in listed, f"a refused mirror is listed: {listed}"
            # Absence can only be observed over a window: a mirror with an include pattern would
            # have contacted its source within milliseconds of being created.
            time.sleep(3)
    finally:
        trap.close()
    assert not trap.accepted, f"the proxy connected to the disallowed address {trap.addr}: {trap.accepted}"


def test_credentials_in_bootstrap_servers_are_refused_and_never_echoed(clusters, workdir):
    source, destination = clusters
    host_port = source.bootstrap.split(",")[0]
    servers = f"admin:{PASSWORD}@{host_port}"
    with running_proxy(destination, workdir) as proxy:
        name = unique("creds")
        code, msg = create_rpc(proxy, name, servers)
        status, body = rest(proxy, "POST", "/v1/mirrors", {"name": name + "-rest", "configs": {"bootstrap.servers": servers}})
        listing = rest(proxy, "GET", "/v1/mirrors")
        described = [rest(proxy, "GET", f"/v1/mirrors/{n}") for n in (name, name + "-rest")]
        cli_out = cli(proxy, "--list", "--output", "json")
        seen = {
            "CreateClusterMirror response": f"{code} {msg}",
            "REST create response": f"{status} {body}",
            "GET /v1/mirrors": str(listing),
            "GET /v1/mirrors/<name>": str(described),
            "CLI --list": cli_out.stdout + cli_out.stderr,
            "proxy log": proxy.log(),
        }
        leaks = [where for where, text in seen.items() if PASSWORD in text]
        assert code != 0, f"CreateClusterMirror with credentials in bootstrap.servers was accepted: {msg!r}"
        assert status >= 400, f"REST create with credentials in bootstrap.servers answered {status}: {body}"
        assert not leaks, f"the password from bootstrap.servers appears in: {leaks}"
        assert name not in mirror_names(proxy), "a mirror with credentials in its address was created"


def test_connect_and_decode_errors_are_short_classes_without_raw_bytes(clusters, workdir):
    _, destination = clusters
    http = TcpServer(http_like_handler)
    silent = TcpServer(closing_handler)
    closed_port = free_port()
    try:
        with running_proxy(destination, workdir) as proxy:
            for kind, addr in (("closed port", f"127.0.0.1:{closed_port}"), ("HTTP service", http.addr), ("open port that hangs up", silent.addr)):
                name = unique("probe")
                status, created = rest(proxy, "POST", "/v1/mirrors", {"name": name, "configs": {"bootstrap.servers": addr}})
                shown, messages = [str(created)], [created.get("message") if isinstance(created, dict) else created]
                if status == 201:
                    status, started = rest(proxy, "POST", f"/v1/mirrors/{name}/start", {"topics": ["probe-topic"]})
                    results = started.get("results", []) if isinstance(started, dict) else []
                    assert status >= 400 or (results and all(r["error_code"] != 0 for r in results)), (
                        f"starting a topic of a mirror whose source is a {kind} reported success: {status} {started}")
                    shown.append(str(started))
                    messages += [started.get("message") if isinstance(started, dict) else started] + [r.get("message") for r in results]
                    described = rest(proxy, "GET", f"/v1/mirrors/{name}")[1]
                    shown.append(str(described))
                    messages += list(json_strings(described, "last_error"))
                joined = " | ".join(shown)
                assert RAW_HTTP_AS_LENGTH not in joined, f"the error for a {kind} shows raw bytes read as a frame length: {joined}"
                assert "HTTP/1.1" not in joined and "Bad Request" not in joined, f"the error for a {kind} echoes the service's bytes: {joined}"
                long = [m for m in messages if m and len(m) > 200]
                assert not long, f"the error for a {kind} is not a short class: {long}"
                # Issue 35, L-f: a closed port, an HTTP service and a peer that hangs up look the
                # same, so the answers cannot tell closed ports from open ones.
                telling = [m for m in messages if m and any(w in m for w in ("connection refused", "not a Kafka broker", "connection closed",
                                                                            "malformed response", "timed out"))]
                assert not telling, f"the error for a {kind} tells what is behind the port: {telling}"
    finally:
        http.close()
        silent.close()
