"""Mirror helpers shared by the real-Kafka test modules (moved out of test_mirror_engine,
test_mirror_faults, test_mirror_failover, test_mirror_cli, test_mirror_state, test_mirror_progress and
test_broker_changes so that no test module imports another): topics on a cluster, producing plain
and transactional data, reading a topic whole, waiting until a mirror caught up, a proxy mirroring
topics from a config file, the admin REST API and the `mirrors` CLI."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kmp_common import PROXY_BIN, ProxyProcess, unique


# ---- from test_mirror_engine.py ----------------------------------------------

FILLER_KEY = b"__kmp_filler"
CATCH_UP_TIMEOUT_S = 90


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("hw")})
    out = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    c.close()
    return out


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """(partition, offset, key, value, headers, timestamp) of every record from each partition's
    log start to its end, fillers included. Reading starts at the log start, not at offset 0: once
    the log start moved, 0 is out of range and the consumer would silently reset to the end and
    read nothing. An offset reset or any error other than end-of-partition fails the read."""
    ends = high_watermarks(bootstrap, topic, partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "isolation.level": isolation,
                  "enable.partition.eof": True, "enable.auto.commit": False, "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, done, deadline = [], {p for p in range(partitions) if ends[p] == 0}, time.time() + 60
    while len(done) < partitions and time.time() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, f"{topic}-{m.partition()} via {bootstrap} ({isolation}): {m.error()}"
                done.add(m.partition())
                continue
            out.append((m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]))
    c.close()
    assert len(done) == partitions, f"{topic}: partitions {sorted(set(range(partitions)) - done)} not read to their end {ends} within 60 s ({isolation})"
    return sorted(out)


def high_watermarks_or_none(bootstrap: str, topic: str, partitions: int) -> list[int] | None:
    try:
        return high_watermarks(bootstrap, topic, partitions)
    except KafkaException:  # the destination topic is not created yet
        return None


def wait_caught_up(source: str, destination: str, topics: dict[str, int]) -> None:
    deadline = time.time() + CATCH_UP_TIMEOUT_S
    while True:
        pending = {t: (high_watermarks(source, t, n), high_watermarks_or_none(destination, t, n)) for t, n in topics.items()}
        pending = {t: v for t, v in pending.items() if v[0] != v[1]}
        if not pending:
            return
        assert time.time() < deadline, f"destination caught up with the source within {CATCH_UP_TIMEOUT_S}s: {pending}"
        time.sleep(0.5)


def wait_equal_ends(source: str, via: str, topic: str, partitions: int, timeout: float = CATCH_UP_TIMEOUT_S) -> list[int]:
    """Waits until ``via`` (a proxy, whose offsets may be shifted) shows the source's high
    watermarks; returns them."""
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        want, got = high_watermarks(source, topic, partitions), high_watermarks_or_none(via, topic, partitions)
        if want == got:
            return got
        last = (want, got)
        time.sleep(0.5)
    raise AssertionError(f"the proxy's high watermarks reached the source's within {timeout:.0f}s: (source, proxy) = {last}")


def produce_plain(bootstrap: str, topic: str, n: int, start: int = 0, **conf) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for i in range(start, start + n):
        key = None if i % 7 == 0 else f"key-{i % 13}".encode()
        value = None if i % 11 == 0 else f"value-{i}".encode() * (1 + i % 5)
        p.produce(topic, key=key, value=value, headers=[("h", f"{i}".encode()), ("empty", b"")] if i % 3 else None)
    assert p.flush(30) == 0


def produce_transactions(bootstrap: str, topic: str) -> None:
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("mirror-tx")})
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    tx.init_transactions(30)
    for round_no in range(6):
        tx.begin_transaction()
        for i in range(8):
            tx.produce(topic, key=f"t{round_no}-{i}".encode(), value=f"txn-{round_no}-{i}".encode(), partition=i % 2)
            if i == 3:
                plain.produce(topic, value=f"between-{round_no}".encode(), partition=round_no % 2)
                plain.flush(30)
        tx.flush(30)
        (tx.abort_transaction if round_no % 3 == 1 else tx.commit_transaction)(30)


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """An offsets-only commit of `group` for `topic`'s partitions (no membership), as an
    application using assign() makes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """`group`'s committed offsets of `topic`'s partitions (OffsetFetch; no membership)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        c.close()


def strip_fillers(records: list[tuple]) -> list[tuple]:
    return [r for r in records if r[2] != FILLER_KEY]


# ---- from test_mirror_faults.py ----------------------------------------------

def mirror_config(workdir, source, topics, name="faults", extra: str = ""):
    """A config file with one mirror of ``topics``; ``extra``: more TOML lines of its definition."""
    path = workdir / f"{name}-{unique('cfg')}.toml"
    listed = ", ".join(f'"{t}"' for t in topics)
    servers = ", ".join(f'"{s}"' for s in source.bootstrap.split(","))
    path.write_text(f'[[mirrors]]\nname = "{name}"\nsource_bootstrap_servers = [{servers}]\ntopics = [{listed}]\n{extra}')
    return ["--config", str(path)]


@contextmanager
def mirroring_proxy(source, destination, workdir, topics, extra: str = ""):
    """The proxy in front of ``destination`` mirroring ``topics`` (``extra``: more TOML lines of
    the mirror's definition); must stop cleanly (exit 0)."""
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, topics, extra=extra)).start()
    try:
        yield proxy
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


def assert_equal(source, destination, topic, partitions):
    """The destination holds the source's records at both isolation levels (fillers aside): aborted
    transactions' records too (read_uncommitted), and only what the source's read_committed readers
    see (read_committed); and the same high watermarks."""
    for isolation in ("read_uncommitted", "read_committed"):
        src = read_all(source.bootstrap, topic, partitions, isolation)
        dst = strip_fillers(read_all(destination.bootstrap, topic, partitions, isolation))
        assert dst == src, f"{topic}: destination equals the source record by record, {isolation} ({len(dst)} vs {len(src)} records)"
    assert high_watermarks(destination.bootstrap, topic, partitions) == high_watermarks(source.bootstrap, topic, partitions)


# ---- from test_mirror_failover.py --------------------------------------------

def call(proxy, method: str, path: str, body: dict | None = None, host: str = "127.0.0.1", token: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(f"http://{host}:{proxy.admin_port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def call_retrying(proxy, method: str, path: str, body: dict | None = None, timeout: float = 60,
                  log=None) -> tuple[int, dict, list[str]]:
    """A management call sent again, as an operator would, while it is answered retriably: the
    elected engine was demoted because a destination broker it relied on went away
    (COORDINATOR_NOT_AVAILABLE, 15), its hand-over timed out (REQUEST_TIMED_OUT, 7) or a new term
    is loading its stored state (HTTP 503) — for up to ``timeout`` seconds. Returns the last
    answer and the retriable answers before it (each also given to ``log``)."""
    deadline = time.time() + timeout
    retries: list[str] = []
    while True:
        status, r = call(proxy, method, path, body)
        codes = {r.get("error_code")} | {x.get("error_code") for x in r.get("results", [])} if isinstance(r, dict) else set()
        retriable = method != "GET" and (status == 503 or codes & {7, 15})
        if not retriable or time.time() > deadline:
            return status, r, retries
        retries.append(f"HTTP {status} {r}")
        if log:
            log(f"{method} {path}: retriable answer HTTP {status} {r}; retrying")
        time.sleep(0.5)


def describe(proxy, mirror: str, topic: str) -> dict:
    status, body = call(proxy, "GET", f"/v1/mirrors/{mirror}")
    assert status == 200, body
    return next(t for t in body["topics"] if t["topic"] == topic)


def states(proxy, mirror, topic) -> list[str]:
    return [p["state"] for p in sorted(describe(proxy, mirror, topic)["partitions"], key=lambda p: p["partition"])]


def produce_one(bootstrap: str, topic: str, partition: int) -> tuple[KafkaError | None, int]:
    p = Producer({"bootstrap.servers": bootstrap})
    out = {}
    p.produce(topic, key=b"after", value=b"failover", partition=partition, on_delivery=lambda err, msg: out.update(err=err, offset=msg.offset()))
    p.flush(60)
    return out.get("err"), out.get("offset", -1)


# ---- from test_mirror_cli.py -------------------------------------------------

def cli(proxy, *args: str) -> tuple[int, str, str]:
    out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, *args], capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout, out.stderr


def cli_json(proxy, *args: str) -> tuple[int, dict]:
    code, out, err = cli(proxy, *args, "--output", "json")
    assert out.strip(), f"no output (exit {code}): {err}"
    return code, json.loads(out)


def mirror_through_cli(proxy, source, destination, mirror: str, props, topic: str) -> None:
    """Creates `mirror` (source settings in `props`) and starts `topic` with the CLI, then waits
    until the destination caught up."""
    code, r = cli_json(proxy, "--create", "--mirror", mirror, "--mirror-config", str(props))
    assert code == 0, f"mirror created: {r}"
    code, r = cli_json(proxy, "--start", "--mirror", mirror, "--topics", topic)
    assert code == 0, f"topic started: {r}"
    wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})


# ---- from test_mirror_state.py -----------------------------------------------

def wait_for_metric_line(proxy, prefix: str, topic: str, suffix: str, count: int, timeout: float = 60) -> list[str]:
    deadline, lines = time.time() + timeout, []
    while time.time() < deadline:
        _, text = proxy.http("/metrics")
        lines = [l for l in text.splitlines() if l.startswith(prefix) and f'topic="{topic}"' in l and l.endswith(suffix)]
        if len(lines) >= count:
            break
        time.sleep(0.3)
    return lines


def wait_for_records_metric(proxy, mirror: str, topic: str, partitions: int, expected: int, timeout: float = 10) -> float:
    """Sum of kmp_mirror_records over the topic's partitions once it reaches ``expected`` (the
    destination's acknowledgement can be seen by a reader a moment before the engine counts it)."""
    deadline = time.time() + timeout
    while True:
        try:
            total = sum(proxy.metric("kmp_mirror_records", f'mirror="{mirror}",topic="{topic}",partition="{p}"') for p in range(partitions))
        except AssertionError:
            # A partition's series appears once the engine has started its task: absent is "not
            # yet" until the deadline, and a failure (naming the missing series) after it.
            if time.time() > deadline:
                raise
            time.sleep(0.2)
            continue
        if total == expected or time.time() > deadline:
            return total
        time.sleep(0.2)


# ---- from test_mirror_progress.py --------------------------------------------

def produce_small_batches(bootstrap: str, topic: str, n: int, partitions: int = 2) -> None:
    """`n` 40-byte records in batches of about 1 KiB (so a 1 KiB Fetch returns one batch)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1024, "compression.type": "none"})
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=b"%040d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "every record produced"


# ---- from test_broker_changes.py ---------------------------------------------

def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return md.topics[topic].partitions[partition].leader
