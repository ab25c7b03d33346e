"""Issue 35, N5: in termination mode nothing unauthenticated holds memory or time. Before, a SCRAM
client-first message of 90 MiB was kept until the exchange ended: 8 connections held 1.45 GiB for up
to the 10-minute idle timeout. Now a frame before authentication is capped at
`listener.auth.max_receive_bytes` (Kafka's `sasl.server.max.receive.size`, 512 KiB) and a client
has `listener.auth.timeout_ms` to authenticate; real SCRAM clients still log in."""

import os
import socket
import time

from confluent_kafka import Producer

import sec_wire as wire
from sec_support import assert_alive, create_topic, proc_status, terminating_proxy, unique

USER, PASSWORD = "alice", "alice-secret-pw"
HUGE = 90 * 1024 * 1024
CONNECTIONS = 8
AUTH_TIMEOUT_MS = 2000


def terminating(destination, workdir, **auth):
    return terminating_proxy(destination, workdir, {USER: PASSWORD}, timeout_ms=AUTH_TIMEOUT_MS, **auth)


def handshake(s: socket.socket) -> None:
    s.sendall(wire.sasl_handshake_v1(1, "SCRAM-SHA-256"))
    _, body = wire.read_response(s)
    assert wire.parse_error_first(body) == 0, "SaslHandshake for SCRAM-SHA-256 accepted"


def test_a_90_mib_scram_first_message_before_authentication_is_refused_at_its_length(destination, workdir):
    with terminating(destination, workdir) as proxy:
        before = proc_status(proxy.pid, "VmRSS")
        socks = []
        try:
            for i in range(CONNECTIONS):
                s = wire.connect("127.0.0.1", proxy.port)
                handshake(s)
                # SaslAuthenticate v1 announcing a 90 MiB client-first message, and its first bytes.
                s.sendall(wire.i32(HUGE) + wire.i16(36) + wire.i16(1) + wire.i32(2) + wire.string("kmp-sec") + b"\x00" * 4096)
                socks.append(s)
            for i, s in enumerate(socks):
                assert wire.closed_by_peer(s, timeout=5), f"connection {i}: a 90 MiB frame before authentication was not refused"
            assert_alive(proxy, f"after {CONNECTIONS} oversized pre-authentication frames")
            grown = proc_status(proxy.pid, "VmHWM") - before
            assert grown < 64 * 1024, f"{CONNECTIONS} announced 90 MiB SCRAM messages grew the proxy's peak memory by {grown // 1024} MiB"
        finally:
            for s in socks:
                s.close()
        assert "frame" in proxy.log().lower(), "the refusal is logged"


def test_a_client_that_does_not_authenticate_in_time_is_disconnected(destination, workdir):
    with terminating(destination, workdir) as proxy:
        s = wire.connect("127.0.0.1", proxy.port)
        try:
            assert wire.api_versions_ok(s), "ApiVersions is answered before authentication"
            handshake(s)
            started = time.time()
            closed = wire.closed_by_peer(s, timeout=AUTH_TIMEOUT_MS / 1000 + 5)
            waited = time.time() - started
        finally:
            s.close()
        assert closed, f"a connection that never authenticated was still open {AUTH_TIMEOUT_MS / 1000 + 5:.0f} s after its handshake"
        assert waited >= AUTH_TIMEOUT_MS / 1000 - 0.5, f"closed after {waited:.1f} s, before listener.auth.timeout_ms"


def test_a_real_scram_client_with_a_request_over_the_preauth_cap_still_works_after_logging_in(destination, workdir):
    with terminating(destination, workdir, max_receive_bytes=64 * 1024) as proxy:
        p = Producer({"bootstrap.servers": proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                      "sasl.username": USER, "sasl.password": PASSWORD, "linger.ms": 50, "batch.size": 1_000_000,
                      "message.timeout.ms": 30000})
        topic = unique("preauth")
        create_topic(destination.bootstrap, topic)
        errors = []
        for i in range(40):  # ~400 KiB in one Produce: over the pre-authentication cap, fine after login
            p.produce(topic, value=os.urandom(10_000), on_delivery=lambda err, _m: err and errors.append(err))
        assert p.flush(40) == 0 and not errors, f"an authenticated SCRAM client could not produce: {errors[:3]}"
