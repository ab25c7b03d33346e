"""An existing empty destination topic that a mirror adopts gets the settings identical records
need, whatever its creator set (found by a hostile review: a topic pre-created with
``message.timestamp.type=LogAppendTime`` was adopted as is, and the destination restamped every
copied record with its own append time while the mirror reported healthy)."""

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from kmp_common import unique
from sec_support import create_topic, mirror_decl, running_proxy, wait_caught_up

# An hour old (older ones would fall to the default 7-day retention at once): a destination that
# stamps its own append time gives every record "now" instead.
SOURCE_TIMESTAMPS = [int(time.time() * 1000) - 3_600_000 + i for i in range(5)]


def timestamps(bootstrap: str, topic: str, n: int) -> list[tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("sec-ts"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out, deadline = [], time.time() + 30
    try:
        while len(out) < n and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                out.append(m.timestamp())
    finally:
        c.close()
    assert len(out) == n, f"read {len(out)} of {n} records of {topic} via {bootstrap}"
    return out


def test_an_adopted_topic_created_with_log_append_time_keeps_the_source_timestamps(clusters, workdir):
    source, destination = clusters
    topic = unique("sec-adopt")
    create_topic(source.bootstrap, topic)
    p = Producer({"bootstrap.servers": source.bootstrap})
    for i, ts in enumerate(SOURCE_TIMESTAMPS):
        p.produce(topic, value=f"v{i}".encode(), timestamp=ts)
    assert p.flush(30) == 0
    create_topic(destination.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime", "compression.type": "gzip"})
    with running_proxy(destination, workdir, mirrors=[mirror_decl("adopt", source, [topic])]):
        wait_caught_up(source, destination, topic, 1)
        got = timestamps(destination.bootstrap, topic, len(SOURCE_TIMESTAMPS))
        assert [ts for _, ts in got] == SOURCE_TIMESTAMPS, f"the adopted topic restamped the copied records: {got} (source {SOURCE_TIMESTAMPS})"
        admin = AdminClient({"bootstrap.servers": destination.bootstrap})
        r = ConfigResource(ResourceType.TOPIC, topic)
        configs = admin.describe_configs([r])[r].result(30)
        assert configs["message.timestamp.type"].value == "CreateTime", "the adopted topic keeps LogAppendTime"
        assert configs["compression.type"].value == "producer", "the adopted topic keeps its own compression type"
