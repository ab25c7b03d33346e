"""The engine's link to the source, against a dedicated 1-broker source cluster:

- a distant source (issue #13's WAN setup at a small size): the mirror reaches the cluster only
  through a toxiproxy relay adding 100 ms of round trip (tests/harness/latency.py) and must copy at
  bandwidth, not one fetch_max_bytes per round trip: its Fetch size grows while answers come back
  full, so a 40 MB backlog takes a handful of Fetch requests instead of the ~40 a fixed 1 MiB would
  need. The copy must be exact (records and offsets) and nothing may bypass the relay. The
  throughput and lag tables over 20/100 ms against MirrorMaker 2 are bench/wan_bench.py's.
- a broker that evicts the mirror's fetch session: the cluster's fetch session cache is tiny (8
  slots: one per cache shard) and a client fetching as a follower (replica id 99; Kafka lets a
  follower's session evict a consumer's at once, anyone else only after 2 minutes) takes every
  slot; the mirror's next incremental Fetch is refused (FETCH_SESSION_ID_NOT_FOUND) and it must go
  on with full Fetches, sessionless while the cache stays full, without a partition failing or a
  record lost.
"""

import os
import socket
import struct
import time

import pytest
from confluent_kafka import Producer

from conftest import unique
from kafka_wire import _str, read_response, request
from kmp_common import ProxyProcess, established, running_cluster
from latency import LatencyRelay
from mirror import assert_equal, create, mirroring_proxy, produce_plain, wait_caught_up

RTT_MS = 100
BACKLOG_RECORDS = 40_000  # of 1 KiB: 40 MB
FIXED_FETCH_REQUESTS = BACKLOG_RECORDS * 1024 // (1024 * 1024)  # what 1 MiB per Fetch would need at least


SESSION_SLOTS = 8  # Kafka shards the fetch session cache 8 ways: one session per shard


@pytest.fixture(scope="module")
def far_source(workdir):
    """A 1-broker source whose WAN listener is reachable only through the relay, 100 ms away (its
    plain listener stays direct), with a fetch session cache of 8 slots."""
    extra = {"max.incremental.fetch.session.cache.slots": SESSION_SLOTS}
    with running_cluster("link-source", 1, workdir, wan=True, extra_config=extra) as cluster, LatencyRelay(cluster, workdir) as relay:
        relay.set_rtt(RTT_MS)
        yield cluster, relay


def produce_backlog(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144, "compression.type": "none"})
    for i in range(BACKLOG_RECORDS):
        p.produce(topic, key=str(i).encode(), value=os.urandom(1016) + i.to_bytes(8, "big"), partition=0)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(120) == 0, "backlog delivered to the source"


@pytest.mark.long  # quick tier: the caught-up 100 ms source with a second fetch in flight
def test_a_source_100ms_away_is_copied_exactly_with_growing_fetches(far_source, destination, workdir):
    source, relay = far_source
    rtt = relay.measured_rtt_ms()
    assert rtt >= RTT_MS * 0.9, f"the relay adds {RTT_MS} ms of round trip (measured {rtt:.1f} ms)"
    topic = unique("wan")
    create(source.bootstrap, topic, 1)
    produce_backlog(source.bootstrap, topic)
    cfg = workdir / f"{topic}.toml"
    # Its own state topic: the Fetch count is engine-wide, and mirrors stored by other tests in the
    # default one would add their polls to it.
    cfg.write_text(f'[engine]\nstate_topic = "{unique("kmp-wan-state")}"\n'
                   f'[[mirrors]]\nname = "wan"\nsource_bootstrap_servers = ["{source.wan_bootstrap}"]\ntopics = ["{topic}"]\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(cfg)]).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        requests = proxy.metric("kmp_mirror_fetch_requests_total")
        relayed = established(proxy.pid, {int(source.wan_addr(1).rsplit(":", 1)[1])})
        direct = established(proxy.pid, {source.port(1), int(source.wan_bind(1).rsplit(":", 1)[1])})
        assert relayed >= 1 and direct == 0, f"the engine reaches the source only through the relay ({relayed} relayed, {direct} direct)"
        assert requests <= FIXED_FETCH_REQUESTS // 2, (
            f"a 40 MB backlog took {requests:.0f} Fetch requests; a fixed 1 MiB per Fetch needs at least"
            f" {FIXED_FETCH_REQUESTS}: the Fetch size must grow while answers come back full")
        assert_equal(source, destination, topic, 1)
    finally:
        code = proxy.stop()
        assert code == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


def fetch_v7_new_session(correlation_id: int, topic: str, partitions: int, replica_id: int) -> bytes:
    """A full Fetch v7 from ``replica_id`` asking the broker for a new session (id 0, epoch 0)
    over ``partitions`` partitions of ``topic``."""
    body = struct.pack(">iiiibii", replica_id, 0, 1, 1 << 20, 0, 0, 0)
    body += struct.pack(">i", 1) + _str(topic) + struct.pack(">i", partitions)
    body += b"".join(struct.pack(">iqqi", p, 0, -1, 1024) for p in range(partitions))
    body += struct.pack(">i", 0)  # forgotten topics
    return request(1, 7, correlation_id, body)


def crowd_out_sessions(bootstrap: str, topic: str, partitions: int, attempts: int) -> int:
    """Asks ``attempts`` times, as follower 99, for a new ``partitions``-partition session (the
    broker picks cache shards round-robin); returns how many it granted (a follower's session
    may evict a consumer's at once). Follower 99 is no replica: every partition answers with an
    error and no replica state changes."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    granted = 0
    with socket.create_connection((host, int(port)), timeout=30) as s:
        for i in range(attempts):
            s.sendall(fetch_v7_new_session(i, topic, partitions, 99))
            correlation_id, body = read_response(s)
            assert correlation_id == i, f"answer {correlation_id} to request {i}"
            _throttle, error, session_id = struct.unpack(">ihi", body[:10])
            assert error == 0, f"full Fetch v7 refused with error {error}"
            granted += session_id != 0
    return granted


@pytest.mark.long  # quick tier: the caught-up 100 ms source with a second fetch in flight
def test_a_fetch_session_evicted_by_the_broker_is_followed_by_full_fetches_without_loss(far_source, destination, workdir):
    source, _ = far_source
    topic, crowd = unique("evicted"), unique("crowd")
    create(source.bootstrap, topic, 1)
    create(source.bootstrap, crowd, 4)
    produce_plain(source.bootstrap, topic, 200)
    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        resets_before = proxy.metric("kmp_mirror_fetch_session_resets_total")
        granted = crowd_out_sessions(source.bootstrap, crowd, 4, 2 * SESSION_SLOTS)
        assert granted >= SESSION_SLOTS, f"the follower got {granted} sessions (cache of {SESSION_SLOTS} slots)"
        deadline = time.time() + 30
        while proxy.metric("kmp_mirror_fetch_session_resets_total") == resets_before and time.time() < deadline:
            time.sleep(0.2)
        resets = proxy.metric("kmp_mirror_fetch_session_resets_total") - resets_before
        assert resets >= 1, (f"the broker evicted the mirror's session (the follower was granted {granted} sessions):"
                             " its next incremental Fetch was refused and the session restarted")
        produce_plain(source.bootstrap, topic, 300, start=200)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        assert_equal(source, destination, topic, 1)
        labels = f'mirror="faults",topic="{topic}",partition="0"'
        assert proxy.metric("kmp_mirror_failed", labels) == 0, "an evicted fetch session never fails the partition"


def steady_load(bootstrap: str, topic: str, partitions: int, seconds: float) -> int:
    """Produces for ``seconds``: an idempotent lz4 producer (about 400 records/s over the
    partitions) and a transactional one whose every third transaction aborts. Returns how many
    transactions aborted."""
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "compression.type": "lz4"})
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("hedge-tx"), "linger.ms": 5})
    tx.init_transactions(30)
    aborted, n, end = 0, 0, time.time() + seconds
    while time.time() < end:
        tx.begin_transaction()
        for _ in range(10):
            p = n % partitions
            plain.produce(topic, key=str(n).encode(), value=os.urandom(200), partition=p)
            tx.produce(topic, key=f"tx-{n}".encode(), value=os.urandom(100), partition=p)
            plain.poll(0)
            n += 1
            time.sleep(0.0025)
        tx.flush(30)
        if n % 30 == 0:
            tx.abort_transaction(30)
            aborted += 1
        else:
            tx.commit_transaction(30)
    assert plain.flush(30) == 0, "the steady load reached the source"
    return aborted


def test_a_caught_up_partition_100ms_away_with_a_second_fetch_in_flight_is_copied_exactly(far_source, destination, workdir):
    """``fetch_hedge_min_rtt_ms``: under a steady load every caught-up partition keeps two Fetches
    half a round trip apart, and answers to the older one are cut to the partition's position
    before they are planned. The destination must equal the source record by record at identical
    offsets (aborted transactions included: their batches become fillers), and the cut answers
    must have been used (the lag itself is bench/wan_bench.py's)."""
    source, relay = far_source
    topic = unique("hedge")
    partitions = 2
    create(source.bootstrap, topic, partitions)
    cfg = workdir / f"{topic}.toml"
    cfg.write_text(f'[engine]\nstate_topic = "{unique("kmp-hedge-state")}"\n'
                   f'[[mirrors]]\nname = "hedge"\nsource_bootstrap_servers = ["{source.wan_bootstrap}"]\ntopics = ["{topic}"]\n'
                   f'fetch_hedge_min_rtt_ms = {RTT_MS // 2}\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(cfg)]).start()
    try:
        produce_plain(source.bootstrap, topic, 50)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: partitions})
        aborted = steady_load(source.bootstrap, topic, partitions, 8)
        assert aborted >= 2, f"the load aborted {aborted} transactions"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: partitions})
        assert_equal(source, destination, topic, partitions)
        sent = proxy.metric("kmp_mirror_fetch_second_sent_total")
        cut = proxy.metric("kmp_mirror_fetch_answers_cut_total")
        print(f"\nsecond Fetches sent {sent:.0f}, older answers cut and used {cut:.0f}, {aborted} transactions aborted")
        assert sent > 0, "caught up 100 ms away with fetch_hedge_min_rtt_ms = 50, yet no second Fetch was sent"
        assert cut > 0, "no answer to an older Fetch brought new data: the cut path never ran"
        for p in range(partitions):
            labels = f'mirror="hedge",topic="{topic}",partition="{p}"'
            assert proxy.metric("kmp_mirror_failed", labels) == 0, f"partition {p} did not fail"
    finally:
        code = proxy.stop()
        assert code == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"
