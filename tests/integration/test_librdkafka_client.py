"""librdkafka (confluent-kafka Python) through the proxy: admin create + describe configs,
compressed produce, a two-member consumer group through a rebalance, committed offsets re-read,
and transactions that commit and abort."""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import unique
from client_scenarios import RECORDS, create_topic, scenario


def transactions(bootstrap: str, prefix: str) -> tuple[list[str], list[str]]:
    topic = f"{prefix}-txn"
    create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, 2)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-tx"})
    p.init_transactions(30)
    for kind, rng, commit in (("committed", range(10), True), ("aborted", range(10), False), ("committed", range(10, 15), True)):
        p.begin_transaction()
        for i in rng:
            p.produce(topic, value=f"{kind}-{i}", partition=i % 2)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)

    # Read up to the log end (read_uncommitted high watermark), not the current LSO:
    # commit_transaction() returns before the markers are written.
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe"), "isolation.level": "read_uncommitted"})
    ends = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in (0, 1)]
    probe.close()

    def read(isolation: str) -> list[str]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "isolation.level": isolation,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        tps = [TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)]
        c.assign(tps)
        out, deadline = [], time.time() + 30
        while time.time() < deadline:
            out += [m.value().decode() for m in c.consume(100, 0.2) if not m.error()]
            if all(tp.offset >= end for tp, end in zip(c.position(tps), ends)):
                break
        c.close()
        return out

    return read("read_committed"), read("read_uncommitted")


@pytest.mark.parametrize("compression", ["zstd", "lz4", "gzip", "snappy"])
def test_librdkafka_full_scenario_through_proxy(proxy, compression):
    got = scenario(proxy.bootstrap, unique(f"rdk-{compression}"), compression)
    assert got == {"records": RECORDS, "rebalanced": True}


def test_librdkafka_transactions_commit_and_abort_through_proxy(proxy):
    committed, uncommitted = transactions(proxy.bootstrap, unique("rdk-txn"))
    assert len(committed) == 15 and all(v.startswith("committed-") for v in committed), committed
    assert len(uncommitted) == 25, f"read_uncommitted sees committed and aborted records, got {len(uncommitted)}"
