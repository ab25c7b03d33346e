"""The librdkafka client scenario (moved out of test_librdkafka_client.py; test_newer_broker.py
runs it against a newer broker): topics, produce and consume with a group, offsets and configs."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic



# ---- from test_librdkafka_client.py ------------------------------------------

RECORDS = 300
PARTITIONS = 3


def create_topic(admin: AdminClient, topic: str, partitions: int = PARTITIONS) -> None:
    for f in admin.create_topics([NewTopic(topic, partitions, 3)]).values():
        f.result(30)


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 10000}
    conf.update(extra)
    return Consumer(conf)


def scenario(bootstrap: str, prefix: str, compression: str) -> dict:
    topic, group = f"{prefix}-topic", f"{prefix}-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    create_topic(admin, topic)
    res = ConfigResource("topic", topic)
    deadline = time.time() + 15
    while True:  # the new topic may not have reached every broker's metadata yet (same direct)
        try:
            configs = admin.describe_configs([res])[res].result(30)
            break
        except KafkaException as e:
            if e.args[0].code() != 3 or time.time() > deadline:
                raise
            time.sleep(0.2)
    assert configs["cleanup.policy"].value == "delete", f"describe_configs: {configs.get('cleanup.policy')}"

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "acks": "all"})
    errors = []
    for i in range(RECORDS):
        p.produce(topic, key=f"k{i}", value=f"{prefix}-{i}", on_delivery=lambda e, m: e and errors.append(e))
    assert p.flush(30) == 0 and not errors, f"undelivered records: {errors[:3]}"

    seen = set()
    c1 = consumer(bootstrap, group)
    c1.subscribe([topic])
    deadline = time.time() + 60
    while len(seen) < 100 and time.time() < deadline:
        for m in c1.consume(100, 0.2):
            assert not m.error(), m.error()
            seen.add(m.value().decode())
    assert len(seen) >= 100, f"first member consumed {len(seen)} records within 60s"
    c1.commit(asynchronous=False)
    c2 = consumer(bootstrap, group)
    c2.subscribe([topic])
    rebalanced = False
    deadline = time.time() + 90
    while (len(seen) < RECORDS or not rebalanced) and time.time() < deadline:
        for c in (c1, c2):
            for m in c.consume(100, 0.1):
                if not m.error():
                    seen.add(m.value().decode())
        rebalanced = len(c2.assignment()) > 0 and len(c1.assignment()) < PARTITIONS
    assert rebalanced, f"second member got partitions through a rebalance: c1={c1.assignment()} c2={c2.assignment()}"
    assert len(seen) == RECORDS, f"group consumed all {RECORDS} records, got {len(seen)}"
    # Settle: a member that lost a partition in the rebalance may not have committed what it
    # read; the new owner re-reads from the last commit. Poll and commit until the group's
    # committed offsets reach the end offsets.
    tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
    ends = [c1.get_watermark_offsets(tp, timeout=30)[1] for tp in tps]
    committed = []
    deadline = time.time() + 60
    while time.time() < deadline:
        for c in (c1, c2):
            c.consume(100, 0.1)
            try:
                c.commit(asynchronous=False)
            except KafkaException:
                pass  # nothing new to commit, or a rebalance in progress
        committed = [tp.offset for tp in c1.committed(tps, timeout=30)]
        if committed == ends:
            break
    c1.close()
    c2.close()
    assert committed == ends, f"committed {committed} vs end offsets {ends}"
    assert sum(ends) == RECORDS
    return {"records": len(seen), "rebalanced": rebalanced}
