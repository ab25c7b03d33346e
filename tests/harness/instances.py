"""Several role-auto proxies in front of one destination (moved out of test_engine_takeover.py
so that the HA, forwarding and shared-work modules share them without importing a test module):
``Instance`` (one proxy with a fixed instance id, restartable), ``auto_instances`` (n of them as a
context), the election view from each instance's log and /metrics, a seeded source load, and the
record-for-record comparison of a mirrored log (each isolation level against the same level of the
source)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from contextlib import contextmanager

from confluent_kafka import Producer

from compaction import create_with_compaction_gaps, log_bounds
from kmp_common import PROXY_BIN, ProxyProcess, unique
from mirror import FILLER_KEY, call, produce_plain, produce_transactions, read_all


# ---- from test_engine_takeover.py --------------------------------------------

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


def compressed_data(source, topic: str, partitions: int) -> None:
    """Creates ``topic`` on the source with compaction gaps in every partition (compaction turned
    off again: the only source of fillers on the destination), then writes records in every codec
    and transactions, committed and aborted (replayed on the destination: aborted records copied,
    real markers at the source's offsets)."""
    create_with_compaction_gaps(source.bootstrap, topic, partitions)
    for i, codec in enumerate(["gzip", "snappy", "lz4", "zstd"]):
        produce_plain(source.bootstrap, topic, 80, start=i * 80, **{"compression.type": codec})
    produce_transactions(source.bootstrap, topic)


def assert_same_log(source, destination, topic: str, partitions: int, context: str) -> None:
    """The destination holds the source's records at identical offsets (keys, values, headers,
    timestamps), each isolation level compared with the same level of the source: read_uncommitted
    with aborted transactions' records (replayed and aborted on the destination), read_committed
    without them; fillers (read directly from the destination) only at offsets where the source
    has no record at all (a compaction gap); the same high watermarks and last stable offsets."""
    seen = 0
    for isolation in ("read_uncommitted", "read_committed"):
        src = {(r[0], r[1]): r for r in read_all(source.bootstrap, topic, partitions, isolation)}
        dst = {(r[0], r[1]): r for r in read_all(destination.bootstrap, topic, partitions, isolation)}
        seen += len(src)
        for p, o in sorted(set(src) | set(dst)):
            want, got = src.get((p, o)), dst.get((p, o))
            if got is not None and got[2] == FILLER_KEY:
                # A filler stands for an offset with no source record (a compaction gap): never for
                # a record, aborted ones included, nor for a marker (a real one is written there).
                assert want is None, f"{topic} partition {p} offset {o}: a filler where the source has record {want} ({isolation}, {context})"
                continue
            assert got == want, f"{topic} partition {p} offset {o}: destination {got} != source {want} ({isolation}, {context})"
    src_ends = [hw for _, hw in log_bounds(source.bootstrap, topic, partitions)]
    dst_ends = [hw for _, hw in log_bounds(destination.bootstrap, topic, partitions)]
    assert dst_ends == src_ends, f"{topic}: destination high watermarks {dst_ends}, source {src_ends} ({context})"
    src_stable = [end for _, end in log_bounds(source.bootstrap, topic, partitions, "read_committed")]
    dst_stable = [end for _, end in log_bounds(destination.bootstrap, topic, partitions, "read_committed")]
    assert dst_stable == src_stable, f"{topic}: destination last stable offsets {dst_stable}, source {src_stable} ({context})"
    assert seen, f"{topic}: the source has data ({context})"


def cli_describe_engine(inst, mirror: str) -> dict:
    """The `engine` entry of `mirrors --describe --output json` through instance `inst`."""
    out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", inst.bootstrap, "--describe", "--mirror", mirror, "--output", "json"],
                         capture_output=True, text=True, timeout=60)
    # Exit 1 with the description on stdout when a partition of the mirror has failed (the
    # chaos may fail one on purpose); any other failure is the describe's own.
    described = out.returncode == 0 or (out.returncode == 1 and "partition(s) failed" in out.stderr and "mirror " not in out.stderr)
    assert described, f"describe through {inst.instance_id} failed ({out.returncode}): {out.stderr}"
    engine = json.loads(out.stdout).get("engine")
    assert engine is not None, f"describe through {inst.instance_id} carries no engine identity: {out.stdout[:500]}"
    return engine


class SourceLoad:
    """Continuous source load: compressed records from idempotent producers and transactions, a
    third of them aborted (each with its records delivered first: aborted data on the source,
    replayed and aborted on the destination), until stopped; every delivery must succeed."""

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
                    # Delivered before the transaction ends: an abort would purge records still
                    # queued, whose sequence numbers librdkafka (2.16) had already taken, and the
                    # next transaction's first record on that partition then fails on the source
                    # with OUT_OF_ORDER_SEQUENCE_NUMBER (seen: a marker with no record before it,
                    # then sequence 12 after 10). Flushed, an aborted transaction holds its records
                    # too: aborted data for the mirror to replay.
                    if tx.flush(30) != 0:
                        self.errors.append("transactional records left undelivered before the transaction ended")
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


def chaos_actions(rng):
    """The chaos tests' events, seeded: "kill" and "freeze" once each first (in a seeded order), so
    even the quick tier's short window exercises both, then either at random."""
    first = ["kill", "freeze"]
    rng.shuffle(first)
    yield from first
    while True:
        yield rng.choice(["kill", "freeze"])
