"""High availability of the mirror engine (issue #14): three proxies with `engine.role = "auto"` in
front of one destination elect exactly one active engine through a consumer-group-protocol group on
the destination cluster; the others are standbys that follow the state topic and enforce it.

A: one instance becomes active, the others standby; a mirror of compressed and transactional data
   (committed and aborted transactions, and compaction gaps, which become fillers on the
   destination) created through the active catches up; every instance refuses produces to the
   mirror topic, masks the fillers and serves each isolation level exactly as the source does.
B: chaos: under continuous source load the active is SIGKILLed (and restarted with the same instance
   id) or SIGSTOPped past the session timeout (and SIGCONTed) every 3-6 s, seeded; per takeover the
   time until another instance is active and the replication stall are measured; at the end the
   destination equals the source record for record at identical offsets (each isolation level
   against the same level of the source: the load's aborted transactions are replayed and aborted
   on the destination), nothing FAILED, and a woken
   old active is a standby. `KMP_CHAOS_SECONDS` (quick tier 20, long tier 120) sets the length, `KMP_CHAOS_SEED` replays
   a seed.
C: a failover (stop) through the active while clients produce to other topics through the standbys:
   the stopped topic becomes writable through every instance, the other producers never fail.
"""

from __future__ import annotations

import math
import os
import random
import signal
import statistics
import threading
import time

from confluent_kafka import KafkaError, Producer

from conftest import unique
import tier
from kmp_common import wait_until
from instances import (
    ELECTION_BOUND_S, INSTANCES, NOT_CONTROLLER, SESSION_TIMEOUT_MS, SourceLoad, TAKEOVER_BOUND_S,
    WOKEN_STANDBY_BOUND_S, assert_same_log, auto_instances, chaos_actions, cli_describe_engine, compressed_data,
    lists_topic, partition_states, roles, start_mirror, wait_one_active,
)
from mirror import (
    FILLER_KEY, call, create, high_watermarks, produce_one, produce_plain, produce_transactions, read_all,
    wait_caught_up,
)

# The chaos window: 20 s in the quick tier (at least one kill and one freeze), 120 s in the long.
CHAOS_SECONDS = tier.dial("chaos seconds", quick=20.0, long=120.0, env="KMP_CHAOS_SECONDS")


def test_exactly_one_instance_is_active_and_every_instance_enforces_the_mirror(clusters, workdir):
    source, destination = clusters
    topic, mirror, partitions = unique("ha-enforce"), unique("ham"), 4
    compressed_data(source, topic, partitions)  # compaction gaps, then every codec and transactions
    expected = {isolation: read_all(source.bootstrap, topic, partitions, isolation) for isolation in ("read_committed", "read_uncommitted")}
    with auto_instances(destination, workdir) as instances:
        started = time.time()
        active, view = wait_one_active(instances, "exactly one of three role-auto instances is active, the others standby", ELECTION_BOUND_S)
        print(f"\nelection: {active.instance_id} active (generation {view[2]}) {time.time() - started:.1f}s after the last instance was ready")
        views = roles(instances)
        assert len(views) == INSTANCES, f"every instance answers: {views}"
        for iid, (role, reported_id, generation, active_metric, generation_metric, takeovers, named) in views.items():
            assert reported_id == iid, f"/readyz of {iid} names instance {reported_id}"
            assert not any(math.isnan(v) for v in (active_metric, generation_metric, takeovers)), \
                f"{iid} exports kmp_engine_active, kmp_engine_generation and kmp_engine_takeovers_total: {views[iid]}"
            assert generation == generation_metric, f"{iid}: /readyz generation {generation} != kmp_engine_generation {generation_metric}"
            if role == "standby":
                wait_until(f"standby {iid} names the active {active.instance_id} in /readyz",
                           lambda: (v := next(i for i in instances if i.instance_id == iid).engine()) and v[6] == active.instance_id, timeout=10)
        assert views[active.instance_id][5] >= 1, f"the active counted its takeover (kmp_engine_takeovers_total): {views[active.instance_id]}"

        # REST mutations through standbys are carried out by the active instance (handed over
        # through the state topic), with the active's statuses and bodies.
        standbys = [i for i in instances if i is not active]
        start_mirror(standbys[0], source, mirror, topic)
        status, r = call(standbys[1].proxy, "POST", "/v1/mirrors", {"name": mirror, "configs": {"bootstrap.servers": source.bootstrap}})
        assert status == 409 and r.get("error") == "CLUSTER_MIRROR_ALREADY_EXISTS", f"the active's 409 reaches a caller of standby {standbys[1].instance_id}: {status} {r}"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: partitions})
        assert_same_log(source, destination, topic, partitions, "after the first catch-up")
        assert any(r[2] == FILLER_KEY for r in read_all(destination.bootstrap, topic, partitions, "read_uncommitted")), \
            "the destination log holds fillers where the source has compaction gaps (the premise of the masking check)"
        status, r = call(standbys[0].proxy, "POST", f"/v1/mirrors/{mirror}/pause", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"a pause through standby {standbys[0].instance_id}: {status} {r}"
        wait_until("the active describes the topic as paused",
                   lambda: [s for _, s in partition_states(active, mirror, topic)] == ["paused"] * partitions, timeout=15)
        status, r = call(standbys[1].proxy, "POST", f"/v1/mirrors/{mirror}/resume", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"a resume through standby {standbys[1].instance_id}: {status} {r}"
        status, r = call(standbys[1].proxy, "POST", f"/v1/mirrors/{mirror}/stop", {"topics": [topic], "graceful_timeout_ms": 1000})
        assert status == 421 and r.get("error_code") == NOT_CONTROLLER and active.instance_id in r.get("message", ""), \
            f"a graceful stop through a standby is sent to the active instance by name: {status} {r}"
        status, r = call(standbys[0].proxy, "POST", f"/v1/mirrors/{mirror}-nope/pause", {"topics": [topic]})
        assert status == 404, f"an unknown mirror through a standby is 404 as on the active: {status} {r}"

        for inst in instances:
            wait_until(f"{inst.instance_id} lists {mirror} with {topic}", lambda: lists_topic(inst, mirror, topic), timeout=15)
            err, _ = produce_one(inst.bootstrap, topic, 0)
            assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, \
                f"a produce to mirror topic {topic} through {inst.instance_id} ({'active' if inst is active else 'standby'}) is refused with POLICY_VIOLATION, got {err}"
            for isolation in ("read_committed", "read_uncommitted"):
                got = read_all(inst.bootstrap, topic, partitions, isolation)
                fillers = [(r[0], r[1]) for r in got if r[2] == FILLER_KEY]
                assert not fillers, f"fillers reached a consumer of {inst.instance_id} ({isolation}) at (partition, offset) {fillers[:5]}"
                assert got == expected[isolation], \
                    f"through {inst.instance_id} ({isolation}) consumers see exactly what the source's {isolation} consumers see ({len(got)} vs {len(expected[isolation])} records)"
            assert [s for _, s in partition_states(inst, mirror, topic)] == ["mirroring"] * partitions, \
                f"{inst.instance_id} describes every partition as mirroring: {partition_states(inst, mirror, topic)}"
            engine = cli_describe_engine(inst, mirror)
            generation = engine.pop("generation", None)
            assert engine == {"instance_id": inst.instance_id, "role": "auto", "active": inst is active, "active_instance": active.instance_id}, \
                f"`mirrors --describe` through {inst.instance_id} names the instance, its part and the active one: {engine}"
            # A member's rejoin may have moved the generation on since the election (same active).
            assert isinstance(generation, int) and generation >= view[2], f"describe through {inst.instance_id} gives the generation: {generation} (elected at {view[2]})"
        assert high_watermarks(destination.bootstrap, topic, partitions) == high_watermarks(source.bootstrap, topic, partitions), \
            "nothing written through any instance reached the mirror topic"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def test_chaos_killing_and_freezing_the_active_keeps_the_mirror_identical_to_the_source(clusters, workdir):
    source, destination = clusters
    seed = int(os.environ.get("KMP_CHAOS_SEED", random.randrange(1 << 31)))
    print(f"\nchaos seed {seed} (replay with KMP_CHAOS_SEED={seed}), {CHAOS_SECONDS:.0f}s")
    rng = random.Random(seed)
    topic, mirror, partitions = unique("ha-chaos"), unique("hac"), 4
    compressed_data(source, topic, partitions)
    ctx = f"seed {seed}"
    with auto_instances(destination, workdir) as instances:
        active, view = wait_one_active(instances, f"one active instance before the chaos ({ctx})", ELECTION_BOUND_S)
        start_mirror(active, source, mirror, topic)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: partitions})
        load = SourceLoad(source.bootstrap, topic, partitions, seed).start()
        takeovers = []  # (action, victim, seconds to a new active, seconds of replication stall)
        woken = []  # instance ids SIGCONTed after a freeze
        generation = view[2]
        try:
            chaos_end = time.time() + CHAOS_SECONDS
            actions = chaos_actions(rng)
            while time.time() < chaos_end or len(takeovers) < 2:  # a kill and a freeze at least
                time.sleep(rng.uniform(3, 6))
                victim, view = wait_one_active(instances, f"one active instance before the next event ({ctx})", TAKEOVER_BOUND_S)
                generation = view[2]
                action = next(actions)
                survivors = [i for i in instances if i is not victim]
                if action == "kill":
                    victim.proxy.proc.kill()
                    hit = time.time()
                    victim.proxy.proc.wait()
                else:
                    os.kill(victim.proxy.pid, signal.SIGSTOP)
                    hit = time.time()
                    victim.stopped = True
                # Writes the victim had in flight land within moments; the stall is measured from
                # the hit until the destination grows past what it held 0.3 s later (no takeover can
                # happen that early: the session timeout is SESSION_TIMEOUT_MS).
                time.sleep(0.3)
                before = sum(high_watermarks(destination.bootstrap, topic, partitions))
                stall = {}

                def watch_destination():
                    while time.time() - hit < TAKEOVER_BOUND_S + 30:
                        if sum(high_watermarks(destination.bootstrap, topic, partitions)) > before:
                            stall["at"] = time.time()
                            return
                        time.sleep(0.05)

                watcher = threading.Thread(target=watch_destination, daemon=True)
                watcher.start()
                new_active, new_view = wait_one_active(survivors, f"a survivor becomes active after the {action} of {victim.instance_id} ({ctx})",
                                                       TAKEOVER_BOUND_S, min_generation=generation)
                took = time.time() - hit
                watcher.join(TAKEOVER_BOUND_S + 30)
                assert "at" in stall, f"the destination of {topic} grew again after the {action} of {victim.instance_id} ({ctx})"
                assert new_view[5] >= 1, f"{new_active.instance_id} counted its takeover: {new_view} ({ctx})"
                takeovers.append((action, victim.instance_id, took, stall["at"] - hit))
                print(f"  t+{hit - chaos_end + CHAOS_SECONDS:5.1f}s {action:6} {victim.instance_id}: {new_active.instance_id} active "
                      f"(generation {new_view[2]}) after {took:.2f}s, replication stalled {stall['at'] - hit:.2f}s")
                if action == "kill":
                    time.sleep(rng.uniform(1, 3))
                    victim.restart()  # the same instance id
                else:
                    time.sleep(max(0.0, SESSION_TIMEOUT_MS / 1000 + rng.uniform(0.5, 2) - (time.time() - hit)))
                    os.kill(victim.proxy.pid, signal.SIGCONT)
                    victim.stopped = False
                    woken.append(victim.instance_id)
                    first = victim.engine()
                    wait_until(f"the woken old active {victim.instance_id} reports standby (kmp_engine_active 0) ({ctx}; first seen {first})",
                               lambda: (v := victim.engine()) is not None and v[0] == "standby" and v[3] == 0, timeout=WOKEN_STANDBY_BOUND_S)
                    now_active, _ = wait_one_active(instances, f"still exactly one active after {victim.instance_id} woke ({ctx})", TAKEOVER_BOUND_S)
                    assert now_active is not victim, f"{victim.instance_id} took over again right after waking ({ctx})"
            # The load aborts a third of its transactions at random: wait for one (replayed and
            # aborted on the destination across the takeovers) rather than count on the window
            # having been long enough.
            wait_until(f"the source load aborted a transaction ({ctx})", lambda: load.transactions["aborted"] > 0, timeout=120)
        finally:
            load.stop()
        assert {t[0] for t in takeovers} == {"kill", "freeze"}, f"the chaos killed and froze the active ({ctx}): {takeovers}"
        for action in ("kill", "freeze"):
            rows = [t for t in takeovers if t[0] == action]
            if rows:
                took, stalls = [t[2] for t in rows], [t[3] for t in rows]
                print(f"{action}: {len(rows)} takeovers, time to a new active p50 {statistics.median(took):.2f}s max {max(took):.2f}s; "
                      f"replication stall p50 {statistics.median(stalls):.2f}s max {max(stalls):.2f}s")
        print(f"source load: {load.records} records, transactions {load.transactions}")

        active, _ = wait_one_active(instances, f"one active at the end ({ctx})", TAKEOVER_BOUND_S)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: partitions})
        assert_same_log(source, destination, topic, partitions, ctx)
        for inst in instances:
            states = partition_states(inst, mirror, topic)
            failed = [p for p, s in states if s == "failed"]
            assert not failed, f"{topic} partitions {failed} FAILED as described by {inst.instance_id} ({ctx}): {states}"
        assert [s for _, s in partition_states(active, mirror, topic)] == ["mirroring"] * partitions, \
            f"the active {active.instance_id} mirrors every partition ({ctx}): {partition_states(active, mirror, topic)}"
        for iid in woken:
            inst = next(i for i in instances if i.instance_id == iid)
            if inst is not active:
                v = inst.engine()
                assert v is not None and v[0] == "standby" and v[3] == 0, f"woken old active {iid} reports standby at the end ({ctx}): {v}"
        assert load.transactions["aborted"] > 0, f"the load aborted transactions (aborted records on the destination) ({ctx}): {load.transactions}"


def test_a_failover_through_the_active_makes_the_topic_writable_through_every_instance(clusters, workdir):
    source, destination = clusters
    topic, other, mirror, partitions = unique("ha-failover"), unique("ha-other"), unique("haf"), 2
    create(source.bootstrap, topic, partitions)
    produce_plain(source.bootstrap, topic, 100, **{"compression.type": "lz4"})
    produce_transactions(source.bootstrap, topic)
    create(destination.bootstrap, other, 2)
    with auto_instances(destination, workdir) as instances:
        active, _ = wait_one_active(instances, "one active instance", ELECTION_BOUND_S)
        standbys = [i for i in instances if i is not active]
        start_mirror(active, source, mirror, topic)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: partitions})
        for inst in instances:
            wait_until(f"{inst.instance_id} lists {mirror} with {topic}", lambda: lists_topic(inst, mirror, topic), timeout=15)
        ends = high_watermarks(destination.bootstrap, topic, partitions)

        # Clients keep producing to a topic that is not mirrored, through each standby.
        done, delivered, failures = threading.Event(), {i.instance_id: 0 for i in standbys}, []

        def produce_through(inst):
            p = Producer({"bootstrap.servers": inst.bootstrap, "linger.ms": 5, "acks": "all"})

            def on_delivery(err, _msg):
                if err is None:
                    delivered[inst.instance_id] += 1
                else:
                    failures.append((inst.instance_id, err))
            n = 0
            while not done.is_set():
                p.produce(other, value=f"{inst.instance_id}-{n}".encode(), on_delivery=on_delivery)
                n += 1
                p.poll(0.02)
            if p.flush(30) != 0:
                failures.append((inst.instance_id, "records left undelivered after 30 s"))

        producers = [threading.Thread(target=produce_through, args=(i,), daemon=True) for i in standbys]
        for t in producers:
            t.start()
        wait_until("both standby producers delivered records", lambda: all(v > 10 for v in delivered.values()), timeout=30)
        sent = time.time()
        status, r = call(active.proxy, "POST", f"/v1/mirrors/{mirror}/stop", {"topics": [topic], "graceful_timeout_ms": 30000})
        stopped = time.time()
        assert status == 200 and r["results"][0]["error_code"] == 0, f"stop through the active {active.instance_id}: {status} {r}"
        offset_next = ends[1]
        for inst in instances:
            def writable():
                err, offset = produce_one(inst.bootstrap, topic, 1)
                if err is None:
                    return offset
                assert err.code() == KafkaError.POLICY_VIOLATION, f"before {inst.instance_id} sees the stop it refuses as before: {err}"
                return None
            offset = wait_until(f"{topic} becomes writable through {inst.instance_id} after the stop", writable, timeout=15)
            print(f"\n{inst.instance_id} ({'active' if inst is active else 'standby'}): writable {time.time() - stopped:.2f}s after the stop returned "
                  f"(the stop took {stopped - sent:.2f}s)")
            assert offset == offset_next, f"the write through {inst.instance_id} lands at the next offset {offset_next} of partition 1: {offset}"
            offset_next += 1
        done.set()
        for t in producers:
            t.join(60)
        assert not failures, f"producing to {other} through the standbys never failed during the failover: {failures[:5]}"
        total = sum(delivered.values())
        assert sum(high_watermarks(destination.bootstrap, other, 2)) == total, f"{other} holds the {total} delivered records"
        for inst in instances:
            wait_until(f"{inst.instance_id} describes {topic} as stopped",
                       lambda: [s for _, s in partition_states(inst, mirror, topic)] == ["stopped"] * partitions, timeout=15)
