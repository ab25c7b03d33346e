"""A new connection's first ApiVersions is answered from the broker's last answer while the
proxy opens the connection's upstream (`upstream.api_versions_cache_ms`): the answer must be the
one the broker gives, field for field apart from the correlation id and a finalized-features epoch
that may lag the broker's current one (a KRaft broker advances it with its metadata log); the request still reaches the
broker and its answer is never delivered twice; the connection then works like any other; an
upstream that cannot be opened still closes the connection; and with the setting at 0 nothing is
answered early."""

from __future__ import annotations

import socket
import struct
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))

from kafka_wire import closed_by_peer, metadata_v1_no_topics, read_response  # noqa: E402
from kmp_common import ProxyProcess, unique  # noqa: E402
from mirror import create
from sec_support import TcpServer, assert_alive, running_proxy, write_config  # noqa: E402

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


def test_with_the_setting_at_zero_nothing_is_answered_early(destination, workdir):
    with running_proxy(destination, workdir, {"engine": {"enabled": False}, "upstream": {"api_versions_cache_ms": 0}}) as proxy:
        for n in range(10):
            s, cid, _ = ask(proxy.port, api_versions_v3(n))
            s.close()
            assert cid == n, f"connection {n}: ApiVersions answered"
        assert proxy.metric(EARLY) == 0, "upstream.api_versions_cache_ms = 0 must answer every ApiVersions from the broker"


class Relay(TcpServer):
    """A TCP relay to a real broker that can be shut (then connecting to it is refused)."""

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        super().__init__(self._pipe)

    def target_addr(self) -> tuple[str, int]:
        return (self.host, self.port)

    def _pipe(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        up = socket.create_connection(self.target, timeout=10)
        up.settimeout(None)

        def copy(a: socket.socket, b: socket.socket) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        t = threading.Thread(target=copy, args=(up, conn), daemon=True)
        t.start()
        copy(conn, up)
        t.join()

    def close(self) -> None:
        # Wakes the accept thread (closing alone leaves a blocked accept() accepting on Linux),
        # so connecting is refused from now on.
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        super().close()


def test_an_early_answer_does_not_hide_an_upstream_that_cannot_be_opened(destination, workdir):
    relay = Relay(destination.bootstrap.split(",")[0])
    try:
        with running_proxy_to(relay.addr, workdir) as proxy:
            s, _, _ = ask(proxy.port, api_versions_v3(1))
            s.close()
            relay.close()
            try:
                socket.create_connection(relay.target_addr(), timeout=2).close()
                raise AssertionError("the relay still accepts after it was shut")
            except ConnectionRefusedError:
                pass
            errors_before = proxy.metric("kmp_upstream_connect_errors_total")
            s, cid, _ = ask(proxy.port, api_versions_v3(2))
            with s:
                assert cid == 2, "answered early although the upstream cannot be opened"
                s.sendall(metadata_v1_no_topics(3))
                assert closed_by_peer(s), "with the upstream refused the connection must close, not hang"
            assert proxy.metric("kmp_upstream_connect_errors_total") > errors_before, "the refused upstream connect is counted"
            assert_alive(proxy, "after an upstream connect failed behind an early answer")
    finally:
        relay.close()


@contextmanager
def running_proxy_to(upstream: str, workdir):
    """A proxy whose bootstrap broker is ``upstream`` (the relay) instead of the cluster."""
    args, _ = write_config(workdir, {"engine": {"enabled": False}})
    proxy = ProxyProcess(upstream, workdir, args)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
