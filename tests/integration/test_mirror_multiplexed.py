"""Many partitions, few connections (issue #13), against real clusters: hundreds of partitions of
one mirror reach the source broker over a fetch session and a control connection and each
destination broker over a produce lane and a control connection; a partition whose destination
log was written behind the mirror's back goes FAILED alone while the partitions sharing its
Produce requests keep mirroring; killing a destination broker stalls only the partitions it led."""

import signal
import threading
import time

from confluent_kafka import Producer

from conftest import unique
from kmp_common import established
from test_broker_changes import leader_of
from test_mirror_engine import create, high_watermarks, read_all, strip_fillers, wait_caught_up
from test_mirror_faults import mirroring_proxy

PARTITIONS = 300


def ports_of(bootstrap: str) -> list[int]:
    return [int(a.rsplit(":", 1)[1]) for a in bootstrap.split(",")]


def watermarks_of(bootstrap: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """High watermarks of some partitions (those whose leader is alive)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("hw")})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        c.close()


def produce_each(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, value=f"{tag}-{part}-{i}".encode(), partition=part)
        p.poll(0)
    assert p.flush(60) == 0, "source records delivered"


def test_hundreds_of_partitions_share_a_few_connections_and_a_failed_partition_stops_alone(clusters, workdir):
    source, destination = clusters
    topic = unique("mux")
    create(source.bootstrap, topic, PARTITIONS)
    produce_each(source.bootstrap, topic, PARTITIONS, 3, "a")
    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        to_source = established(proxy.pid, set(ports_of(source.bootstrap)))
        per_destination = {port: established(proxy.pid, {port}) for port in ports_of(destination.bootstrap)}
        assert 1 <= to_source <= 4, f"{PARTITIONS} partitions reach the source broker over {to_source} connections (at most 4)"
        assert all(n <= 4 for n in per_destination.values()), f"connections per destination broker (at most 4): {per_destination}"
        requests = proxy.metric("kmp_mirror_produce_requests_total")
        batches = proxy.metric("kmp_mirror_produce_batches_total")
        assert batches > requests, f"Produce requests carry several partitions' batches: {batches} batches in {requests} requests"

        # A record written straight into partition 7 of the destination (not through the proxy)
        # puts the mirror's next write at another offset: that partition must fail closed, alone.
        victim = 7
        p = Producer({"bootstrap.servers": destination.bootstrap})
        p.produce(topic, value=b"foreign", partition=victim)
        assert p.flush(30) == 0
        produce_each(source.bootstrap, topic, PARTITIONS, 2, "b")
        labels = f'mirror="faults",topic="{topic}",partition="{victim}"'
        deadline = time.time() + 60
        while proxy.metric("kmp_mirror_failed", labels) != 1 and time.time() < deadline:
            time.sleep(0.5)
        assert proxy.metric("kmp_mirror_failed", labels) == 1, f"partition {victim} is FAILED after its offsets drifted"
        others = [p for p in range(PARTITIONS) if p != victim]
        deadline = time.time() + 90
        while time.time() < deadline:
            src, dst = high_watermarks(source.bootstrap, topic, PARTITIONS), high_watermarks(destination.bootstrap, topic, PARTITIONS)
            if all(src[i] == dst[i] for i in others):
                break
            time.sleep(0.5)
        behind = [i for i in others if src[i] != dst[i]]
        assert not behind, f"partitions sharing produce requests with the failed one kept mirroring; behind: {behind[:10]}"
        failed = [i for i in range(PARTITIONS) if proxy.metric("kmp_mirror_failed", f'mirror="faults",topic="{topic}",partition="{i}"') == 1]
        assert failed == [victim], f"only partition {victim} failed: {failed}"
    src_records = [r for r in read_all(source.bootstrap, topic, PARTITIONS, "read_committed") if r[0] != victim]
    dst_records = [r for r in strip_fillers(read_all(destination.bootstrap, topic, PARTITIONS, "read_uncommitted")) if r[0] != victim]
    assert dst_records == src_records, "every other partition equals the source record by record"


def test_killing_a_destination_broker_stalls_only_the_partitions_it_led(clusters, workdir):
    source, destination = clusters
    topic, n = unique("mux-kill"), 60
    create(source.bootstrap, topic, n)
    produce_each(source.bootstrap, topic, n, 2, "a")
    stop = threading.Event()

    def keep_producing():
        p = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            for part in range(n):
                p.produce(topic, value=f"live-{part}-{i}".encode(), partition=part)
            p.poll(0)
            i += 1
            time.sleep(0.05)
        assert p.flush(60) == 0

    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: n})
        writer = threading.Thread(target=keep_producing, daemon=True)
        writer.start()
        victim = None
        try:
            leaders = {p: leader_of(destination.bootstrap, topic, p) for p in range(n)}
            victim = max(set(leaders.values()), key=lambda b: sum(1 for v in leaders.values() if v == b))
            others = [p for p, b in leaders.items() if b != victim]
            destination.kill_broker(victim, signal.SIGKILL)
            killed_at = time.time()
            before = watermarks_of(destination.bootstrap, topic, others)
            # Partitions led by the surviving brokers keep advancing while the victim's wait for
            # their new leaders.
            deadline = killed_at + 20
            advanced = set()
            while time.time() < deadline and not set(others) <= advanced:
                now = watermarks_of(destination.bootstrap, topic, others)
                advanced |= {p for p in others if now[p] > before[p]}
                time.sleep(0.5)
            stalled = sorted(set(others) - advanced)
            assert not stalled, f"partitions not led by the killed broker {victim} kept mirroring within 20 s; stalled: {stalled}"
        finally:
            stop.set()
            writer.join(60)
            if victim is not None and victim not in destination.procs:
                destination.start_broker(victim)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: n})
        assert proxy.metric("kmp_mirror_failed", f'mirror="faults",topic="{topic}",partition="0"') == 0
    src_records = read_all(source.bootstrap, topic, n, "read_committed")
    dst_records = strip_fillers(read_all(destination.bootstrap, topic, n, "read_uncommitted"))
    assert dst_records == src_records, "after the leaders moved back and forth, the destination equals the source"
