"""Partition-scale benchmark: what mirroring N partitions costs the proxy and the source broker.

    python3 bench/partition_scale_bench.py [--sizes 100,1000,10000] [--idle-seconds 20]
        [--load-mb-s 10] [--load-seconds 20] [--load-record-bytes 1000] [--load-run 10]
        [--broker-heap 2g] [--no-build]
        [--binary new=target/release/kafka-mirror-proxy] [--binary old=/path/to/older/build]
        [--out docs/partition-scale-benchmark.md] [--append]

Starts a 1-broker source and a 1-broker destination KRaft cluster (tests/harness). For each size N
it creates a source topic of N partitions holding ``--records-per-partition`` 200-byte records
each, and for each binary:

1. starts that proxy with a config-file mirror of the topic (its own state topic), and times the
   catch-up (destination high watermarks equal the source's; the engine creates the destination
   topic, from 5,000 partitions in steps);
2. idle, mirroring: over ``--idle-seconds`` measures proxy CPU, source broker CPU, the proxy's
   open file descriptors, RSS and TCP connections to each cluster (from /proc; connections sampled
   every 0.25 s: the most frequent count and the highest, which catches the short-lived connections
   of the periodic metadata sync passes);
3. loaded, mirroring (unless ``--load-mb-s 0``): a librdkafka producer writes
   ``--load-mb-s`` MB/s (10^6 bytes of record values, ``--load-record-bytes`` incompressible
   values, no compression, the partitions in turn with ``--load-run`` consecutive records to each,
   so every partition gets the same share; the producer runs in a child process, the bench only
   measures) for ``--load-seconds``; over that window (first record to the producer's flush) proxy CPU, source
   broker CPU, the proxy's peak RSS, fds and connections (sampled every 0.5 s), the mirror lag
   (source minus destination high watermarks, summed over the partitions, both read together every
   5 s); at the flush the lag once more and then the time until the destination has caught up. The
   achieved rate is what the source's high watermarks grew by over the window;
4. idle, paused: the same topic paused through the REST API, source broker CPU again;
5. loaded, paused (unless ``--load-mb-s 0``): the same producer again with the mirror paused
   (the source's watermarks read every 5 s as in 3.), source broker CPU: what the broker spends
   on the producer alone; then once more with one consumer group (librdkafka, a process of its
   own, joined and at the end of every partition before the window) reading along, which must
   read every record produced: what one consumer of the same data costs the broker;
6. baseline (once per size, no proxy, before 1.): one consumer group (librdkafka) reading the same
   N partitions to their end, then idle for the same window: source broker CPU.

Reported: connections per broker per side, proxy idle CPU (% of a core), and the source broker's
idle overhead (mirroring minus paused) divided by that of the consumer group (group minus the
broker's CPU with nobody reading, the paused figure); under load, proxy CPU and peak RSS, the source
broker's CPU mirroring, paused and with one group reading, the lag during the load and when the
producer stops, and the catch-up time after it.
Every figure is measured; a step that cannot measure its figure fails the run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests"))

from kafka_cluster import KafkaCluster, classpath  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402
from mirror_bench import watermarks  # noqa: E402
from proxy_bench import cpu_seconds, java  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def connections(pid: int, ports: dict[str, set[int]]) -> dict[str, int]:
    """Established TCP connections of ``pid`` to each named set of ports."""
    from kmp_common import established
    return {name: established(pid, ps) for name, ps in ports.items()}


class ScaleCluster(KafkaCluster):
    """The harness cluster with an optional other broker heap (``--broker-heap``, e.g. 2g)."""
    heap: str | None = None

    def _java(self, *args: str) -> list[str]:
        cmd = super()._java(*args)
        if self.heap:
            cmd = [f"-Xmx{self.heap}" if a.startswith("-Xmx") else a for a in cmd]
        return cmd


def broker_pid(cluster: KafkaCluster) -> int:
    return next(iter(cluster.procs.values())).pid


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000, "compression.type": "lz4"})
    # A topic grown with --alter reaches the broker's metadata a moment later: produce() to a
    # partition the client's metadata does not have yet fails with "Unknown partition".
    deadline = time.time() + 120
    while True:
        meta = p.list_topics(topic, timeout=10).topics.get(topic)
        known = len(meta.partitions) if meta is not None and meta.error is None else 0
        if known == partitions:
            break
        assert time.time() < deadline, f"{topic}: the source lists {known} of {partitions} partitions after 120 s"
        time.sleep(0.5)
    value = b"x" * 200
    for i in range(per_partition):
        for part in range(partitions):
            while True:
                try:
                    p.produce(topic, value=value, partition=part)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    assert p.flush(300) == 0, "source filled"


def admin_client(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def _hw_request(admin, topic: str, partitions: int) -> dict:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec
    return admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}, request_timeout=60)


def _hw_collect(futures: dict, partitions: int) -> list[int] | None:
    from confluent_kafka import KafkaException
    try:
        got = {tp.partition: f.result().offset for tp, f in futures.items()}
    except KafkaException:
        return None
    return [got[p] for p in range(partitions)]


def high_watermarks(bootstrap: str, topic: str, partitions: int, admin=None) -> list[int] | None:
    """High watermarks of every partition of ``topic`` in one ListOffsets round (None while the
    topic or one of its partitions is unknown). Fast enough to poll 10,000 partitions. ``admin``:
    an AdminClient already connected (no bootstrap delay), else a new one for this call."""
    admin = admin or admin_client(bootstrap)  # kept alive until the answers are in: destroying it drops them
    return _hw_collect(_hw_request(admin, topic, partitions), partitions)


def lag_sampler(stop: threading.Event, topic: str, partitions: int, src_admin, dst_admin, every: float, out: list) -> None:
    """Every ``every`` s until ``stop``: the mirror lag (source minus destination high watermarks,
    summed; both ListOffsets sent together) and how long the pair took; without ``dst_admin`` the
    source alone is read (the same load on the source broker, no lag). A failed read is recorded
    as None and fails the step. Reads start on a fixed schedule; one that takes longer than
    ``every`` (10,000 partitions on a loaded broker) delays only the next one, not the schedule."""
    due = time.time() + every
    while not stop.wait(max(0.0, due - time.time())):
        t = time.time()
        due = max(due + every, t)
        fd = _hw_request(dst_admin, topic, partitions) if dst_admin is not None else None
        fs = _hw_request(src_admin, topic, partitions)
        d = _hw_collect(fd, partitions) if fd is not None else None
        src_hw = _hw_collect(fs, partitions)
        lag = None if src_hw is None or (dst_admin is not None and d is None) else (sum(src_hw) - sum(d) if d is not None else 0)
        out.append((lag, time.time() - t))


LOAD_RECORD_BYTES = 1000
LAG_EVERY_S = 5.0


def produce_load(bootstrap: str, topic: str, partitions: int, mb_s: float, seconds: float,
                 record_bytes: int = LOAD_RECORD_BYTES, ready=None, go=None, linger_ms: int = 5, run: int = 1) -> dict:
    """Produces ``mb_s`` MB/s of ``record_bytes`` random values for ``seconds``, over the partitions
    in turn with ``run`` consecutive records to each; returns the records sent, the window (first
    record to flush done), when the last record was handed to the client (later than ``seconds`` if
    the producer fell behind the schedule) and this process's CPU over the window. With ``ready`` /
    ``go`` (events): connects, sets ``ready`` and waits for ``go`` before the window opens."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "compression.type": "none", "acks": "all",
                  "queue.buffering.max.messages": 1000000, "queue.buffering.max.kbytes": 2097152})
    payloads = [os.urandom(record_bytes) for _ in range(512)]
    rate = mb_s * 1e6 / record_bytes
    total = int(rate * seconds)
    errors: list = []

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(err)
    sent = 0
    if ready is not None:
        p.list_topics(topic, timeout=30)  # connected and the partitions known before the window opens
        ready.set()
        assert go.wait(120), "the bench never opened the load window"
    start, cpu_start = time.time(), time.process_time()
    while sent < total:
        elapsed = time.time() - start
        due = min(total, int(rate * elapsed) + 1)
        while sent < due:
            try:
                p.produce(topic, value=payloads[sent % len(payloads)], partition=(sent // run) % partitions,
                          on_delivery=delivered)
                sent += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0)
        time.sleep(0.002)
    produced_by = time.time() - start
    left = p.flush(300)
    window = time.time() - start
    cpu_s = time.process_time() - cpu_start  # every thread of this process: Python and librdkafka
    p.close()
    assert left == 0, f"the load producer could not deliver {left} records"
    assert not errors, f"the load producer got {len(errors)} delivery errors, first {errors[0]}"
    return {"records": sent, "window_s": window, "produce_s": produced_by, "cpu_pct": cpu_s / window * 100}


def idle_window(pid: int, broker: int, seconds: float, ports: dict[str, set[int]]) -> dict:
    """CPU of the proxy ``pid`` and of ``broker`` over ``seconds``, and the proxy's connections to
    each side sampled every 0.25 s: the most frequent count (steady) and the highest (peak)."""
    samples = []
    before, start, busy0 = (cpu_seconds(pid), cpu_seconds(broker)), time.time(), machine_busy()
    while time.time() - start < seconds:
        samples.append(connections(pid, ports))
        time.sleep(0.25)
    elapsed, busy1 = time.time() - start, machine_busy()
    out = {"proxy_cpu_pct": (cpu_seconds(pid) - before[0]) / elapsed * 100,
           "broker_cpu_pct": (cpu_seconds(broker) - before[1]) / elapsed * 100,
           "machine_busy_pct": (busy1[0] - busy0[0]) / (busy1[1] - busy0[1]) * 100}
    for side in ("source", "destination"):
        counts = [c[side] for c in samples]
        out[f"conn_{side}"] = max(set(counts), key=counts.count)
        out[f"conn_{side}_peak"] = max(counts)
    return out


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat (idle and iowait count as not busy)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(f) - f[3] - f[4], sum(f)


def wait_ready(ready, proc, result, what: str, timeout: float) -> None:
    """Waits for a child's ``ready`` event; fails at once with its error if it died first."""
    deadline = time.time() + timeout
    while not ready.wait(0.5):
        if not proc.is_alive() or time.time() > deadline:
            err = result.get(timeout=5)[1] if not result.empty() or not proc.is_alive() else "no answer"
            raise AssertionError(f"{what} did not get ready within {timeout:.0f} s: {err}")
    assert result.empty(), f"{what} failed: {result.get()[1]}"


def _produce_child(result, *args) -> None:
    try:
        result.put(("ok", produce_load(*args)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the run
        result.put(("error", repr(e)))


class LoadProducer:
    """:func:`produce_load` in a child process of its own (a fresh interpreter), so the bench's
    sampling threads neither slow the producer down (the GIL) nor hide in its CPU figure. The child
    connects first; :meth:`start` opens the window; :meth:`result` waits for the flush."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, mb_s: float, seconds: float, record_bytes: int, run: int):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.go, self.queue = ctx.Event(), ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=_produce_child, daemon=True, args=(self.queue, bootstrap, topic, partitions, mb_s, seconds,
                                                                         record_bytes, self.ready, self.go, 5, run))
        self.proc.start()
        wait_ready(self.ready, self.proc, self.queue, "the load producer", 120)

    def start(self) -> None:
        self.go.set()

    def done(self) -> bool:
        return not self.queue.empty() or not self.proc.is_alive()

    def result(self, timeout: float = 600) -> dict:
        import queue
        try:
            status, value = self.queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the load producer gave no result (exit code {self.proc.exitcode})") from None
        self.proc.join(60)
        assert status == "ok", f"the load producer failed: {value}"
        return value


def _consume_child(ready, stop, expected, result, bootstrap: str, topic: str, partitions: int, starts: list[int]) -> None:
    """One consumer group (librdkafka) that joins, takes every partition at ``starts`` (the
    source's end before the window: with 10,000 partitions resolving "latest" takes longer than
    any fixed settle time, and a late one would skip records), says ready, and counts what it reads
    until ``stop``, or until it has read ``expected`` records (once the parent sets that above 0)."""
    try:
        from confluent_kafka import Consumer

        def at_starts(consumer, assigned) -> None:
            for tp in assigned:
                tp.offset = starts[tp.partition]
            consumer.assign(assigned)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"loaded-{time.time_ns()}", "enable.auto.commit": False})
        c.subscribe([topic], on_assign=at_starts)
        deadline = time.time() + 300
        while len(c.assignment()) < partitions:
            assert time.time() < deadline, f"the group was assigned {len(c.assignment())} of {partitions} partitions"
            c.consume(1000, 0.5)
        settle = time.time() + 5  # the end offsets resolved, fetching from there
        while time.time() < settle:
            c.consume(1000, 0.5)
        ready.set()
        got = 0
        while not stop.is_set() and not (0 < expected.value <= got):
            got += sum(1 for m in c.consume(10000, 0.2) if not m.error())
        c.close()
        result.put(("ok", got))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the run
        result.put(("error", repr(e)))
        ready.set()


class LoadGroup:
    """:func:`_consume_child` in a process of its own: one consumer group reading along."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, starts: list[int]):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.stop, self.queue = ctx.Event(), ctx.Event(), ctx.Queue()
        self.expected = ctx.Value("q", 0)
        self.proc = ctx.Process(target=_consume_child, daemon=True,
                                args=(self.ready, self.stop, self.expected, self.queue, bootstrap, topic, partitions, starts))
        self.proc.start()
        wait_ready(self.ready, self.proc, self.queue, "the loaded group", 360)

    def records(self, expected: int, timeout: float = 300) -> int:
        """Waits until the group has read ``expected`` records (at most ``timeout`` s), then stops
        it; returns what it read."""
        import queue
        self.expected.value = expected
        try:
            status, value = self.queue.get(timeout=timeout)
        except queue.Empty:
            self.stop.set()
            status, value = self.queue.get(timeout=120)
        self.proc.join(60)
        assert status == "ok", f"the loaded group failed: {value}"
        return value


def cpu_over(pids: list[int], seconds: float) -> list[float]:
    before = [cpu_seconds(p) for p in pids]
    time.sleep(seconds)
    return [(cpu_seconds(p) - b) / seconds * 100 for p, b in zip(pids, before)]


def group_baseline(bootstrap: str, topic: str, partitions: int, total: int, pid: int, seconds: float) -> float:
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"baseline-{time.time_ns()}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = 0, time.time() + 600
    while got < total and time.time() < deadline:
        got += sum(1 for m in c.consume(10000, 0.5) if not m.error())
    assert got >= total, f"the baseline group read {got} of {total} records"
    time.sleep(3)
    # The consumer keeps polling while idle, as a real one does.
    before, start = cpu_seconds(pid), time.time()
    while time.time() - start < seconds:
        c.consume(1000, 0.5)
    pct = (cpu_seconds(pid) - before) / (time.time() - start) * 100
    c.close()
    return pct


def run_proxy(binary: str, work: Path, name: str, src: KafkaCluster, dst: KafkaCluster, topic: str) -> tuple[subprocess.Popen, int]:
    from kmp_common import free_port, free_port_block  # noqa: E402
    cfg = work / f"{name}.toml"
    cfg.write_text(f'[engine]\nstate_topic = "__kmp_state_{name}"\n\n[[mirrors]]\nname = "scale"\n'
                   f'source_bootstrap_servers = ["{src.bootstrap}"]\ntopics = ["{topic}"]\n')
    port, admin = free_port(), free_port()
    log = open(work / f"{name}.log", "wb")
    proc = subprocess.Popen([binary, "run", "--upstream", dst.bootstrap, "--listen", f"127.0.0.1:{port}", "--node-port-base",
                             str(free_port_block(8)), "--admin-listen", f"127.0.0.1:{admin}", "--config", str(cfg), "--log", "warn"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "KMP_MIRROR_SOURCE_ALLOW": "127.0.0.1:*"})
    return proc, admin


def load_step(src: KafkaCluster, dst: KafkaCluster | None, topic: str, n: int, mb_s: float, seconds: float,
              proc: subprocess.Popen | None, ports: dict[str, set[int]], record_bytes: int = 1000, run: int = 10,
              group: bool = False) -> dict:
    """One loaded window (see the module doc); with ``proc`` the mirror is running and its cost,
    the lag at the end and the catch-up after it are measured (fds, RSS and connections: the peak
    of the samples taken during the window), without only the source broker's CPU; with ``group``
    one consumer group reads along (and must read every record produced)."""
    # Connected before the window, so the lag at the producer's flush is read without a bootstrap delay.
    src_admin = admin_client(src.bootstrap)
    dst_admin = admin_client(dst.bootstrap) if proc is not None else None
    before = high_watermarks(src.bootstrap, topic, n, src_admin)
    assert before is not None, "source high watermarks before the load"
    if dst_admin is not None:
        assert high_watermarks(dst.bootstrap, topic, n, dst_admin) is not None, "destination high watermarks before the load"
    bpid = broker_pid(src)
    peak = {"rss_peak_mib": 0.0, "fds": 0, "conn_source": 0, "conn_destination": 0, "samples": 0}

    def sample() -> None:
        if proc is not None:
            assert proc.poll() is None, f"the proxy exited with {proc.returncode} under load"
            conns = connections(proc.pid, ports)
            for k, v in (("rss_peak_mib", rss_mib(proc.pid)), ("fds", fds(proc.pid)), ("conn_source", conns["source"]),
                         ("conn_destination", conns["destination"])):
                peak[k] = max(peak[k], v)
            peak["samples"] += 1
    reader = LoadGroup(src.bootstrap, topic, n, before) if group else None
    producer = LoadProducer(src.bootstrap, topic, n, mb_s, seconds, record_bytes, run)
    others = {"dst_broker_cpu_pct": broker_pid(dst) if proc is not None else None}
    lags: list = []
    stop = threading.Event()
    sampler = threading.Thread(target=lag_sampler, args=(stop, topic, n, src_admin, dst_admin, LAG_EVERY_S, lags), daemon=True)
    cpu0 = {pid: cpu_seconds(pid) for pid in ([bpid] + ([proc.pid] if proc else []) + [p for p in others.values() if p])}
    t0, busy0 = time.time(), machine_busy()
    producer.start()
    sampler.start()
    try:
        next_sample = 0.0
        while not producer.done():
            if time.time() >= next_sample:
                sample()
                next_sample = time.time() + 0.5
            time.sleep(0.02)
        wall, busy1 = time.time() - t0, machine_busy()
        cpu = {pid: (cpu_seconds(pid) - c) / wall * 100 for pid, c in cpu0.items()}
        load = producer.result()
    finally:
        stop.set()
        sampler.join(120)
    stopped = t0 + wall
    # The destination first: the source's watermarks no longer move once the producer flushed.
    dst_hw = high_watermarks(dst.bootstrap, topic, n, dst_admin) if proc is not None else None
    lag_after = time.time() - stopped
    src_hw = high_watermarks(src.bootstrap, topic, n, src_admin)
    assert src_hw is not None, "source high watermarks after the load"
    out = {"records": load["records"], "window_s": wall, "producer_window_s": load["window_s"], "produce_s": load["produce_s"],
           "producer_cpu_pct": load["cpu_pct"], "broker_cpu_pct": cpu[bpid]}
    assert not sampler.is_alive(), "the lag sampler did not stop"
    # A read slower than the period (10,000 partitions) makes fewer samples: each one counts.
    period = max([LAG_EVERY_S] + [t for _, t in lags])
    assert len(lags) >= max(1, int(seconds / period) - 1), f"only {len(lags)} lag samples in {wall:.0f} s (reads took up to {period:.1f} s)"
    assert all(lag is not None for lag, _ in lags), f"a high-watermark read failed during the load: {lags}"
    out["lag_samples"] = [lag for lag, _ in lags]
    out["lag_read_s_max"] = max(t for _, t in lags)
    out.update({k: cpu[pid] for k, pid in others.items() if pid})
    out["machine_busy_pct"] = (busy1[0] - busy0[0]) / (busy1[1] - busy0[1]) * 100
    grew = sum(src_hw) - sum(before)
    assert grew == load["records"], f"the source grew by {grew} records, the producer sent {load['records']}"
    out["mb_s"] = grew * record_bytes / 1e6 / load["window_s"]
    out["record_bytes"], out["run"] = record_bytes, run
    if reader is not None:
        # The group's CPU window closed with the producer's flush; it may still be reading the tail.
        t = time.time()
        out["group_records"] = reader.records(load["records"])
        out["group_tail_s"] = time.time() - t
        assert out["group_records"] == load["records"], f"the group read {out['group_records']} of {load['records']} records"
    if proc is None:
        return out
    assert dst_hw is not None, "destination high watermarks at the end of the load"
    out["lag_records"] = sum(src_hw) - sum(dst_hw)
    out["lag_measured_after_s"] = lag_after
    read_done = stopped + lag_after
    while dst_hw != src_hw:
        assert proc.poll() is None, f"the proxy exited with {proc.returncode} while catching up after the load"
        assert time.time() - stopped < 600, f"no catch-up within 600 s after the load: {sum(dst_hw)} of {sum(src_hw)}"
        time.sleep(0.2)
        dst_hw = high_watermarks(dst.bootstrap, topic, n, dst_admin)
        read_done = time.time()
        assert dst_hw is not None, "destination high watermarks while catching up"
    # An upper bound: the destination read that first matched the source had been answered by then.
    out["catch_up_s"] = read_done - stopped
    assert peak["samples"] >= seconds, f"only {peak['samples']} samples of the proxy during the load"
    out["proxy_cpu_pct"] = cpu[proc.pid]
    out.update(peak)
    return out


def pause(admin: int, topic: str) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{admin}/v1/mirrors/scale/pause", data=json.dumps({"topics": [topic]}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200, f"pause answered {r.status}"


def mirror_failure(admin: int) -> str | None:
    """The mirror's status around a "failed" state, if it reports one (None: none, or no answer yet)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/v1/mirrors/scale", timeout=30).read().decode()
    except OSError:
        return None
    m = re.search(r'"state"\s*:\s*"failed"', text, re.IGNORECASE)
    return None if m is None else text[max(0, m.start() - 600):m.end() + 200]


def paused_everywhere(admin: int, partitions: int) -> bool:
    """Whether the mirror reports every partition paused (the status spells the state "paused";
    older builds spelled it "PAUSED")."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/v1/mirrors/scale", timeout=30).read().decode()
    return len(re.findall(r'"state"\s*:\s*"paused"', text, re.IGNORECASE)) >= partitions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--records-per-partition", type=int, default=20)
    ap.add_argument("--idle-seconds", type=float, default=20)
    ap.add_argument("--load-mb-s", type=float, default=10,
                    help="aggregate produce rate of the loaded step, MB/s of record values (0: no loaded step)")
    ap.add_argument("--load-seconds", type=float, default=20)
    ap.add_argument("--load-record-bytes", type=int, default=LOAD_RECORD_BYTES, help="value size of the loaded step's records")
    ap.add_argument("--load-run", type=int, default=10,
                    help="consecutive records per partition before the producer moves to the next partition (1: strict "
                         "round-robin; one librdkafka producer then cannot keep 10 MB/s over 10,000 partitions on 2 cores)")
    ap.add_argument("--broker-heap", help="-Xmx of the two brokers (default: the harness's)")
    ap.add_argument("--no-build", action="store_true", help="do not run cargo build --release for the default binary")
    ap.add_argument("--binary", action="append", default=[], help="name=path of a kafka-mirror-proxy build (repeatable)")
    ap.add_argument("--max-partitions", action="append", default=[], help="name=N: run that build only up to N partitions")
    ap.add_argument("--append", action="store_true", help="append this run's table to --out")
    ap.add_argument("--out", default=str(REPO / "docs" / "partition-scale-benchmark.md"))
    args = ap.parse_args()
    limits = {k: int(v) for k, v in (m.split("=", 1) for m in args.max_partitions)}
    binaries = dict(b.split("=", 1) for b in args.binary) or {"new": str(REPO / "target" / "release" / "kafka-mirror-proxy")}
    if not args.no_build and "new" in binaries and binaries["new"].endswith("target/release/kafka-mirror-proxy"):
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)

    from kmp_common import free_port_block  # noqa: E402
    work = bench_workdir("kmp-scale-")
    extra = {"num.partitions": 1, "log.segment.bytes": 16 * 1024 * 1024, "log.index.size.max.bytes": 65536}
    ScaleCluster.heap = args.broker_heap
    src = ScaleCluster("scale-src", 1, free_port_block(101), work, extra_config=extra).start()
    dst = ScaleCluster("scale-dst", 1, free_port_block(101), work, extra_config=extra).start()
    print(f"work dir {work}; source broker pid {broker_pid(src)}, destination broker pid {broker_pid(dst)}", flush=True)
    cp = classpath()
    ports = {"source": {int(src.bootstrap.rsplit(":", 1)[1])}, "destination": {int(dst.bootstrap.rsplit(":", 1)[1])}}
    rows = []
    proc = None
    from confluent_kafka import Consumer  # noqa: F401 - fail early without the client
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            group_pct = None
            for name, binary in binaries.items():
                if n > limits.get(name, n):
                    continue
                # The mirror writes into a destination topic named like the source topic: one
                # topic per build, so each build starts from an empty destination.
                btopic = f"scale-{n}-{name}"
                # KRaft refuses more than 10,000 records in one operation: create, then grow.
                java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", src.bootstrap, "--create", "--topic", btopic,
                     "--partitions", str(min(n, 5000)), "--replication-factor", "1")
                if n > 5000:
                    java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", src.bootstrap, "--alter", "--topic", btopic,
                         "--partitions", str(n))
                fill(src.bootstrap, btopic, n, args.records_per_partition)
                want = high_watermarks(src.bootstrap, btopic, n)
                assert want is not None and want == watermarks(src.bootstrap, btopic, n), "source high watermarks"
                if group_pct is None:
                    group_pct = group_baseline(src.bootstrap, btopic, n, sum(want or []), broker_pid(src), args.idle_seconds)
                    print(f"N={n}: consumer group idle: source broker {group_pct:.1f}%", flush=True)
                proc, admin = run_proxy(binary, work, f"{name}-{n}", src, dst, btopic)
                started = time.time()
                while True:
                    assert proc.poll() is None, f"{name} exited with {proc.returncode}"
                    hw = high_watermarks(dst.bootstrap, btopic, n)
                    if hw == want:
                        break
                    assert time.time() - started < 1800, f"{name} did not catch up {n} partitions within 30 min: {sum(hw or [])} of {sum(want or [])}"
                    failed = mirror_failure(admin)
                    assert failed is None, f"{name}: the mirror failed: {failed}"
                    time.sleep(1)
                catch_up = time.time() - started
                time.sleep(5)
                row = {"n": n, "binary": name, "catch_up_s": catch_up, **idle_window(proc.pid, broker_pid(src), args.idle_seconds, ports),
                       "fds": fds(proc.pid), "rss_mib": rss_mib(proc.pid), "group_pct": group_pct}
                print(f"N={n} {name}: idle: {json.dumps(row)}", flush=True)
                if args.load_mb_s > 0:
                    row["load"] = load_step(src, dst, btopic, n, args.load_mb_s, args.load_seconds, proc, ports,
                                            args.load_record_bytes, args.load_run)
                    print(f"N={n} {name}: loaded, mirroring: {json.dumps(row['load'])}", flush=True)
                    time.sleep(5)
                pause(admin, btopic)
                deadline = time.time() + 120
                while not paused_everywhere(admin, n) and time.time() < deadline:
                    time.sleep(1)
                assert paused_everywhere(admin, n), f"{name}: not every partition paused within 120 s"
                time.sleep(3)
                row["paused_broker_cpu_pct"] = cpu_over([broker_pid(src)], args.idle_seconds)[0]
                if args.load_mb_s > 0:
                    row["load_paused"] = load_step(src, None, btopic, n, args.load_mb_s, args.load_seconds, None, ports,
                                                   args.load_record_bytes, args.load_run)
                    print(f"N={n} {name}: loaded, paused: {json.dumps(row['load_paused'])}", flush=True)
                    time.sleep(5)
                    row["load_group"] = load_step(src, None, btopic, n, args.load_mb_s, args.load_seconds, None, ports,
                                                  args.load_record_bytes, args.load_run, group=True)
                    print(f"N={n} {name}: loaded, paused, one consumer group reading: {json.dumps(row['load_group'])}", flush=True)
                proc.terminate()
                proc.wait(60)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        src.stop()
        dst.stop()
    lines = ["| partitions | build | catch-up s | conns to source broker, steady (peak) | conns to destination broker, steady (peak) | fds | RSS MiB | proxy idle CPU % | source broker CPU % mirroring / paused / group | broker overhead vs one group |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mirror_over = r["broker_cpu_pct"] - r["paused_broker_cpu_pct"]
        group_over = max(r["group_pct"] - r["paused_broker_cpu_pct"], 0.05)
        lines.append(f"| {r['n']} | {r['binary']} | {r['catch_up_s']:.0f} | {r['conn_source']} ({r['conn_source_peak']}) | "
                     f"{r['conn_destination']} ({r['conn_destination_peak']}) | {r['fds']} | "
                     f"{r['rss_mib']:.0f} | {r['proxy_cpu_pct']:.1f} | {r['broker_cpu_pct']:.1f} / {r['paused_broker_cpu_pct']:.1f} / "
                     f"{r['group_pct']:.1f} | {mirror_over / group_over:.1f}× |")
    if args.load_mb_s > 0:
        lines += ["", f"Loaded: {args.load_mb_s:g} MB/s of {args.load_record_bytes:,}-byte random values asked for {args.load_seconds:g} s, "
                  f"over all partitions in turn, {args.load_run} consecutive records to each (librdkafka in a process of its own, "
                  "acks=all, linger.ms=5, no compression), three times: mirroring, mirror paused, and mirror paused with one "
                  "consumer group (librdkafka, its own process, joined before the window) reading along. Achieved = source "
                  "high-watermark growth over the producer's window (first record to its flush). Broker cost of the mirror vs one "
                  "group = (broker CPU mirroring − paused) / (group − paused). "
                  f"Lag: source minus destination high watermarks summed over the partitions, read together every "
                  f"{LAG_EVERY_S:g} s during the window (median / max) and once when the producer's flush returned; caught up: "
                  "from that flush until a destination read equal to the source's had been answered (an upper bound: at 10,000 "
                  "partitions on a busy machine one read takes seconds). RSS, fds and connections: highest of the samples taken "
                  "every 0.5 s during the window.", "",
                  "| partitions | build | achieved MB/s mirroring / paused / group | proxy CPU % | proxy peak RSS MiB | peak fds | "
                  "peak conns source / destination | source broker CPU % mirroring / paused / group | broker cost of the mirror vs one group | "
                  "lag during load, records median / max | lag at producer flush, records | caught up s after flush | "
                  f"machine busy % of {os.cpu_count()} CPUs mirroring / paused / group |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            ld, lp, lg = r["load"], r["load_paused"], r["load_group"]
            lags = sorted(ld["lag_samples"])
            group_cost = lg["broker_cpu_pct"] - lp["broker_cpu_pct"]
            ratio = f"{(ld['broker_cpu_pct'] - lp['broker_cpu_pct']) / group_cost:.1f}×" if group_cost > 0 else "n/a (group cost ≤ 0)"
            lines.append(f"| {r['n']} | {r['binary']} | {ld['mb_s']:.2f} / {lp['mb_s']:.2f} / {lg['mb_s']:.2f} | {ld['proxy_cpu_pct']:.1f} | "
                         f"{ld['rss_peak_mib']:.0f} | {ld['fds']} | {ld['conn_source']} / {ld['conn_destination']} | "
                         f"{ld['broker_cpu_pct']:.1f} / {lp['broker_cpu_pct']:.1f} / {lg['broker_cpu_pct']:.1f} | {ratio} | "
                         f"{lags[len(lags) // 2]} / {lags[-1]} | {ld['lag_records']} | ≤ {ld['catch_up_s']:.1f} | "
                         f"{ld['machine_busy_pct']:.0f} / {lp['machine_busy_pct']:.0f} / {lg['machine_busy_pct']:.0f} |")
    report = "\n".join(lines)
    print(report)
    out = Path(args.out)
    if args.append and out.exists():
        out.write_text(out.read_text() + "\nCommand: `python3 bench/partition_scale_bench.py " + " ".join(sys.argv[1:]) + "`\n\n" + report + "\n")
        return 0
    out.write_text("# Partition-scale benchmark\n\nCommand: `python3 bench/partition_scale_bench.py " + " ".join(sys.argv[1:]) +
                   "`\n\n" + report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
