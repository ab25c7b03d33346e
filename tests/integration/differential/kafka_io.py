"""Talking to the clusters for the differential test: watermarks, reading every record of a set of
partitions to a known end, admin calls, and bounded polling.

Nothing here returns a default for something missing: a partition that cannot be read to its end,
a watermark that cannot be fetched or a condition that never holds raises with what was seen.
"""

from __future__ import annotations

import time
from typing import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

TP = tuple[str, int]
# (offset, key, value, headers, timestamp type, timestamp) of one visible record.
Rec = tuple[int, "bytes | None", "bytes | None", tuple, int, int]

_seq = [0]

# Errors a partition answers ListOffsets with for a moment after it was created, added or moved
# (a broker's metadata can name a leader before that broker leads it), retried up to RETRY_S.
RETRIABLE = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
             KafkaError.NOT_COORDINATOR, KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
RETRY_S = 15


def group_id(prefix: str) -> str:
    _seq[0] += 1
    return f"kmp-diff-{prefix}-{time.time_ns()}-{_seq[0]}"


def wait_until(what: str, condition: Callable[[], object], timeout: float, interval: float = 0.2, detail: Callable[[], str] | None = None):
    """Polls ``condition`` until it returns something truthy (returned); raises after ``timeout``."""
    deadline = time.time() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.time() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f":\n{detail()}" if detail else ""))
        time.sleep(interval)


def watermarks(bootstrap: str, tps: list[TP], isolation: str = "read_uncommitted") -> dict[TP, tuple[int, int]]:
    """(log start, end) of each partition; the end is the high watermark, or with read_committed
    the last stable offset (librdkafka's ListOffsets carries the isolation level)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id("wm"), "isolation.level": isolation})

    def one(tp: TP) -> tuple[int, int]:
        deadline = time.time() + RETRY_S
        while True:
            try:
                return c.get_watermark_offsets(TopicPartition(tp[0], tp[1]), timeout=10, cached=False)
            except KafkaException as e:
                if e.args[0].code() not in RETRIABLE or time.time() > deadline:
                    raise
                time.sleep(0.2)
    try:
        return {tp: one(tp) for tp in tps}
    finally:
        c.close()


def partition_counts(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Partition count of each of ``topics`` that exists (missing ones are absent)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    return {t: len(md[t].partitions) for t in topics if t in md and md[t].error is None}


def read_records(bootstrap: str, ranges: dict[TP, tuple[int, int]], isolation: str, timeout: float = 60) -> dict[TP, list[Rec]]:
    """Every visible record of each partition from its range's start to its end (exclusive).

    A partition is done when the consumer's position reaches the end (records, control batches
    and masked fillers all move it). Raises if a partition does not get there, if the start is out
    of range, or if one offset comes back twice with different contents."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id("read"), "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False, "auto.offset.reset": "error",
                  "fetch.wait.max.ms": 100})
    got: dict[TP, dict[int, Rec]] = {tp: {} for tp in ranges}
    pending = {tp for tp, (lo, hi) in ranges.items() if hi > lo}
    try:
        if pending:
            c.assign([TopicPartition(t, p, ranges[(t, p)][0]) for t, p in sorted(pending)])
        deadline = time.time() + timeout
        while pending:
            if time.time() > deadline:
                pos = {(tp.topic, tp.partition): tp.offset for tp in c.position([TopicPartition(t, p) for t, p in pending])}
                raise AssertionError(f"reading {bootstrap} ({isolation}) did not reach the end of {sorted(pending)} within {timeout:.0f}s: "
                                     f"positions {pos}, wanted ranges { {tp: ranges[tp] for tp in pending} }")
            for m in c.consume(1000, 0.2):
                tp = (m.topic(), m.partition())
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= ranges[tp][1]:
                            pending.discard(tp)
                        continue
                    raise AssertionError(f"reading {tp} from {bootstrap} ({isolation}): {m.error()}")
                if m.offset() >= ranges[tp][1]:
                    continue
                ts_type, ts = m.timestamp()
                rec = (m.offset(), m.key(), m.value(), tuple(m.headers() or ()), ts_type, ts)
                seen = got[tp].get(m.offset())
                assert seen is None or seen == rec, f"{tp} offset {m.offset()} read twice with different contents: {seen} / {rec}"
                got[tp][m.offset()] = rec
            if pending:
                for tp in c.position([TopicPartition(t, p) for t, p in pending]):
                    if tp.offset >= ranges[(tp.topic, tp.partition)][1]:
                        pending.discard((tp.topic, tp.partition))
    finally:
        c.close()
    return {tp: [recs[o] for o in sorted(recs)] for tp, recs in got.items()}


class Admin:
    """The admin calls the history needs, each waiting for its result."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.client = AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(self, name: str, partitions: int, config: dict, replication: int = 1) -> None:
        self.client.create_topics([NewTopic(name, partitions, replication, config=config)])[name].result(30)
        wait_until(f"{name} has a leader for each partition", lambda: self._leaders(name) == partitions, 30)

    def _leaders(self, name: str) -> int:
        t = self.client.list_topics(name, timeout=10).topics[name]
        return 0 if t.error else sum(1 for p in t.partitions.values() if p.leader >= 0)

    def delete_records(self, topic: str, partition: int, before: int) -> int:
        """Moves the log start to ``before``; returns the new log start the broker reports."""
        futures = self.client.delete_records([TopicPartition(topic, partition, before)])
        return next(iter(futures.values())).result(30).low_watermark

    def set_config(self, topic: str, name: str, value: str) -> None:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        for f in self.client.incremental_alter_configs([res]).values():
            f.result(30)

    def add_partitions(self, topic: str, total: int) -> None:
        self.client.create_partitions([NewPartitions(topic, total)])[topic].result(30)
        wait_until(f"{topic} has {total} partitions with leaders", lambda: self._leaders(topic) == total, 30)
        # Metadata names a new partition's leader a moment before that broker serves it
        # (ListOffsets answered NOT_LEADER_OR_FOLLOWER): wait until every partition answers.
        watermarks(self.bootstrap, [(topic, p) for p in range(total)])

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, -1 while the broker answering does not know the partition
        yet (a topic just created can be in one broker's metadata before another's)."""
        t = self.client.list_topics(topic, timeout=10).topics.get(topic)
        p = t.partitions.get(partition) if t is not None and t.error is None else None
        return p.leader if p is not None else -1

    def delete_topics(self, topics: list[str]) -> None:
        for f in self.client.delete_topics(topics).values():
            f.result(30)
