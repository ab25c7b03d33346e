"""Many partitions, few connections (issue #13), against real clusters: hundreds of partitions of
one mirror reach the source broker over a fetch session and a control connection and each
destination broker over a produce lane and a control connection; a partition whose destination
log was written behind the mirror's back goes FAILED alone while the partitions sharing its
Produce requests keep mirroring; killing a destination broker stalls only the partitions it led;
and a large mirror (2,000 partitions in the long tier, 500 in the quick) under a steady writer,
with a tenth of the leaders moved and then a broker killed, stalls only the partitions involved
and ends equal to the source."""

import re
import signal
import threading
import time

import pytest

from confluent_kafka import Producer

import tier
from conftest import unique
from kmp_common import established
from mirror import create, high_watermarks, leader_of, mirroring_proxy, read_all, strip_fillers, wait_caught_up

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


def test_hundreds_of_partitions_share_a_few_connections_and_a_failed_partition_stops_alone(clusters, workdir, drop_topics):
    source, destination = clusters
    topic = unique("mux")
    create(source.bootstrap, topic, PARTITIONS)
    drop_topics(topic)
    produce_each(source.bootstrap, topic, PARTITIONS, 3, "a")
    with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        # The fewest seen over 2 s: a metadata sync pass (group offsets, topic configs) opens a
        # connection of its own for its requests and drops it after, and on a loaded machine one
        # may still be open at any single look (seen: 6 to the source broker once). What is
        # counted is what the copy path keeps open.
        def fewest(ports: set[int]) -> int:
            seen = []
            for _ in range(10):
                seen.append(established(proxy.pid, ports))
                time.sleep(0.2)
            return min(seen)
        to_source = fewest(set(ports_of(source.bootstrap)))
        per_destination = {port: fewest({port}) for port in ports_of(destination.bootstrap)}
        assert 1 <= to_source <= 4, f"{PARTITIONS} partitions reach the source broker over {to_source} connections (at most 4)"
        # Per destination broker: the produce lane and the control connection, and on the broker
        # leading the state topic and coordinating the engine's election group also the state
        # writer, the reader of forwarded management requests, the election member, the metadata
        # sync and the proxy's metadata refresh — none of them per partition.
        assert all(n <= 10 for n in per_destination.values()), f"connections per destination broker (at most 10): {per_destination}"
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


@pytest.mark.long  # quick tier: test_hundreds_of_partitions_… isolates a failed partition; a broker kill and its election take over a minute
def test_killing_a_destination_broker_stalls_only_the_partitions_it_led(clusters, workdir, drop_topics):
    source, destination = clusters
    topic, n = unique("mux-kill"), 60
    create(source.bootstrap, topic, n)
    drop_topics(topic)
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


# --- 2,000 partitions (500 in the quick tier): leaders killed and moved ---------------------------

SCALE_PARTITIONS = tier.dial("partitions of the large mirror", quick=500, long=2000, env="KMP_SCALE_PARTITIONS")
SCALE_MOVED = SCALE_PARTITIONS // 10  # leaders moved
SCALE_ROUND_S = 1.0  # the background writer adds one record to every partition this often


def end_offsets(bootstrap: str, topic: str, partitions, timeout: float = 15) -> dict[int, int | None]:
    """High watermarks of ``partitions`` with one ListOffsets per leader (get_watermark_offsets
    would cost a round trip per partition); None for a partition whose leader did not answer
    (killed, not yet replaced) or a topic that does not exist yet."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}, request_timeout=timeout)
    except KafkaException:
        return {p: None for p in partitions}
    out = {}
    for tp, f in futures.items():
        try:
            out[tp.partition] = f.result().offset
        except KafkaException:
            out[tp.partition] = None
    return out


def partition_layout(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) on the cluster at ``bootstrap``."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_topics(TopicCollection([topic]), request_timeout=30)[topic].result()
    return {p.id: (p.leader.id if p.leader is not None else -1, [r.id for r in p.replicas], [r.id for r in p.isr])
            for p in desc.partitions}


def failed_partitions(proxy, topic: str, partitions: int) -> list[int]:
    """Partitions of ``topic`` whose kmp_mirror_failed is 1, from one scrape of /metrics (one
    metric() call per partition would scrape 2,000 times). A partition without a series fails
    the test: a missing series must never read as "not failed"."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.admin_port}/metrics", timeout=60) as r:
        text = r.read().decode()
    prefix = f'kmp_mirror_failed{{mirror="faults",topic="{topic}",partition="'
    values = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            series, value = line.rsplit(" ", 1)
            values[int(series[len(prefix):].split('"', 1)[0])] = float(value)
    missing = sorted(set(range(partitions)) - set(values))
    assert not missing, f"kmp_mirror_failed has no series for {len(missing)} of {partitions} partitions of {topic}, e.g. {missing[:10]}"
    return sorted(p for p, v in values.items() if v != 0)


def wait_end_offsets_equal(source: str, destination: str, topic: str, partitions: int, timeout: float) -> list[int]:
    """Waits until every partition's destination high watermark equals the source's; returns them."""
    deadline = time.time() + timeout
    while True:
        src, dst = end_offsets(source, topic, range(partitions)), end_offsets(destination, topic, range(partitions))
        behind = [p for p in range(partitions) if src[p] is None or src[p] != dst[p]]
        if not behind:
            return [src[p] for p in range(partitions)]
        assert time.time() < deadline, (f"{len(behind)} of {partitions} partitions not caught up within {timeout:.0f} s, "
                                        f"e.g. {[(p, src[p], dst[p]) for p in behind[:10]]} (partition, source, destination)")
        time.sleep(1)


def answered_end_offsets(bootstrap: str, topic: str, partitions, timeout: float = 30) -> dict[int, int]:
    """end_offsets() once every partition answers (right after a leader change a client's metadata
    can still name the old leader for a moment)."""
    deadline = time.time() + timeout
    while True:
        got = end_offsets(bootstrap, topic, partitions)
        silent = sorted(p for p, hw in got.items() if hw is None)
        if not silent:
            return got
        assert time.time() < deadline, f"{len(silent)} partitions of {topic} answered no ListOffsets within {timeout:.0f} s, e.g. {silent[:10]}"
        time.sleep(0.5)


def watch_advance(bootstrap: str, topic: str, baseline: dict[int, int], deadline: float) -> dict[int, float]:
    """Polls until every partition of ``baseline`` has a high watermark above its baseline, or the
    deadline passes; returns partition -> time it was first seen above (partitions never seen
    above are absent)."""
    seen: dict[int, float] = {}
    while len(seen) < len(baseline) and time.time() < deadline:
        now = end_offsets(bootstrap, topic, [p for p in baseline if p not in seen], timeout=5)
        t = time.time()
        seen.update({p: t for p, hw in now.items() if hw is not None and hw > baseline[p]})
        time.sleep(0.5)
    return seen


class RoundWriter:
    """Adds one record to every partition of the source topic each ``SCALE_ROUND_S`` until
    stopped. A round starts only once the previous one is (nearly) delivered, so a slow source
    broker on a loaded machine slows the rounds instead of piling up a backlog."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.stop_event = threading.Event()
        self.errors: list = []
        self.rounds = 0
        self.late_rounds = 0
        self.queued_at_stop, self.flush_s = 0, 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 50, "batch.num.messages": 10000})
        on_delivery = lambda err, _msg: err and self.errors.append(err)  # noqa: E731
        try:
            next_round = time.time()
            while not self.stop_event.is_set():
                for part in range(self.partitions):
                    p.produce(self.topic, value=f"live-{part}-{self.rounds}".encode(), partition=part, on_delivery=on_delivery)
                self.rounds += 1
                next_round += SCALE_ROUND_S
                while not self.stop_event.is_set() and (time.time() < next_round or len(p) > self.partitions // 2):
                    p.poll(0.05)
                if time.time() > next_round + SCALE_ROUND_S / 2:
                    self.late_rounds += 1
                    next_round = time.time()
            self.queued_at_stop = len(p)
            flushing = time.time()
            left = p.flush(60)
            self.flush_s = time.time() - flushing
            if left:
                self.errors.append(f"{left} records not delivered within 60 s")
        except Exception as e:  # noqa: BLE001 - reported by stop()
            self.errors.append(repr(e))

    def start(self) -> "RoundWriter":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(90)
        assert not self.thread.is_alive(), "the background writer stopped within 90 s"
        assert not self.errors, f"the background writer delivered every record to the source: {self.errors[:5]}"


def first_retry_backoffs(log: str, topic: str) -> dict[int, str]:
    """The back-off of each partition's first "retrying" line in ``log`` (partitions of ``topic``)."""
    first: dict[int, str] = {}
    for line in log.splitlines():
        if "retrying" not in line or f"topic={topic}" not in line:
            continue
        p, b = re.search(r"partition\{partition=(\d+)\}", line), re.search(r"backoff=(\S+)", line)
        if p and b:
            first.setdefault(int(p.group(1)), b.group(1))
    return first


def reassign(kafka_classpath: str, bootstrap: str, topic: str, replicas: dict[int, list[int]], workdir) -> None:
    """Kafka's partition reassignment tool (kafka-reassign-partitions.sh --execute)."""
    import json
    import subprocess
    plan = workdir / f"reassign-{unique('plan')}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": r} for p, r in replicas.items()]}))
    out = subprocess.run(["java", "-cp", kafka_classpath, "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                          "--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan), "--execute"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, f"kafka-reassign-partitions --execute failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"


def wait_layout(bootstrap: str, topic: str, ok, what: str, timeout: float) -> dict:
    """Polls the partition layout until ``ok(layout)`` returns no offending partitions."""
    from confluent_kafka import KafkaError, KafkaException
    deadline = time.time() + timeout
    while True:
        try:
            layout = partition_layout(bootstrap, topic)
        except KafkaException as e:
            # Right after CreateTopics the broker a describe reaches may not know the topic yet.
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or time.time() > deadline:
                raise
            time.sleep(0.5)
            continue
        bad = ok(layout)
        if not bad:
            return layout
        assert time.time() < deadline, f"{what} within {timeout:.0f} s; {len(bad)} partitions not yet, e.g. {[(p, layout[p]) for p in bad[:5]]}"
        time.sleep(0.5)


@pytest.mark.long  # quick tier: test_hundreds_of_partitions_share_a_few_connections covers the multiplexing; 500+ partitions and a broker kill take 3 min
def test_a_large_mirror_stalls_only_the_partitions_whose_leaders_were_moved_or_killed(clusters, workdir, kafka_classpath):
    """Issue: "a 2,000-partition mirror with some partitions' leaders killed and moved (only those
    partitions stall)", while a writer adds a record to every source partition every second. The
    destination topic the mirror creates gets the cluster's default replication factor (3 on the
    3-broker destination, min.insync.replicas 1): every broker holds a replica of every
    partition, so leadership can go anywhere.

    SCALE_PARTITIONS partitions: 2,000 in the long tier, 500 in the quick (the same steps and
    bounds; the quick tier's checks are the same, its broker recovers a quarter of the logs).

    Moved: a tenth (200 of 2,000) of the partitions led by two of the brokers get the other one of the two as preferred
    replica (kafka-reassign-partitions) and their leadership moves there (preferred election).
    Those must resume on their new leader, and every other partition must keep advancing meanwhile.

    Killed: then the third broker is SIGKILLed. The engine writes acks=all and the killed broker
    is in every ISR, so every partition waits until the controller fences it
    (broker.session.timeout.ms, 9 s) and drops it from the ISRs; the bound is well past that.
    Every partition led by a surviving broker must advance, and the killed broker's partitions
    must resume on their new leaders.

    The move comes first because the killed broker is restarted right after: recovering 2,000 logs
    after a SIGKILL takes it about a minute under mirroring load on a 2-core machine, which then
    overlaps the final catch-up and comparison instead of adding to them. No partition ever goes
    FAILED, and at the end the destination equals the source record by record."""
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    source, destination = clusters
    n = SCALE_PARTITIONS
    topic = unique(f"mux-{n}")
    started = time.time()

    def mark(what: str) -> None:
        print(f"{time.time() - started:6.1f} s: {what}", flush=True)

    create(source.bootstrap, topic, n)  # KRaft takes 2,000 partitions in one CreateTopics (the limit is 10,000 records)
    wait_layout(source.bootstrap, topic, lambda lay: [p for p in range(n) if lay.get(p, (-1,))[0] < 0], "every source partition has a leader", 60)
    produce_each(source.bootstrap, topic, n, 3, "a")
    victim = None
    try:
        with mirroring_proxy(source, destination, workdir, [topic]) as proxy:
            wait_end_offsets_equal(source.bootstrap, destination.bootstrap, topic, n, timeout=180)
            mark("caught up")
            layout = partition_layout(destination.bootstrap, topic)
            assert all(len(r) == 3 for _, r, _ in layout.values()), "the mirror created the destination topic with 3 replicas per partition"
            writer = RoundWriter(source.bootstrap, topic, n).start()
            try:
                # Progress must be new: wait until the writer's records flow into every partition.
                flowing = watch_advance(destination.bootstrap, topic, answered_end_offsets(destination.bootstrap, topic, range(n)),
                                        time.time() + 60)
                assert len(flowing) == n, f"the writer's records reach every partition; {n - len(flowing)} do not within 60 s"
                mark("the writer's records flow into every partition")
                leaders = {p: leader for p, (leader, _, _) in layout.items()}
                victim = max(set(leaders.values()), key=lambda b: sum(1 for v in leaders.values() if v == b))
                movers = sorted({1, 2, 3} - {victim})

                # --- moved: SCALE_MOVED partitions from one of `movers` to the other, alternately ---
                candidates = sorted(p for p, (leader, replicas, _) in layout.items() if leader in movers and leader == replicas[0])
                assert len(candidates) >= SCALE_MOVED, f"{SCALE_MOVED} partitions to move among {len(candidates)} candidates"
                moved = candidates[::len(candidates) // SCALE_MOVED][:SCALE_MOVED]
                target = {p: next(b for b in movers if b != layout[p][0]) for p in moved}
                staying = sorted(set(range(n)) - set(moved))
                window_start = answered_end_offsets(destination.bootstrap, topic, range(n))
                log_before_move = len(proxy.log())
                move_started = time.time()
                reassign(kafka_classpath, destination.bootstrap, topic,
                         {p: [target[p]] + [r for r in layout[p][1] if r != target[p]] for p in moved}, workdir)
                wait_layout(destination.bootstrap, topic, lambda lay: [p for p in moved if lay[p][1][0] != target[p]],
                            f"the {SCALE_MOVED} reassigned partitions have their new preferred replica", 60)
                admin = AdminClient({"bootstrap.servers": destination.bootstrap})
                result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in moved]).result(60)
                # ELECTION_NOT_NEEDED (84): the controller's periodic preferred-leader rebalance got there first.
                refused = {tp.partition: e for tp, e in result.items() if e is not None and e.args[0].code() != 84}
                assert not refused, f"preferred leader election refused for {len(refused)} partitions: {list(refused.items())[:5]}"
                wait_layout(destination.bootstrap, topic, lambda lay: [p for p in moved if lay[p][0] != target[p]],
                            f"the {SCALE_MOVED} moved partitions are led by their new leaders", 60)
                moved_at = time.time()
                after_move = answered_end_offsets(destination.bootstrap, topic, range(n))
                # The others kept going while the leaders moved (the window is at least the
                # reassignment tool's run, several seconds of one record per partition per second)...
                stopped = [p for p in staying if after_move[p] <= window_start[p]]
                assert not stopped, (f"{len(stopped)} of {len(staying)} partitions that were not moved did not advance while "
                                     f"{SCALE_MOVED} others moved ({moved_at - move_started:.1f} s), e.g. {stopped[:10]}")
                # ... and every partition, moved or not, goes on from there.
                progressed = watch_advance(destination.bootstrap, topic, after_move, moved_at + 45)
                stuck = [p for p in moved if p not in progressed]
                assert not stuck, (f"{len(stuck)} of {SCALE_MOVED} partitions whose leadership moved did not resume on the new leader "
                                   f"within 45 s, e.g. {stuck[:10]}")
                stopped = [p for p in staying if p not in progressed]
                assert not stopped, f"{len(stopped)} of {len(staying)} partitions that were not moved stopped after the move, e.g. {stopped[:10]}"
                failed = failed_partitions(proxy, topic, n)
                assert not failed, f"{len(failed)} partitions went FAILED after leadership moved: {failed[:20]}"
                # A partition that had been copying for minutes retries its first error after the
                # move at once: its back-off starts afresh (it used to keep the 3-5 s the start-up
                # retries had reached).
                first = first_retry_backoffs(proxy.log()[log_before_move:], topic)
                assert first, f"moving {SCALE_MOVED} leaders made some partitions retry (the check below is not vacuous)"
                slow = {p: b for p, b in first.items() if b != "100ms"}
                assert not slow, f"{len(slow)} of {len(first)} partitions retried their first error after the move with a grown back-off: {dict(list(slow.items())[:10])}"
                mark(f"moved {SCALE_MOVED} leaders in {moved_at - move_started:.1f} s, the {len(staying)} others advancing meanwhile; "
                     f"the moved resumed within {max(progressed[p] for p in moved) - moved_at:.1f} s")

                # --- killed ---
                layout = partition_layout(destination.bootstrap, topic)
                led = sorted(p for p, (leader, _, _) in layout.items() if leader == victim)
                others = sorted(p for p, (leader, _, _) in layout.items() if leader != victim)
                before = answered_end_offsets(destination.bootstrap, topic, range(n))
                destination.kill_broker(victim, signal.SIGKILL)
                killed_at = time.time()
                after_kill = answered_end_offsets(destination.bootstrap, topic, others)
                survivors_advanced = watch_advance(destination.bootstrap, topic, after_kill, killed_at + 45)
                stalled = [p for p in others if p not in survivors_advanced]
                assert not stalled, (f"{len(stalled)} of {len(others)} partitions not led by the killed broker {victim} did not advance "
                                     f"within 45 s of the kill, e.g. {stalled[:10]}")
                resumed = watch_advance(destination.bootstrap, topic, {p: before[p] for p in led}, killed_at + 90)
                stuck = [p for p in led if p not in resumed]
                assert not stuck, (f"{len(stuck)} of {len(led)} partitions the killed broker {victim} led did not resume on new "
                                   f"leaders within 90 s of the kill, e.g. {stuck[:10]}")
                failed = failed_partitions(proxy, topic, n)
                assert not failed, f"{len(failed)} partitions went FAILED after broker {victim} was killed: {failed[:20]}"
                mark(f"killed broker {victim} (led {len(led)} of {n}): the {len(others)} others advanced "
                     f"{min(survivors_advanced.values()) - killed_at:.1f}-{max(survivors_advanced.values()) - killed_at:.1f} s after the kill, "
                     f"its {len(led)} resumed {min(resumed.values()) - killed_at:.1f}-{max(resumed.values()) - killed_at:.1f} s after")
                destination.start_broker(victim, wait=False)  # waited for at the end
            finally:
                writer.stop()
            mark(f"writer stopped after {writer.rounds} rounds ({writer.late_rounds} late; "
                 f"{writer.queued_at_stop} records left to deliver took {writer.flush_s:.1f} s)")
            ends = wait_end_offsets_equal(source.bootstrap, destination.bootstrap, topic, n, timeout=180)
            mark("caught up")
            failed = failed_partitions(proxy, topic, n)
            assert not failed, f"{len(failed)} partitions are FAILED at the end: {failed[:20]}"
        # Every partition, record by record (2,000 x (3 + writer rounds) records per cluster).
        src_records = read_all(source.bootstrap, topic, n, "read_committed")
        dst_all = read_all(destination.bootstrap, topic, n, "read_uncommitted")
        dst_records = strip_fillers(dst_all)
        assert len(src_records) == sum(ends), f"the source holds {sum(ends)} records ({len(src_records)} read)"
        assert len(dst_all) == len(dst_records), f"a topic without gaps gets no fillers, got {len(dst_all) - len(dst_records)}"
        if dst_records != src_records:
            differ = sorted({r[0] for r in set(src_records) ^ set(dst_records)})
            raise AssertionError(f"the destination differs from the source in {len(differ)} partitions, e.g. {differ[:10]} "
                                 f"(moved: {moved[:10]}...; broker {victim} was killed leading {led[:10]}...)")
        mark("compared record by record")
    finally:
        if victim is not None and victim not in destination.procs:
            destination.start_broker(victim, wait=False)
        destination.wait_ready()  # the restarted broker is back: the session's other tests need all three
        # 2,000 partitions (x3 replicas on the destination) would weigh on the session's other tests.
        for cluster in (source, destination):
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # must outlive the future
            try:
                admin.delete_topics([topic])[topic].result(60)
            except Exception as e:  # noqa: BLE001 - never hides the test's own failure
                print(f"deleting {topic} on {cluster.name} failed: {e}")
        mark("broker back, topics deleted")
