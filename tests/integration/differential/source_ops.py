"""Operations of a history on the source cluster, and the model of what was produced.

``SourceSide`` executes produce (plain and idempotent producers, every codec, batching through
linger.ms/batch.size), transactions (two transactional producers whose transactions interleave
with each other and with the other producers, committed or aborted), DeleteRecords (at a fraction
of the log or inside the last produced batch), compaction (segments rolled, then waiting until the
source's log cleaner has cleaned up to the roll) and time retention (segments rolled,
``retention.ms=1`` until the old segments are deleted, then back to unlimited), and partitions
added. Every produced record is kept in ``model`` with the offset its delivery report gave, so the
comparator can tell a record the source compacted away from a record the mirror made up.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer

from . import content
from .history import COMPACT_CONFIG, RETENTION_SEGMENT_MS
from prefix import append_empty_records

from .kafka_io import TP, Admin, wait_until, watermarks

COMPACT_SEGMENT_MS = int(COMPACT_CONFIG["segment.ms"])
SOURCE_WAIT_S = 30


_PRODUCERS: dict[tuple, Producer] = {}


def shared_producer(conf: dict) -> Producer:
    """One plain/idempotent producer per configuration for the whole session: a producer is not
    tied to a topic, and starting one (connections, producer id) costs more than most operations."""
    key = tuple(sorted(conf.items()))
    if key not in _PRODUCERS:
        _PRODUCERS[key] = Producer(conf)
    return _PRODUCERS[key]


def close_shared_producers() -> None:
    for p in _PRODUCERS.values():
        p.flush(10)
    _PRODUCERS.clear()


class ProducedRecord:
    __slots__ = ("key", "value", "headers", "timestamp", "txn")

    def __init__(self, key, value, headers, timestamp, txn):
        self.key, self.value, self.headers, self.timestamp, self.txn = key, value, headers, timestamp, txn


class SourceSide:
    def __init__(self, bootstrap: str, log_dir: Path, names: list[str], history: dict, run_tag: str, log):
        self.bootstrap = bootstrap
        self.log_dir = log_dir  # the 1-broker source's data directory (cleaner checkpoint)
        self.names = names
        self.history = history
        self.run_tag = run_tag
        self.log = log
        self.partitions = [t["partitions"] for t in history["topics"]]
        self.model: dict[TP, dict[int, ProducedRecord]] = {}
        self.last_range: dict[TP, tuple[int, int]] = {}  # offsets of the last produce per partition
        self.last_append: dict[int, float] = {}  # topic index -> time of the last append
        self.txn: dict[int, Producer] = {}
        self.txn_records: dict[int, list[tuple[TP, int]]] = {}
        self.txn_outcome: dict[str, str] = {}  # txn label -> committed / aborted
        self.txn_count = 0
        self.txn_label: dict[int, str] = {}  # slot -> label of its open transaction

    @property
    def admin(self) -> Admin:
        # A fresh client per call: nothing long-lived stays referenced by a failure's traceback.
        return Admin(self.bootstrap)

    # -- producing ---------------------------------------------------------------------------

    def _send(self, producer: Producer, topic: int, recs: list[content.Record], txn: str | None) -> list[tuple[TP, int]]:
        name, delivered, errors = self.names[topic], [], []

        def report(rec: content.Record, err, msg):
            # Keys, values and headers from what was sent (delivery reports do not carry headers).
            if err is not None:
                errors.append(err)
            else:
                delivered.append((msg.partition(), msg.offset(), rec.key, rec.value, tuple(rec.headers or ()), msg.timestamp()))

        for r in recs:
            kwargs = {"timestamp": r.timestamp} if r.timestamp else {}
            deadline = time.time() + SOURCE_WAIT_S
            while True:
                try:
                    producer.produce(name, key=r.key, value=r.value, headers=r.headers, partition=r.partition,
                                     on_delivery=functools.partial(report, r), **kwargs)
                    break
                except KafkaException as e:
                    # A partition added a moment ago is unknown to a long-lived producer until its
                    # metadata is refreshed (librdkafka refreshes every 5 minutes): ask for it.
                    if e.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.time() > deadline:
                        raise
                    producer.list_topics(name, timeout=10)
                    time.sleep(0.2)
            producer.poll(0)
        left = producer.flush(30)
        assert left == 0 and not errors, f"source produce to {name} failed (environment, not the mirror): {left} left, {errors[:3]}"
        assert len(delivered) == len(recs), f"{len(delivered)} of {len(recs)} deliveries reported"
        offsets: dict[int, list[int]] = {}
        out = []
        for p, off, key, value, headers, ts in delivered:
            self.model.setdefault((name, p), {})[off] = ProducedRecord(key, value, headers, ts, txn)
            offsets.setdefault(p, []).append(off)
            out.append(((name, p), off))
        for p, offs in offsets.items():
            self.last_range[(name, p)] = (min(offs), max(offs))
        self.last_append[topic] = time.time()
        return out

    def produce(self, i: int, op: dict) -> str:
        conf = {"bootstrap.servers": self.bootstrap, "enable.idempotence": op["idempotent"], "acks": "all",
                "compression.type": op["codec"], "linger.ms": op["linger_ms"], "batch.size": op["batch_size"]}
        recs = content.records(op["content"], op["count"], op["partitions"], f"op{i}")
        sent = self._send(shared_producer(conf), op["topic"], recs, None)
        return f"{len(sent)} records, offsets {self._ranges(sent)}"

    def txn_begin(self, op: dict) -> str:
        slot = op["slot"]
        if slot not in self.txn:
            cfg = self.history["txn_producers"][slot]
            p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"kmp-diff-{self.run_tag}-tx{slot}",
                          "compression.type": cfg["codec"], "linger.ms": cfg["linger_ms"], "batch.size": cfg["batch_size"]})
            p.init_transactions(30)
            self.txn[slot] = p
        self.txn[slot].begin_transaction()
        self.txn_records[slot] = []
        self.txn_count += 1
        self.txn_label[slot] = f"tx{self.txn_count}"
        return self.txn_label[slot]

    def txn_produce(self, i: int, op: dict) -> str:
        slot = op["slot"]
        recs = content.records(op["content"], op["count"], op["partitions"], f"op{i}")
        sent = self._send(self.txn[slot], op["topic"], recs, self.txn_label[slot])
        self.txn_records[slot] += sent
        return f"{self.txn_label[slot]}: {len(sent)} records, offsets {self._ranges(sent)}"

    def txn_end(self, op: dict) -> str:
        slot = op["slot"]
        (self.txn[slot].commit_transaction if op["commit"] else self.txn[slot].abort_transaction)(30)
        self.txn_outcome[self.txn_label[slot]] = "committed" if op["commit"] else "aborted"
        return f"{self.txn_label[slot]} {'committed' if op['commit'] else 'aborted'} ({len(self.txn_records[slot])} records)"

    def close(self) -> None:
        for p in self.txn.values():
            p.flush(5)
        self.txn.clear()

    @staticmethod
    def _ranges(sent: list[tuple[TP, int]]) -> str:
        by: dict[TP, list[int]] = {}
        for tp, off in sent:
            by.setdefault(tp, []).append(off)
        return ", ".join(f"p{tp[1]}:{min(o)}-{max(o)}" for tp, o in sorted(by.items()))

    # -- log start, compaction, retention, partitions ----------------------------------------

    def delete_records(self, op: dict) -> str:
        tp = (self.names[op["topic"]], op["partition"])
        lo, hi = watermarks(self.bootstrap, [tp])[tp]
        where = op["where"]
        first, last = self.last_range.get(tp, (0, 0))
        if where == "last_batch" and last > first:
            # Strictly inside the last produce's offsets: after its first record.
            offset = first + 1 + int(op["fraction"] * (last - first - 1))
        else:
            where = "fraction"
            offset = lo + round(op["fraction"] * (hi - lo))
        offset = max(lo, min(hi, offset))
        new_lo = self.admin.delete_records(tp[0], tp[1], offset)
        assert new_lo == offset, f"DeleteRecords {tp} to {offset} left the log start at {new_lo}"
        return f"{tp[0]}/{tp[1]}: log start {lo} -> {offset} ({where}; log end {hi}; last produce {first}-{last})"

    def jump(self, op: dict) -> str:
        """Moves the partition's log start ``offsets`` past its end: that many empty records, then
        DeleteRecords to the new end (the records are never in the model: no comparison sees them)."""
        tp = (self.names[op["topic"]], op["partition"])
        lo, hi = watermarks(self.bootstrap, [tp])[tp]
        end = append_empty_records(self.bootstrap, tp[0], tp[1], op["offsets"])
        new_lo = self.admin.delete_records(tp[0], tp[1], end)
        assert new_lo == end, f"DeleteRecords {tp} to {end} left the log start at {new_lo}"
        self.last_append[op["topic"]] = time.time()
        return f"{tp[0]}/{tp[1]}: log start {lo} -> {end} ({end - hi} empty records appended and deleted; log end was {hi})"

    def _wait_for_roll(self, topic: int, segment_ms: int) -> None:
        """Waits until a new append rolls the segment: segment.ms after the last append (the
        segment's first record is at least as old)."""
        since = time.time() - self.last_append.get(topic, 0)
        if since < segment_ms / 1000 + 0.05:
            time.sleep(segment_ms / 1000 + 0.05 - since)

    def _roll(self, topic: int, segment_ms: int) -> dict[TP, int]:
        self._wait_for_roll(topic, segment_ms)
        name = self.names[topic]
        recs = [content.Record(p, b"roll", f"roll@{time.time_ns()}".encode(), None, 0) for p in range(self.partitions[topic])]
        sent = self._send(shared_producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0}), topic, recs, None)
        return {tp: off for tp, off in sent}

    def cleaner_checkpoint(self) -> dict[TP, int]:
        path = self.log_dir / "cleaner-offset-checkpoint"
        out = {}
        if path.exists():
            for line in path.read_text().splitlines()[2:]:
                parts = line.split()
                if len(parts) == 3:
                    out[(parts[0], int(parts[1]))] = int(parts[2])
        return out

    def compact(self, op: dict) -> str:
        rolled = self._roll(op["topic"], COMPACT_SEGMENT_MS)
        want = {tp: off for tp, off in rolled.items() if off > 0}
        cleaned = lambda: all(self.cleaner_checkpoint().get(tp, -1) >= off for tp, off in want.items())
        wait_until("the source log cleaner to clean up to the rolled segments", cleaned, SOURCE_WAIT_S, 0.2,
                   lambda: f"want {want}, checkpoint {self.cleaner_checkpoint()}")
        return f"cleaned up to {want}"

    def time_retention(self, op: dict) -> str:
        name = self.names[op["topic"]]
        before = watermarks(self.bootstrap, [(name, p) for p in range(self.partitions[op["topic"]])])
        rolled = self._roll(op["topic"], RETENTION_SEGMENT_MS)
        self.admin.set_config(name, "retention.ms", "1")
        try:
            def gone():
                now = watermarks(self.bootstrap, list(rolled))
                return all(now[tp][0] >= off for tp, off in rolled.items())
            wait_until(f"time retention to delete the old segments of {name}", gone, SOURCE_WAIT_S, 0.3,
                       lambda: f"rolled at {rolled}, watermarks {watermarks(self.bootstrap, list(rolled))}")
        finally:
            self.admin.set_config(name, "retention.ms", "-1")
        after = watermarks(self.bootstrap, list(rolled))
        return ", ".join(f"p{tp[1]}: log start {before[tp][0]} -> {after[tp][0]} (end {after[tp][1]})" for tp in sorted(rolled))

    def add_partitions(self, op: dict) -> str:
        t = op["topic"]
        total = self.partitions[t] + op["add"]
        self.admin.add_partitions(self.names[t], total)
        self.partitions[t] = total
        return f"{self.names[t]} now has {total} partitions"
