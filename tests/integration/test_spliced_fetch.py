"""Large Fetch responses through the proxy move socket to socket by splice(2) (plain TCP on both
sides): a consumer reading megabytes of incompressible records through the proxy gets exactly what
a consumer reading the broker directly gets, record by record, and the proxy's
kmp_spliced_bytes shows the records did not pass through its memory."""

import hashlib
import os
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import unique

PARTITIONS = 2
RECORDS_PER_PARTITION = 600
VALUE_BYTES = 16 * 1024


def read_all(bootstrap: str, topic: str, ends: list[int]) -> dict[tuple[int, int], str]:
    """Every record of ``topic`` up to ``ends``, as (partition, offset) -> digest of key and value."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("splice-reader"), "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "fetch.max.bytes": 8 * 1024 * 1024,
                  "max.partition.fetch.bytes": 4 * 1024 * 1024})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: dict[tuple[int, int], str] = {}
    deadline = time.time() + 120
    while len(out) < sum(ends) and time.time() < deadline:
        for m in c.consume(500, 0.5):
            assert not m.error(), f"consumer error through {bootstrap}: {m.error()}"
            out[(m.partition(), m.offset())] = hashlib.sha256((m.key() or b"") + b"|" + m.value()).hexdigest()
    c.close()
    assert len(out) == sum(ends), f"read {len(out)} of {sum(ends)} records through {bootstrap} within 120 s"
    return out


def test_megabytes_of_records_consumed_through_the_proxy_are_spliced_and_equal_a_direct_read(proxy, destination):
    topic = unique("spliced")
    admin = AdminClient({"bootstrap.servers": destination.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": destination.bootstrap, "compression.type": "none", "acks": "all",
                  "linger.ms": 20, "batch.size": 1024 * 1024, "message.max.bytes": 2 * 1024 * 1024})
    errors: list = []
    for i in range(RECORDS_PER_PARTITION):
        for part in range(PARTITIONS):
            p.produce(topic, key=f"k{part}-{i}".encode(), value=os.urandom(VALUE_BYTES), partition=part,
                      on_delivery=lambda e, _m: e and errors.append(e))
        p.poll(0)
    assert p.flush(60) == 0 and not errors, f"undelivered records: {errors[:3]}"
    probe = Consumer({"bootstrap.servers": destination.bootstrap, "group.id": unique("probe")})
    ends = [probe.get_watermark_offsets(TopicPartition(topic, part), timeout=30)[1] for part in range(PARTITIONS)]
    probe.close()
    assert ends == [RECORDS_PER_PARTITION] * PARTITIONS, f"end offsets {ends}"

    spliced_before = proxy.metric("kmp_spliced_bytes_total")
    direct = read_all(destination.bootstrap, topic, ends)
    through = read_all(proxy.bootstrap, topic, ends)
    spliced = proxy.metric("kmp_spliced_bytes_total") - spliced_before

    missing = sorted(direct.keys() - through.keys())[:5]
    differ = sorted(k for k in direct.keys() & through.keys() if direct[k] != through[k])[:5]
    assert not missing and not differ and through.keys() == direct.keys(), \
        f"through the proxy vs direct: missing {missing}, different {differ}"
    total = PARTITIONS * RECORDS_PER_PARTITION * VALUE_BYTES
    assert spliced >= total // 2, f"only {spliced:.0f} of the {total} record bytes were spliced"
