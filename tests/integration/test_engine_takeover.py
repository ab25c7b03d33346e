"""High availability of the mirror engine (issue #14): three proxies with `engine.role = "auto"` in
front of one destination elect exactly one active engine through a consumer-group-protocol group on
the destination cluster; the others are standbys that follow the state topic and enforce it.

A: one instance becomes active, the others standby; a mirror of compressed and transactional data
   created through the active catches up; every instance refuses produces to the mirror topic and
   masks the fillers.
B: chaos: under continuous source load the active is SIGKILLed (and restarted with the same instance
   id) or SIGSTOPped past the session timeout (and SIGCONTed) every 3-6 s, seeded; per takeover the
   time until another instance is active and the replication stall are measured; at the end the
   destination equals the source record for record at identical offsets, nothing FAILED, and a woken
   old active is a standby. `KMP_CHAOS_SECONDS` (default 120) sets the length, `KMP_CHAOS_SEED` replays
   a seed.
C: a failover (stop) through the active while clients produce to other topics through the standbys:
   the stopped topic becomes writable through every instance, the other producers never fail.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import threading
import time
from contextlib import contextmanager

from confluent_kafka import KafkaError, Producer

from conftest import PROXY_BIN, ProxyProcess, unique
from kmp_common import wait_until
from test_mirror_engine import FILLER_KEY, create, high_watermarks, produce_plain, produce_transactions, read_all, wait_caught_up
from test_mirror_failover import call, produce_one

# The smallest session the brokers accept by default (group.min.session.timeout.ms = 6000; the
# shared session clusters keep the broker defaults).
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
INSTANCES = 3
# Election and takeover bounds: the coordinator drops a dead member after the session timeout, the
# rebalance that follows waits up to one more session for the survivors' JoinGroups.
ELECTION_BOUND_S = 3 * SESSION_TIMEOUT_MS / 1000 + 10
TAKEOVER_BOUND_S = 3 * SESSION_TIMEOUT_MS / 1000 + 10
# A woken old active must see its lease expired at once; a few heartbeats of slack for the poll.
WOKEN_STANDBY_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 5
CHAOS_SECONDS = float(os.environ.get("KMP_CHAOS_SECONDS", "120"))
NOT_CONTROLLER = 41
# With engine.share_work the line ends in "; share <index> of <members>" (or "; no share").
ENGINE_LINE = re.compile(r"engine: (active|standby) \(instance ([^\s,]+), generation (-?\d+)(?:; active: ([^\s;)]+))?(?:; (?:share \d+ of \d+|no share))?\)")


class Instance:
    """One role-auto proxy with a fixed instance id. A restart keeps the instance id but takes fresh
    ports: a port the dead process held may meanwhile be some client connection's ephemeral port
    (the proxy then rightly hides that broker and stays unready)."""

    def __init__(self, destination, workdir, args, instance_id: str):
        self.instance_id = instance_id
        self._spawn = lambda: ProxyProcess(destination.bootstrap, workdir, args, env={"KMP_INSTANCE_ID": instance_id})
        self.proxy = self._spawn()
        self.logs = [self.proxy.log_path]
        self.stopped = False  # SIGSTOPped: not polled (every HTTP call would time out)
        self.state_topic: str | None = None  # set by auto_instances

    def start(self) -> "Instance":
        self.proxy.start()
        return self

    def restart(self) -> "Instance":
        assert not self.proxy.alive(), f"{self.instance_id} is restarted only once it has exited"
        self.proxy = self._spawn()
        self.logs.append(self.proxy.log_path)
        return self.start()

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap

    def reachable(self) -> bool:
        return self.proxy.alive() and not self.stopped

    def engine(self) -> tuple[str, str, int, float, float, float, str | None] | None:
        """(role from /readyz, instance id from /readyz, generation from /readyz, kmp_engine_active,
        kmp_engine_generation, kmp_engine_takeovers_total, the active instance a standby's /readyz
        names), or None when the instance does not answer.
        The role is "no engine line: <body>" while /readyz has no `engine: active|standby (instance
        <id>, generation <n>)` line, and a metric that is not on /metrics reads as NaN (so that a
        wait names what it saw last)."""
        if not self.reachable():
            return None
        status, body = self.proxy.http("/readyz")
        if status == 0:
            return None
        line = ENGINE_LINE.search(body)
        status, text = self.proxy.http("/metrics")
        if status != 200:
            return None
        values = {}
        for name in ("kmp_engine_active", "kmp_engine_generation", "kmp_engine_takeovers_total"):
            found = [float(l.split()[-1]) for l in text.splitlines() if l.startswith((name + " ", name + "{"))]
            values[name] = found[0] if found else float("nan")
        role, iid, generation, named = (line.group(1), line.group(2), int(line.group(3)), line.group(4)) if line \
            else (f"no engine line: {body!r}", "?", -1, None)
        return (role, iid, generation, values["kmp_engine_active"], values["kmp_engine_generation"], values["kmp_engine_takeovers_total"],
                named)


def auto_config(workdir, state_topic: str, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS, share_work: bool = False) -> list[str]:
    """One config file shared by every instance: role auto, a unique state topic, a short session
    (and with ``share_work``, the copying shared by the instances)."""
    path = workdir / f"{unique('auto-cfg')}.toml"
    path.write_text(f'[engine]\nrole = "auto"\nstate_topic = "{state_topic}"\nstate_flush_interval_ms = 500\n'
                    f'session_timeout_ms = {session_timeout_ms}\nheartbeat_interval_ms = {heartbeat_interval_ms}\n'
                    f'share_work = {"true" if share_work else "false"}\n')
    return ["--config", str(path)]


@contextmanager
def auto_instances(destination, workdir, n: int = INSTANCES, **config):
    """``n`` role-auto proxies sharing one config (``config``: auto_config's timing settings); each
    must exit 0 on SIGTERM at the end."""
    state_topic = unique("kmp-state-ha")
    args = auto_config(workdir, state_topic, **config)
    prefix = unique("kmp-ha")
    instances = [Instance(destination, workdir, args, f"{prefix}-{i}") for i in range(n)]
    for inst in instances:
        inst.state_topic = state_topic
    try:
        for inst in instances:
            inst.start()
        yield instances
    except BaseException:
        shut_down(instances)  # the failure at hand is the one to report
        raise
    codes = shut_down(instances)
    logs = "\n".join(f"--- {i.instance_id}: {', '.join(map(str, i.logs))}" for i in instances)
    assert all(c == 0 for c in codes.values()), f"every instance exits 0 on SIGTERM: {codes}\n{logs}"


def shut_down(instances) -> dict[str, int]:
    """SIGCONT what is frozen, SIGTERM every instance; their exit codes by instance id."""
    codes = {}
    for inst in instances:
        if inst.stopped and inst.proxy.alive():
            os.kill(inst.proxy.pid, signal.SIGCONT)
            inst.stopped = False
        codes[inst.instance_id] = inst.proxy.stop()
    return codes


def roles(instances) -> dict[str, tuple]:
    """Engine view of every reachable instance, by instance id."""
    return {i.instance_id: view for i in instances if (view := i.engine()) is not None}


def one_active(views: dict, min_generation: int = -1):
    """(instance, view) of the single instance that is active (/readyz and kmp_engine_active agree)
    while every other one in ``views`` is a standby, at a generation above ``min_generation``."""
    if any(v is None for _, v in views.values()):
        return None
    active = [(i, v) for i, v in views.values() if v[0] == "active" and v[3] == 1]
    standby = [(i, v) for i, v in views.values() if v[0] == "standby" and v[3] == 0]
    if len(active) != 1 or len(active) + len(standby) != len(views) or active[0][1][2] <= min_generation:
        return None
    return active[0]


def wait_one_active(instances, what: str, timeout: float, min_generation: int = -1):
    """Polls the reachable ones of ``instances`` (every 50 ms) until exactly one is active and the
    others standby; fails naming ``what`` and every instance's last engine view."""
    deadline = time.time() + timeout
    while True:
        views = {i.instance_id: (i, i.engine()) for i in instances if i.reachable()}
        found = one_active(views, min_generation)
        if found:
            return found
        assert time.time() < deadline, (f"{what}: not within {timeout}s; last seen (role, instance, generation, kmp_engine_active, "
                                         f"kmp_engine_generation, kmp_engine_takeovers_total, active named): "
                                         f"{ {k: v for k, (_, v) in views.items()} }; logs: {[str(p) for i in instances for p in i.logs]}")
        time.sleep(0.05)


def start_mirror(inst: Instance, source, mirror: str, topic: str) -> None:
    """Creates `mirror` and starts `topic` through `inst` (active, or a standby handing over)."""
    status, r = call(inst.proxy, "POST", "/v1/mirrors", {"name": mirror, "configs": {"bootstrap.servers": source.bootstrap}})
    assert status == 201, f"mirror {mirror} created through {inst.instance_id}: {status} {r}"
    status, r = call(inst.proxy, "POST", f"/v1/mirrors/{mirror}/start", {"topics": [topic]})
    assert status == 200 and r["results"][0]["error_code"] == 0, f"{topic} started through {inst.instance_id}: {status} {r}"


def partition_states(inst: Instance, mirror: str, topic: str) -> list[tuple[int, str]]:
    status, body = call(inst.proxy, "GET", f"/v1/mirrors/{mirror}")
    assert status == 200, f"describe {mirror} through {inst.instance_id}: {status} {body}"
    topics = [t for t in body["topics"] if t["topic"] == topic]
    return sorted((p["partition"], p["state"]) for t in topics for p in t["partitions"])


def lists_topic(inst: Instance, mirror: str, topic: str) -> bool:
    status, body = call(inst.proxy, "GET", "/v1/mirrors")
    return status == 200 and any(m["name"] == mirror and topic in m["topics"] for m in body["mirrors"])


def compressed_data(source, topic: str) -> None:
    for i, codec in enumerate(["gzip", "snappy", "lz4", "zstd"]):
        produce_plain(source.bootstrap, topic, 80, start=i * 80, **{"compression.type": codec})
    produce_transactions(source.bootstrap, topic)  # committed and aborted: markers and aborted data become fillers


def assert_same_log(source, destination, topic: str, partitions: int, context: str) -> None:
    """The destination holds the source's committed records at identical offsets (keys, values,
    headers, timestamps) and fillers only where the source has a marker or aborted data."""
    committed = {(r[0], r[1]): r for r in read_all(source.bootstrap, topic, partitions, "read_committed")}
    dst = {(r[0], r[1]): r for r in read_all(destination.bootstrap, topic, partitions, "read_uncommitted")}
    for p, o in sorted(set(committed) | set(dst)):
        want, got = committed.get((p, o)), dst.get((p, o))
        if got is not None and got[2] == FILLER_KEY:
            # No committed record there: the source holds a transaction marker or aborted data.
            assert want is None, f"{topic} partition {p} offset {o}: a filler where the source has committed record {want} ({context})"
            continue
        assert got == want, f"{topic} partition {p} offset {o}: destination {got} != source {want} ({context})"
    src_ends, dst_ends = high_watermarks(source.bootstrap, topic, partitions), high_watermarks(destination.bootstrap, topic, partitions)
    for p in range(partitions):
        assert dst_ends[p] == src_ends[p], f"{topic} partition {p}: destination ends at offset {dst_ends[p]}, source at {src_ends[p]} ({context})"
    assert committed, f"{topic}: the source has data ({context})"


def test_exactly_one_instance_is_active_and_every_instance_enforces_the_mirror(clusters, workdir):
    source, destination = clusters
    topic, mirror, partitions = unique("ha-enforce"), unique("ham"), 4
    create(source.bootstrap, topic, partitions)
    compressed_data(source, topic)
    expected = read_all(source.bootstrap, topic, partitions, "read_committed")
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
            "the destination log holds fillers (the premise of the masking check)"
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
            assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
                f"a produce to mirror topic {topic} through {inst.instance_id} ({'active' if inst is active else 'standby'}) is refused with TOPIC_AUTHORIZATION_FAILED, got {err}"
            for isolation in ("read_committed", "read_uncommitted"):
                got = read_all(inst.bootstrap, topic, partitions, isolation)
                fillers = [(r[0], r[1]) for r in got if r[2] == FILLER_KEY]
                assert not fillers, f"fillers reached a consumer of {inst.instance_id} ({isolation}) at (partition, offset) {fillers[:5]}"
                assert got == expected, f"through {inst.instance_id} ({isolation}) consumers see exactly the source's committed records"
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


def cli_describe_engine(inst, mirror: str) -> dict:
    """The `engine` entry of `mirrors --describe --output json` through instance `inst`."""
    out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", inst.bootstrap, "--describe", "--mirror", mirror, "--output", "json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"describe through {inst.instance_id} failed ({out.returncode}): {out.stderr}"
    engine = json.loads(out.stdout).get("engine")
    assert engine is not None, f"describe through {inst.instance_id} carries no engine identity: {out.stdout[:500]}"
    return engine


class SourceLoad:
    """Continuous source load: compressed records from idempotent producers and transactions, a
    third of them aborted, until stopped; every delivery must succeed."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, seed: int):
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rng = random.Random(seed)
        self.done = threading.Event()
        self.errors: list = []
        self.records = 0
        self.transactions = {"committed": 0, "aborted": 0}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, _msg):
        if err is not None:
            self.errors.append(err)

    def _run(self):
        producers = [Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 20, "compression.type": c})
                     for c in ("lz4", "zstd", "gzip", "snappy")]
        tx = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": unique("ha-load-tx"), "compression.type": "zstd"})
        tx.init_transactions(30)
        i = 0
        try:
            while not self.done.is_set():
                p = producers[i % len(producers)]
                for _ in range(10):
                    p.produce(self.topic, key=f"k{i % 17}".encode(), value=f"load-{i}-".encode() * (1 + i % 4),
                              partition=self.rng.randrange(self.partitions), headers=[("n", str(i).encode())], on_delivery=self._delivered)
                    i += 1
                    self.records += 1
                p.poll(0)
                if i % 200 == 0:
                    tx.begin_transaction()
                    for j in range(6):
                        tx.produce(self.topic, key=b"tx", value=f"tx-{i}-{j}".encode(), partition=j % self.partitions)
                    if self.rng.random() < 1 / 3:
                        tx.abort_transaction(30)
                        self.transactions["aborted"] += 1
                    else:
                        tx.commit_transaction(30)
                        self.transactions["committed"] += 1
                time.sleep(0.05)
        except Exception as e:  # noqa: BLE001  (reported by stop())
            self.errors.append(e)
        finally:
            for p in producers:
                if p.flush(60) != 0:
                    self.errors.append("records left undelivered at the end")

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.done.set()
        self.thread.join(120)
        assert not self.thread.is_alive(), "the load thread finished"
        assert not self.errors, f"the source load never failed: {self.errors[:5]}"


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def test_chaos_killing_and_freezing_the_active_keeps_the_mirror_identical_to_the_source(clusters, workdir):
    source, destination = clusters
    seed = int(os.environ.get("KMP_CHAOS_SEED", random.randrange(1 << 31)))
    print(f"\nchaos seed {seed} (replay with KMP_CHAOS_SEED={seed}), {CHAOS_SECONDS:.0f}s")
    rng = random.Random(seed)
    topic, mirror, partitions = unique("ha-chaos"), unique("hac"), 4
    create(source.bootstrap, topic, partitions)
    compressed_data(source, topic)
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
            while time.time() < chaos_end:
                time.sleep(rng.uniform(3, 6))
                victim, view = wait_one_active(instances, f"one active instance before the next event ({ctx})", TAKEOVER_BOUND_S)
                generation = view[2]
                action = rng.choice(["kill", "freeze"])
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
        finally:
            load.stop()
        assert takeovers, f"the chaos made at least one takeover ({ctx})"
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
        assert load.transactions["aborted"] > 0, f"the load aborted transactions (fillers on the destination) ({ctx}): {load.transactions}"


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
                assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, f"before {inst.instance_id} sees the stop it refuses as before: {err}"
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
