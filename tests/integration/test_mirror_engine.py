"""Mirror engine against real clusters: topics declared in the proxy's config are copied from the
1-broker source into the 3-broker destination so that every record keeps its source offset —
plain, keyed and null records with headers, all four codecs, and committed and aborted
transactions (markers and aborted data become fillers) — and mirroring continues while the
source keeps producing."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import ProxyProcess, unique

FILLER_KEY = b"__kmp_filler"
CATCH_UP_TIMEOUT_S = 90


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("hw")})
    out = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    c.close()
    return out


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp) of every record from each partition's
    log start to its end, fillers included. Reading starts at the log start, not at offset 0: once
    the log start moved, 0 is out of range and the consumer would silently reset to the end and
    read nothing. An offset reset or any error other than end-of-partition fails the read."""
    ends = high_watermarks(bootstrap, topic, partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False, "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, done, deadline = [], {p for p in range(partitions) if ends[p] == 0}, time.time() + 60
    while len(done) < partitions and time.time() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, f"{topic}-{m.partition()} via {bootstrap} ({isolation}): {m.error()}"
                done.add(m.partition())
                continue
            out.append((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
    c.close()
    assert len(done) == partitions, f"{topic}: partitions {sorted(set(range(partitions)) - done)} not read to their end {ends} within 60 s ({isolation})"
    return sorted(out)


def high_watermarks_or_none(bootstrap: str, topic: str, partitions: int) -> list[int] | None:
    try:
        return high_watermarks(bootstrap, topic, partitions)
    except KafkaException:  # the destination topic is not created yet
        return None


def wait_caught_up(source: str, destination: str, topics: dict[str, int]) -> None:
    deadline = time.time() + CATCH_UP_TIMEOUT_S
    while True:
        pending = {t: (high_watermarks(source, t, n), high_watermarks_or_none(destination, t, n)) for t, n in topics.items()}
        pending = {t: v for t, v in pending.items() if v[0] != v[1]}
        if not pending:
            return
        assert time.time() < deadline, f"destination caught up with the source within {CATCH_UP_TIMEOUT_S}s: {pending}"
        time.sleep(0.5)


def produce_plain(bootstrap: str, topic: str, n: int, start: int = 0, **conf) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(start, start + n):
        key = None if i % 7 == 0 else f"key-{i % 13}".encode()
        value = None if i % 11 == 0 else f"value-{i}".encode() * (1 + i % 5)
        p.produce(topic, key=key, value=value, headers=[("h", f"{i}".encode()), ("empty", b"")] if i % 3 else None)
    assert p.flush(30) == 0


def produce_transactions(bootstrap: str, topic: str) -> None:
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("mirror-tx")})
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    tx.init_transactions(30)
    for round_no in range(6):
        tx.begin_transaction()
        for i in range(8):
            tx.produce(topic, key=f"t{round_no}-{i}".encode(), value=f"txn-{round_no}-{i}".encode(), partition=i % 2)
            if i == 3:
                plain.produce(topic, value=f"between-{round_no}".encode(), partition=round_no % 2)
                plain.flush(30)
        tx.flush(30)
        (tx.abort_transaction if round_no % 3 == 1 else tx.commit_transaction)(30)


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


def strip_fillers(records: list[tuple]) -> list[tuple]:
    return [r for r in records if r[2] != FILLER_KEY]


def test_mirrored_records_keep_their_offsets_keys_values_headers_and_timestamps(mirrored):
    source, destination, _, topics = mirrored
    for topic, n in topics.items():
        src = read_all(source.bootstrap, topic, n, "read_committed")
        assert src, f"{topic} has source data"
        for isolation in ("read_committed", "read_uncommitted"):
            dst = read_all(destination.bootstrap, topic, n, isolation)
            assert strip_fillers(dst) == src, f"{topic} ({isolation}) equals the source record by record, fillers aside"
        assert high_watermarks(destination.bootstrap, topic, n) == high_watermarks(source.bootstrap, topic, n)


def test_transaction_markers_and_aborted_data_become_fillers(mirrored):
    source, destination, _, topics = mirrored
    txn = [t for t in topics if t.startswith("mir-txn")][0]
    dst = read_all(destination.bootstrap, txn, 2, "read_uncommitted")
    fillers = [r for r in dst if r[2] == FILLER_KEY]
    assert fillers, "markers and aborted records occupy their offsets as fillers"
    assert all(r[3] is None and r[4] == (("kmp-filler", b"1"),) for r in fillers), "fillers are keyed tombstones with the filler header"
    aborted = [r for r in read_all(source.bootstrap, txn, 2, "read_uncommitted") if r[3] and r[3].startswith(b"txn-1-")]
    assert aborted and not any(r[3] and r[3].startswith(b"txn-1-") for r in dst), "aborted data is not copied"


def test_mirroring_continues_while_the_source_keeps_producing(mirrored):
    source, destination, proxy, topics = mirrored
    plain = [t for t in topics if t.startswith("mir-plain")][0]
    produce_plain(source.bootstrap, plain, 500, start=1000, **{"compression.type": "zstd"})
    wait_caught_up(source.bootstrap, destination.bootstrap, {plain: 3})
    assert strip_fillers(read_all(destination.bootstrap, plain, 3, "read_committed")) == read_all(source.bootstrap, plain, 3, "read_committed")
    _, text = proxy.http("/metrics")
    lags = [float(l.split()[-1]) for l in text.splitlines() if l.startswith('kmp_mirror_lag_records{mirror="dr"')]
    assert lags and max(lags) == 0, f"lag is exported and zero once caught up: {lags}"
    lag_s = [float(l.split()[-1]) for l in text.splitlines() if l.startswith('kmp_mirror_lag_seconds{mirror="dr"')]
    assert lag_s and max(lag_s) == 0, f"time lag is exported and zero once caught up: {lag_s}"
    latency = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("kmp_mirror_replication_latency_ms{") and f'topic="{plain}"' in l]
    assert latency and all(0 <= v < 60_000 for v in latency), f"replication latency of freshly produced records: {latency}"
    assert 'kmp_mirror_failed{mirror="dr"' in text and not any(
        l.startswith('kmp_mirror_failed{mirror="dr"') and not l.endswith(" 0") for l in text.splitlines()), "no partition failed"
