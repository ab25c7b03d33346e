"""A stop records the line each partition's copy reached — the last mirrored offset and the source
leader epoch of the record before it, and the source cluster's id — in the state topic, together
with the topic's writable flag, and DescribeClusterMirrors answers it: per partition in the proxy's
`LastMirror` extension (REST's and the CLI's `last_mirror_epoch` beside `destination_offset`), and
to a failing-back cluster's lookup (the request's tagged `ClusterId` and `LastMirrorEpochLookups`,
the response's tagged `LookupResults`, as the prototype's schemas lay them out). Against a source
whose partitions changed leader epoch mid-history, stopped while the source is down (a disaster),
and after a proxy restart (read back from the state topic). Issue #39, "failover records the line"."""

from __future__ import annotations

import signal
import struct
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import ProxyProcess, unique
from kafka_cluster import KafkaCluster
from kmp_common import wait_until
from mirror import call, cli_json, describe, high_watermarks, mirror_config, produce_plain, wait_caught_up
from ports import free_port_block

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import sec_wire as w  # noqa: E402 - the security suite's frame encoder and reader

PARTITIONS = 2
LAST_MIRROR_TAG = 10_003


def last_record_epochs(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """The leader epoch the source appended each partition's last record in (what the record
    batches carry, as a consumer reads it)."""
    ends = high_watermarks(bootstrap, topic, partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("epochs"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, ends[p] - 1) for p in range(partitions)])
    epochs: dict[int, int] = {}
    deadline = time.time() + 30
    while len(epochs) < partitions and time.time() < deadline:
        for m in c.consume(10, 0.5):
            assert not m.error(), m.error()
            if m.offset() == ends[m.partition()] - 1:
                epochs[m.partition()] = m.leader_epoch()
    c.close()
    assert len(epochs) == partitions, f"the last record of every partition read: {epochs}"
    return [epochs[p] for p in range(partitions)]


# ---- DescribeClusterMirrors with a failback lookup, encoded here from the prototype's schema ----

def describe_with_lookup(port: int, cluster_id: str, topic_id: bytes, partitions: list[int]) -> tuple[list, list]:
    """Sends DescribeClusterMirrors v0 (all mirrors) with ClusterId (tag 0) and one lookup (tag 1);
    returns the partitions' `(topic, partition, destination offset, state, LastMirror extension or
    None)` and the LookupResults (tag 0) as `(topic id, [(partition, last mirror epoch)])`."""
    lookups = w.carray([topic_id + w.carray([w.i32(p) for p in partitions]) + w.TAGS])
    cluster = w.cstring(cluster_id)
    tags = w.uvarint(2) + w.uvarint(0) + w.uvarint(len(cluster)) + cluster + w.uvarint(1) + w.uvarint(len(lookups)) + lookups
    body = w.uvarint(0) + w.i8(0) + tags  # MirrorNames null = all, IncludeAuthorizedOperations false
    r = w.Reader(w.roundtrip("127.0.0.1", port, w.request(99, 0, 7, body, flexible=True), flexible_header=True))
    r.i32(), r.i16(), r.cstring()
    described = []
    for _ in range(r.carray_len()):
        r.i16(), r.cstring(), r.i32()
        for _ in range(r.carray_len()):
            topic = r.cstring()
            for _ in range(r.carray_len()):
                index, _src, dst, _lag, state, _retry, _err = r.i32(), r.i64(), r.i64(), r.i64(), r.cstring(), r.i16(), r.cstring()
                line = next((struct.unpack_from(">iq", v, 0) for tag, v in r.tagged() if tag == LAST_MIRROR_TAG), None)
                described.append((topic, index, dst, state, line))
            r.tags()
        r.tags()
    results = []
    for tag, value in r.tagged():
        if tag == 0:
            v = w.Reader(value)
            for _ in range(v.carray_len()):
                tid, parts = v.uuid(), []
                for _ in range(v.carray_len()):
                    parts.append((v.i32(), v.i32()))
                    v.tags()
                v.tags()
                results.append((tid, parts))
    assert r.pos == len(r.data), "the whole answer was read"
    return described, results


@pytest.mark.long  # a 3-broker source of its own (60-140 s); quick tier: test_mirror_failback's failbacks read the lines stops record
def test_a_stop_records_each_partitions_line_and_answers_a_failback_lookup_even_with_the_source_down(clusters, workdir):
    _, destination = clusters
    source = KafkaCluster("line-src", 3, free_port_block(104), workdir).start()
    proxy = None
    try:
        topic = unique("mir-line")
        admin = AdminClient({"bootstrap.servers": source.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
        produce_plain(source.bootstrap, topic, 100)
        # A leader change under each partition: its later records carry a newer epoch. A controlled
        # shutdown (SIGTERM) moves leadership at once; a SIGKILL would wait out the broker's session.
        def leader_of(p: int) -> int:
            """The partition's leader as a fresh admin client reads it now; -1 none or not known (a
            client's connection to the broker just killed can hang its request)."""
            try:
                fresh = AdminClient({"bootstrap.servers": source.bootstrap})
                node = fresh.describe_topics(TopicCollection([topic]), request_timeout=5)[topic].result(10).partitions[p].leader
            except Exception:  # noqa: BLE001 - any failure to read it is "not known yet"
                return -1
            return -1 if node is None else node.id

        for p in range(PARTITIONS):
            leader = leader_of(p)
            source.kill_broker(leader, signal.SIGTERM)
            wait_until(f"a new leader for {topic}/{p}", lambda: leader_of(p) not in (-1, leader), 60)
            source.start_broker(leader)
        produce_plain(source.bootstrap, topic, 60, start=1000)
        ends = high_watermarks(source.bootstrap, topic, PARTITIONS)
        epochs = last_record_epochs(source.bootstrap, topic, PARTITIONS)
        assert all(e >= 1 for e in epochs), f"the leader changes moved the source's epochs on: {epochs}"
        admin = AdminClient({"bootstrap.servers": source.bootstrap})
        cluster_id = admin.describe_cluster().result(30).cluster_id
        uuid = admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id
        source_topic_id = struct.pack(">qq", uuid.get_most_significant_bits(), uuid.get_least_significant_bits())

        args = mirror_config(workdir, source, [topic], name="line")
        proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        # The destination's watermarks can run ahead of the engine's accounting of the acknowledgements.
        deadline = time.time() + 30
        while True:
            parts = sorted(describe(proxy, "line", topic)["partitions"], key=lambda p: p["partition"])
            if [(p["destination_offset"], p["last_mirror_epoch"]) for p in parts] == list(zip(ends, epochs)):
                break
            assert time.time() < deadline, f"while mirroring, each partition shows how far it copied and that record's source epoch: {parts}"
            time.sleep(0.2)

        # A disaster: the source is gone; the stop still records the line, and the source's id.
        source.stop()
        status, r = call(proxy, "POST", "/v1/mirrors/line/stop", {"topics": [topic]})
        assert status == 200 and [x["error_code"] for x in r["results"]] == [0], f"stop with the source down: {r}"
        wait_until("the topic stopped", lambda: {p["state"] for p in describe(proxy, "line", topic)["partitions"]} == {"stopped"}, 30)

        def the_line_everywhere(where: str) -> None:
            parts = sorted(describe(proxy, "line", topic)["partitions"], key=lambda p: p["partition"])
            assert [(p["destination_offset"], p["last_mirror_epoch"]) for p in parts] == list(zip(ends, epochs)), f"REST {where}: {parts}"
            code, d = cli_json(proxy, "--describe", "--mirror", "line")
            rows = sorted((p for p in d["partitions"] if p["topic"] == topic), key=lambda p: p["partition"])
            assert code == 0 and [(p["destination_offset"], p["last_mirror_epoch"]) for p in rows] == list(zip(ends, epochs)), \
                f"the CLI (DescribeClusterMirrors) {where}: {rows}"
            described, results = describe_with_lookup(proxy.port, cluster_id, source_topic_id, [0, 1, 7])
            mine = sorted((i, dst, state, line) for t, i, dst, state, line in described if t == topic)
            assert mine == [(p, ends[p], "STOPPED", (epochs[p], ends[p])) for p in range(PARTITIONS)], \
                f"the partition entries' LastMirror extension {where}: {mine}"
            assert results == [(source_topic_id, [(0, epochs[0]), (1, epochs[1]), (7, -1)])], \
                f"LookupResults for the source cluster {where} (a partition it never had: -1): {results}"
            _, other = describe_with_lookup(proxy.port, "another-cluster-id-xxxx", source_topic_id, [0, 1])
            assert other == [(source_topic_id, [(0, -1), (1, -1)])], f"another cluster learns nothing {where}: {other}"

        the_line_everywhere("after the stop")
        assert proxy.stop() == 0
        proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
        wait_until("the mirror known after the restart", lambda: call(proxy, "GET", "/v1/mirrors/line")[0] == 200, 30)
        wait_until("the stopped topic loaded", lambda: {p["state"] for p in describe(proxy, "line", topic)["partitions"]} == {"stopped"}, 30)
        the_line_everywhere("after a restart (read from the state topic)")
    finally:
        if proxy is not None:
            proxy.stop()
        source.stop()
