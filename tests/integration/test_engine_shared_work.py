"""Shared mirror work (issue #14, `engine.share_work = true`): three role-auto proxies in front of
one destination each copy the partitions the election group's current generation assigns them;
the active one keeps topic creation, management and the sync loops.

A: every instance reports a distinct share of the same generation; a mirror of compressed and
   transactional data with compaction gaps (fillers on the destination) catches up with its
   partitions copied by all three (each instance's /metrics shows progress for exactly its own
   partitions, together every partition once); every instance refuses produces to the mirror
   topic, masks fillers, serves each isolation level exactly as the source does and describes
   every partition
   (`mirrors --describe` names each instance's share);
   a pause through a standby stops copying on every instance (the source grows, the destination
   does not), a resume catches up again, and a stop (failover) through a standby while the source
   keeps growing makes the topic writable through every instance only after every instance
   stopped copying: no source record lands after the first client record.
B: members come and go under load (seeded): every 2-4 s an instance (the active one included) is
   SIGKILLed and restarted, or SIGSTOPped past the session timeout and SIGCONTed; after each event
   the survivors' shares cover every partition again and every partition grows again (the stall
   per event is printed, and its longest per kind); at the end the destination equals the source
   record for record at identical offsets (each isolation level against the same level of the
   source) with no partition FAILED. `KMP_CHAOS_SECONDS` (quick
   tier 20, long tier 120) sets the length, `KMP_CHAOS_SEED` replays a seed.
"""

from __future__ import annotations

import os
import random
import re
import signal
import statistics
import threading
import time

import pytest

from confluent_kafka import Consumer, TopicPartition

from conftest import unique
import tier
from kmp_common import wait_until
from instances import (
    ELECTION_BOUND_S, INSTANCES, SESSION_TIMEOUT_MS, SourceLoad, TAKEOVER_BOUND_S, assert_same_log, auto_instances,
    chaos_actions, cli_describe_engine, compressed_data, partition_states, start_mirror, wait_one_active,
)
from mirror import FILLER_KEY, call, high_watermarks, produce_one, produce_plain, read_all, wait_caught_up

PARTITIONS = 6
# The chaos window: 20 s in the quick tier (at least one kill and one freeze), 120 s in the long.
CHAOS_SECONDS = tier.dial("chaos seconds", quick=20.0, long=120.0, env="KMP_CHAOS_SECONDS")


class StallWatch:
    """Polls (every 50 ms) until every partition of ``topic`` grew past its high watermark at
    the start; ``result`` is the seconds from ``hit`` until then."""

    def __init__(self, bootstrap: str, topic: str, hit: float, bound: float):
        self.bootstrap, self.topic, self.hit, self.bound = bootstrap, topic, hit, bound
        self.before = high_watermarks(bootstrap, topic, PARTITIONS)
        self.at: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "StallWatch":
        self.thread.start()
        return self

    def _run(self):
        grown: set[int] = set()
        while time.time() - self.hit < self.bound:
            now = high_watermarks(self.bootstrap, self.topic, PARTITIONS)
            grown |= {p for p in range(PARTITIONS) if now[p] > self.before[p]}
            if len(grown) == PARTITIONS:
                self.at = time.time()
                return
            time.sleep(0.05)

    def result(self, what: str) -> float:
        self.thread.join(self.bound + 5)
        assert self.at is not None, f"{what}: not within {self.bound:.0f}s (high watermarks at the start {self.before})"
        return self.at - self.hit
RECORDS_LINE = re.compile(r'^kmp_mirror_records\{mirror="([^"]+)",topic="([^"]+)",partition="(\d+)"\} (\d+)$', re.M)


def engine_share(inst) -> tuple[int, int, int] | None:
    """(generation, share index, members) from `GET /v1/engine`, or None without a share."""
    status, body = call(inst.proxy, "GET", "/v1/engine")
    assert status == 200, f"GET /v1/engine of {inst.instance_id}: {status} {body}"
    assert body.get("share_work") is True, f"{inst.instance_id} reports share_work: {body}"
    share = body.get("share")
    return (body["generation"], share["index"], share["members"]) if share else None


def wait_shares(instances, what: str, timeout: float) -> dict[str, tuple[int, int, int]]:
    """Waits until every one of ``instances`` holds a share of one generation, the indexes
    0..n-1 each once; the shares by instance id."""
    last = {}

    def settled():
        nonlocal last
        last = {i.instance_id: engine_share(i) for i in instances}
        shares = list(last.values())
        if any(s is None for s in shares):
            return False
        return len({s[0] for s in shares}) == 1 and sorted(s[1] for s in shares) == list(range(len(instances))) \
            and all(s[2] == len(instances) for s in shares)

    wait_until(f"{what} (last seen (generation, index, members): {last})", settled, timeout=timeout)
    return last


def copied_partitions(inst, mirror: str, topic: str) -> dict[int, int]:
    """Partition → records copied, from the per-partition gauges of the instance's /metrics (only
    the partitions its current share copies are there)."""
    status, text = inst.proxy.http("/metrics")
    assert status == 200, f"/metrics of {inst.instance_id}: {status}"
    return {int(p): int(n) for m, t, p, n in RECORDS_LINE.findall(text) if m == mirror and t == topic}


def source_grows_destination_does_not(source, destination, topic: str, why: str) -> None:
    before = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    produce_plain(source.bootstrap, topic, 60, start=100_000 + int(time.time() * 1000) % 100_000)
    time.sleep(3)  # several heartbeats and fetch rounds: time for a copy that should not happen
    after = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    assert after == before, f"{why}: the destination grew from {before} to {after} while the source did"


def records_from(bootstrap: str, topic: str, partition: int, offset: int) -> list[tuple[int, bytes | None]]:
    """(offset, value) of partition ``partition`` from ``offset`` to its end (read_uncommitted)."""
    end = high_watermarks(bootstrap, topic, PARTITIONS)[partition]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    c.assign([TopicPartition(topic, partition, offset)])
    got = []
    deadline = time.time() + 30
    while (not got or got[-1][0] < end - 1) and time.time() < deadline and offset < end:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.offset(), m.value()))
    c.close()
    return got


@pytest.mark.long  # opt-in shared work (60 s); quick tier: test_default_scale_out's three default instances
def test_three_instances_share_the_copying_and_a_stop_waits_for_every_instance(clusters, workdir):
    source, destination = clusters
    topic, mirror = unique("share"), unique("shm")
    compressed_data(source, topic, PARTITIONS)  # compaction gaps, then every codec and transactions
    expected = {isolation: read_all(source.bootstrap, topic, PARTITIONS, isolation) for isolation in ("read_committed", "read_uncommitted")}
    with auto_instances(destination, workdir, share_work=True) as instances:
        active, _ = wait_one_active(instances, "one active instance", ELECTION_BOUND_S)
        shares = wait_shares(instances, "every instance holds a distinct share of one generation", ELECTION_BOUND_S)
        print(f"\nshares (generation, index, members): {shares}")
        standbys = [i for i in instances if i is not active]
        start_mirror(standbys[0], source, mirror, topic)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert_same_log(source, destination, topic, PARTITIONS, "after the first catch-up with shared work")
        assert any(r[2] == FILLER_KEY for r in read_all(destination.bootstrap, topic, PARTITIONS, "read_uncommitted")), \
            "the destination log holds fillers where the source has compaction gaps (the premise of the masking check)"

        # Each instance copied its own partitions, together every partition exactly once.
        def split():
            per = {i.instance_id: copied_partitions(i, mirror, topic) for i in instances}
            owners = [p for parts in per.values() for p in parts]
            return per if sorted(owners) == list(range(PARTITIONS)) else None

        wait_until("the instances' /metrics show every partition copied by exactly one instance", lambda: split() is not None, timeout=30)
        per = split()
        print(f"partitions copied per instance: { {k: sorted(v) for k, v in per.items()} }")
        assert all(per.values()), f"every instance copies some partitions: {per}"
        assert sum(sum(v.values()) for v in per.values()) > 0, f"records were copied: {per}"

        for inst in instances:
            err, _ = produce_one(inst.bootstrap, topic, 0)
            assert err is not None, f"a produce to mirror topic {topic} through {inst.instance_id} is refused"
            for isolation in ("read_committed", "read_uncommitted"):
                got = read_all(inst.bootstrap, topic, PARTITIONS, isolation)
                fillers = [(r[0], r[1]) for r in got if r[2] == FILLER_KEY]
                assert not fillers, f"fillers reached a consumer of {inst.instance_id} ({isolation}) at (partition, offset) {fillers[:5]}"
                assert got == expected[isolation], \
                    f"through {inst.instance_id} ({isolation}) consumers see exactly what the source's {isolation} consumers see ({len(got)} vs {len(expected[isolation])} records)"
            wait_until(f"{inst.instance_id} describes every partition as mirroring",
                       lambda: [s for _, s in partition_states(inst, mirror, topic)] == ["mirroring"] * PARTITIONS, timeout=20)
        # `mirrors --describe` names each instance's share (identity, assignment and generation).
        described = {inst.instance_id: cli_describe_engine(inst, mirror) for inst in instances}
        assert sorted(e.get("share", {}).get("index", -1) for e in described.values()) == list(range(INSTANCES)) \
            and all(e["share"]["members"] == INSTANCES for e in described.values()), f"every describe names a distinct share: {described}"

        # Pause through a standby: no instance copies any more.
        status, r = call(standbys[1].proxy, "POST", f"/v1/mirrors/{mirror}/pause", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"a pause through standby {standbys[1].instance_id}: {status} {r}"
        for inst in instances:
            wait_until(f"{inst.instance_id} describes the topic as paused",
                       lambda: [s for _, s in partition_states(inst, mirror, topic)] == ["paused"] * PARTITIONS, timeout=20)
        source_grows_destination_does_not(source, destination, topic, "paused with shared work")

        status, r = call(standbys[0].proxy, "POST", f"/v1/mirrors/{mirror}/resume", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"a resume through standby {standbys[0].instance_id}: {status} {r}"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        wait_shares(instances, "shares again after the resume", ELECTION_BOUND_S)

        # Stop (failover) through a standby while the source keeps growing.
        load = SourceLoad(source.bootstrap, topic, PARTITIONS, seed=7).start()
        try:
            time.sleep(2)
            status, r = call(standbys[1].proxy, "POST", f"/v1/mirrors/{mirror}/stop", {"topics": [topic]})
            assert status == 200 and r["results"][0]["error_code"] == 0, f"a stop through standby {standbys[1].instance_id}: {status} {r}"
        finally:
            load.stop()
        at_stop = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        for inst in instances:
            wait_until(f"{topic} is writable through {inst.instance_id} after the stop",
                       lambda: produce_one(inst.bootstrap, topic, 0)[0] is None, timeout=20)
        # Every partition gets client records; whatever follows the stop's log end must be them.
        for inst in instances:
            for p in range(PARTITIONS):
                err, _ = produce_one(inst.bootstrap, topic, p)
                assert err is None, f"a produce to stopped {topic}/{p} through {inst.instance_id}: {err}"
        time.sleep(2)  # a late mirror write would land now
        assert high_watermarks(source.bootstrap, topic, PARTITIONS) != at_stop, "the source kept growing (the premise)"
        for p in range(PARTITIONS):
            after = records_from(destination.bootstrap, topic, p, at_stop[p])
            foreign = [(o, v) for o, v in after if v != b"failover"]
            assert not foreign, f"{topic}/{p}: records after the stop's log end {at_stop[p]} that no client wrote: {foreign[:5]}"
        for inst in instances:
            wait_until(f"{inst.instance_id} describes every partition as stopped (recorded by the new generation's owners)",
                       lambda: [s for _, s in partition_states(inst, mirror, topic)] == ["stopped"] * PARTITIONS, timeout=20)


@pytest.mark.long  # quick tier: test_three_instances_share_the_copying… shares the work; members churning for a minute is the long tier's
def test_members_coming_and_going_keep_every_partition_copied_exactly(clusters, workdir):
    source, destination = clusters
    seed = int(os.environ.get("KMP_CHAOS_SEED", random.randrange(1 << 31)))
    print(f"\nshared-work chaos seed {seed} (replay with KMP_CHAOS_SEED={seed}), {CHAOS_SECONDS:.0f}s")
    rng = random.Random(seed)
    topic, mirror = unique("share-chaos"), unique("shc")
    compressed_data(source, topic, PARTITIONS)
    ctx = f"seed {seed}"
    with auto_instances(destination, workdir, share_work=True) as instances:
        active, _ = wait_one_active(instances, f"one active instance ({ctx})", ELECTION_BOUND_S)
        wait_shares(instances, f"three shares ({ctx})", ELECTION_BOUND_S)
        start_mirror(active, source, mirror, topic)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        load = SourceLoad(source.bootstrap, topic, PARTITIONS, seed).start()
        stalls = []  # (action, seconds until every partition grew again)
        n = 0
        try:
            chaos_end = time.time() + CHAOS_SECONDS
            actions = chaos_actions(rng)
            while time.time() < chaos_end or n < 2:  # a kill and a freeze at least
                n += 1
                time.sleep(rng.uniform(2, 4))
                active, _ = wait_one_active(instances, f"one active before event {n} ({ctx})", TAKEOVER_BOUND_S)
                victim = rng.choice(instances)  # the active one too: its management moves, the shares stay exact
                action = next(actions)
                survivors = [i for i in instances if i is not victim]
                hit = time.time()
                if action == "kill":
                    victim.proxy.proc.kill()
                    victim.proxy.proc.wait()
                else:
                    os.kill(victim.proxy.pid, signal.SIGSTOP)
                    victim.stopped = True
                # Writes in flight land within moments; the stall lasts until every partition grew
                # past what it held 0.3 s after the hit (the victim's share is the one that waits).
                time.sleep(0.3)
                watcher = StallWatch(destination.bootstrap, topic, hit, TAKEOVER_BOUND_S + 30).start()
                wait_shares(survivors, f"the survivors share the work after the {action} of {victim.instance_id} ({ctx})", TAKEOVER_BOUND_S)
                reshared = time.time() - hit
                stall = watcher.result(f"event {n}: every partition grows again after the {action} of {victim.instance_id} ({ctx})")
                stalls.append((action, stall))
                print(f"event {n}: {action} {victim.instance_id}{' (active)' if victim is active else ''}: survivors re-shared after "
                      f"{reshared:.1f}s, every partition grew again after {stall:.1f}s")
                if action == "kill":
                    victim.restart()
                else:
                    time.sleep(max(0.0, SESSION_TIMEOUT_MS / 1000 + 1 - (time.time() - hit)))
                    os.kill(victim.proxy.pid, signal.SIGCONT)
                    victim.stopped = False
                wait_shares(instances, f"all three share again after event {n} ({ctx})", TAKEOVER_BOUND_S)
        finally:
            load.stop()
        for action in ("kill", "freeze"):
            got = [st for a, st in stalls if a == action]
            if got:
                print(f"{action}: {len(got)} events, replication stall p50 {statistics.median(got):.2f}s, longest {max(got):.2f}s")
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert_same_log(source, destination, topic, PARTITIONS, f"after {len(stalls)} membership events ({ctx})")
        status, r = call(active.proxy, "GET", f"/v1/mirrors/{mirror}")
        failed = [(t["topic"], p["partition"], p.get("last_error")) for t in r.get("topics", []) for p in t["partitions"] if p["state"] == "failed"]
        assert status == 200 and not failed, f"no partition FAILED ({ctx}): {failed}"
