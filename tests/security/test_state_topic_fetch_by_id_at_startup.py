"""Issue 35, L-a: right after a start the proxy does not know the state topic's id yet. Before, a
Fetch v13 naming it by id in that first second opened a fetch session on it, and tens of thousands
of incremental fetches then read the mirror state for 30 s. Now a request that names topics by id
waits until the id is known (bounded; then the connection closes, which clients retry), and is
then refused for the state topic like any other. The proxy is restarted while raw clients fetch
the state topic by id from the moment its port opens: no answer carries its records."""

import socket
import struct
import threading
import time

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

import sec_wire as wire
from sec_support import mirror_decl, mirrored_topic, running_proxy, wait_caught_up

RESTARTS = 2


def fetch_v13(correlation_id: int, topic_id: bytes) -> bytes:
    """Fetch v13 of partition 0 of ``topic_id`` from offset 0 (a new session)."""
    partition = wire.i32(0) + wire.i32(-1) + wire.i64(0) + wire.i32(-1) + wire.i64(-1) + wire.i32(1 << 20) + wire.TAGS
    topic = topic_id + wire.uvarint(2) + partition + wire.TAGS
    body = (wire.i32(-1) + wire.i32(50) + wire.i32(1) + wire.i32(1 << 20) + wire.i8(0) + wire.i32(0) + wire.i32(0)
            + wire.uvarint(2) + topic + wire.uvarint(1) + wire.cstring("") + wire.TAGS)
    return wire.request(1, 13, correlation_id, body, flexible=True)


def state_records_in(body: bytes, topic_id: bytes) -> int:
    """Bytes of records a Fetch v13 answer carries for ``topic_id``."""
    r = wire.Reader(body)
    r.i32(), r.i16(), r.i32()
    found = 0
    for _ in range(r.carray_len()):
        tid = r._take(16)
        for _ in range(r.carray_len()):
            r.i32(), r.i16(), r.i64(), r.i64(), r.i64()
            for _ in range(max(r.carray_len(), 0)):
                r.i64(), r.i64(), r.tags()
            r.i32()
            n = r.uvarint() - 1
            records = r._take(n) if n > 0 else b""
            r.tags()
            if tid == topic_id:
                found += len(records)
        r.tags()
    return found


class Fetcher(threading.Thread):
    def __init__(self, port: int, topic_id: bytes):
        super().__init__(daemon=True)
        self.port, self.topic_id = port, topic_id
        self.stop, self.leaked, self.answers = threading.Event(), 0, 0

    def run(self):
        cid = 0
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    while not self.stop.is_set():
                        cid += 1
                        s.sendall(fetch_v13(cid, self.topic_id))
                        _, body = wire.read_response(s, flexible_header=True)
                        self.answers += 1
                        self.leaked += state_records_in(body, self.topic_id)
            except (OSError, ValueError, AssertionError):
                time.sleep(0.01)


def test_a_fetch_by_the_state_topics_id_right_after_start_never_reads_it(clusters, workdir):
    source, destination = clusters
    topic = mirrored_topic(source, records=10, prefix="sec-la")
    with running_proxy(destination, workdir, mirrors=[mirror_decl("la", source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)
        direct = AdminClient({"bootstrap.servers": destination.bootstrap})
        desc = direct.describe_topics(TopicCollection([proxy.state_topic]))[proxy.state_topic].result(30)
        tid = desc.topic_id
        topic_id = struct.pack(">qq", tid.get_most_significant_bits(), tid.get_least_significant_bits())
        assert topic_id != bytes(16), "precondition: the destination reports the state topic's id"
        for i in range(RESTARTS):
            proxy.stop()
            fetcher = Fetcher(proxy.port, topic_id)
            fetcher.start()
            proxy.start()
            time.sleep(3)
            fetcher.stop.set()
            fetcher.join(10)
            assert fetcher.leaked == 0, (f"restart {i + 1}: {fetcher.leaked} bytes of the state topic were read by id through the proxy "
                                         f"({fetcher.answers} answers)")
