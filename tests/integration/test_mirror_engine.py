"""Mirror engine against real clusters: topics declared in the proxy's config are copied from the
1-broker source into the 3-broker destination so that every record keeps its source offset —
plain, keyed and null records with headers, all four codecs, and committed and aborted
transactions (replayed in destination transactions: aborted records are copied and aborted on
the destination, COMMIT and ABORT markers land at the source markers' offsets, and no filler is
written for them) — each isolation level of the destination and of the proxy equal to the same
level of the source, and mirroring continues while the source keeps producing."""

import socket
import struct

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

import kafka_wire
from conftest import ProxyProcess, unique
from mirror import (
    FILLER_KEY, create, produce_plain, produce_transactions, read_all, strip_fillers, wait_caught_up,
)
from records import fetch_v4_records

COMMIT, ABORT = 1, 0  # a control record's type (its key: version int16, type int16)


@pytest.fixture(scope="module")
def mirrored(clusters, workdir):
    source, destination = clusters
    topics = {unique("mir-plain"): 3, unique("mir-codecs"): 4, unique("mir-txn"): 2}
    plain, codecs, txn = topics
    for t, n in topics.items():
        create(source.bootstrap, t, n)
    produce_plain(source.bootstrap, plain, 300, **{"compression.type": "lz4"})
    for i, codec in enumerate(["gzip", "snappy", "lz4", "zstd", "none"]):
        produce_plain(source.bootstrap, codecs, 100, start=i * 100, **{"compression.type": codec})
    produce_transactions(source.bootstrap, txn)
    config = workdir / "mirror.toml"
    topic_list = ", ".join(f'"{t}"' for t in topics)
    config.write_text(f'[[mirrors]]\nname = "dr"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = [{topic_list}]\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, topics)
        yield source, destination, proxy, topics
    finally:
        assert proxy.stop() == 0


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zigzag varint at ``pos``."""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos


def control_records(bootstrap: str, topic: str, partition: int) -> list[tuple[int, int]]:
    """(offset, type) of every control record (transaction marker) of the partition, read with
    Fetch v4 (read_uncommitted) from its leader, from offset 0 to the end."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    leader = md.brokers[md.topics[topic].partitions[partition].leader]
    out, offset = [], 0
    with socket.create_connection((leader.host, leader.port), timeout=10) as s:
        for correlation in range(1, 10_000):
            s.sendall(kafka_wire.fetch_v4(correlation, topic, partition, offset, 0))
            _, body = kafka_wire.read_response(s)
            records = fetch_v4_records(body, f"{topic}-{partition}@{offset} from {bootstrap}")
            pos, last = 0, None
            while pos + 61 <= len(records):
                base, length = struct.unpack_from(">qi", records, pos)
                if pos + 12 + length > len(records):
                    break  # a trailing partial batch
                attributes, last_delta = struct.unpack_from(">hi", records, pos + 21)
                if attributes & 0x20:  # a control batch: one uncompressed control record
                    r = varint(records, pos + 61)[1] + 1  # record length, record attributes
                    r = varint(records, r)[1]  # timestamp delta
                    offset_delta, r = varint(records, r)
                    key_length, r = varint(records, r)
                    assert key_length == 4, f"{topic}-{partition}: a control record key at {base + offset_delta}"
                    out.append((base + offset_delta, struct.unpack_from(">h", records, r + 2)[0]))
                last = base + last_delta
                pos += 12 + length
            if last is None:
                return out
            offset = last + 1
    raise AssertionError(f"{topic}-{partition}: read to its end")


def ends(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple[int, int]]:
    """(log start, end) of every partition: the end is the high watermark read_uncommitted and
    the last stable offset read_committed."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("ends"), "isolation.level": isolation})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    finally:
        c.close()


def test_mirrored_records_keep_their_offsets_keys_values_headers_and_timestamps(mirrored):
    source, destination, proxy, topics = mirrored
    for topic, n in topics.items():
        # Each isolation level against the same level of the source: read_uncommitted includes
        # the aborted transactions' records, read_committed leaves them out.
        for isolation in ("read_uncommitted", "read_committed"):
            src = read_all(source.bootstrap, topic, n, isolation)
            assert src, f"{topic} has source data"
            dst = read_all(destination.bootstrap, topic, n, isolation)
            assert strip_fillers(dst) == src, f"{topic} ({isolation}) directly on the destination equals the source record by record, fillers aside"
            assert read_all(proxy.bootstrap, topic, n, isolation) == src, f"{topic} ({isolation}) through the proxy equals the source record by record"
            assert ends(destination.bootstrap, topic, n, isolation) == ends(source.bootstrap, topic, n, isolation), \
                f"{topic}: destination log starts and {'high watermarks' if isolation == 'read_uncommitted' else 'last stable offsets'} equal the source's"


def test_transaction_markers_and_aborted_data_are_replayed_at_their_source_offsets(mirrored):
    source, destination, _, topics = mirrored
    txn = [t for t in topics if t.startswith("mir-txn")][0]
    dst = read_all(destination.bootstrap, txn, 2, "read_uncommitted")
    assert not any(r[2] == FILLER_KEY for r in dst), "transactions leave no fillers: markers and aborted records are replayed"

    src = read_all(source.bootstrap, txn, 2, "read_uncommitted")
    aborted = [r for r in src if r[3] and r[3].startswith((b"txn-1-", b"txn-4-"))]
    assert len(aborted) == 16, f"the source holds the two aborted transactions' records (read_uncommitted): {len(aborted)}"
    assert dst == src, "read_uncommitted: the destination holds every source record at its offset, aborted ones included"
    assert [r for r in dst if r in aborted] == aborted, "the aborted records are copied"
    for bootstrap in (source.bootstrap, destination.bootstrap):
        committed = read_all(bootstrap, txn, 2, "read_committed")
        assert not any(r in aborted for r in committed), f"read_committed readers of {bootstrap} see no aborted record"
    assert read_all(destination.bootstrap, txn, 2, "read_committed") == read_all(source.bootstrap, txn, 2, "read_committed")

    for p in range(2):
        src_markers = control_records(source.bootstrap, txn, p)
        # produce_transactions: six transactions over both partitions, rounds 1 and 4 aborted.
        assert [t for _, t in src_markers] == [COMMIT, ABORT, COMMIT, COMMIT, ABORT, COMMIT], f"{txn}-{p}: source markers {src_markers}"
        dst_markers = control_records(destination.bootstrap, txn, p)
        assert dst_markers == src_markers, f"{txn}-{p}: the destination's COMMIT/ABORT markers are at the source's offsets: {dst_markers} vs {src_markers}"


def test_mirroring_continues_while_the_source_keeps_producing(mirrored):
    source, destination, proxy, topics = mirrored
    plain = [t for t in topics if t.startswith("mir-plain")][0]
    produce_plain(source.bootstrap, plain, 500, start=1000, **{"compression.type": "zstd"})
    wait_caught_up(source.bootstrap, destination.bootstrap, {plain: 3})
    for isolation in ("read_uncommitted", "read_committed"):
        assert strip_fillers(read_all(destination.bootstrap, plain, 3, isolation)) == read_all(source.bootstrap, plain, 3, isolation), \
            f"{plain} ({isolation}) equals the source"
    _, text = proxy.http("/metrics")
    lags = [float(l.split()[-1]) for l in text.splitlines() if l.startswith('kmp_mirror_lag_records{mirror="dr"')]
    assert lags and max(lags) == 0, f"lag is exported and zero once caught up: {lags}"
    lag_s = [float(l.split()[-1]) for l in text.splitlines() if l.startswith('kmp_mirror_lag_seconds{mirror="dr"')]
    assert lag_s and max(lag_s) == 0, f"time lag is exported and zero once caught up: {lag_s}"
    latency = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("kmp_mirror_replication_latency_ms{") and f'topic="{plain}"' in l]
    assert latency and all(0 <= v < 60_000 for v in latency), f"replication latency of freshly produced records: {latency}"
    assert 'kmp_mirror_failed{mirror="dr"' in text and not any(
        l.startswith('kmp_mirror_failed{mirror="dr"') and not l.endswith(" 0") for l in text.splitlines()), "no partition failed"
