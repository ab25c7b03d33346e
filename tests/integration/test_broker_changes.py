"""The destination cluster changes under the proxy: a partition leader is killed mid-stream
(clients must recover through the proxy with no loss), and a broker joins and leaves at runtime
(picked up without restarting the proxy)."""

import signal
import threading
import time

import pytest

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import unique
from mirror import leader_of

RECORDS = 20000


def create(bootstrap: str, topic: str, **kw) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the futures
    for f in admin.create_topics([NewTopic(topic, **kw)]).values():
        f.result(30)


@pytest.mark.long  # a leader kill under client load (76 s); the quick tier keeps test_broker_joining_and_leaving
def test_clients_recover_with_no_loss_when_the_partition_leader_is_killed(proxy, destination):
    topic = unique("failover")
    create(proxy.bootstrap, topic, num_partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    acked, failed = set(), []
    consumed = set()
    stop_consumer = threading.Event()

    def on_delivery(err, msg):
        (failed.append(err) if err else acked.add(msg.value().decode()))

    def consume():
        c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("failover-group"),
                      "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
        c.subscribe([topic])
        while not stop_consumer.is_set():
            for m in c.consume(500, 0.2):
                if not m.error():
                    consumed.add(m.value().decode())
        c.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    p = Producer({"bootstrap.servers": proxy.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    victim = None
    try:
        for i in range(RECORDS):
            while True:
                try:
                    p.produce(topic, value=f"v{i}", on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            if i % 100 == 0:
                p.poll(0)
                time.sleep(0.02)  # ~5000 records/s: the stream spans the kill and the recovery
            if i == RECORDS // 3:
                victim = leader_of(destination.bootstrap, topic, 0)
                destination.kill_broker(victim, signal.SIGKILL)
        assert p.flush(120) == 0, "producer delivered everything within 120s after the leader died"
        assert not failed, f"no delivery failed through the proxy: {failed[:5]}"
        assert len(acked) == RECORDS
        new_leader = leader_of(destination.bootstrap, topic, 0)
        assert new_leader not in (victim, -1), f"partition 0 moved to a live broker (was {victim}, now {new_leader})"
        deadline = time.time() + 120
        while not acked <= consumed and time.time() < deadline:
            time.sleep(0.2)
        missing = acked - consumed
        assert not missing, f"{len(missing)} acknowledged records never reached the consumer, e.g. {sorted(missing)[:5]}"
    finally:
        stop_consumer.set()
        reader.join(30)
        if victim is not None and victim not in destination.procs:
            destination.start_broker(victim)
    assert proxy.alive(), "the proxy survived the broker kill"


@pytest.mark.long  # 92 s loaded; quick tier: test_mirroring_survives_a_source_broker_kill_and_restart changes brokers under the engine
def test_broker_joining_and_leaving_is_picked_up_without_restart(proxy, destination):
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    assert sorted(b.id for b in admin.list_topics(timeout=30).brokers.values()) == [1, 2, 3]
    destination.add_broker(4)
    try:
        deadline = time.time() + 30
        brokers = {}
        while time.time() < deadline:
            brokers = {b.id: (b.host, b.port) for b in admin.list_topics(timeout=30).brokers.values()}
            if 4 in brokers:
                break
            time.sleep(0.2)
        assert brokers.get(4) == ("127.0.0.1", proxy.node_port(4)), f"broker 4 is shown at its proxy port: {brokers}"

        topic = unique("on-broker-4")
        create(proxy.bootstrap, topic, num_partitions=1, replication_factor=-1, replica_assignment=[[4]])
        p = Producer({"bootstrap.servers": proxy.bootstrap})
        for i in range(50):
            p.produce(topic, value=f"b4-{i}")
        assert p.flush(30) == 0, "records for a partition led by the new broker are delivered through the proxy"
        c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("b4"), "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.time() + 30
        while len(got) < 50 and time.time() < deadline:
            got += [m.value().decode() for m in c.consume(100, 0.2) if not m.error()]
        c.close()
        assert got == [f"b4-{i}" for i in range(50)]
        deadline = time.time() + 30
        while proxy.metric("kmp_known_brokers") < 4 and time.time() < deadline:
            time.sleep(0.2)
        assert proxy.metric("kmp_known_brokers") == 4, "the proxy's own refresh counts the new broker"
    finally:
        destination.kill_broker(4, signal.SIGTERM)
    deadline = time.time() + 60
    ids = []
    while time.time() < deadline:
        ids = sorted(b.id for b in admin.list_topics(timeout=30).brokers.values())
        if ids == [1, 2, 3]:
            break
        time.sleep(0.5)
    assert ids == [1, 2, 3], f"the departed broker disappears from metadata through the proxy: {ids}"
    p = Producer({"bootstrap.servers": proxy.bootstrap})
    p.produce(unique("after-leave"), value=b"x")
    assert p.flush(30) == 0, "the proxy keeps serving after a broker left"
