"""Issue 35, N5: in termination mode nothing unauthenticated holds memory or time. Before, a SCRAM
client-first message of 90 MiB was kept until the exchange ended: 8 connections held 1.45 GiB for up
to the 10-minute idle timeout. Now a frame before authentication is capped at
`listener.auth.max_receive_bytes` (Kafka's `sasl.server.max.receive.size`, 512 KiB) and a client
has `listener.auth.timeout_ms` to authenticate (both checked without a broker in
proxy/tests/preauth_limits.rs); here: a real SCRAM client (librdkafka) still logs in and then
produces requests over the cap to a real broker."""

import os

from confluent_kafka import Producer

from sec_support import create_topic, terminating_proxy, unique

USER, PASSWORD = "alice", "alice-secret-pw"
AUTH_TIMEOUT_MS = 2000


def terminating(destination, workdir, **auth):
    return terminating_proxy(destination, workdir, {USER: PASSWORD}, timeout_ms=AUTH_TIMEOUT_MS, **auth)


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
