"""Small source batches are merged into larger destination batches (mirror setting
``coalesce_max_bytes``), against the real clusters: a source whose producers do not batch holds one
record per batch, and without merging the copy costs one Produce batch per record.

One source topic is filled with one-record batches in every codec (idempotent and plain
producers, keys, null values, headers, timestamps out of order) plus a partition of one-record
transactions, committed and aborted (replayed in destination transactions, the markers at the
source's offsets; transactional batches are never merged). Two mirrors copy it into two
destination topics in one proxy: one with the default (merging), one with
``coalesce_max_bytes = 0``. Both must equal the source record for record at identical offsets,
through the proxy and directly, each isolation level against the same level of the source
(aborted records included read_uncommitted); the merged copy must hold far fewer batches than the
source (the transactions' partition exactly the source's batches), the unmerged one exactly as
many.
"""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kafka_wire
from conftest import ProxyProcess, unique
from mirror import wait_caught_up
from records import assert_same_records, batch_headers, fetch_v4_records, read_from, strip_fillers, watermarks

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TXN_PARTITION = len(CODECS)
PARTITIONS = len(CODECS) + 1
PER_PARTITION = 240
# Recent (older records would fall to the brokers' 7-day time retention), out of order.
BASE_TS = int(time.time() * 1000) - 60_000


def produce_one_record_batches(bootstrap: str, topic: str, tag: str) -> None:
    """PER_PARTITION records to each codec's partition, one record per batch, then one-record
    transactions to the last partition (every third aborted)."""
    for p, codec in enumerate(CODECS):
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                             "compression.type": codec, "enable.idempotence": p % 2 == 0})
        for i in range(PER_PARTITION):
            headers = [("h", f"{tag}-{i}".encode()), ("dup", b"a"), ("dup", b"b")] if i % 3 else None
            producer.produce(topic, partition=p, key=None if i % 11 == 3 else f"{tag}-k{i % 17}".encode(),
                             value=None if i % 13 == 6 else f"{tag}-{codec}-{i}".encode() * (1 + i % 5),
                             headers=headers, timestamp=BASE_TS + (i * 7919) % 5000)
        assert producer.flush(60) == 0, f"{topic}-{p}: every {codec} record acknowledged"
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("coalesce-tx"), "linger.ms": 0,
                   "batch.num.messages": 1, "compression.type": "lz4"})
    tx.init_transactions(30)
    for n in range(40):
        tx.begin_transaction()
        for i in range(3):
            tx.produce(topic, partition=TXN_PARTITION, key=f"t{n}-{i}".encode(), value=f"{tag}-txn-{n}-{i}".encode())
            tx.flush(30)  # each record its own batch
        (tx.abort_transaction if n % 3 == 1 else tx.commit_transaction)(30)


def batches(addr: str, topic: str, partition: int) -> list[tuple[int, int]]:
    """(base offset, record count) of every batch of the partition, read from its leader at
    ``addr`` with Fetch v4 (read_uncommitted) from offset 0 to the end."""
    host, port = addr.rsplit(":", 1)
    out: list[tuple[int, int]] = []
    offset = 0
    with socket.create_connection((host, int(port)), timeout=10) as s:
        while True:
            s.sendall(kafka_wire.fetch_v4(len(out) + 1, topic, partition, offset, 0))
            _, body = kafka_wire.read_response(s)
            got = batch_headers(fetch_v4_records(body, f"{topic}-{partition}@{offset} from {addr}"))
            if not got:
                return out
            out.extend((base, count) for base, _, count in got)
            offset = got[-1][1] + 1


def leaders(bootstrap: str, topic: str) -> dict[int, str]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    return {p: brokers[pm.leader] for p, pm in md.topics[topic].partitions.items()}


def assert_copy_equals_source(source, destination, proxy, topic: str) -> None:
    wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
    starts = {p: 0 for p in range(PARTITIONS)}
    for isolation in ("read_uncommitted", "read_committed"):
        for p in range(PARTITIONS):
            src, dst = watermarks(source.bootstrap, topic, p, isolation), watermarks(destination.bootstrap, topic, p, isolation)
            assert dst == src, f"{topic}-{p} ({isolation}): destination log start and end {dst}, source {src}"
    # Each isolation level against the same level of the source: the transactions are replayed,
    # so read_uncommitted readers see the aborted records too and read_committed readers do not.
    for isolation in ("read_uncommitted", "read_committed"):
        expected = read_from(source.bootstrap, topic, starts, isolation)
        assert_same_records(expected, read_from(proxy.bootstrap, topic, starts, isolation),
                            f"{topic} through the proxy ({isolation}) vs the source ({isolation})")
        assert_same_records(expected, strip_fillers(read_from(destination.bootstrap, topic, starts, isolation)),
                            f"{topic} directly on the destination, fillers stripped ({isolation}) vs the source ({isolation})")


def test_one_record_source_batches_land_merged_with_every_record_at_its_source_offset(clusters, workdir):
    source, destination = clusters
    tag = unique("c")
    merged_topic, plain_topic = unique("coalesce-on"), unique("coalesce-off")
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    for t in (merged_topic, plain_topic):
        admin.create_topics([NewTopic(t, PARTITIONS, 1)])[t].result(30)
        produce_one_record_batches(source.bootstrap, t, tag)
    src_batches = {}
    for t in (merged_topic, plain_topic):
        at = leaders(source.bootstrap, t)
        src_batches[t] = {p: batches(at[p], t, p) for p in range(PARTITIONS)}
        for p in range(len(CODECS)):
            assert [c for _, c in src_batches[t][p]] == [1] * PER_PARTITION, \
                f"{t}-{p}: the source holds one record per batch ({len(src_batches[t][p])} batches)"

    servers = ", ".join(f'"{s}"' for s in source.bootstrap.split(","))
    config = workdir / f"coalesce-{tag}.toml"
    config.write_text(
        f'[[mirrors]]\nname = "merged-{tag}"\nsource_bootstrap_servers = [{servers}]\ntopics = ["{merged_topic}"]\n'
        f'[[mirrors]]\nname = "unmerged-{tag}"\nsource_bootstrap_servers = [{servers}]\ntopics = ["{plain_topic}"]\n'
        'coalesce_max_bytes = 0\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]).start()
    try:
        for t in (merged_topic, plain_topic):
            assert_copy_equals_source(source, destination, proxy, t)
        def labels(mirror: str, topic: str, p: int) -> str:
            return f'mirror="{mirror}",topic="{topic}",partition="{p}"'

        for p in range(PARTITIONS):
            assert proxy.metric("kmp_mirror_failed", labels(f"merged-{tag}", merged_topic, p)) == 0, f"{merged_topic}-{p} FAILED"
            assert proxy.metric("kmp_mirror_coalesced_batches", labels(f"unmerged-{tag}", plain_topic, p)) == 0, \
                f"{plain_topic}-{p}: coalesce_max_bytes = 0 merges nothing"
        dst = {t: leaders(destination.bootstrap, t) for t in (merged_topic, plain_topic)}
        for p in range(PARTITIONS):
            plain = batches(dst[plain_topic][p], plain_topic, p)
            assert len(plain) == len(src_batches[plain_topic][p]), \
                f"{plain_topic}-{p}: unmerged, the destination holds the source's {len(src_batches[plain_topic][p])} batches, not {len(plain)}"
            merged = batches(dst[merged_topic][p], merged_topic, p)
            source_count = len(src_batches[merged_topic][p])
            coalesced = proxy.metric("kmp_mirror_coalesced_batches", labels(f"merged-{tag}", merged_topic, p))
            if p < len(CODECS):
                assert len(merged) * 10 <= source_count, \
                    f"{merged_topic}-{p} ({CODECS[p]}): {source_count} one-record source batches became {len(merged)} destination batches, expected at most a tenth"
                assert coalesced >= source_count - len(merged), f"{merged_topic}-{p}: kmp_mirror_coalesced_batches {coalesced}"
            else:
                # Transactions: transactional data is written inside its destination transaction,
                # by its producer, and never merged; each marker is the destination's own control
                # batch at the source marker's offset. The layout is the source's, batch for batch.
                assert merged == src_batches[merged_topic][p], \
                    f"{merged_topic}-{p} (transactions): the destination holds the source's batches unmerged, markers at the same offsets"
                assert coalesced == 0, f"{merged_topic}-{p} (transactions): kmp_mirror_coalesced_batches {coalesced}"
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


@pytest.mark.long  # quick tier: test_one_record_source_batches_land_merged…
def test_merged_batches_over_the_topics_max_message_bytes_fall_back_to_the_source_batches(clusters, workdir):
    """A source topic with a small ``max.message.bytes`` (copied to the destination topic) holds
    one-record batches far below it; merged, they would exceed it. The destination refuses the
    merged batch as too large and the partition must copy the source's batches as they came,
    never turn FAILED."""
    source, destination = clusters
    tag = unique("c")
    topic = unique("coalesce-small-max")
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"max.message.bytes": "8192"})])[topic].result(30)
    produce_one_record_batches(source.bootstrap, topic, tag)
    servers = ", ".join(f'"{s}"' for s in source.bootstrap.split(","))
    config = workdir / f"coalesce-small-{tag}.toml"
    config.write_text(f'[[mirrors]]\nname = "small-{tag}"\nsource_bootstrap_servers = [{servers}]\ntopics = ["{topic}"]\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]).start()
    try:
        assert_copy_equals_source(source, destination, proxy, topic)
        for p in range(PARTITIONS):
            labels = f'mirror="small-{tag}",topic="{topic}",partition="{p}"'
            assert proxy.metric("kmp_mirror_failed", labels) == 0, f"{topic}-{p} FAILED:\n{proxy.log()[-3000:]}"
        dst = leaders(destination.bootstrap, topic)
        for p in range(PARTITIONS):
            sizes = batches(dst[p], topic, p)
            assert sizes, f"{topic}-{p}: the destination holds batches"
        assert "merging is off for this partition" in proxy.log(), "the destination refused a merged batch and the engine fell back"
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"
