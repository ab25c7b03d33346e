"""kafka-python (pure Python client) through the proxy: admin create + describe configs, gzip
produce, a two-member consumer group through a rebalance, committed offsets re-read."""

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from conftest import unique

RECORDS = 300
PARTITIONS = 3


def consumer(bootstrap: str, group: str) -> KafkaConsumer:
    # metadata_max_age_ms: a new topic may not have reached the broker that answers the group
    # leader's first metadata request (on a loaded machine, directly as through the proxy); the
    # range assignor then assigns nothing, and kafka-python rejoins only once a metadata refresh
    # shows the topic — by default after 5 minutes.
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=200, session_timeout_ms=10000,
                         heartbeat_interval_ms=1000, metadata_max_age_ms=1000)


def test_kafka_python_full_scenario_through_proxy(proxy):
    prefix = unique("kpy")
    topic, group = f"{prefix}-topic", f"{prefix}-group"
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    deadline = time.time() + 15
    while True:  # the new topic may not have reached every broker's metadata yet (same direct)
        try:
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        except Exception:  # noqa: BLE001 - UnknownTopicOrPartitionError, retried below
            described = None
        if (described and "cleanup.policy" in repr(described)) or time.time() > deadline:
            break
        time.sleep(0.2)
    text = repr(described)
    assert "cleanup.policy" in text and "delete" in text, f"describe_configs through proxy: {text[:500]}"

    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, compression_type="gzip", acks="all")
    futures = [producer.send(topic, key=f"k{i}".encode(), value=f"{prefix}-{i}".encode()) for i in range(RECORDS)]
    producer.flush(30)
    for f in futures:
        f.get(30)
    producer.close()

    seen = set()
    c1 = consumer(proxy.bootstrap, group)
    c1.subscribe([topic])
    deadline = time.time() + 60
    while len(seen) < 100 and time.time() < deadline:
        for recs in c1.poll(200).values():
            seen.update(r.value.decode() for r in recs)
    assert len(seen) >= 100, f"first member consumed {len(seen)} records within 60s"
    c1.commit()
    c2 = consumer(proxy.bootstrap, group)
    c2.subscribe([topic])
    rebalanced = False
    deadline = time.time() + 90
    while (len(seen) < RECORDS or not rebalanced) and time.time() < deadline:
        for c in (c1, c2):
            for recs in c.poll(100).values():
                seen.update(r.value.decode() for r in recs)
        rebalanced = len(c2.assignment()) > 0 and len(c1.assignment()) < PARTITIONS
    assert rebalanced, f"second member got partitions through a rebalance: c1={c1.assignment()} c2={c2.assignment()}"
    assert len(seen) == RECORDS, f"group consumed all {RECORDS} records, got {len(seen)}"
    # Settle: poll and commit until the group's committed offsets reach the end offsets (a
    # member that lost a partition in the rebalance may not have committed what it read).
    reader = KafkaConsumer(bootstrap_servers=proxy.bootstrap)
    ends = reader.end_offsets([TopicPartition(topic, i) for i in range(PARTITIONS)])
    reader.close()
    committed = {}
    deadline = time.time() + 60
    while time.time() < deadline:
        for c in (c1, c2):
            c.poll(100)
            try:
                c.commit()
            except Exception:  # noqa: BLE001 - a rebalance in progress; retried next round
                pass
        committed = {tp: om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
        if committed == ends:
            break
    c1.close()
    c2.close()
    admin.close()
    assert committed == ends, f"committed {committed} vs end offsets {ends}"
    assert sum(ends.values()) == RECORDS
