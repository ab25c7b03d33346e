"""A source record never becomes a filler (issue #10), against real clusters.

* **Log start inside a batch before the mirror starts.** Whole gzip batches of 100 records per
  partition, each built here and written by one Produce request (a client's linger cannot promise
  that: under load librdkafka sent 15 of 300 records ahead of the rest); DeleteRecords moves the source log start
  inside a batch (partition 0 to 37 inside batch 0-99, partition 1 to 150 inside batch 100-199),
  onto a batch boundary (partition 2 to 100) or leaves it (partition 3). The layout is checked on
  the source's own Fetch response before the mirror starts.
* **Log start moved inside a batch while the mirror is paused.** Caught up, paused, 300 records
  per partition written as one batch each, DeleteRecords to an offset inside that batch on every
  partition (just after its start, the middle, its last record), resumed.

After each: every record the source returns at or above its log start is on the destination at
the same offset with the same key, value, headers and timestamp — read through the proxy and
directly from the destination with fillers stripped, read_committed and read_uncommitted, each
against the same isolation level of the source — the destination log start, high watermark and
last stable offset equal the source's, and no partition is FAILED.

* **Filler masking only where fillers can be.** In a proxy that has mirrors running (and masks a
  mirror topic's fillers, which stand in for the records a compacted source topic's cleaner
  removed), a plain topic carrying records keyed ``__kmp_filler`` — one exactly like a filler
  (null value, header ``kmp-filler: 1``, uncompressed batch) — is delivered exactly as produced
  to librdkafka and Java (Fetch by topic id), kafka-python and a hand-built Fetch v4 (by topic
  name), both isolation levels."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.memory_records import MemoryRecordsBuilder

import kafka_wire
from conftest import ProxyProcess, unique, wait_for_leader
from kmp_common import java_command, wait_until
from compaction import create_with_compaction_gaps
from mirror import call, create, mirror_config, states, wait_caught_up
from records import assert_same_records, batch_headers, fetch_v4_records, read_from, strip_fillers, watermarks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import sec_wire as w  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MIRROR_CHECK = REPO / "tests" / "clients" / "java" / "MirrorCheck.java"
FILLER_KEY = b"__kmp_filler"
FILLER_HEADERS = (("kmp-filler", b"1"),)
PARTITIONS = 4
GZIP = 1  # the record batch attribute's compression codec


# ---- source side --------------------------------------------------------------------------------

def produce_batches(bootstrap: str, topic: str, per_partition: int, tag: str) -> None:
    """``per_partition`` records to every partition as one gzip batch each, all in one Produce
    request to ``bootstrap`` (the source's only broker, leader of every partition). Keys, null keys
    and values, headers. The batches are built here, so their layout does not depend on timing."""
    batches = {}
    for part in range(PARTITIONS):
        b = MemoryRecordsBuilder(magic=2, compression_type=GZIP, batch_size=16 << 20)
        for i in range(per_partition):
            key = None if i % 9 == 4 else f"{tag}-k{i % 17}".encode()
            value = None if i % 13 == 6 else f"{tag}-p{part}-{i}".encode() * (1 + i % 4)
            headers = [("h", f"{tag}-{i}".encode()), ("empty", b"")] if i % 3 else []
            assert b.append(timestamp=None, key=key, value=value, headers=headers) is not None, "the batch has room"
        b.close()
        batches[part] = bytes(b.buffer())
    host, port = bootstrap.rsplit(":", 1)

    def send_waiting() -> bool:
        """Sends the batches not appended yet; True once every one is."""
        parts = [w.i32(p) + w.bytes_field(batch) for p, batch in batches.items()]
        body = w.string(None) + w.i16(-1) + w.i32(30_000) + w.array([w.string(topic) + w.array(parts)])
        answer = w.parse_produce_v7(w.roundtrip(host, int(port), w.request(w.PRODUCE, 7, 1, body)))
        assert sorted(answer) == [(topic, p) for p in batches], f"an answer for every partition sent: {answer}"
        for (_, p), (code, _) in answer.items():
            # A just-created topic's partition may not have its leader yet (3, 6): nothing was
            # appended, so sending it again cannot duplicate it.
            assert code in (0, 3, 6), f"{topic}-{p}: the batch appended or refused retriably: {answer}"
            if code == 0:
                del batches[p]
        return not batches

    wait_until(f"every partition of {topic} appended its batch (a leader for each)", send_waiting, timeout=30, interval=0.2)


def delete_records(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()]).values():
        f.result(30)


def source_batches(addr: str, topic: str, partition: int, offset: int) -> list[tuple[int, int, int]]:
    """(base offset, last offset, record count) of the batches the broker at ``addr`` (the
    partition's leader) returns for a read_uncommitted Fetch v4 from ``offset``."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(kafka_wire.fetch_v4(1, topic, partition, offset, 100))
        _, body = kafka_wire.read_response(s)
    return batch_headers(fetch_v4_records(body))


def assert_inside_a_batch(source, topic: str, partition: int, log_start: int) -> None:
    batches = source_batches(source.bootstrap, topic, partition, log_start)
    assert batches, f"{topic}-{partition}: the source returns data from its log start {log_start}"
    base, last, count = batches[0]
    assert base < log_start <= last and count > 1, \
        f"{topic}-{partition}: the source log start {log_start} is inside a multi-record batch (first batch returned: {base}-{last}, {count} records)"


# ---- reading and comparing ----------------------------------------------------------------------


def wait_for_log_starts(bootstrap: str, topic: str, want: dict[int, int], timeout: float = 30) -> dict[int, int]:
    deadline = time.time() + timeout
    while True:
        got = {p: watermarks(bootstrap, topic, p, "read_uncommitted")[0] for p in want}
        if got == want or time.time() > deadline:
            return got


def assert_destination_equals_source(source, destination, proxy, topic: str, mirror: str) -> None:
    wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
    src_marks = {p: watermarks(source.bootstrap, topic, p, "read_uncommitted") for p in range(PARTITIONS)}
    log_starts = {p: lo for p, (lo, _) in src_marks.items()}
    got_starts = wait_for_log_starts(destination.bootstrap, topic, log_starts)
    for p in range(PARTITIONS):
        assert got_starts[p] == log_starts[p], f"{topic}-{p}: destination log start {got_starts[p]}, source log start {log_starts[p]}"
    for isolation in ("read_uncommitted", "read_committed"):
        for p in range(PARTITIONS):
            src, dst = watermarks(source.bootstrap, topic, p, isolation)[1], watermarks(destination.bootstrap, topic, p, isolation)[1]
            assert dst == src, f"{topic}-{p}: destination {'high watermark' if isolation == 'read_uncommitted' else 'last stable offset'} {dst}, source {src}"

    for isolation in ("read_committed", "read_uncommitted"):
        expected = read_from(source.bootstrap, topic, log_starts, isolation)
        visible = sum(len(r) for r in expected.values())
        assert visible == sum(hi - lo for lo, hi in src_marks.values()), \
            f"{topic}: the source shows a record at every offset from its log start (plain data only, {isolation}): {visible} records, watermarks {src_marks}"
        assert_same_records(expected, read_from(proxy.bootstrap, topic, log_starts, isolation),
                            f"{topic} through the proxy ({isolation}) vs the source ({isolation})")
        assert_same_records(expected, strip_fillers(read_from(destination.bootstrap, topic, log_starts, isolation)),
                            f"{topic} directly on the destination, fillers stripped ({isolation}) vs the source ({isolation})")

    _, text = proxy.http("/metrics")
    failed = [l for l in text.splitlines() if l.startswith(f'kmp_mirror_failed{{mirror="{mirror}",topic="{topic}"')]
    assert len(failed) == PARTITIONS and all(l.endswith(" 0") for l in failed), f"{topic}: every partition exported, none FAILED: {failed}"


# ---- the two straddling scenarios ---------------------------------------------------------------

def test_a_source_log_start_inside_a_batch_before_the_mirror_starts_loses_no_record(clusters, workdir):
    source, destination = clusters
    topic = unique("straddle-before")
    create(source.bootstrap, topic, PARTITIONS)
    produce_batches(source.bootstrap, topic, 100, "a")  # offsets 0-99, one batch per partition
    produce_batches(source.bootstrap, topic, 100, "b")  # offsets 100-199
    for p in range(PARTITIONS):
        assert [(b, l) for b, l, _ in source_batches(source.bootstrap, topic, p, 0)] == [(0, 99), (100, 199)], \
            f"{topic}-{p}: two batches of 100 records on the source"
    log_starts = {0: 37, 1: 150, 2: 100}  # inside the first batch, inside the second, on a boundary
    delete_records(source.bootstrap, topic, log_starts)
    assert_inside_a_batch(source, topic, 0, 37)
    assert_inside_a_batch(source, topic, 1, 150)

    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="straddle-a")).start()
    try:
        assert_destination_equals_source(source, destination, proxy, topic, "straddle-a")
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


def test_a_source_log_start_moved_inside_a_batch_while_the_mirror_is_paused_loses_no_record(clusters, workdir):
    source, destination = clusters
    topic = unique("straddle-paused")
    create(source.bootstrap, topic, PARTITIONS)
    produce_batches(source.bootstrap, topic, 100, "a")  # offsets 0-99
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="straddle-p")).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        status, r = call(proxy, "POST", "/v1/mirrors/straddle-p/pause", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        assert states(proxy, "straddle-p", topic) == ["paused"] * PARTITIONS

        produce_batches(source.bootstrap, topic, 300, "c")  # offsets 100-399, one batch per partition
        for p in range(PARTITIONS):
            assert (100, 399, 300) in source_batches(source.bootstrap, topic, p, 100), f"{topic}-{p}: one batch 100-399 on the source"
        log_starts = {0: 250, 1: 101, 2: 399, 3: 180}  # the middle, just after the start, the last record
        delete_records(source.bootstrap, topic, log_starts)
        for p, o in log_starts.items():
            assert_inside_a_batch(source, topic, p, o)

        status, r = call(proxy, "POST", "/v1/mirrors/straddle-p/resume", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        assert_destination_equals_source(source, destination, proxy, topic, "straddle-p")
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


# ---- filler masking only on mirror topics -------------------------------------------------------

# (key, value, headers) per batch: each inner list is produced and flushed on its own, so it is one
# uncompressed batch whose first record is the one listed first.
PLAIN_BATCHES = [
    [(b"k0", b"v0", ())],
    [(FILLER_KEY, None, FILLER_HEADERS)],                                   # exactly like a filler
    [(FILLER_KEY, b"a value", (("h", b"x"),))],                              # the filler key with a value
    [(FILLER_KEY, None, FILLER_HEADERS)] * 3,                               # like a 3-record filler batch
    [(b"k1", b"v1", ()), (FILLER_KEY, None, FILLER_HEADERS)],               # the filler key second
    [(FILLER_KEY, None, FILLER_HEADERS), (b"k2", b"v2", (("h", b"y"),))],   # a filler-like record first
    [(b"k3", None, ())],
]


def mirrored_with_fillers(source, destination, workdir, prefix: str, mirror: str):
    """A new 2-partition compacted source topic whose cleaner has removed records (compaction gaps
    in both partitions: fillers on the destination), mirrored and caught up by a new proxy:
    (topic, proxy)."""
    topic = unique(prefix)
    create_with_compaction_gaps(source.bootstrap, topic, 2)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name=mirror)).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2})
    except BaseException:
        proxy.stop()
        raise
    return topic, proxy


def produce_plain_batches(bootstrap: str, topic: str, batches=None) -> list[tuple]:
    """Writes ``batches`` (default PLAIN_BATCHES), one producer batch each, through ``bootstrap``;
    (offset, key, value, headers) as produced."""
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": "none", "linger.ms": 20, "enable.idempotence": False})
    delivered = []
    for batch in batches or PLAIN_BATCHES:
        for key, value, headers in batch:
            p.produce(topic, key=key, value=value, headers=list(headers) or None, partition=0,
                      on_delivery=lambda err, msg, rec=(key, value, headers): delivered.append((err, msg.offset(), *rec)))
        assert p.flush(30) == 0
    assert all(e is None for e, *_ in delivered), f"every record of the plain topic was written: {delivered}"
    return sorted(r[1:] for r in delivered)


def consume_librdkafka(bootstrap: str, topic: str, isolation: str, expected: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("plainfk"), "isolation.level": isolation,
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, 0, 0)])
    out, deadline = [], time.time() + 30
    while len(out) < expected and time.time() < deadline:
        for m in c.consume(100, 0.2):
            assert not m.error(), f"librdkafka ({isolation}): {m.error()}"
            out.append((m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
    c.close()
    return sorted(out)


def consume_kafka_python(bootstrap: str, topic: str, isolation: str, expected: int) -> list[tuple]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False, group_id=None)
    tp = KTP(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    out, deadline = [], time.time() + 30
    while len(out) < expected and time.time() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            out += [(r.offset, r.key, r.value, tuple((k, v) for k, v in (r.headers or []))) for r in recs]
    c.close()
    return sorted(out)


def consume_java(kafka_classpath: str, bootstrap: str, topic: str, isolation: str, expected: int) -> tuple[list[tuple], int]:
    """Kafka 4.1's Java consumer (Fetch by topic id): (offset, key, value) — MirrorCheck prints no
    headers — and its final position."""
    out = subprocess.run([*java_command(kafka_classpath, MIRROR_CHECK), "consume", bootstrap, topic, "1", isolation, str(expected)],
                         capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, f"MirrorCheck failed:\n{out.stderr[-3000:]}"

    def unhex(f: str) -> bytes | None:
        return None if f == "-" else (b"" if f == "_" else bytes.fromhex(f))
    records, position = [], None
    for f in (line.split() for line in out.stdout.splitlines()):
        if f and f[0] == "R":
            records.append((int(f[2]), unhex(f[3]), unhex(f[4])))
        elif f and f[0] == "P":
            position = int(f[2])
    return sorted(records), position


def raw_fetch_v4(host: str, port: int, topic: str) -> bytes:
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(kafka_wire.fetch_v4(3, topic, 0, 0, 100))
        _, body = kafka_wire.read_response(s)
    return fetch_v4_records(body)


@pytest.mark.long  # quick tier: test_client_batches_that_start_like_fillers_… covers filler look-alikes
def test_a_plain_topic_with_records_keyed_like_fillers_is_delivered_exactly_as_produced(clusters, workdir, kafka_classpath):
    source, destination = clusters
    mirrored, proxy = mirrored_with_fillers(source, destination, workdir, "straddle-masked", "straddle-m")
    try:
        # Control: this proxy does mask the mirror topic's fillers.
        masked_before = proxy.metric("kmp_masked_fetch_responses_total")
        dst = read_from(destination.bootstrap, mirrored, {0: 0, 1: 0}, "read_uncommitted")
        assert any(r[0] == FILLER_KEY for rs in dst.values() for r in rs.values()), "the mirror topic holds fillers on the destination"
        via_proxy = read_from(proxy.bootstrap, mirrored, {0: 0, 1: 0}, "read_uncommitted")
        assert not any(r[0] == FILLER_KEY for rs in via_proxy.values() for r in rs.values()), "the mirror topic's fillers are masked"
        assert_same_records(read_from(source.bootstrap, mirrored, {0: 0, 1: 0}, "read_uncommitted"), via_proxy,
                            f"{mirrored} through the proxy vs the source")
        assert proxy.metric("kmp_masked_fetch_responses_total") > masked_before, "masking ran for the mirror topic"

        plain = unique("plain-fillerkey")
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic(plain, 1)])[plain].result(30)
        leader = wait_for_leader(admin, plain)
        produced = produce_plain_batches(proxy.bootstrap, plain)
        want = produced
        assert [r[0] for r in want] == list(range(sum(len(b) for b in PLAIN_BATCHES))), f"consecutive offsets: {want}"
        assert consume_librdkafka(destination.bootstrap, plain, "read_uncommitted", len(want)) == want, "stored as produced (read directly)"

        for isolation in ("read_committed", "read_uncommitted"):
            got = consume_librdkafka(proxy.bootstrap, plain, isolation, len(want))
            assert got == want, f"librdkafka through the proxy ({isolation}) gets the plain topic as produced:\n  want {want}\n  got  {got}"
            got = consume_kafka_python(proxy.bootstrap, plain, isolation, len(want))
            assert got == want, f"kafka-python through the proxy ({isolation}) gets the plain topic as produced:\n  want {want}\n  got  {got}"
            got, position = consume_java(kafka_classpath, proxy.bootstrap, plain, isolation, len(want))
            assert got == [r[:3] for r in want] and position == len(want), \
                f"Java through the proxy ({isolation}) gets the plain topic as produced (position {position}):\n  want {[r[:3] for r in want]}\n  got  {got}"

        direct = raw_fetch_v4("127.0.0.1", destination.port(leader), plain)
        via = raw_fetch_v4("127.0.0.1", proxy.node_port(leader), plain)
        assert direct and via == direct, \
            f"a Fetch v4 (topic by name) through the proxy returns the leader's record batches byte for byte ({len(via)} vs {len(direct)} bytes)"
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


MIXED_BATCHES = [
    [(b"k1", b"v1", ()), (FILLER_KEY, None, FILLER_HEADERS)],               # the filler key second
    [(FILLER_KEY, None, FILLER_HEADERS), (b"k2", b"v2", (("h", b"y"),))],   # a filler-like record first
    [(FILLER_KEY, b"a value", (("h", b"x"),))],                              # the filler key with a value
    [(b"k3", None, ())],
]


def test_client_batches_that_start_like_fillers_on_a_failed_over_mirror_topic_are_delivered_whole(clusters, workdir):
    """A stopped mirror topic is writable and still holds the engine's fillers, so it stays
    masked. A client's batch there whose first record looks like a filler was masked whole
    (its real records vanished for consumers of the proxy): only batches made of nothing but
    filler records are masked now."""
    source, destination = clusters
    topic, proxy = mirrored_with_fillers(source, destination, workdir, "straddle-former", "former-m")
    try:
        status, r = call(proxy, "POST", "/v1/mirrors/former-m/stop", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"stopping the mirror topic: {status} {r}"
        wait_until("the topic is stopped", lambda: states(proxy, "former-m", topic) == ["stopped"] * 2, 30)
        history = read_from(destination.bootstrap, topic, {0: 0}, "read_uncommitted")[0]
        assert any(r[0] == FILLER_KEY for r in history.values()), "the stopped topic holds fillers"
        start = max(history) + 1 if history else 0

        want = produce_plain_batches(proxy.bootstrap, topic, MIXED_BATCHES)
        assert want[0][0] >= start, f"the client's records follow the mirrored history: {want[0][0]} < {start}"

        via = read_from(proxy.bootstrap, topic, {0: want[0][0]}, "read_committed")[0]
        got = sorted((o, *rec[:3]) for o, rec in via.items() if o >= want[0][0])
        assert got == want, f"librdkafka through the proxy gets the client's batches whole:\n  want {want}\n  got  {got}"
        masked = read_from(proxy.bootstrap, topic, {0: 0}, "read_uncommitted")[0]
        assert not any(rec[0] == FILLER_KEY for o, rec in masked.items() if o < want[0][0]), \
            "the engine's fillers in the mirrored history stay masked"
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"
