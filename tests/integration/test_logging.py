"""Logging of the real binary in front of the real destination cluster: `--log-format json` (and
`KMP_LOG_FORMAT=json`) writes one JSON object per line with level, target, fields and the span;
`GET` / `PUT /v1/log-level` shows and replaces the log filter while the proxy runs (a debug line
appears, and stops again when the filter goes back); an invalid filter is a 400 with the parse
error; a non-loopback caller without the admin token cannot change it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))  # sec_support

from conftest import PROXY_BIN, ProxyProcess  # noqa: E402
from kmp_common import wait_until  # noqa: E402
from sec_support import non_loopback_ipv4, rest  # noqa: E402

TOKEN = "log-level-token"
# Refreshes this often, each logging "metadata refreshed" at DEBUG (target kafka_mirror_proxy::refresh).
REFRESH_MS = 200


def json_lines(proxy: ProxyProcess) -> list[dict]:
    """Every line the proxy wrote, parsed; a line that is not a JSON object fails the test."""
    out = []
    for n, line in enumerate(proxy.log().splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise AssertionError(f"log line {n} is not JSON ({e}): {line!r}") from None
        assert isinstance(value, dict), f"log line {n} is JSON but not an object: {line!r}"
        out.append(value)
    return out


def refresh_debug_lines(lines: list[dict]) -> list[dict]:
    return [l for l in lines if l.get("level") == "DEBUG" and l.get("fields", {}).get("message") == "metadata refreshed"]


@pytest.fixture(scope="module")
def json_proxy(destination, workdir):
    """A proxy logging JSON at `info`, admin endpoint on every address, with an admin token."""
    config = workdir / "logging.toml"
    config.write_text(f"[upstream]\nmetadata_refresh_interval_ms = {REFRESH_MS}\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config), "--log-format", "json", "--log", "info"],
                         admin_host="0.0.0.0", env={"KMP_ADMIN_TOKEN": TOKEN}).start()
    try:
        yield proxy
    finally:
        assert proxy.stop() == 0, f"proxy exited badly on SIGTERM:\n{proxy.log()[-3000:]}"


def set_filter(proxy: ProxyProcess, flt: str) -> dict:
    status, body = rest(proxy, "PUT", "/v1/log-level", {"filter": flt})
    assert status == 200, f"PUT /v1/log-level {flt!r} from loopback answered {status}: {body}"
    return body


def test_json_log_lines_carry_level_target_fields_and_the_span(json_proxy):
    lines = json_lines(json_proxy)
    assert lines, "the proxy logged nothing"
    for l in lines:
        missing = {"timestamp", "level", "target", "fields"} - l.keys()
        assert not missing, f"a JSON log line lacks {missing}: {l}"
        assert l["level"] in {"ERROR", "WARN", "INFO"}, f"at filter `info` nothing below INFO is written: {l}"
    listening = [l for l in lines if l["fields"].get("message") == "admin endpoint listening"]
    assert listening, f"the admin endpoint's start is logged: {[l['fields'].get('message') for l in lines]}"
    assert listening[0]["target"] == "kafka_mirror_proxy::admin", listening[0]
    assert listening[0]["fields"]["addr"].endswith(f":{json_proxy.admin_port}"), f"fields carry the event's values: {listening[0]}"
    in_span = [l for l in lines if "span" in l]
    assert in_span, f"events inside a span (the mirror engine's) carry it: {lines[:20]}"
    assert all(l["span"].get("name") and isinstance(l.get("spans"), list) and l["spans"] for l in in_span), in_span[:3]
    assert any(l["span"]["name"] == "mirror-engine" for l in in_span), f"the engine's span: {[l['span'] for l in in_span][:5]}"


def test_the_log_level_changes_at_runtime_and_back(json_proxy):
    status, body = rest(json_proxy, "GET", "/v1/log-level")
    assert (status, body) == (200, {"filter": "info"}), f"GET /v1/log-level shows the --log filter: {status} {body}"
    assert not refresh_debug_lines(json_lines(json_proxy)), "no debug line at `info`"

    body = set_filter(json_proxy, "info,kafka_mirror_proxy=debug")
    assert body == {"filter": "kafka_mirror_proxy=debug,info"}, f"the filter in force is answered: {body}"
    debug = wait_until("a DEBUG 'metadata refreshed' line after raising the level",
                       lambda: refresh_debug_lines(json_lines(json_proxy)), timeout=20)
    assert debug[0]["target"] == "kafka_mirror_proxy::refresh", debug[0]
    assert isinstance(debug[0]["fields"].get("brokers"), int), f"the debug line's fields: {debug[0]}"

    assert set_filter(json_proxy, "info") == {"filter": "info"}
    lines = json_lines(json_proxy)
    changes = [i for i, l in enumerate(lines) if l["fields"].get("message") == "log filter changed through the admin endpoint"]
    assert len(changes) >= 2, f"each change is logged: {changes}"
    assert lines[changes[-1]]["fields"].get("now") == "info", lines[changes[-1]]
    # Several refreshes after the change back (counted on /metrics) must have logged nothing at DEBUG.
    refreshes = json_proxy.metric("kmp_metadata_refreshes_total")
    wait_until("three more metadata refreshes", lambda: json_proxy.metric("kmp_metadata_refreshes_total") >= refreshes + 3, timeout=20)
    after = refresh_debug_lines(json_lines(json_proxy)[changes[-1] + 1:])
    assert not after, f"back at `info`, no more debug lines: {after[:3]}"
    assert rest(json_proxy, "GET", "/v1/log-level") == (200, {"filter": "info"})


def test_an_invalid_filter_is_a_400_with_the_parse_error_and_changes_nothing(json_proxy):
    for bad in ["kafka_mirror_engine=loud", "info,[{", ""]:
        status, body = rest(json_proxy, "PUT", "/v1/log-level", {"filter": bad})
        assert status == 400, f"PUT /v1/log-level {bad!r}: {status} {body}"
        assert f"invalid log filter `{bad}`" in body["message"], f"the message names the filter and the reason: {body}"
    status, body = rest(json_proxy, "PUT", "/v1/log-level", {"level": "debug"})
    assert status == 400 and "filter" in body["message"], f"a body without `filter`: {status} {body}"
    assert rest(json_proxy, "GET", "/v1/log-level") == (200, {"filter": "info"}), "the filter in force stays"
    status, doc = rest(json_proxy, "GET", "/v1/openapi.json")
    assert status == 200 and {"get", "put"} <= doc["paths"]["/v1/log-level"].keys(), "the route is in the OpenAPI document"


def test_a_remote_caller_needs_the_admin_token_to_see_or_change_the_log_level(json_proxy):
    ip = non_loopback_ipv4()
    for token in (None, "wrong"):
        status, body = rest(json_proxy, "PUT", "/v1/log-level", {"filter": "debug"}, host=ip, token=token)
        assert status == 403, f"a remote PUT with token {token!r} from {ip} is refused: {status} {body}"
        status, body = rest(json_proxy, "GET", "/v1/log-level", host=ip, token=token)
        assert status == 401, f"a remote GET with token {token!r} from {ip} is refused: {status} {body}"
    assert rest(json_proxy, "GET", "/v1/log-level") == (200, {"filter": "info"}), "nothing changed"
    status, body = rest(json_proxy, "PUT", "/v1/log-level", {"filter": "warn"}, host=ip, token=TOKEN)
    assert (status, body) == (200, {"filter": "warn"}), f"with the token a remote caller may change it: {status} {body}"
    set_filter(json_proxy, "info")


def test_kmp_log_format_selects_json_and_text_is_the_default(destination, workdir):
    proxy = ProxyProcess(destination.bootstrap, workdir, env={"KMP_LOG_FORMAT": "json"}).start()
    try:
        assert any(l["fields"].get("message") == "admin endpoint listening" for l in json_lines(proxy)), proxy.log()
    finally:
        assert proxy.stop() == 0
    proxy = ProxyProcess(destination.bootstrap, workdir, env={"KMP_LOG_FORMAT": None}).start()
    try:
        text = proxy.log()
        assert "admin endpoint listening" in text and not text.lstrip().startswith("{"), f"text lines by default: {text[:500]}"
    finally:
        assert proxy.stop() == 0


def test_an_unknown_log_format_or_an_invalid_log_filter_is_refused_at_start():
    bad_format = subprocess.run([str(PROXY_BIN), "run", "--log-format", "xml"], capture_output=True, text=True, timeout=30)
    assert bad_format.returncode == 2 and "json" in bad_format.stderr, f"names the formats: {bad_format.returncode} {bad_format.stderr}"
    bad_filter = subprocess.run([str(PROXY_BIN), "run", "--log", "kafka_mirror_engine=loud", "--upstream", "127.0.0.1:1"],
                                capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    assert bad_filter.returncode == 2 and "invalid log filter" in bad_filter.stderr, \
        f"an invalid --log is refused with the reason: {bad_filter.returncode} {bad_filter.stderr}"
