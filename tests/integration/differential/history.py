"""Histories and their seeded generator.

A history is plain JSON-able data, so a failing one can be printed, committed as a regression
case (``regressions.json``) and replayed without the generator:

    {"seed": 7,
     "topics": [{"kind": "plain", "partitions": 2, "config": {...}}, ...],
     "txn_producers": [{"codec": "zstd", "linger_ms": 20, "batch_size": 16384}, ...],
     "shift_prefix_from": 100000,        (only in histories whose mirror shifts, see below)
     "ops": [{"op": "produce", "topic": 0, ...}, {"op": "start", "topic": 0}, ...]}

Topics are referred to by index (names are made unique per run by the runner). Offsets are never
in the history: a DeleteRecords says *where* (a fraction of the log, or inside the last batch
produced to that partition) and the executor resolves it, so a history stays meaningful on any
cluster. ``generate(seed)`` only uses ``random.Random(seed)``: the same seed gives the same
history. The generator keeps its own view of the state (started, paused, open transactions,
partition counts, a destination broker down) so every history is valid, and it ends every history
in a state that must converge: transactions closed, the broker back, every topic started and
resumed. The expensive operations (proxy and broker kills, compaction, time retention, partitions
added) are enabled for a subset of the seeds only and are likely until used once in a history.

Shifted prefixes (``shift_prefix_from``, docs/mirroring.md "Shifted prefixes"): about half of the
histories (all of them with ``KMP_DIFF_FORCE_SHIFT=1`` in the environment, to stress the shifted
path) have a mirror that sets ``shift_prefix_from`` to a drawn threshold (10^3..10^7). Those
histories also get ``jump`` operations *before* their topic is started (the mirror creates the
destination topic then, and decides per partition): on some partitions of at least the threshold
(those partitions are shifted: Δ = their source log start), on others of a tenth of it or less, or
none (those are filled) — both in one topic when it has several partitions, the exact threshold
itself sometimes, as the first operation (a log start equal to it). Some shifted partitions get
another jump after the start (filled by the engine on top of the fixed Δ), sometimes with a
``catch_up`` (a comparison) after it. These draws come from their own ``random.Random`` (derived
from the seed), so they leave the rest of a seed's history as it was: a seed whose mirror does not
shift generates exactly what it generated before shifts existed, and a shifted seed is that
history plus the inserted jumps. A stored history without ``shift_prefix_from`` (every
regression recorded before) means a mirror without it: every prefix filled.

Operations (``op`` and its parameters):

* ``produce``        topic, partitions (list), count, codec, linger_ms, batch_size, idempotent,
                     content (a dict for ``content.records``); acks=all
* ``txn_begin``      slot            — a transactional producer (``txn_producers[slot]``) begins
* ``txn_produce``    slot, topic, partitions, count, content
* ``txn_end``        slot, commit
* ``delete_records`` topic, partition, where ("fraction" | "last_batch"), fraction
* ``jump``           topic, partition, offsets — append that many empty records (raw gzip batches of
                     up to 100,000, tests/harness/prefix.py) and DeleteRecords to the log end: the
                     log start jumps by ``offsets`` (10^3..10^8), before or while the mirror copies
                     (a retention prefix, or one deleted ahead of the engine); not on compacted topics
* ``compact``        topic           — roll the segments and wait until the source cleaner ran
* ``time_retention`` topic           — roll, retention.ms=1 until the old segments are gone, back
* ``add_partitions`` topic, add
* ``start``          topic           — StartMirrorTopics
* ``pause`` / ``resume``  topic
* ``catch_up``                       — wait until the mirror has what the source committed
* ``kill_proxy``                     — ``kill -9`` the proxy and start it again
* ``kill_dest_leader`` topic, partition — SIGKILL the destination broker leading it
* ``restart_dest_broker``            — start that broker again
"""

from __future__ import annotations

import json
import os
import random

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# ``jump`` sizes (log-uniform 10^3..10^8) and how likely each is: the largest cost about 10 s to
# make and, filled, 13 s to fill.
JUMP_SIZES = [1_000, 30_000, 100_000, 1_000_000, 10_000_000, 100_000_000]
JUMP_WEIGHTS = [3, 3, 3, 3, 2, 1]
# ``shift_prefix_from`` of the histories whose mirror shifts, and how likely each is. 1000 is
# below what a few produces and a DeleteRecords reach: such a partition is shifted without a jump,
# often with its log start inside a batch.
SHIFT_THRESHOLDS = [1_000, 30_000, 100_000, 1_000_000, 10_000_000]
SHIFT_THRESHOLD_WEIGHTS = [2, 2, 2, 3, 2]
# Every generated history's mirror shifts (the shift draws stay the same; only "whether" is forced).
FORCE_SHIFT_ENV = "KMP_DIFF_FORCE_SHIFT"
MAX_PARTITIONS = 4
MAX_TXN_SLOTS = 2

# Topic configs on the source. The destination never copies the cleanup/retention/segment settings
# (see runner.MIRROR_CONFIGS): its own cleaner or retention would race with the comparison.
COMPACT_CONFIG = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                  "min.compaction.lag.ms": "0", "delete.retention.ms": "100"}
RETENTION_SEGMENT_MS = 300
# Some plain source topics use message.timestamp.type=LogAppendTime (consumers must see the
# source's append time through the proxy too).
LOG_APPEND_TIME_TOPICS = True


def topic_spec(rng: random.Random, kind: str) -> dict:
    partitions = rng.choice([1, 1, 2, 2, 3])
    if kind == "compact":
        config = dict(COMPACT_CONFIG)
        if rng.random() < 0.5:
            config["cleanup.policy"] = "compact,delete"  # DeleteRecords is allowed on these
        return {"kind": kind, "partitions": partitions, "config": config}
    if kind == "retention":
        return {"kind": kind, "partitions": partitions, "config": {"segment.ms": str(RETENTION_SEGMENT_MS)}}
    log_append_time = rng.random() < 0.15  # drawn either way: switching the kind off changes nothing else
    config = {"message.timestamp.type": "LogAppendTime"} if log_append_time and LOG_APPEND_TIME_TOPICS else {}
    return {"kind": kind, "partitions": partitions, "config": config}


def content_params(rng: random.Random, kind: str) -> dict:
    """How the records of one produce look (``content.records`` derives them)."""
    return {
        "rng": rng.randrange(1 << 30),
        "null_keys": 0.0 if kind == "compact" else rng.choice([0.0, 0.0, 0.2, 0.5]),
        "null_values": rng.choice([0.0, 0.0, 0.1, 0.3]),
        "key_space": rng.choice([5, 20, 1000]) if kind == "compact" else 1000,
        "headers": rng.choice([0.0, 0.5, 1.0]),
        "value_size": rng.choice([0, 10, 100, 100, 500, 2000]),
        # Explicit, older timestamps only where segment rolling and retention do not look at them.
        "past_timestamps": kind == "plain" and rng.random() < 0.3,
    }


class _State:
    """The generator's view of the system while it writes a history."""

    def __init__(self, topics: list[dict]):
        self.partitions = [t["partitions"] for t in topics]
        self.kinds = [t["kind"] for t in topics]
        self.compact_only = [t["config"].get("cleanup.policy") == "compact" for t in topics]
        self.started: set[int] = set()
        self.paused: set[int] = set()
        self.open_txns: set[int] = set()
        self.broker_down = False
        self.counts = {"time_retention": 0, "compact": 0, "kill_proxy": 0, "kill_dest_leader": 0, "add_partitions": 0, "jump": 0}


def _partitions(rng: random.Random, n: int) -> list[int]:
    if n == 1 or rng.random() < 0.6:
        return [rng.randrange(n)]
    return sorted(rng.sample(range(n), rng.randint(2, n)))


def _produce(rng: random.Random, st: _State, topic: int) -> dict:
    return {"op": "produce", "topic": topic, "partitions": _partitions(rng, st.partitions[topic]),
            "count": rng.choice([1, 5, 30, 100, 200, 300]), "codec": rng.choice(CODECS),
            "linger_ms": rng.choice([0, 5, 50]), "batch_size": rng.choice([2000, 16384, 1000000]),
            "idempotent": rng.random() < 0.7, "content": content_params(rng, st.kinds[topic])}


def _candidates(rng: random.Random, st: _State, features: dict) -> list[tuple[int, dict]]:
    """(weight, op) for every operation valid now."""
    n = len(st.partitions)
    topic = rng.randrange(n)
    c: list[tuple[int, dict]] = [(30, _produce(rng, st, topic))]
    slot = rng.randrange(MAX_TXN_SLOTS)
    if slot not in st.open_txns:
        c.append((6, {"op": "txn_begin", "slot": slot}))
    if st.open_txns:
        s = rng.choice(sorted(st.open_txns))
        c.append((20, {"op": "txn_produce", "slot": s, "topic": topic, "partitions": _partitions(rng, st.partitions[topic]),
                       "count": rng.choice([1, 10, 50, 150]), "content": content_params(rng, st.kinds[topic])}))
        c.append((5, {"op": "txn_end", "slot": s, "commit": rng.random() < 0.6}))
    if not st.compact_only[topic]:
        where = rng.choice(["fraction", "last_batch", "last_batch"])
        c.append((10, {"op": "delete_records", "topic": topic, "partition": rng.randrange(st.partitions[topic]),
                       "where": where, "fraction": round(rng.random() if rng.random() < 0.9 else 1.0, 3)}))
    unstarted = sorted(set(range(n)) - st.started)
    if unstarted:
        c.append((8, {"op": "start", "topic": rng.choice(unstarted)}))
    running = sorted(st.started - st.paused)
    if running:
        c.append((4, {"op": "pause", "topic": rng.choice(running)}))
        c.append((5, {"op": "catch_up"}))
    if st.paused:
        c.append((5, {"op": "resume", "topic": rng.choice(sorted(st.paused))}))
    # A seed's expensive operations: likely until used once, rarer afterwards.
    def boost(kind: str) -> int:
        return 12 if st.counts[kind] == 0 else 3

    if features["jump"] and st.kinds[topic] != "compact" and st.counts["jump"] < 2:
        offsets = rng.choices(JUMP_SIZES, weights=JUMP_WEIGHTS)[0]
        c.append((boost("jump"), {"op": "jump", "topic": topic, "partition": rng.randrange(st.partitions[topic]), "offsets": offsets}))
    if features["kill_proxy"] and st.counts["kill_proxy"] < 2:
        c.append((boost("kill_proxy"), {"op": "kill_proxy"}))
    if features["kill_broker"] and not st.broker_down and st.counts["kill_dest_leader"] < 1 and st.started:
        t = rng.choice(sorted(st.started))
        c.append((boost("kill_dest_leader"), {"op": "kill_dest_leader", "topic": t, "partition": rng.randrange(st.partitions[t])}))
    if st.broker_down:
        c.append((6, {"op": "restart_dest_broker"}))
    if features["add_partitions"] and st.partitions[topic] < MAX_PARTITIONS and st.counts["add_partitions"] < 2:
        c.append((boost("add_partitions"), {"op": "add_partitions", "topic": topic, "add": rng.randint(1, MAX_PARTITIONS - st.partitions[topic])}))
    for kind, op, ok in (("retention", "time_retention", True), ("compact", "compact", not st.open_txns)):
        of_kind = [i for i, k in enumerate(st.kinds) if k == kind]
        if of_kind and ok and st.counts[op] < 2:
            c.append((boost(op), {"op": op, "topic": rng.choice(of_kind)}))
    return c


def _apply(st: _State, op: dict) -> None:
    kind = op["op"]
    if kind == "txn_begin":
        st.open_txns.add(op["slot"])
    elif kind == "txn_end":
        st.open_txns.discard(op["slot"])
    elif kind == "start":
        st.started.add(op["topic"])
    elif kind == "pause":
        st.paused.add(op["topic"])
    elif kind == "resume":
        st.paused.discard(op["topic"])
    elif kind == "kill_dest_leader":
        st.broker_down = True
    elif kind == "restart_dest_broker":
        st.broker_down = False
    elif kind == "add_partitions":
        st.partitions[op["topic"]] += op["add"]
    if kind in st.counts:
        st.counts[kind] += 1


def generate(seed: int) -> dict:
    """The history of ``seed``; the same seed always gives the same history."""
    rng = random.Random(seed)
    kinds = ["plain"]
    for _ in range(rng.choice([0, 1, 1, 2])):
        kinds.append(rng.choices(["plain", "compact", "retention"], weights=[4, 3, 3])[0])
    rng.shuffle(kinds)
    topics = [topic_spec(rng, k) for k in kinds]
    # Expensive operations appear in a subset of the seeds only (CI time).
    features = {"kill_proxy": rng.random() < 0.35, "kill_broker": rng.random() < 0.12, "add_partitions": rng.random() < 0.25,
                "jump": rng.random() < 0.4}
    txn_producers = [{"codec": rng.choice(CODECS), "linger_ms": rng.choice([0, 5, 50]), "batch_size": rng.choice([2000, 16384, 1000000])}
                     for _ in range(MAX_TXN_SLOTS)]
    st = _State(topics)
    ops: list[dict] = []
    if rng.random() < 0.4:  # the mirror starts before any data: the live case from the first record
        first = {"op": "start", "topic": rng.randrange(len(topics))}
        ops.append(first)
        _apply(st, first)
    for _ in range(rng.randint(6, 16)):
        weighted = _candidates(rng, st, features)
        op = rng.choices([o for _, o in weighted], weights=[w for w, _ in weighted])[0]
        ops.append(op)
        _apply(st, op)
    # Converge: close transactions, bring the broker back, start and resume everything, and
    # sometimes write more once everything runs again.
    tail = [{"op": "txn_end", "slot": s, "commit": rng.random() < 0.6} for s in sorted(st.open_txns)]
    if st.broker_down:
        tail.append({"op": "restart_dest_broker"})
    tail += [{"op": "start", "topic": t} for t in sorted(set(range(len(topics))) - st.started)]
    tail += [{"op": "resume", "topic": t} for t in sorted(st.paused)]
    for op in tail:
        ops.append(op)
        _apply(st, op)
    if rng.random() < 0.5:
        ops.append(_produce(rng, st, rng.randrange(len(topics))))
    history = {"seed": seed, "topics": topics, "txn_producers": txn_producers, "ops": ops}
    _draw_shift(seed, history, force_shift())
    return history


def force_shift() -> bool:
    """Whether ``KMP_DIFF_FORCE_SHIFT`` asks every generated history's mirror to shift."""
    return os.environ.get(FORCE_SHIFT_ENV, "").strip() not in ("", "0")


def _draw_shift(seed: int, history: dict, force: bool) -> None:
    """Makes ``history``'s mirror shift (``shift_prefix_from``) for about half of the seeds (every
    seed with ``force``), with jumps inserted before and after its topics' starts. Its own
    ``random.Random``: the draws are the same whether shifting is forced or not, and the rest of
    the history is what ``generate`` made without it."""
    rng = random.Random(seed * 1_000_003 + 38)
    shift = rng.random() < 0.5
    threshold = rng.choices(SHIFT_THRESHOLDS, weights=SHIFT_THRESHOLD_WEIGHTS)[0]
    if not (shift or force):
        return
    topics, ops = history["topics"], history["ops"]
    # (position in the original ops, order, op): inserted before the op at that position.
    inserts: list[tuple[int, int, dict]] = []
    later_jumps = 0
    jumpable = [t for t, spec in enumerate(topics) if spec["kind"] != "compact"]  # DeleteRecords needs cleanup.policy delete
    shifted_any = False
    for n, t in enumerate(jumpable):
        parts = topics[t]["partitions"]
        first_start = next(i for i, op in enumerate(ops) if op["op"] == "start" and op["topic"] == t)
        # The last topic that could get a shifted partition gets one if none did before.
        if rng.random() < 0.3 and (shifted_any or n < len(jumpable) - 1):
            continue
        above = sorted(rng.sample(range(parts), rng.randint(1, max(1, parts - 1))))
        shifted_any = True
        for p in range(parts):
            if p in above:
                sizes = [threshold] + [s for s in JUMP_SIZES if s > threshold]
                weights = [4] + [w for s, w in zip(JUMP_SIZES, JUMP_WEIGHTS) if s > threshold]
                size = rng.choices(sizes, weights=weights)[0]
                # The exact threshold as the very first operation: a log start equal to it.
                at = 0 if size == threshold and rng.random() < 0.5 else rng.randint(0, first_start)
            else:
                below = [s for s in JUMP_SIZES if s * 10 <= threshold]
                if not below or rng.random() < 0.35:
                    continue  # no jump: filled whatever else the history does to it
                size, at = rng.choice(below), rng.randint(0, first_start)
            inserts.append((at, len(inserts), {"op": "jump", "topic": t, "partition": p, "offsets": size}))
        for p in above:
            if later_jumps < 2 and rng.random() < 0.6:
                later_jumps += 1
                at = rng.randint(first_start + 1, len(ops))
                size = rng.choices(JUMP_SIZES[:5], weights=[3, 3, 3, 2, 1])[0]
                inserts.append((at, len(inserts), {"op": "jump", "topic": t, "partition": p, "offsets": size}))
                if rng.random() < 0.5:
                    inserts.append((at, len(inserts), {"op": "catch_up"}))
    merged: list[dict] = []
    pending = sorted(inserts, key=lambda x: (x[0], x[1]))
    k = 0
    for i, op in enumerate(ops + [None]):
        while k < len(pending) and pending[k][0] == i:
            merged.append(pending[k][2])
            k += 1
        if op is not None:
            merged.append(op)
    history["ops"] = merged
    history["shift_prefix_from"] = threshold


def expensive(history: dict) -> list[str]:
    """The expensive operations a history uses (for the per-seed summary line)."""
    kinds = {op["op"] for op in history["ops"]}
    return sorted(kinds & {"kill_proxy", "kill_dest_leader", "time_retention", "compact", "add_partitions", "jump"})


def describe_op(i: int, op: dict) -> str:
    params = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in op.items() if k != "op")
    return f"{i:3d}. {op['op']}({params})"


def shift_setting(history: dict) -> str:
    """The history's mirror shift setting, as the reports show it."""
    n = history.get("shift_prefix_from")
    if n is None:
        return "shift_prefix_from unset (every prefix filled)"
    return f"shift_prefix_from = {n} (a partition whose source log start is at least {n} when its topic is started is shifted)"


def format_history(history: dict) -> str:
    lines = [f"seed {history['seed']}", f"  mirror: {shift_setting(history)}"]
    for i, t in enumerate(history["topics"]):
        lines.append(f"  topic {i}: {t['kind']}, {t['partitions']} partition(s), config {json.dumps(t['config'], sort_keys=True)}")
    for i, p in enumerate(history["txn_producers"]):
        lines.append(f"  transactional producer {i}: {json.dumps(p, sort_keys=True)}")
    lines += ["  " + describe_op(i, op) for i, op in enumerate(history["ops"])]
    return "\n".join(lines)
