"""Large Fetch responses through the client-facing TLS listener arrive whole, at once. A regression
test for a stall the TLS benchmark found: a response write could leave its encrypted tail buffered
in the TLS layer until the client's next request — which a consumer with one fetch outstanding never
sends — so the fetch timed out (30 s) and was retried. It depends on the socket being full exactly
when a response's last bytes are handed over, so it is not deterministic: the benchmark saw 1–4 per
300,000-record consume. This exercises the path three ways (librdkafka, a slow raw reader with a
small receive window, Kafka's own consumer twice) with short request timeouts and fails on any
timed-out request or stalled response; it did not catch the unfixed binary in the runs made, the
benchmark (bench/tls_bench.py, "client requests timed out") is the stronger check."""

from __future__ import annotations

import subprocess
import time

import socket
import ssl
import struct
import sys
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kmp_common import classpath, unique
from tls.proxy_tls import client, listener_tls, running_proxy, suite_env  # noqa: F401  (fixture)
from tls.tls_clients import create_topic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import sec_wire as w  # noqa: E402

RECORDS = 60_000
VALUE = b"x" * 1024
PARTITIONS = 3


def test_a_consumer_reads_large_fetches_through_the_tls_listener_without_a_timed_out_request(suite_env, secure_destination):
    direct = client(suite_env, "mtls", cert="app_client").librdkafka(secure_destination.bootstrap_for("SSL"))
    topic = unique("tls-fetch")
    create_topic(direct, topic, PARTITIONS)
    p = Producer({**direct, "linger.ms": 20, "batch.size": 1_000_000, "compression.type": "none"})
    for i in range(RECORDS):
        p.produce(topic, value=VALUE, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "producing the data set directly"

    sections = {"listener.tls": listener_tls(suite_env.certs), "upstream.properties": {"security.protocol": "PLAINTEXT"}, "engine": {"enabled": False}}
    with running_proxy(suite_env, secure_destination.bootstrap_for("INTERNAL"), sections, "tls-large-fetch") as proxy:
        logs: list[str] = []

        class Capture:
            def log(self, level, msg, *args, **kwargs):
                logs.append(msg % args if args else str(msg))

        conf = client(suite_env, "tls").librdkafka(proxy.bootstrap)
        c = Consumer({**conf, "group.id": unique("tls-fetch"), "enable.auto.commit": False,
                      "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 10 * 1024 * 1024,
                      "socket.timeout.ms": 8000, "logger": Capture(), "log_level": 7, "debug": "broker"})
        try:
            c.assign([TopicPartition(topic, part, 0) for part in range(PARTITIONS)])
            got, deadline = 0, time.time() + 180
            while got < RECORDS and time.time() < deadline:
                for m in c.consume(1000, 0.5):
                    if m.error():
                        raise KafkaException(m.error())
                    got += 1
        finally:
            c.close()
        # A slow reader, deterministic: the proxy's socket is full when it hands over the response's
        # last bytes, which then sit in the TLS layer unless the proxy flushes them.
        fetch = w.request(1, 4, 7, w.i32(-1) + w.i32(100) + w.i32(1) + w.i32(64 << 20) + w.i8(0)
                          + w.array([w.string(topic) + w.array([w.i32(p) + w.i64(0) + w.i32(16 << 20) for p in range(PARTITIONS)])]))
        ctx = ssl.create_default_context(cafile=str(suite_env.certs.ca.cert))
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        raw.settimeout(15)
        raw.connect(("127.0.0.1", proxy.port))
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(fetch)
            head = b""
            while len(head) < 4:
                head += s.recv(4 - len(head))
            (size,) = struct.unpack(">i", head)
            assert size > 8 << 20, f"the fetch response is large ({size} bytes)"
            received = 0
            try:
                while received < size:
                    chunk = s.recv(min(32 * 1024, size - received))
                    assert chunk, "the proxy closed the connection mid-response"
                    received += len(chunk)
                    time.sleep(0.002)
            except TimeoutError:
                raise AssertionError(f"the response stalled after {received} of {size} bytes through the TLS listener (slow reader)") from None

        # Kafka's own consumer (one fetch in flight per broker, as in the benchmark that found it).
        log4j = suite_env.path("tools-log4j2", ".properties")
        log4j.write_text("status = warn\nappender.err.type = Console\nappender.err.name = ERR\nappender.err.target = SYSTEM_ERR\n"
                         "appender.err.layout.type = PatternLayout\nappender.err.layout.pattern = %p %m (%c)%n\n"
                         "rootLogger.level = ERROR\nrootLogger.appenderRef.err.ref = ERR\n"
                         "logger.network.name = org.apache.kafka.clients.NetworkClient\nlogger.network.level = INFO\n")
        props = suite_env.path("tls-fetch-consumer", ".properties")
        props.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={suite_env.certs.ca.cert}\n"
                         "request.timeout.ms=8000\nfetch.max.bytes=52428800\nmax.partition.fetch.bytes=10485760\n")
        for round_ in range(2):
            out = subprocess.run(["java", "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath(),
                                  "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", proxy.bootstrap, "--topic", topic,
                                  "--messages", str(RECORDS), "--timeout", "60000", "--consumer.config", str(props),
                                  "--group", unique("tls-fetch-java")], capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, f"ConsumerPerformance through the TLS listener failed:\n{out.stderr[-3000:]}"
            stalls = out.stderr.count("due to request timeout")
            assert stalls == 0, f"round {round_}: {stalls} requests of the Java consumer timed out through the TLS listener (a stalled response):\n{out.stderr[-3000:]}"
        timed_out = [line for line in logs if "timed out" in line.lower() or "REQTMOUT" in line]
        assert got == RECORDS, f"read {got} of {RECORDS} records through the TLS listener; timeouts: {timed_out[:5]}"
        assert not timed_out, f"{len(timed_out)} requests timed out through the TLS listener (a stalled response):\n" + "\n".join(timed_out[:5])
