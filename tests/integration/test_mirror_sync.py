"""Metadata sync against real clusters (issue #5): consumer-group offsets and topic configs.

* The disaster-recovery test: a Java (KIP-848 protocol) and a librdkafka (classic protocol) group
  consume part of two mirrored topics on a dedicated source cluster and commit — right after a
  transaction marker, on the marker, right after a compaction gap and inside it. The source is
  killed, the proxy is killed and restarted without it, the topics are failed over, and each
  group, now pointed at the proxy, reads every remaining record exactly once.
* A group with members on the destination is never overwritten; offsets are clamped into the
  destination log; stopped topics are not synced any more; one more sync runs at stop.
* Changed source topic configs reach the destination within two intervals, removed ones are
  removed, excluded ones never arrive.
* Share groups (Kafka 4.4 clusters): start offsets synced and clamped; a share consumer through
  the proxy never sees the fillers that stand in for a compacted source topic's removed records.
* Sync status on /metrics, in the REST describe and in the CLI's DescribeClusterMirrors output.

Partition growth and deleted source topics are covered by test_mirror_faults.py."""

import json
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic)

from conftest import PROXY_BIN, ProxyProcess, running_cluster, unique
from kmp_common import java_command
from compaction import create_with_compaction_gaps
from mirror import FILLER_KEY, call, create, high_watermarks, read_all, wait_caught_up

REPO = Path(__file__).resolve().parents[2]
JAVA = REPO / "tests" / "clients" / "java" / "GroupResume.java"
INTERVAL_MS = 1000


def sync_config(workdir, source, topics, name, **settings) -> list[str]:
    path = workdir / f"{name}-{unique('cfg')}.toml"
    listed = ", ".join(f'"{t}"' for t in topics)
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    path.write_text(f'[[mirrors]]\nname = "{name}"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = [{listed}]\n{extra}')
    return ["--config", str(path)]


@contextmanager
def syncing_proxy(source, destination, workdir, topics, name, **settings):
    proxy = ProxyProcess(destination.bootstrap, workdir, sync_config(workdir, source, topics, name, **settings)).start()
    try:
        yield proxy
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


def committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], TopicPartition]:
    """The group's committed offsets (OffsetFetch; the consumer never joins the group)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {(tp.topic, tp.partition): tp for tp in c.committed([TopicPartition(t, p) for t, p in tps], timeout=10)}
    finally:
        c.close()


def offsets_of(bootstrap, group, tps) -> dict[tuple[str, int], int]:
    return {k: tp.offset for k, tp in committed(bootstrap, group, tps).items()}


def wait_for_offsets(bootstrap, group, want: dict[tuple[str, int], int], timeout: float = 30) -> float:
    """Seconds until the group's committed offsets on ``bootstrap`` equal ``want``."""
    start = time.time()
    got = None
    while time.time() - start < timeout:
        got = offsets_of(bootstrap, group, list(want))
        if got == want:
            return time.time() - start
        time.sleep(0.02)
    raise AssertionError(f"group {group} on {bootstrap}: committed {got}, expected {want} within {timeout}s")


def commit_on(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """An offsets-only commit (no membership), as an application using assign() makes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def java(kafka_classpath, *args: str) -> list[str]:
    out = subprocess.run([*java_command(kafka_classpath, JAVA), *args], capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, f"GroupResume {args[0]} failed:\n{out.stderr[-3000:]}"
    return out.stdout.splitlines()


def describe_sync(proxy, mirror: str) -> dict:
    status, body = call(proxy, "GET", f"/v1/mirrors/{mirror}")
    assert status == 200, body
    return body["sync"]


def metric_lines(proxy, name: str, mirror: str) -> dict[str, float]:
    """kind → value of one sync metric of a mirror."""
    _, text = proxy.http("/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") and f'mirror="{mirror}"' in line:
            kind = line.split('kind="')[1].split('"')[0]
            out[kind] = float(line.split()[-1])
    return out


# ---- the disaster-recovery test ---------------------------------------------------------------

@pytest.fixture(scope="module")
def dr_source(workdir):
    """A source cluster of its own: this test kills it."""
    with running_cluster("dr-source", 1, workdir) as cluster:
        yield cluster


def produce_marker_topic(bootstrap: str, topic: str) -> None:
    """Offsets 0-39 plain, 40-59 a committed transaction, 60 its COMMIT marker, 61-90 plain."""
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(40):
        plain.produce(topic, value=f"a-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("dr-tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(20):
        tx.produce(topic, value=f"t-{i}".encode(), partition=0)
    tx.commit_transaction(30)
    for i in range(30):
        plain.produce(topic, value=f"b-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    # commit_transaction returns once the coordinator has decided; the COMMIT marker at 60 is
    # written to the partition afterwards, and until then the last stable offset (what a
    # read_committed reader, and high_watermarks(), sees as the end) stays at the transaction's
    # first offset, 40. Wait for the marker instead of reading the end once.
    deadline, ends = time.time() + 30, None
    while time.time() < deadline:
        ends = high_watermarks(bootstrap, topic, 1)
        if ends == [91]:
            break
        time.sleep(0.1)
    assert ends == [91], f"marker topic layout: last stable offset {ends}, expected [91] once the COMMIT marker is written"


def produce_compacted_topic(bootstrap: str, topic: str) -> None:
    """Offsets 0-9 distinct keys, 10-29 one key (10-28 removed by the source's cleaner), 30-39
    distinct keys, 40 rolls the segment."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
              "min.compaction.lag.ms": "0", "delete.retention.ms": "100"}
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(30):
        key = f"k{i}" if i < 10 else "dup"
        p.produce(topic, key=key.encode(), value=f"c-{i}".encode(), partition=0)
    p.flush(30)
    time.sleep(0.3)
    for i in range(30, 40):
        p.produce(topic, key=f"k{i}".encode(), value=f"c-{i}".encode(), partition=0)
    p.flush(30)
    time.sleep(0.3)
    p.produce(topic, key=b"roll", value=b"roll", partition=0)
    p.flush(30)
    deadline, offsets = time.time() + 60, []
    while time.time() < deadline:
        offsets = [r[1] for r in read_all(bootstrap, topic, 1, "read_uncommitted")]
        if 10 not in offsets and 29 in offsets:
            break
        time.sleep(1)
    assert offsets[:11] == [*range(10), 29], f"the source's cleaner removed offsets 10-28: {offsets}"


def records_from(records: list[tuple], topic: str, start: int) -> list[tuple]:
    return [(topic, r[1], r[3]) for r in records if r[1] >= start]


def test_consumer_groups_resume_exactly_once_on_the_destination_after_the_source_and_the_proxy_are_lost(dr_source, clusters, workdir, kafka_classpath):
    source, (_, destination) = dr_source, clusters
    marker, compacted = unique("dr-marker"), unique("dr-compacted")
    create(source.bootstrap, marker, 1)
    produce_marker_topic(source.bootstrap, marker)
    produce_compacted_topic(source.bootstrap, compacted)
    expected_source = {t: read_all(source.bootstrap, t, 1, "read_committed") for t in (marker, compacted)}
    # Java commits right after the marker and right after the compaction gap; librdkafka on the
    # marker itself and at the first offset inside the gap.
    java_at = {(marker, 0): 61, (compacted, 0): 29}
    rdkafka_at = {(marker, 0): 60, (compacted, 0): 10}
    java_group, rdkafka_group = unique("dr-java"), unique("dr-rdkafka")
    # `compacted` is picked up by a pattern, so it must come back after the restart without the
    # source listing it.
    args = sync_config(workdir, source, [marker], "dr-sync", include=[compacted], group_offset_sync_interval_ms=INTERVAL_MS)
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {marker: 1, compacted: 1})
        spec = ",".join(f"{t}:{p}:{o}" for (t, p), o in java_at.items())
        lines = java(kafka_classpath, "commit", source.bootstrap, java_group, "consumer", spec)
        assert sorted(lines) == sorted(f"C {t} {p} {o}" for (t, p), o in java_at.items()), lines
        c = Consumer({"bootstrap.servers": source.bootstrap, "group.id": rdkafka_group, "enable.auto.commit": False,
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        c.subscribe([marker, compacted])
        deadline, seen = time.time() + 60, 0
        while seen < 20 and time.time() < deadline:
            seen += sum(1 for m in c.consume(100, 0.2) if not m.error())
        assert seen >= 20, "the librdkafka group consumed part of the topics on the source"
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in rdkafka_at.items()], asynchronous=False)
        committed_at = time.time()
        elapsed = wait_for_offsets(destination.bootstrap, rdkafka_group, rdkafka_at)
        print(f"\nsource commit -> destination: {elapsed * 1000:.0f} ms (interval {INTERVAL_MS} ms, measured from commit return {time.time() - committed_at:.2f}s ago)")
        assert elapsed < 2 * INTERVAL_MS / 1000, f"the commit reached the destination within two sync intervals ({elapsed:.2f}s)"
        c.close()
        wait_for_offsets(destination.bootstrap, java_group, java_at)
        for key, tp in committed(destination.bootstrap, java_group, list(java_at)).items():
            assert tp.leader_epoch is None, f"{key}: committed without the source's leader epoch ({tp.leader_epoch})"
            assert tp.metadata == "from-source", f"{key}: the commit metadata is copied ({tp.metadata!r})"

        for node in list(source.procs):
            source.kill_broker(node)
        # The proxy crashes too and comes back while the source is gone: it must still take its
        # mirror topics back from the state topic and fail them over.
        proxy.stop(signal.SIGKILL)
        proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
        started = time.time()
        status, body = call(proxy, "POST", "/v1/mirrors/dr-sync/stop", {"topics": [marker, compacted]})
        assert status == 200 and all(r["error_code"] == 0 for r in body["results"]), f"failover with the source down: {status} {body}"
        assert time.time() - started < 45, f"failover did not wait for the lost source ({time.time() - started:.1f}s)"
        groups_sync = describe_sync(proxy, "dr-sync")["group_offsets"]
        assert groups_sync["errors_total"] >= 1 and "source" in (groups_sync["last_error"] or ""), \
            f"the sync at stop could not reach the source and says so: {groups_sync}"

        want_java = sorted(r for t in (marker, compacted) for r in records_from(expected_source[t], t, java_at[(t, 0)]))
        lines = java(kafka_classpath, "resume", proxy.bootstrap, java_group, "consumer", f"{marker},{compacted}", str(len(want_java)))
        starts = sorted(l for l in lines if l.startswith("S "))
        assert starts == sorted(f"S {t} {p} {o}" for (t, p), o in java_at.items()), f"Java resumed at the synced offsets: {starts}"
        got = [(f[1], int(f[3]), bytes.fromhex(f[4]) if f[4] != "-" else None) for f in (l.split() for l in lines if l.startswith("R "))]
        assert len(got) == len(set(got)), "Java: no record twice"
        assert sorted(got) == want_java, f"Java read every remaining record exactly once ({len(got)} of {len(want_java)})"

        want_rdkafka = sorted(r for t in (marker, compacted) for r in records_from(expected_source[t], t, rdkafka_at[(t, 0)]))
        c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": rdkafka_group, "enable.auto.commit": False,
                      "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        c.subscribe([marker, compacted])
        got, deadline = [], time.time() + 60
        while len(got) < len(want_rdkafka) and time.time() < deadline:
            got += [(m.topic(), m.offset(), m.value()) for m in c.consume(100, 0.2) if not m.error()]
        quiet = time.time() + 2
        while time.time() < quiet:
            got += [(m.topic(), m.offset(), m.value()) for m in c.consume(100, 0.2) if not m.error()]
        c.close()
        assert len(got) == len(set(got)), "librdkafka: no record twice"
        assert sorted(got) == want_rdkafka, f"librdkafka read every remaining record exactly once ({len(got)} of {len(want_rdkafka)})"
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


# ---- group rules on the shared clusters --------------------------------------------------------

def produce_to_partitions(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


class ActiveMember:
    """A librdkafka member of ``group`` on the destination that consumes everything, commits, and
    keeps polling (stays a member) until closed."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.c.subscribe([topic])
        self.seen, self.stop, self.lock = 0, threading.Event(), threading.Lock()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            with self.lock:
                self.seen += sum(1 for m in self.c.consume(100, 0.1) if not m.error())

    def commit(self):
        with self.lock:
            self.c.commit(asynchronous=False)

    def close(self):
        self.stop.set()
        self.thread.join(10)
        self.c.close()


def test_a_group_active_on_the_destination_is_never_overwritten_and_offsets_are_clamped(clusters, workdir):
    source, destination = clusters
    topic, other = unique("sync-active"), unique("sync-stopped")
    create(source.bootstrap, topic, 2)
    create(source.bootstrap, other, 1)
    produce_to_partitions(source.bootstrap, topic, 2, 100)
    produce_to_partitions(source.bootstrap, other, 1, 50)
    group = unique("sync-g")
    t0, t1, o0 = (topic, 0), (topic, 1), (other, 0)
    with syncing_proxy(source, destination, workdir, [topic, other], "sync-active", group_offset_sync_interval_ms=INTERVAL_MS) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2, other: 1})
        commit_on(source.bootstrap, group, {t0: 10, t1: 10, o0: 5})
        wait_for_offsets(destination.bootstrap, group, {t0: 10, t1: 10, o0: 5})

        member = ActiveMember(proxy.bootstrap, group, topic)
        try:
            deadline = time.time() + 60
            while member.seen < 180 and time.time() < deadline:
                time.sleep(0.1)
            assert member.seen == 180, f"the destination member read from the synced offsets 10 to the end ({member.seen})"
            member.commit()
            assert offsets_of(destination.bootstrap, group, [t0, t1]) == {t0: 100, t1: 100}
            commit_on(source.bootstrap, group, {t0: 20, t1: 20})
            time.sleep(3.5 * INTERVAL_MS / 1000)
            assert offsets_of(destination.bootstrap, group, [t0, t1]) == {t0: 100, t1: 100}, "the active group's own progress stays"
            sync = describe_sync(proxy, "sync-active")["group_offsets"]
            assert sync["skipped_active_groups"] >= 1, f"describe reports the skipped active group: {sync}"
            assert metric_lines(proxy, "kmp_mirror_sync_skipped_active_groups", "sync-active").get("group_offsets", 0) >= 1
        finally:
            member.close()
        wait_for_offsets(destination.bootstrap, group, {t0: 20, t1: 20}, timeout=4 * INTERVAL_MS / 1000 + 5)

        # Clamped: never past the destination's end, never before its log start.
        admin = AdminClient({"bootstrap.servers": destination.bootstrap})
        for f in admin.delete_records([TopicPartition(topic, 1, 50)]).values():
            f.result(30)
        commit_on(source.bootstrap, group, {t0: 1_000_000, t1: 5})
        wait_for_offsets(destination.bootstrap, group, {t0: 100, t1: 50})

        # Stopped topics are not synced any more; the others still are.
        status, body = call(proxy, "POST", "/v1/mirrors/sync-active/stop", {"topics": [other]})
        assert status == 200 and body["results"][0]["error_code"] == 0, body
        commit_on(source.bootstrap, group, {t0: 30, o0: 40})
        wait_for_offsets(destination.bootstrap, group, {t0: 30})
        time.sleep(2 * INTERVAL_MS / 1000)
        assert offsets_of(destination.bootstrap, group, [o0]) == {o0: 5}, "a failed-over topic's destination offsets are the destination's own"
        runs = metric_lines(proxy, "kmp_mirror_sync_runs_total", "sync-active")
        applied = metric_lines(proxy, "kmp_mirror_sync_applied_total", "sync-active")
        last = metric_lines(proxy, "kmp_mirror_sync_last_success_timestamp_seconds", "sync-active")
        assert runs.get("group_offsets", 0) >= 5 and applied.get("group_offsets", 0) >= 6, f"metrics count passes and commits: {runs} {applied}"
        assert time.time() - last.get("group_offsets", 0) < 10, f"last successful sync time is recent: {last}"


def test_the_last_group_offsets_reach_the_destination_when_a_topic_is_stopped(clusters, workdir):
    """Periodic sync off (interval 0): only the pass at stop can have copied the commit."""
    source, destination = clusters
    topic = unique("sync-atstop")
    create(source.bootstrap, topic, 1)
    produce_to_partitions(source.bootstrap, topic, 1, 80)
    group = unique("sync-final")
    with syncing_proxy(source, destination, workdir, [topic], "sync-atstop", group_offset_sync_interval_ms=0) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        commit_on(source.bootstrap, group, {(topic, 0): 64})
        time.sleep(1)
        assert offsets_of(destination.bootstrap, group, [(topic, 0)]) == {(topic, 0): -1001}, "nothing synced before the stop"
        status, body = call(proxy, "POST", "/v1/mirrors/sync-atstop/stop", {"topics": [topic], "graceful_timeout_ms": 30000})
        assert status == 200 and body["results"][0]["error_code"] == 0, body
        assert offsets_of(destination.bootstrap, group, [(topic, 0)]) == {(topic, 0): 64}, "the stop synced the group before returning"
        out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, "--describe", "--mirror", "sync-atstop", "--output", "json"],
                             capture_output=True, text=True, timeout=60)
        sync = json.loads(out.stdout)["sync"]["sync-atstop"]
        assert sync["group_offsets"]["runs"] == 1 and sync["group_offsets"]["applied_total"] == 1 and sync["group_offsets"]["interval_ms"] == 0, \
            f"DescribeClusterMirrors carries the sync status: {sync}"
        table = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, "--describe", "--mirror", "sync-atstop"],
                               capture_output=True, text=True, timeout=60).stdout
        assert "group_offsets" in table and "LAST-SUCCESS" in table, table


# ---- topic configs ------------------------------------------------------------------------------

def is_dynamic(entry: ConfigEntry) -> bool:
    """Set on the topic itself (not a broker default)."""
    return entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def topic_configs(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("topic", topic)
    return admin.describe_configs([res])[res].result(30)


def alter(bootstrap: str, topic: str, ops: list[tuple[str, str | None, AlterConfigOpType]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource("topic", topic, incremental_configs=[ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops])
    admin.incremental_alter_configs([res])[res].result(30)


def wait_config(bootstrap, topic, check, timeout: float) -> float:
    start = time.time()
    while time.time() - start < timeout:
        if check(topic_configs(bootstrap, topic)):
            return time.time() - start
        time.sleep(0.05)
    raise AssertionError(f"{topic}: destination configs did not change within {timeout}s: "
                         f"{ {k: v.value for k, v in topic_configs(bootstrap, topic).items() if is_dynamic(v)} }")


def test_source_topic_config_changes_reach_the_destination_within_two_intervals_except_excluded_ones(clusters, workdir):
    source, destination = clusters
    topic = unique("sync-configs")
    interval = 2000
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "1111111"})])[topic].result(30)
    excluded = ["min.insync.replicas", "unclean.leader.election.enable", "max\\.message\\.bytes"]
    with syncing_proxy(source, destination, workdir, [topic], "sync-configs", topic_config_sync_interval_ms=interval,
                       topic_config_exclude=excluded) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        assert topic_configs(destination.bootstrap, topic)["retention.ms"].value == "1111111", "copied at creation"
        SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
        alter(source.bootstrap, topic, [("retention.ms", "2222222", SET), ("segment.bytes", "5000000", SET),
                                        ("max.message.bytes", "3000000", SET), ("min.insync.replicas", "1", SET)])
        elapsed = wait_config(destination.bootstrap, topic, lambda c: c["retention.ms"].value == "2222222" and c["segment.bytes"].value == "5000000",
                              timeout=2 * interval / 1000 + 5)
        print(f"\nsource config change -> destination: {elapsed * 1000:.0f} ms (interval {interval} ms)")
        assert elapsed < 2 * interval / 1000, f"the change arrived within two intervals ({elapsed:.2f}s)"
        dst = topic_configs(destination.bootstrap, topic)
        for name in ("max.message.bytes", "min.insync.replicas"):
            assert not is_dynamic(dst[name]), f"excluded config {name} was not copied ({dst[name].value})"
        assert dst["compression.type"].value == "producer", "forced configs stay"

        alter(source.bootstrap, topic, [("segment.bytes", None, DELETE)])
        wait_config(destination.bootstrap, topic, lambda c: not is_dynamic(c["segment.bytes"]),
                    timeout=2 * interval / 1000 + 5)
        assert topic_configs(destination.bootstrap, topic)["retention.ms"].value == "2222222"
        sync = describe_sync(proxy, "sync-configs")["topic_configs"]
        assert sync["applied_total"] >= 3 and sync["last_success_ms"] > 0 and sync["errors_total"] == 0, f"config sync status: {sync}"
        applied = metric_lines(proxy, "kmp_mirror_sync_applied_total", "sync-configs")
        assert applied.get("topic_configs", 0) >= 3, f"/metrics counts applied config changes: {applied}"


# ---- share groups ---------------------------------------------------------------------------------

SHARE_JAVA = REPO / "tests" / "clients" / "java" / "ShareCheck.java"
# Kafka 4.1's preview share groups accept AlterShareGroupOffsets without applying it; from 4.2 on
# share groups are GA (share.version finalized by default), so this test runs on the session's
# newer_clusters (Kafka KMP_NEWER_KAFKA_VERSION, 4.4.0 by default; tests/conftest.py).


def share_check(kafka_classpath, *args: str) -> list[str]:
    out = subprocess.run([*java_command(kafka_classpath, SHARE_JAVA), *args], capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, f"ShareCheck {args[0]} failed:\n{out.stdout}{out.stderr[-3000:]}"
    return out.stdout.splitlines()


def share_offsets(kafka_classpath, bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    lines = share_check(kafka_classpath, "offsets", bootstrap, group, topic, str(partitions))
    return {int(f[1]): int(f[2]) for f in (l.split() for l in lines if l.startswith("O "))}


@pytest.mark.long  # the newer Kafka's clusters (tests/conftest.py newer_clusters) cost two cluster starts
def test_share_groups_sync_their_start_offsets_and_never_see_fillers_through_the_proxy(newer_clusters, workdir, kafka_classpath):
    source, destination = newer_clusters
    topic, group, gaps_topic = unique("sync-share"), unique("sync-sg"), unique("sync-share-gaps")
    create(source.bootstrap, topic, 2)
    produce_to_partitions(source.bootstrap, topic, 2, 100)
    create_with_compaction_gaps(source.bootstrap, gaps_topic, 1)
    source_records = read_all(source.bootstrap, gaps_topic, 1, "read_uncommitted")
    with syncing_proxy(source, destination, workdir, [topic, gaps_topic], "sync-share", group_offset_sync_interval_ms=INTERVAL_MS) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2, gaps_topic: 1})
        # The offsets the source's cleaner emptied are fillers on the destination; a share
        # consumer through the proxy gets exactly the source's records.
        assert any(r[2] == FILLER_KEY for r in read_all(destination.bootstrap, gaps_topic, 1, "read_uncommitted")), \
            "the compaction gaps are fillers on the destination (the premise)"
        want = [(r[1], r[2].hex()) for r in source_records]
        assert want and want[-1][0] + 1 > len(want), f"the source topic has compaction gaps: {want}"
        lines = share_check(kafka_classpath, "consume", proxy.bootstrap, unique("share-px"), gaps_topic, str(len(want)))
        got = sorted((int(f[2]), f[3]) for f in (l.split() for l in lines if l.startswith("R ")))
        assert got == sorted(want), f"share consumer through the proxy: {got}"
        # A share group consumes on the source, then an operator moves its start offsets.
        lines = share_check(kafka_classpath, "consume", source.bootstrap, group, topic, "50")
        assert any(l.startswith("N ") and int(l.split()[1]) >= 50 for l in lines), lines
        share_check(kafka_classpath, "alter", source.bootstrap, group, topic, "0:37,1:180")
        want = {0: 37, 1: 100}  # 180 is past the destination's end: clamped to its high watermark
        assert share_offsets(kafka_classpath, source.bootstrap, group, topic, 2) == {0: 37, 1: 180}
        deadline, got = time.time() + 30, None
        while time.time() < deadline:
            got = share_offsets(kafka_classpath, destination.bootstrap, group, topic, 2)
            if got == want:
                break
            time.sleep(0.5)
        assert got == want, f"the destination share group starts where the source's does, clamped: {got} vs {want}"
        sync = describe_sync(proxy, "sync-share")["share_group_offsets"]
        assert sync["applied_total"] >= 2 and sync["errors_total"] == 0, f"share group sync status: {sync}"
    # The destination group really starts there: a share consumer gets offsets 37-99 of partition 0.
    lines = share_check(kafka_classpath, "consume", destination.bootstrap, group, topic, "63")
    assert "N 63" in lines, f"a share consumer on the destination resumed at the synced start offsets: {lines}"
