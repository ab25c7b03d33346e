"""A source partition whose log starts far from 0, made cheaply: a topic that ran for years under
retention starts at 10^9..10^11, and writing that many records one by one through a client would
take hours. Here the partition leader is sent raw Produce requests (v7, acks=all) of one gzip
batch of 100,000 empty records (null key, null value, no headers: about 1.4 KB compressed), the
same bytes every time (no producer id, a fixed timestamp, so one CRC), several in flight; then
DeleteRecords moves the log start to the end of them. The broker takes about 10 million such
offsets per second on the 2-core test machine. gzip because Python's standard library has it.

Used by tests/integration/test_mirror_prefix.py and bench/prefix_bench.py.
"""

from __future__ import annotations

import gzip
import socket
import struct
import time

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.record.util import calc_crc32c

RECORDS_PER_BATCH = 100_000
IN_FLIGHT = 4
GZIP = 1


def _varint(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _batch(codec: int, count: int, timestamp_ms: int, section: bytes) -> bytes:
    after_crc = struct.pack(">hiqqqhii", codec, count - 1, timestamp_ms, timestamp_ms, -1, -1, -1, count) + section
    rest = struct.pack(">ib", -1, 2) + struct.pack(">I", calc_crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(rest)) + rest


def empty_records_batch(count: int, timestamp_ms: int) -> bytes:
    """One v2 batch of ``count`` empty records, gzip-compressed, without producer fields."""
    records = bytearray()
    for delta in range(count):
        body = b"\x00" + _varint(0) + _varint(delta) + _varint(-1) + _varint(-1) + _varint(0)
        records += _varint(len(body)) + body
    return _batch(GZIP, count, timestamp_ms, gzip.compress(bytes(records), 6))


def uncompressed_filler_batch(count: int) -> bytes:
    """One uncompressed batch of ``count`` filler records as the engine writes them (key
    ``__kmp_filler``, null value, header ``kmp-filler: 1``), stamped 0, without producer fields:
    what a fill cost before fills were compressed (bench/prefix_bench.py's baseline)."""
    records = bytearray()
    for delta in range(count):
        body = (b"\x00" + _varint(0) + _varint(delta) + _varint(12) + b"__kmp_filler" + _varint(-1) + _varint(1)
                + _varint(10) + b"kmp-filler" + _varint(1) + b"1")
        records += _varint(len(body)) + body
    return _batch(0, count, 0, bytes(records))


def _string(s: bytes) -> bytes:
    return struct.pack(">h", len(s)) + s


def _produce_request(correlation_id: int, topic: str, partition: int, batch: bytes) -> bytes:
    body = struct.pack(">hhi", 0, 7, correlation_id) + _string(b"kmp-prefix")
    body += struct.pack(">hhi", -1, -1, 30_000)  # no transactional id, acks=all, timeout
    body += struct.pack(">i", 1) + _string(topic.encode()) + struct.pack(">i", 1) + struct.pack(">ii", partition, len(batch)) + batch
    return struct.pack(">i", len(body)) + body


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"the broker closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _produce_answer(sock: socket.socket) -> tuple[int, int]:
    """(error code, base offset) of a one-partition Produce v7 response."""
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    r = _read_exact(sock, size)
    at = 4 + 4  # correlation id, topics count
    (name_len,) = struct.unpack_from(">h", r, at)
    at += 2 + name_len + 4  # name, partitions count
    _, error, base = struct.unpack_from(">ihq", r, at)
    return error, base


def leader_address(bootstrap: str, topic: str, partition: int, timeout: float = 60) -> tuple[str, int]:
    """The partition leader's address, once the broker answering Metadata knows it: a topic just
    created is in the controller's log before every broker has loaded it (seconds on a loaded
    machine), and meanwhile Metadata names no leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline, seen = time.time() + timeout, None
    while True:
        md = admin.list_topics(topic, timeout=30)
        t = md.topics.get(topic)
        p = t.partitions.get(partition) if t is not None and t.error is None else None
        seen = (t.error if t is not None else "absent") if p is None else f"leader {p.leader}"
        if p is not None and p.leader in md.brokers:
            broker = md.brokers[p.leader]
            return broker.host, broker.port
        if time.time() > deadline:
            raise TimeoutError(f"no leader for {topic}-{partition} within {timeout:.0f} s (last seen: {seen})")
        time.sleep(0.2)


def append_empty_records(bootstrap: str, topic: str, partition: int, offsets: int) -> int:
    """Appends at least ``offsets`` empty records (whole batches) to the partition; returns its
    log end afterwards."""
    per_batch = max(1, min(RECORDS_PER_BATCH, offsets))
    batch = empty_records_batch(per_batch, int(time.time() * 1000))
    return append_repeatedly(bootstrap, topic, partition, batch, per_batch, offsets)


def append_repeatedly(bootstrap: str, topic: str, partition: int, batch: bytes, records_per_batch: int, offsets: int) -> int:
    """Sends ``batch`` (``records_per_batch`` records) to the partition's leader until at least
    ``offsets`` offsets were appended; returns the partition's log end afterwards."""
    host, port = leader_address(bootstrap, topic, partition)
    batches = -(-offsets // records_per_batch)
    end = -1
    with socket.create_connection((host, port), timeout=60) as sock:
        sent = answered = 0
        while answered < batches:
            while sent < batches and sent - answered < IN_FLIGHT:
                sent += 1
                sock.sendall(_produce_request(sent, topic, partition, batch))
            error, base = _produce_answer(sock)
            answered += 1
            if error:
                raise RuntimeError(f"Produce of empty records to {topic}-{partition} failed with error {error}")
            end = base + records_per_batch
    return end


def make_prefix(bootstrap: str, topic: str, partition: int, offsets: int) -> int:
    """Gives the (empty) partition a log start of at least ``offsets``: that many empty records,
    then DeleteRecords up to their end. Returns the log start."""
    end = append_empty_records(bootstrap, topic, partition, offsets)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_records([TopicPartition(topic, partition, end)]).values():
        f.result(60)
    return end
