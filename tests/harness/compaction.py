"""Compaction gaps on a source topic: since the engine replays source transactions (aborted records
copied, real COMMIT/ABORT markers at the source's offsets), the only fillers (key `__kmp_filler`)
it writes on the destination stand for offsets with no source record at all — compaction gaps of a
compacted source topic and offsets below the source's log start (the latter deleted on the
destination soon after). A test whose premise is "the destination holds fillers" gets them here.

``create_with_compaction_gaps`` creates a compacted topic, overwrites keys while segments roll until
the source's log cleaner has left holes in every partition, then turns compaction off again
(the configs are deleted: the topic is an ordinary delete-policy topic from then on, with the holes
kept) so that the source no longer changes under the test: a cleaner still running would remove
aborted transactions' records and markers, and superseded records, after the mirror copied them.
The destination topic, created later with the source's configs, is then not compacted either, so
the fillers stay on it."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from kmp_common import unique
from mirror import FILLER_KEY, read_all

# The settings that make the test brokers' cleaner (log.cleaner.backoff.ms = 1000) compact a
# partition within seconds of a segment roll.
COMPACT_CONFIG = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                  "min.compaction.lag.ms": "0", "delete.retention.ms": "100"}
GAPS_TIMEOUT_S = 120


def log_bounds(bootstrap: str, topic: str, partitions: int, isolation: str = "read_uncommitted") -> list[tuple[int, int]]:
    """(log start, end) of each partition: the end is the high watermark read_uncommitted, the last
    stable offset read_committed (ListOffsets carries the consumer's isolation level)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("bounds"), "isolation.level": isolation})
    out = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    c.close()
    return out


def holes(bootstrap: str, topic: str, partitions: int) -> dict[int, list[int]]:
    """Per partition, the offsets between its log start and its end at which reading it
    read_uncommitted returns no record. On a topic without transactions these are exactly the
    compaction gaps (a transaction marker is such an offset too: call this before any)."""
    bounds = log_bounds(bootstrap, topic, partitions)
    present: dict[int, set[int]] = {p: set() for p in range(partitions)}
    for r in read_all(bootstrap, topic, partitions, "read_uncommitted"):
        present[r[0]].add(r[1])
    return {p: [o for o in range(bounds[p][0], bounds[p][1]) if o not in present[p]] for p in range(partitions)}


def _set_configs(admin: AdminClient, topic: str, op) -> None:
    entries = [ConfigEntry(k, v if op == AlterConfigOpType.SET else "", incremental_operation=op) for k, v in COMPACT_CONFIG.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([resource]).values():
        fut.result(30)


def _cleanup_policy(admin: AdminClient, topic: str) -> str:
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    return next(iter(described.values())).result(30)["cleanup.policy"].value


def create_with_compaction_gaps(bootstrap: str, topic: str, partitions: int, keys: int = 4, rounds: int = 12) -> dict[int, list[int]]:
    """Creates ``topic`` compacted, writes ``rounds`` batches of ``keys`` keys to each partition
    (every round supersedes the previous one) and keeps appending one record per partition every
    ~200 ms (so segments roll: segment.ms = 100) until the source's cleaner left holes in every
    partition — bounded by GAPS_TIMEOUT_S. Then compaction is turned off (the configs deleted,
    the topic falls back to cleanup.policy=delete) and the log is waited on until it stays
    the same. Returns the holes by partition. Every record is keyed (a compacted topic refuses
    null keys); write null-keyed records only after this returned."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=COMPACT_CONFIG)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for r in range(rounds):
        for part in range(partitions):
            for k in range(keys):
                p.produce(topic, key=f"c{part}-{k}".encode(), value=f"compacted-{part}-{k}@{r}".encode(), partition=part,
                          headers=[("round", str(r).encode())])
        assert p.flush(30) == 0, "the keyed records reached the source"
        time.sleep(0.12)  # past segment.ms: the next batch rolls the segment
    deadline, found, n = time.time() + GAPS_TIMEOUT_S, {}, 0
    while True:
        # One more record per partition (superseding the previous one) rolls the segment that
        # holds the earlier records, so the cleaner can take it.
        for part in range(partitions):
            p.produce(topic, key=f"tick-{part}".encode(), value=f"tick-{part}@{n}".encode(), partition=part)
        assert p.flush(30) == 0, "the tick records reached the source"
        n += 1
        if n % 5 == 0:
            found = holes(bootstrap, topic, partitions)
            if all(found.values()):
                break
            assert time.time() < deadline, (f"{topic}: the source's log cleaner left holes in every partition within "
                                            f"{GAPS_TIMEOUT_S}s (holes by partition: {found})")
        time.sleep(0.2)
    _set_configs(admin, topic, AlterConfigOpType.DELETE)
    deadline = time.time() + 60
    while _cleanup_policy(admin, topic) != "delete":
        assert time.time() < deadline, f"{topic}: cleanup.policy back to delete within 60 s"
        time.sleep(0.2)
    # A cleaning the broker started before the change may still finish: wait until two reads a
    # few cleaner backoffs apart agree.
    before = read_all(bootstrap, topic, partitions, "read_uncommitted")
    while True:
        time.sleep(3)
        now = read_all(bootstrap, topic, partitions, "read_uncommitted")
        if now == before:
            break
        assert time.time() < deadline, f"{topic}: the source log stopped changing once compaction was turned off"
        before = now
    found = holes(bootstrap, topic, partitions)
    assert all(found.values()), f"{topic}: holes left in every partition: {found}"
    return found


def fillers(records: list[tuple]) -> list[tuple[int, int]]:
    """(partition, offset) of the filler records in ``records`` (as mirror.read_all returns them)."""
    return [(r[0], r[1]) for r in records if r[2] == FILLER_KEY]
