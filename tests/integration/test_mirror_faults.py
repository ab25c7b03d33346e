"""Mirror engine under faults and edge cases, against real clusters: a source log start above
zero (filled, then followed with DeleteRecords), a 32-partition topic, the proxy killed with
SIGKILL mid-copy again and again (3 times in the quick tier, 10 in the long) while the source
keeps producing, and the source broker killed and restarted mid-stream. After each, the
destination equals the source at identical offsets."""

import random
import signal
import threading
import time

import pytest

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import tier
from conftest import ProxyProcess, unique
from kmp_common import wait_until
from mirror import (
    assert_equal, create, high_watermarks_or_none, mirror_config, mirroring_proxy, produce_plain, read_all,
    wait_caught_up,
)


def wait_for_low_watermark(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> int:
    deadline = time.time() + timeout
    while (lo := low_watermark(bootstrap, topic)) != expected and time.time() < deadline:
        time.sleep(0.2)
    return lo


def low_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("lw")})
    lo = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[0]
    c.close()
    return lo


def delete_records(bootstrap: str, topic: str, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, before)]).values():
        f.result(30)


def test_source_log_start_above_zero_is_filled_and_then_followed(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-logstart")
    create(source.bootstrap, topic, 1)
    produce_plain(source.bootstrap, topic, 200)
    delete_records(source.bootstrap, topic, 120)
    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        assert wait_for_low_watermark(destination.bootstrap, topic, 120) == 120, "destination log start follows the source's (120)"
        assert_equal(source, destination, topic, 1)
        produce_plain(source.bootstrap, topic, 100, start=200)
        delete_records(source.bootstrap, topic, 250)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        assert wait_for_low_watermark(destination.bootstrap, topic, 250) == 250, "a later DeleteRecords on the source is followed"
        assert_equal(source, destination, topic, 1)


@pytest.mark.long  # quick tier: test_source_log_start_above_zero_is_filled_and_then_followed fills a moved log start
def test_source_log_start_advanced_by_time_retention_before_mirroring_is_filled(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-retention")
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    # Segments roll every second, so the first records end up in closed segments retention can delete.
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.ms": "1000"})])[topic].result(30)
    produce_plain(source.bootstrap, topic, 150)
    time.sleep(1.5)
    produce_plain(source.bootstrap, topic, 150, start=150)
    time.sleep(1.5)
    produce_plain(source.bootstrap, topic, 50, start=300)  # rolls again: the first two segments are closed
    set_topic_config(admin, topic, "retention.ms", "1000")
    # Retention deletes the two closed segments (log start 300); on a slow machine the third may
    # have rolled too by then (350): either way the source starts above 0 by time retention.
    deadline = time.time() + 60
    while (start := low_watermark(source.bootstrap, topic)) < 300 and time.time() < deadline:
        time.sleep(0.2)
    assert start in (300, 350), f"time retention deleted the closed segments on the source (log start {start})"
    set_topic_config(admin, topic, "retention.ms", "-1")  # nothing more disappears while we compare
    start = low_watermark(source.bootstrap, topic)
    with mirroring_proxy(source, destination, workdir, [topic]):
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        assert wait_for_low_watermark(destination.bootstrap, topic, start) == start, f"destination log start equals the source's ({start})"
        assert_equal(source, destination, topic, 1)


def set_topic_config(admin, topic: str, name: str, value: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


@pytest.mark.long  # test_hundreds_of_partitions_… mirrors more partitions in the quick tier
def test_a_topic_with_32_partitions_is_mirrored(clusters, workdir, drop_topics):
    source, destination = clusters
    topic = unique("mir-wide")
    create(source.bootstrap, topic, 32)
    drop_topics(topic)
    produce_plain(source.bootstrap, topic, 3200, **{"compression.type": "zstd"})
    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 32})
        assert_equal(source, destination, topic, 32)


class BackgroundProducer:
    """Keeps producing plain and transactional records to the source until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.stop = threading.Event()
        self.errors: list = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        plain = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
        tx = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": unique("bg-tx")})
        tx.init_transactions(30)
        i = 0
        while not self.stop.is_set():
            for _ in range(50):
                plain.produce(self.topic, key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=self.check)
                i += 1
            plain.poll(0)
            if i % 500 == 0:
                tx.begin_transaction()
                for p in range(self.partitions):
                    tx.produce(self.topic, value=f"tx-{i}-{p}".encode(), partition=p)
                tx.flush(30)
                (tx.abort_transaction if (i // 500) % 2 else tx.commit_transaction)(30)
            time.sleep(0.02)
        assert plain.flush(60) == 0

    def check(self, err, _msg) -> None:
        if err:
            self.errors.append(err)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(120)


# SIGKILLs of the mirroring proxy: 3 in the quick tier, 10 in the long.
KILLS = tier.dial("proxy SIGKILLs", quick=3, long=10, env="KMP_FAULT_KILLS")


def test_destination_equals_source_after_repeated_sigkills_of_the_proxy(clusters, workdir):
    """The proxy is SIGKILLed KILLS times while a producer keeps writing plain and transactional
    records to the source; each kill comes only once that run of the proxy has copied something
    (so every kill lands mid-copy, whatever the machine's speed), a seeded 0-1.5 s later."""
    source, destination = clusters
    topic = unique("mir-kill9")
    create(source.bootstrap, topic, 4)
    args = mirror_config(workdir, source, [topic])
    rng = random.Random(99)
    with BackgroundProducer(source.bootstrap, topic, 4) as producer:
        for n in range(KILLS):
            before = sum(high_watermarks_or_none(destination.bootstrap, topic, 4) or [0])
            proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
            wait_until(f"run {n + 1} of the proxy copies records (the destination grows past {before})",
                       lambda: sum(high_watermarks_or_none(destination.bootstrap, topic, 4) or [0]) > before, timeout=60, interval=0.1)
            time.sleep(rng.uniform(0, 1.5))
            proxy.stop(signal.SIGKILL)
    assert not producer.errors, producer.errors[:3]
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 4})
        assert_equal(source, destination, topic, 4)
        _, text = proxy.http("/metrics")
        failed = [l for l in text.splitlines() if l.startswith("kmp_mirror_failed{") and f'topic="{topic}"' in l]
        assert len(failed) == 4 and all(l.endswith(" 0") for l in failed), f"all 4 partitions exported, none failed: {failed}"
    finally:
        assert proxy.stop() == 0


def test_mirroring_survives_a_source_broker_kill_and_restart(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-srcrestart")
    create(source.bootstrap, topic, 3)
    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        try:
            produce_plain(source.bootstrap, topic, 500)
            wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 3})
            source.kill_broker(1, signal.SIGKILL)
            time.sleep(2)
            source.start_broker(1)
            produce_plain(source.bootstrap, topic, 500, start=500)
            wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 3})
            assert_equal(source, destination, topic, 3)
            assert proxy.alive()
        finally:
            if 1 not in source.procs:
                source.start_broker(1)


def test_a_deleted_source_topic_fails_its_partitions_while_others_keep_mirroring(clusters, workdir):
    source, destination = clusters
    doomed, healthy = unique("mir-doomed"), unique("mir-healthy")
    for t in (doomed, healthy):
        create(source.bootstrap, t, 2)
        produce_plain(source.bootstrap, t, 100)
    with mirroring_proxy(source, destination, workdir, [doomed, healthy]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {doomed: 2, healthy: 2})
        kept = read_all(destination.bootstrap, doomed, 2, "read_uncommitted")
        admin = AdminClient({"bootstrap.servers": source.bootstrap})
        admin.delete_topics([doomed])[doomed].result(30)
        deadline, failed = time.time() + 60, []
        while time.time() < deadline:
            _, text = proxy.http("/metrics")
            failed = [l for l in text.splitlines() if l.startswith("kmp_mirror_failed{") and f'topic="{doomed}"' in l and l.endswith(" 1")]
            if len(failed) == 2:
                break
            time.sleep(0.5)
        assert len(failed) == 2, f"both partitions of the deleted source topic are FAILED: {failed}"
        assert "was deleted" in proxy.log(), "the reason is logged"
        produce_plain(source.bootstrap, healthy, 100, start=100)
        wait_caught_up(source.bootstrap, destination.bootstrap, {healthy: 2})
        assert_equal(source, destination, healthy, 2)
        assert read_all(destination.bootstrap, doomed, 2, "read_uncommitted") == kept, "the destination data stays"


def recreate(bootstrap: str, topic: str) -> None:
    """Deletes ``topic`` and creates a new topic under the same name (another topic id)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            return
        except Exception:  # still being deleted
            time.sleep(0.3)
    raise TimeoutError(f"{topic} could not be recreated")


def failed_partitions(proxy, topic: str) -> list[str]:
    _, text = proxy.http("/metrics")
    return [l for l in text.splitlines() if l.startswith("kmp_mirror_failed{") and f'topic="{topic}"' in l and l.endswith(" 1")]


def test_a_source_topic_recreated_under_the_same_name_fails_instead_of_appending_the_new_topics_records(clusters, workdir):
    """One topic is replaced while the proxy mirrors it, the other while the proxy is down; the
    new topics have more records than the mirrored ones, so appending from the mirrored offset
    on would copy records of another topic."""
    source, destination = clusters
    live, offline = unique("mir-recreated"), unique("mir-recreated-off")
    for t in (live, offline):
        create(source.bootstrap, t, 1)
        produce_plain(source.bootstrap, t, 50)
    args = mirror_config(workdir, source, [live, offline], name="recreate")
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {live: 1, offline: 1})
        kept = {t: read_all(destination.bootstrap, t, 1, "read_uncommitted") for t in (live, offline)}
        assert proxy.stop() == 0
        recreate(source.bootstrap, offline)
        produce_plain(source.bootstrap, offline, 200, start=1000)
        proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
        recreate(source.bootstrap, live)
        produce_plain(source.bootstrap, live, 200, start=1000)
        deadline = time.time() + 60
        while time.time() < deadline and not (failed_partitions(proxy, live) and failed_partitions(proxy, offline)):
            time.sleep(0.5)
        assert failed_partitions(proxy, live) and failed_partitions(proxy, offline), "both replaced topics' partitions are FAILED"
        assert "deleted and recreated" in proxy.log(), "the reason names the recreation"
        time.sleep(2)
        for t in (live, offline):
            assert read_all(destination.bootstrap, t, 1, "read_uncommitted") == kept[t], f"{t}: nothing of the new source topic was appended"
    finally:
        assert proxy.stop() == 0


def test_a_compacted_topic_with_holes_inside_batches_is_mirrored_exactly(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-compacted")
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    from confluent_kafka.admin import NewTopic
    config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
              "min.compaction.lag.ms": "0", "delete.retention.ms": "100"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    p = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 50, "compression.type": "zstd"})
    for i in range(30):
        # One batch each; "shared" keys are superseded by later batches, leaving holes inside.
        for key in (f"u{i}-a", "shared", f"u{i}-b", "shared2"):
            p.produce(topic, key=key.encode(), value=f"{key}@{i}".encode(), partition=0)
        p.flush(30)
    time.sleep(0.3)
    p.produce(topic, key=b"roll", value=b"roll", partition=0)  # rolls the segment so the cleaner takes it
    p.flush(30)
    deadline, records = time.time() + 60, []
    while time.time() < deadline:
        records = read_all(source.bootstrap, topic, 1, "read_uncommitted")
        if len(records) == 30 * 2 + 2 + 1:
            break
        time.sleep(1)
    assert len(records) == 63, f"the source's log cleaner compacted the topic ({len(records)} records left of 121)"
    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        assert_equal(source, destination, topic, 1)
        # The destination topic is compacted too (configs are copied), so its own cleaner may
        # already have removed the filler tombstones: count what the engine wrote instead.
        _, text = proxy.http("/metrics")
        lines = [l for l in text.splitlines() if l.startswith("kmp_mirror_filler_records{") and f'topic="{topic}"' in l]
        written = [float(l.split()[-1]) for l in lines]
        assert written == [121 - 63], f"every offset the source cleaner removed was filled: {lines}"
        reencoded = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("kmp_mirror_reencoded_batches{") and f'topic="{topic}"' in l]
        assert reencoded and reencoded[0] >= 29, f"batches with holes inside were re-encoded, not skipped: {reencoded}"


@pytest.mark.long  # starts a 3-broker source of its own (58 s); the quick tier kills a source broker in test_mirroring_survives_a_source_broker_kill_and_restart
def test_mirroring_from_a_3_broker_source_survives_killing_the_source_partition_leader(clusters, workdir):
    """Roles reversed for this test: the 3-broker cluster is the source, the 1-broker cluster is
    the destination behind its own proxy, so a source partition leader can be killed while the
    source stays available."""
    one_broker, three_brokers = clusters
    topic = unique("mir-src3")
    admin = AdminClient({"bootstrap.servers": three_brokers.bootstrap})
    from confluent_kafka.admin import NewTopic
    admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(30)
    victim = None
    with mirroring_proxy(three_brokers, one_broker, workdir, [topic]):
        try:
            with BackgroundProducer(three_brokers.bootstrap, topic, 3) as producer:
                deadline = time.time() + 60
                while sum(high_watermarks_or_none(one_broker.bootstrap, topic, 3) or [0]) < 1000:
                    assert time.time() < deadline, "mirroring started before the kill"
                    time.sleep(0.2)
                victim = admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader
                three_brokers.kill_broker(victim, signal.SIGKILL)
                time.sleep(3)
                three_brokers.start_broker(victim)
                time.sleep(2)
            assert not producer.errors, producer.errors[:3]
            wait_caught_up(three_brokers.bootstrap, one_broker.bootstrap, {topic: 3})
            assert_equal(three_brokers, one_broker, topic, 3)
        finally:
            if victim is not None and victim not in three_brokers.procs:
                three_brokers.start_broker(victim)


def test_source_topic_configs_are_copied_except_the_excluded_and_forced_ones(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-configs")
    from confluent_kafka.admin import ConfigResource, NewTopic
    src_admin = AdminClient({"bootstrap.servers": source.bootstrap})
    config = {"retention.ms": "987654321", "max.message.bytes": "2000000", "compression.type": "zstd",
              "unclean.leader.election.enable": "true"}
    src_admin.create_topics([NewTopic(topic, 2, 1, config=config)])[topic].result(30)
    produce_plain(source.bootstrap, topic, 50)
    with mirroring_proxy(source, destination, workdir, [topic]):
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2})
        dst_admin = AdminClient({"bootstrap.servers": destination.bootstrap})
        res = ConfigResource("topic", topic)
        got = {k: v.value for k, v in dst_admin.describe_configs([res])[res].result(30).items()}
        assert got["retention.ms"] == "987654321" and got["max.message.bytes"] == "2000000", "explicit source configs are copied"
        assert got["compression.type"] == "producer", "compression.type is forced so batches are not recompressed"
        assert got["message.timestamp.type"] == "CreateTime"
        assert got["unclean.leader.election.enable"] == "false", "cluster-local settings are not copied"
        assert_equal(source, destination, topic, 2)


def test_include_and_exclude_patterns_select_topics_and_pick_up_new_ones(clusters, workdir):
    source, destination = clusters
    prefix = unique("rx")
    early, skipped, late = f"{prefix}-early", f"{prefix}-skip", f"{prefix}-late"
    for t in (early, skipped):
        create(source.bootstrap, t, 2)
        produce_plain(source.bootstrap, t, 50)
    path = workdir / f"{prefix}.toml"
    path.write_text(f'[[mirrors]]\nname = "rx"\nsource_bootstrap_servers = ["{source.bootstrap}"]\n'
                    f'include = ["{prefix}-.*"]\nexclude = ["{prefix}-skip"]\ntopic_refresh_interval_ms = 500\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(path)]).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {early: 2})
        create(source.bootstrap, late, 3)
        produce_plain(source.bootstrap, late, 60)
        wait_caught_up(source.bootstrap, destination.bootstrap, {late: 3})
        assert_equal(source, destination, early, 2)
        assert_equal(source, destination, late, 3)
        names = AdminClient({"bootstrap.servers": destination.bootstrap}).list_topics(timeout=30).topics
        assert skipped not in names, "an excluded topic is not mirrored"
        assert "new source topic matches the mirror" in proxy.log()
    finally:
        assert proxy.stop() == 0


def test_a_large_retention_prefix_is_filled_and_one_over_the_limit_fails_with_a_reason(clusters, workdir):
    source, destination = clusters
    big, capped = unique("mir-prefix"), unique("mir-capped")
    prefix = 200_000
    for topic, n in ((big, prefix), (capped, 5_000)):
        create(source.bootstrap, topic, 1)
        p = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
        for i in range(n):
            p.produce(topic, value=b"x", partition=0)
            if i % 50_000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        delete_records(source.bootstrap, topic, n)
        produce_plain(source.bootstrap, topic, 10)
    path = workdir / f"{big}.toml"
    path.write_text(f'[[mirrors]]\nname = "big"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = ["{big}"]\n'
                    f'[[mirrors]]\nname = "capped"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = ["{capped}"]\n'
                    f'max_fill_offsets = 1000\n')
    started = time.time()
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(path)]).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {big: 1})
        elapsed = time.time() - started
        print(f"\nfilled a {prefix}-offset retention prefix in {elapsed:.1f}s ({prefix / elapsed:,.0f} fillers/s, proxy start included)")
        assert low_watermark(destination.bootstrap, big) == prefix or wait_for_low_watermark(destination.bootstrap, big, prefix) == prefix
        assert_equal(source, destination, big, 1)
        deadline, failed = time.time() + 30, []
        while time.time() < deadline and not failed:
            _, text = proxy.http("/metrics")
            failed = [l for l in text.splitlines() if l.startswith("kmp_mirror_failed{") and f'topic="{capped}"' in l and l.endswith(" 1")]
            time.sleep(0.3)
        assert failed, "a gap over max_fill_offsets turns the partition FAILED"
        assert "more than max_fill_offsets = 1000; filling them would take about 1 min" in proxy.log(), (
            "the reason says which limit, how long the fill would take and how to raise it")
    finally:
        assert proxy.stop() == 0


def test_partitions_added_on_the_source_are_added_and_mirrored_on_the_destination(clusters, workdir):
    from confluent_kafka.admin import NewPartitions
    source, destination = clusters
    topic = unique("mir-grow")
    create(source.bootstrap, topic, 2)
    produce_plain(source.bootstrap, topic, 100)
    with mirroring_proxy(source, destination, workdir, [topic]):
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2})
        admin = AdminClient({"bootstrap.servers": source.bootstrap})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        p = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 5})
        for i in range(40):
            p.produce(topic, key=f"grow-{i}".encode(), value=f"v{i}".encode(), partition=2 + i % 2)
        assert p.flush(30) == 0
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 4})
        assert_equal(source, destination, topic, 4)
