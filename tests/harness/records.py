"""Record- and batch-level views of a partition for the filler and batch-boundary tests (moved
out of test_mirror_straddle.py; test_mirror_coalesce.py uses them too): raw batch headers, Fetch v4
record sets, watermarks, records read from given offsets, and their comparison."""

from __future__ import annotations

import struct
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from kmp_common import unique
from mirror import FILLER_KEY


# ---- from test_mirror_straddle.py --------------------------------------------

def batch_headers(records: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, record count) of every whole batch in a records blob (a
    trailing partial batch is left out)."""
    out, pos = [], 0
    while pos + 61 <= len(records):
        base, length = struct.unpack_from(">qi", records, pos)
        if pos + 12 + length > len(records):
            break  # a trailing partial batch
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        (count,) = struct.unpack_from(">i", records, pos + 57)
        out.append((base, base + last_delta, count))
        pos += 12 + length
    return out


def fetch_v4_records(body: bytes, what: str = "the partition") -> bytes:
    """The records blob of the only partition of a Fetch v4 response body (after the correlation
    id); fails on a partition error, naming ``what`` was fetched."""
    pos = 4 + 4  # throttle, topic count
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + n + 4 + 4  # name, partition count, partition index
    (err,) = struct.unpack_from(">h", body, pos)
    assert err == 0, f"{what}: Fetch v4 answered error {err}"
    pos += 2 + 8 + 8  # error, high watermark, last stable offset
    (aborted,) = struct.unpack_from(">i", body, pos)
    pos += 4 + max(aborted, 0) * 16
    (size,) = struct.unpack_from(">i", body, pos)
    return body[pos + 4:pos + 4 + size]


def watermarks(bootstrap: str, topic: str, partition: int, isolation: str) -> tuple[int, int]:
    """(log start, high watermark) — the end is the last stable offset for read_committed."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("wm"), "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def read_from(bootstrap: str, topic: str, starts: dict[int, int], isolation: str) -> dict[int, dict[int, tuple]]:
    """partition → offset → (key, value, headers, (timestamp type, timestamp)) of every record from
    ``starts[partition]`` to the end. An offset reset or any other consumer error fails the read
    (auto.offset.reset=error), so a read can never silently come back empty."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("straddle"), "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False, "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
    out: dict[int, dict[int, tuple]] = {p: {} for p in starts}
    done, deadline = set(), time.time() + 60
    try:
        while len(done) < len(starts):
            assert time.time() < deadline, f"{topic} via {bootstrap} ({isolation}): partitions {sorted(set(starts) - done)} did not reach their end in 60 s"
            for m in c.consume(1000, 0.5):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, \
                        f"{topic}-{m.partition()} via {bootstrap} ({isolation}): {m.error()}"
                    done.add(m.partition())
                    continue
                assert m.offset() not in out[m.partition()], f"{topic}-{m.partition()} offset {m.offset()} delivered twice"
                out[m.partition()][m.offset()] = (m.key(), m.value(), tuple(m.headers() or ()), m.timestamp())
    finally:
        c.close()
    return out


def assert_same_records(expected: dict[int, dict[int, tuple]], got: dict[int, dict[int, tuple]], what: str) -> None:
    problems = []
    for p in sorted(expected):
        for o in sorted(set(expected[p]) | set(got.get(p, {}))):
            want, have = expected[p].get(o), got.get(p, {}).get(o)
            if want != have:
                problems.append(f"partition {p} offset {o}: expected {want}, got {have if have is not None else 'nothing'}")
    missing = sum(1 for p in expected for o in expected[p] if o not in got.get(p, {}))
    assert not problems, (f"{what}: {len(problems)} offsets differ ({missing} source records missing); first ones:\n  "
                          + "\n  ".join(problems[:12]))


def strip_fillers(records: dict[int, dict[int, tuple]]) -> dict[int, dict[int, tuple]]:
    return {p: {o: r for o, r in rs.items() if r[0] != FILLER_KEY} for p, rs in records.items()}
