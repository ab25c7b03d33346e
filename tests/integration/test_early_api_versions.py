"""A new connection's first ApiVersions is answered from the broker's last answer while the
proxy opens the connection's upstream (`upstream.api_versions_cache_ms`): the answer must be the
one the broker gives, field for field apart from the correlation id and a finalized-features epoch
that may lag the broker's current one (a KRaft broker advances it with its metadata log); the request still reaches the
broker and its answer is never delivered twice; the connection then works like any other. That an
upstream that cannot be opened still closes the connection, and that with the setting at 0 nothing
is answered early, needs no broker: proxy/tests/early_api_versions.rs."""

from __future__ import annotations

import socket
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

from kafka_wire import metadata_v1_no_topics, read_response  # noqa: E402
from kmp_common import unique  # noqa: E402
from mirror import create
from sec_support import assert_alive, running_proxy  # noqa: E402

EARLY = "kmp_api_versions_answered_early_total"


def api_versions_v3(correlation_id: int) -> bytes:
    """ApiVersions v3 (flexible: request header v2, client software name and version)."""
    client_id = b"kmp-early"
    header = struct.pack(">hhih", 18, 3, correlation_id, len(client_id)) + client_id + b"\x00"
    body = bytes([len("kmp-test") + 1]) + b"kmp-test" + bytes([len("1.0") + 1]) + b"1.0" + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def uvarint(b: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = b[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def versions_v3(body: bytes) -> tuple[bytes, dict[int, bytes]]:
    """An ApiVersions v3 answer's body (after the correlation id) as its fixed part (error code,
    API keys and versions, throttle time) and its tagged fields by tag."""
    at = 2  # error_code
    n, at = uvarint(body, at)
    for _ in range(n - 1):  # compact array: length + 1
        at += 6  # api_key, min_version, max_version
        tags, at = uvarint(body, at)
        assert tags == 0, "an API key entry with tagged fields"
    at += 4  # throttle_time_ms
    fixed = body[:at]
    count, at = uvarint(body, at)
    tagged = {}
    for _ in range(count):
        tag, at = uvarint(body, at)
        size, at = uvarint(body, at)
        tagged[tag] = body[at:at + size]
        at += size
    assert at == len(body), f"{len(body) - at} bytes after the tagged fields"
    return fixed, tagged


# ApiVersions v3's tagged field 1: the finalized features' epoch, which a KRaft broker advances
# with its metadata log (every topic the suite creates); an early answer may carry one up to
# `api_versions_cache_ms` old.
FINALIZED_FEATURES_EPOCH = 1


def assert_same_answer(early: bytes, broker: bytes, what: str) -> None:
    """The early answer is the broker's, but for a finalized-features epoch no newer than now."""
    (fixed, tagged), (broker_fixed, broker_tagged) = versions_v3(early), versions_v3(broker)
    assert fixed == broker_fixed, f"{what}: API keys, versions or error code differ from the broker's (clamped) answer"
    assert tagged.keys() == broker_tagged.keys(), f"{what}: tagged fields {sorted(tagged)} against the broker's {sorted(broker_tagged)}"
    for tag, value in tagged.items():
        if tag != FINALIZED_FEATURES_EPOCH:
            assert value == broker_tagged[tag], f"{what}: tagged field {tag} differs from the broker's answer"
    epoch = int.from_bytes(tagged[FINALIZED_FEATURES_EPOCH], "big", signed=True)
    assert 0 <= epoch, f"{what}: finalized features epoch {epoch}"


def ask(port: int, frame: bytes) -> tuple[socket.socket, int, bytes]:
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    s.sendall(frame)
    correlation_id, body = read_response(s)
    return s, correlation_id, body


def test_a_first_apiversions_is_answered_early_with_the_brokers_answer_and_the_connection_then_works(destination, workdir):
    with running_proxy(destination, workdir, {"engine": {"enabled": False}}) as proxy:
        first, cid, forwarded = ask(proxy.port, api_versions_v3(1))
        first.close()
        assert FINALIZED_FEATURES_EPOCH in versions_v3(forwarded)[1], "a KRaft broker's answer carries the finalized features epoch"
        assert cid == 1, "the first connection's ApiVersions answered with its correlation id"
        assert proxy.metric(EARLY) == 0, "nothing is kept before a broker answered once, so nothing is answered early"
        for n in range(20):
            if n == 5:
                # The broker's metadata log (and with it the finalized features epoch) moves on.
                create(destination.bootstrap, unique("early-epoch"), 1)
            s, cid, body = ask(proxy.port, api_versions_v3(1000 + n))
            with s:
                assert cid == 1000 + n, f"connection {n}: ApiVersions answered with its own correlation id, got {cid}"
                assert_same_answer(body, forwarded, f"connection {n}")
                later = int.from_bytes(versions_v3(body)[1][FINALIZED_FEATURES_EPOCH], "big", signed=True)
                first_epoch = int.from_bytes(versions_v3(forwarded)[1][FINALIZED_FEATURES_EPOCH], "big", signed=True)
                assert later >= first_epoch, f"connection {n}: an early answer older than the first connection's (epoch {later} < {first_epoch})"
                # The forwarded ApiVersions' own answer must be swallowed: the next answer on the
                # wire belongs to the next request.
                s.sendall(metadata_v1_no_topics(5000 + n))
                cid, meta = read_response(s)
                assert cid == 5000 + n, f"connection {n}: after an early ApiVersions the next answer must be Metadata's, got correlation id {cid}"
                assert len(meta) > 20, f"connection {n}: a Metadata answer with brokers, got {len(meta)} bytes"
        early = proxy.metric(EARLY)
        assert early >= 10, f"most of 20 connections after the first should be answered early, {early} were"
        assert_alive(proxy, "after early ApiVersions answers")
