"""Bad input never hurts anyone else: malformed, oversized or unknown frames close only the
connection that sent them, while another client keeps producing. Also: pipelined requests are
answered in order, acks=0 produce works (no response is expected or invented). Seeded random
bytes on many connections need no broker: proxy/tests/hostile_frames.rs."""

import random
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kafka_wire as wire
from conftest import unique, wait_for_leader

BAD_FRAMES = {
    "random garbage": bytes(random.Random(7).randrange(256) for _ in range(4096)),
    "oversized length": struct.pack(">i", 0x7FFFFFFF) + b"xxxx",
    "negative length": struct.pack(">i", -5) + b"xxxx",
    "frame shorter than a request header": struct.pack(">i", 3) + b"abc",
    "unknown api key": wire.request(999, 0, 1, b""),
    "unsupported version of a known api": wire.request(3, 99, 1, b""),
    "truncated produce body": wire.request(0, 9, 1, b"\x05"),
}


@pytest.mark.parametrize("name", list(BAD_FRAMES))
def test_bad_frame_closes_only_its_connection_while_another_client_keeps_producing(proxy, name):
    topic = unique("robust")
    delivered, failed = [], []
    stop = threading.Event()

    def produce():
        p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 1})
        i = 0
        while not stop.is_set():
            p.produce(topic, value=f"r{i}", on_delivery=lambda e, m: (failed if e else delivered).append(e or m))
            p.poll(0.01)
            i += 1
        p.flush(30)

    errors_before = proxy.metric("kmp_frame_errors_total", 'side="client"')
    worker = threading.Thread(target=produce)
    worker.start()
    try:
        deadline = time.time() + 30
        while not delivered and time.time() < deadline:
            time.sleep(0.05)
        assert delivered, "the healthy producer delivers before the bad frame"
        count_at_attack = len(delivered)

        bad = socket.create_connection(("127.0.0.1", proxy.port))
        healthy = socket.create_connection(("127.0.0.1", proxy.port))
        bad.sendall(BAD_FRAMES[name])
        assert wire.closed_by_peer(bad), f"the proxy closes the connection that sent {name!r}"
        healthy.sendall(wire.api_versions_v0(11))
        healthy.settimeout(10)
        assert wire.read_response(healthy)[0] == 11, "an idle connection opened alongside is unaffected"
        healthy.close()

        deadline = time.time() + 30
        while len(delivered) < count_at_attack + 50 and time.time() < deadline:
            time.sleep(0.05)
        assert len(delivered) >= count_at_attack + 50, "the healthy producer keeps delivering after the bad frame"
    finally:
        stop.set()
        worker.join(60)
    assert not failed, f"no record of the healthy producer failed: {failed[:3]}"
    assert proxy.alive(), "the proxy process survived"
    assert proxy.metric("kmp_frame_errors_total", 'side="client"') > errors_before, "the frame error is counted"


def test_pipelined_requests_are_answered_in_order(proxy):
    s = socket.create_connection(("127.0.0.1", proxy.port))
    s.settimeout(10)
    ids = list(range(100, 160))
    s.sendall(b"".join(wire.api_versions_v0(i) if i % 2 else wire.metadata_v1_no_topics(i) for i in ids))
    got = [wire.read_response(s)[0] for _ in ids]
    s.close()
    assert got == ids, "responses come back in request order with their own correlation ids"

def test_acks_zero_produce_needs_no_response_and_loses_nothing(proxy):
    """On loopback with no fault nothing may be lost: all 1000 records, in order, at offsets
    0-999. acks=0 gives no delivery report to wait for, so the reader waits until the high
    watermark seen through the proxy reaches 1000 (the last records may still be replicating when
    the producer's flush returns) before it reads."""
    topic = unique("acks0")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    wait_for_leader(admin, topic)
    c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("acks0"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    tp = TopicPartition(topic, 0)
    # The leader answers ListOffsets only once it really leads the new partition: before that an
    # acks=0 produce would be refused with no response to retry on.
    deadline = time.time() + 30
    while True:
        try:
            assert c.get_watermark_offsets(tp, timeout=5) == (0, 0)
            break
        except KafkaException:
            assert time.time() < deadline, f"{topic}-0 has a working leader within 30 s"
            time.sleep(0.1)
    p = Producer({"bootstrap.servers": proxy.bootstrap, "acks": 0, "linger.ms": 5})
    want = [f"a{i}" for i in range(1000)]
    for value in want:
        p.produce(topic, value=value, partition=0)
    assert p.flush(30) == 0, "every acks=0 record left the producer"
    deadline, ends = time.time() + 30, None
    while time.time() < deadline:
        ends = c.get_watermark_offsets(tp, timeout=10)
        if ends[1] >= len(want):
            break
        time.sleep(0.1)
    assert ends == (0, len(want)), f"the partition holds exactly the {len(want)} acks=0 records (log start, high watermark): {ends}"
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.time() + 30
    while len(got) < len(want) and time.time() < deadline:
        got += [(m.offset(), m.value().decode()) for m in c.consume(500, 0.2) if not m.error()]
    c.close()
    assert got == list(enumerate(want)), (
        f"acks=0 records arrive complete and in order: got {len(got)} of {len(want)}, "
        f"first difference at {next((i for i, (a, b) in enumerate(zip(got, enumerate(want))) if a != b), min(len(got), len(want)))}")
