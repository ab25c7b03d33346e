"""Shifted-partition consume benchmark: what reading a shifted mirror partition through the proxy
costs (docs/mirroring.md "Shifted prefixes": every Fetch response naming a shifted partition is
decoded, each batch's base offset moved by Δ, and re-encoded), against an unshifted mirror
partition through the proxy and against the destination broker itself, in the same run.

    python3 bench/shift_consume_bench.py [--mb 1024] [--record-size 1024] [--prefix 1000000]
        [--rounds 5] [--consumers confluent,java] [--no-build]
        [--binary target/release/kafka-mirror-proxy] [--out docs/shift-consume-benchmark.md] [--append]

Starts a 1-broker source and a 1-broker destination KRaft cluster (tests/harness). Then:

1. two source topics of one partition: ``shifted`` gets a log start of ``--prefix`` offsets
   (tests/harness/prefix.py ``make_prefix``: raw batches of empty records, then DeleteRecords),
   ``plain`` none; both are then filled with the same ``--mb`` MB (10^6 bytes) of records of
   ``--record-size`` bytes (value = the record's index as 8 big-endian bytes + random bytes,
   incompressible, so bytes on the wire ≈ record bytes), written by a confluent_kafka Producer
   (lz4, ``batch.size`` 65536, ``linger.ms`` 20, acks=1): batches of ~64 KiB, above the engine's
   merge threshold (16 KiB), so the destination holds the source's batches as they came;
2. ``local``, a topic created on the destination (not a mirror topic), gets the same data written
   straight to the destination broker: the reference for the proxy's spliced path;
3. the proxy (release build) starts in front of the destination with a config-file mirror of
   ``shifted`` and ``plain`` and ``shift_prefix_from`` = ``--prefix``: ``shifted`` is shifted
   (destination partition from 0, Δ = its source log start), ``plain`` is not; the run waits
   until, through the proxy, both topics' low and high watermarks equal the source's, and checks
   the destination holds ``shifted`` at 0..N (unshifted) directly. No record is written to the
   source afterwards, so the engine only keeps its caught-up Fetch open; its CPU while idle is
   measured (10 s) and reported as the proxy's background;
4. each consumer reads one topic from its first to its last record, in these paths:
   (a) ``plain`` straight from the destination broker (the broker's own rate);
   (b) ``plain`` through the proxy (a mirror topic that is not shifted: the Fetch response is read
       whole and scanned for filler batches, not decoded);
   (c) ``shifted`` through the proxy (read whole, decoded, every batch's base offset +Δ,
       re-encoded);
   (d) ``local`` through the proxy (not a mirror topic: the response is spliced socket to socket).
   One unmeasured warm-up read of every path, then ``--rounds`` rounds, each path once per round,
   the order rotating from round to round. Per read: records/s and MB/s (record value bytes over
   the time from assign to the last record), proxy CPU seconds and destination broker CPU seconds
   (from /proc) per GB (10^9 bytes of record values) read, consumer CPU per GB, and the share of
   the proxy's bytes to clients moved by splice (its /metrics), and the load of other processes
   (the machine's busy CPU during the read, from /proc/stat, minus this run's processes: proxy,
   both brokers, consumer; in cores; the machine is shared with other sessions, and a read that
   had to share the 2 cores shows it here). Consumers (``--consumers``):
   ``confluent``: a confluent_kafka (librdkafka) Consumer in this process, assigned offset
   "beginning" (so ListOffsets is translated too), ``fetch.message.max.bytes`` 16 MiB,
   ``fetch.max.bytes`` 64 MiB; librdkafka fetches without fetch sessions. ``java``:
   kafka-consumer-perf-test (ConsumerPerformance, Kafka 4.1.2, ``--fetch-size`` 16 MiB,
   ``fetch.max.bytes`` 64 MiB, a fresh group each read); it uses incremental fetch sessions
   (KIP-227), and the proxy decodes the response to every incremental Fetch while any partition
   is shifted (it cannot tell from the request which partitions will answer), so its (b) and
   (d) are not the paths they are for librdkafka. Its rate is the tool's fetch.MB.sec (group join
   excluded); its consumer CPU includes the JVM's start.
5. correctness, once per run: every read counts exactly N records, contiguous offsets, first and
   last at the expected offsets with the expected record index in their values; and the first
   and last records read through the proxy from ``shifted`` (offset and index) equal those read
   from the source itself.

Reported: medians over the rounds per path, and the ratios c/b and c/a (throughput, proxy CPU per
GB, and CPU per GB of the whole read: proxy + destination broker + consumer), each the median of
the per-round ratios with their range. The proxy is idle during (a): its CPU there is the
background, not a cost of the read. Every figure is measured; a step that cannot measure its
figure fails the run.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests"))

from bench_workdir import bench_workdir  # noqa: E402
from kafka_cluster import KafkaCluster, classpath  # noqa: E402
from prefix import make_prefix  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
PARTITION_FETCH = 16 * 1024 * 1024
FETCH_MAX = 64 * 1024 * 1024
PATHS = {  # path: (topic, through the proxy?, what it is)
    "a": ("plain", False, "`plain` direct from the destination broker"),
    "b": ("plain", True, "`plain` through the proxy (mirror topic, unshifted)"),
    "c": ("shifted", True, "`shifted` through the proxy (translated)"),
    "d": ("local", True, "`local` through the proxy (not a mirror topic)"),
}


def cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICKS


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (every core, from /proc/stat)."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(f) - f[3] - f[4]) / TICKS  # all but idle and iowait


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the future is answered
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def watermarks(bootstrap: str, topic: str) -> tuple[int, int] | None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{time.time_ns()}"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    except KafkaException:
        return None
    finally:
        c.close()


def value_pool(size: int) -> list[bytes]:
    """256 distinct incompressible tails (a record's value is its index + one of them): a batch of
    ~64 KiB never holds the same tail twice, so lz4 finds nothing to shrink."""
    rnd = random.Random(1279)
    return [rnd.randbytes(size - 8) for _ in range(256)]


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    """Writes records 0..n-1 (value: index as 8 big-endian bytes + a pool tail); returns MB/s."""
    from confluent_kafka import Producer
    pool = value_pool(size)
    errors = []

    def report(err, _msg):
        if err is not None:
            errors.append(err)

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "batch.size": 65536, "linger.ms": 20, "acks": 1,
                  "queue.buffering.max.kbytes": 1048576, "queue.buffering.max.messages": 1_000_000})
    started = time.time()
    for i in range(n):
        v = struct.pack(">q", i) + pool[i % 256]
        while True:
            try:
                p.produce(topic, v, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(300) == 0, f"{topic}: every record delivered"
    assert not errors, f"{topic}: delivery errors {errors[:3]}"
    return n * size / 1e6 / (time.time() - started)


def run_proxy(binary: str, work: Path, src: KafkaCluster, dst: KafkaCluster, prefix: int) -> tuple[subprocess.Popen, str, str]:
    """The proxy mirroring ``shifted`` and ``plain``, its client bootstrap and its admin address."""
    from kmp_common import free_port, free_port_block
    cfg = work / "proxy.toml"
    cfg.write_text('[engine]\nstate_topic = "__kmp_state_shift_bench"\n\n[[mirrors]]\nname = "shiftbench"\n'
                   f'source_bootstrap_servers = ["{src.bootstrap}"]\ntopics = ["shifted", "plain"]\nshift_prefix_from = {prefix}\n')
    log = open(work / "proxy.log", "wb")
    listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([binary, "run", "--upstream", dst.bootstrap, "--listen", listen, "--node-port-base",
                             str(free_port_block(8)), "--admin-listen", admin, "--config", str(cfg), "--log", "warn"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "KMP_MIRROR_SOURCE_ALLOW": "127.0.0.1:*"})
    return proc, listen, admin


def metric_sum(admin: str, prefix: str) -> float:
    """The sum of every sample of the proxy's metric lines starting with ``prefix``."""
    text = urllib.request.urlopen(f"http://{admin}/metrics", timeout=10).read().decode()
    rows = [float(l.split()[-1]) for l in text.splitlines() if l.startswith(prefix)]
    assert rows, f"the proxy's /metrics has no {prefix}"
    return sum(rows)


def proxy_bytes(admin: str) -> tuple[float, float]:
    """(bytes to clients, of them spliced) so far."""
    return metric_sum(admin, 'kmp_bytes_total{direction="to_clients"}'), metric_sum(admin, "kmp_spliced_bytes_total")


def read_confluent(bootstrap: str, topic: str, n: int) -> dict:
    """Reads the topic from its first record, n records, with a librdkafka consumer."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"shiftbench-{time.time_ns()}", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "fetch.message.max.bytes": PARTITION_FETCH, "fetch.max.bytes": FETCH_MAX,
                  "receive.message.max.bytes": FETCH_MAX + 1024 * 1024, "queued.max.messages.kbytes": 262144})
    got = nbytes = 0
    first = last = None
    deadline = time.time() + 900
    try:
        started = time.perf_counter()
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while got < n:
            msgs = c.consume(min(10000, n - got), 1.0)  # returns at that count or the timeout: never more than is left
            if not msgs:
                assert time.time() < deadline, f"{topic} via {bootstrap}: {got:,} of {n:,} records within 900 s"
                continue
            for m in msgs:
                if m.error() is not None:
                    raise RuntimeError(f"{topic} via {bootstrap}: {m.error()}")
                nbytes += len(m)
            if first is None:
                first = msgs[0]
            last = msgs[-1]
            got += len(msgs)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "records": got, "bytes": nbytes, "first": (first.offset(), first.value()[:8]),
                "last": (last.offset(), last.value()[:8])}
    finally:
        c.close()


def read_java(cp: str, work: Path, bootstrap: str, topic: str, n: int) -> dict:
    """Reads n records of the topic with kafka-consumer-perf-test (its fetch phase timed)."""
    props = work / "perf-consumer.properties"
    props.write_text(f"fetch.max.bytes={FETCH_MAX}\nauto.offset.reset=earliest\n")
    out = subprocess.run(["java", "-Xmx1g", "-cp", cp, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                          "--topic", topic, "--messages", str(n), "--timeout", "120000", "--fetch-size", str(PARTITION_FETCH),
                          "--consumer.config", str(props), "--group", f"shiftbench-{time.time_ns()}"],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"ConsumerPerformance {topic} via {bootstrap} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    lines = [l for l in out.stdout.strip().splitlines() if l.strip()]
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
    # fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec (MB = 2^20 bytes)
    try:
        row = [x.strip() for x in lines[-1].split(",")]
        mib, records, fetch_ms = float(row[2]), int(row[4]), float(row[7])
    except (IndexError, ValueError):
        raise RuntimeError(f"unreadable ConsumerPerformance output:\n{out.stdout[-2000:]}") from None
    assert records == n, f"ConsumerPerformance {topic} via {bootstrap}: {records:,} of {n:,} records"
    assert fetch_ms > 0, f"ConsumerPerformance {topic} via {bootstrap}: fetch time {fetch_ms} ms"
    return {"seconds": fetch_ms / 1000, "records": records, "bytes": mib * 1024 * 1024}


def source_ends(bootstrap: str, topic: str) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    """(offset, index bytes) of the first and the last record of the topic, read from ``bootstrap``."""
    from confluent_kafka import Consumer, TopicPartition
    low, high = watermarks(bootstrap, topic)
    ends = []
    for at in (low, high - 1):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{time.time_ns()}", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, at)])
        deadline = time.time() + 60
        try:
            while True:
                m = c.poll(1)
                assert time.time() < deadline, f"{topic}: a record at {at} within 60 s"
                if m is None:
                    continue
                assert m.error() is None, f"{topic} at {at}: {m.error()}"
                ends.append((m.offset(), m.value()[:8]))
                break
        finally:
            c.close()
    return ends[0], ends[1]


class Bench:
    def __init__(self, args, binary: str, work: Path):
        self.args, self.binary, self.work = args, binary, work
        self.n = round(args.mb * 1e6 / args.record_size)
        self.notes: list[str] = []

    def setup(self, src: KafkaCluster, dst: KafkaCluster) -> None:
        a, n = self.args, self.n
        for t in ("shifted", "plain"):
            create_topic(src.bootstrap, t)
        create_topic(dst.bootstrap, "local")
        log_start = make_prefix(src.bootstrap, "shifted", 0, a.prefix)
        assert log_start >= a.prefix, f"source log start {log_start} >= {a.prefix}"
        self.delta = log_start
        rates = {}
        for where, bs, t in (("source", src.bootstrap, "shifted"), ("source", src.bootstrap, "plain"), ("destination", dst.bootstrap, "local")):
            rates[t] = produce(bs, t, n, a.record_size)
            print(f"{where} {t}: {n:,} records of {a.record_size} B written at {rates[t]:.0f} MB/s", flush=True)
        self.src_wm = {"shifted": watermarks(src.bootstrap, "shifted"), "plain": watermarks(src.bootstrap, "plain")}
        assert self.src_wm == {"shifted": (log_start, log_start + n), "plain": (0, n)}, f"source watermarks {self.src_wm}"
        self.notes.append(f"data: {n:,} records of {a.record_size} B per topic ({n * a.record_size / 1e9:.2f} GB), lz4, "
                          f"~64 KiB producer batches; written at {rates['shifted']:.0f} MB/s (source `shifted`), "
                          f"{rates['plain']:.0f} MB/s (source `plain`), {rates['local']:.0f} MB/s (destination `local`)")

    def mirror(self, src: KafkaCluster, dst: KafkaCluster) -> None:
        started = time.time()
        self.proc, self.via, self.admin = run_proxy(self.binary, self.work, src, dst, self.args.prefix)
        while True:
            seen = {t: watermarks(self.via, t) for t in ("shifted", "plain")}
            if seen == self.src_wm:
                break
            assert self.proc.poll() is None, f"the proxy exited ({self.proc.returncode}); see {self.work}/proxy.log"
            assert time.time() - started < self.args.timeout, f"mirrored within {self.args.timeout}s (through the proxy {seen}, source {self.src_wm})"
            time.sleep(1)
        took = time.time() - started
        direct = {t: watermarks(dst.bootstrap, t) for t in ("shifted", "plain")}
        assert direct == {"shifted": (0, self.n), "plain": (0, self.n)}, f"destination watermarks, read directly: {direct}"
        coalesced = metric_sum(self.admin, "kmp_mirror_coalesced_batches")
        print(f"mirrored in {took:.1f}s (proxy start included); through the proxy {seen}, directly {direct}; "
              f"coalesced batches {coalesced:.0f}", flush=True)
        self.notes.append(f"mirrored both topics ({2 * self.n * self.args.record_size / 1e9:.2f} GB) in {took:.1f} s, proxy start "
                          f"included; `shifted`: source offsets {self.src_wm['shifted'][0]:,}..{self.src_wm['shifted'][1] - 1:,}, "
                          f"destination (direct) {direct['shifted'][0]:,}..{direct['shifted'][1] - 1:,}, shown through the proxy as "
                          f"{seen['shifted'][0]:,}..{seen['shifted'][1] - 1:,} (Δ = {self.delta:,}); batches merged by the engine: "
                          f"{coalesced:.0f}")
        time.sleep(5)  # the engine's last state flush and metadata refreshes
        p0, t0 = cpu_seconds(self.proc.pid), time.time()
        time.sleep(10)
        self.background = (cpu_seconds(self.proc.pid) - p0) / (time.time() - t0)
        self.notes.append(f"proxy background (caught up, no new data, no client): {self.background * 1000:.1f} ms CPU per second")

    def read(self, consumer: str, path: str, dst: KafkaCluster) -> dict:
        topic, proxied, _ = PATHS[path]
        bootstrap = self.via if proxied else dst.bootstrap
        dst_pid = next(iter(dst.procs.values())).pid
        src_pid = next(iter(self.src.procs.values())).pid
        m0 = proxy_bytes(self.admin)
        w0, s0, busy0 = time.time(), cpu_seconds(src_pid), machine_busy()
        p0, b0, c0, k0 = cpu_seconds(self.proc.pid), cpu_seconds(dst_pid), own_cpu(), children_cpu()
        if consumer == "confluent":
            r = read_confluent(bootstrap, topic, self.n)
        else:
            r = read_java(self.cp, self.work, bootstrap, topic, self.n)
        p1, b1, c1, k1 = cpu_seconds(self.proc.pid), cpu_seconds(dst_pid), own_cpu(), children_cpu()
        w1, s1, busy1 = time.time(), cpu_seconds(src_pid), machine_busy()
        m1 = proxy_bytes(self.admin)
        # CPU the machine spent on anything but this run (other sessions' brokers, builds, tests)
        ours = (p1 - p0) + (b1 - b0) + (c1 - c0) + (k1 - k0) + (s1 - s0)
        other = max(0.0, (busy1 - busy0) - ours) / (w1 - w0)
        assert self.proc.poll() is None, f"the proxy exited ({self.proc.returncode}); see {self.work}/proxy.log"
        assert r["records"] == self.n, f"{consumer} {path}: {r['records']:,} of {self.n:,} records"
        if consumer == "confluent":
            first = self.delta if topic == "shifted" else 0
            want = ((first, struct.pack(">q", 0)), (first + self.n - 1, struct.pack(">q", self.n - 1)))
            assert (r["first"], r["last"]) == want, f"{consumer} {path}: first/last (offset, index) {r['first']}, {r['last']}; want {want}"
        gb = r["bytes"] / 1e9
        to_clients, spliced = m1[0] - m0[0], m1[1] - m0[1]
        row = {**r, "mb_s": r["bytes"] / 1e6 / r["seconds"], "rec_s": r["records"] / r["seconds"], "proxy_cpu_gb": (p1 - p0) / gb,
               "broker_cpu_gb": (b1 - b0) / gb, "client_cpu_gb": ((c1 - c0) if consumer == "confluent" else (k1 - k0)) / gb,
               "spliced": spliced / to_clients if proxied and to_clients > 0 else None, "proxy_out_gb": to_clients / 1e9,
               "other_cores": other}
        row["total_cpu_gb"] = row["proxy_cpu_gb"] + row["broker_cpu_gb"] + row["client_cpu_gb"]
        return row

    def verify_against_source(self, src: KafkaCluster) -> None:
        want = source_ends(src.bootstrap, "shifted")
        got = read_confluent(self.via, "shifted", self.n)
        assert (got["first"], got["last"]) == want, f"shifted through the proxy: first/last {got['first']}, {got['last']}; source {want}"
        self.notes.append(f"correctness: `shifted` read through the proxy starts at offset {got['first'][0]:,} (record 0) and ends at "
                          f"{got['last'][0]:,} (record {self.n - 1:,}), as read from the source itself; every measured read counted "
                          f"{self.n:,} records at contiguous offsets")
        print(f"correctness: shifted through the proxy {got['first'][0]:,}..{got['last'][0]:,} = source {want[0][0]:,}..{want[1][0]:,}", flush=True)

    def run(self, consumer: str, dst: KafkaCluster) -> dict[str, list[dict]]:
        paths = list(PATHS)
        for p in paths:  # warm-up: page cache, connections, the JIT of a fresh JVM aside
            self.read(consumer, p, dst)
        rows: dict[str, list[dict]] = {p: [] for p in paths}
        for rnd in range(self.args.rounds):
            order = paths[rnd % len(paths):] + paths[:rnd % len(paths)]
            for p in order:
                r = self.read(consumer, p, dst)
                rows[p].append(r)
                print(f"{consumer} round {rnd + 1} ({p}) {PATHS[p][2]}: {r['mb_s']:.0f} MB/s, {r['rec_s']:,.0f} records/s, proxy CPU "
                      f"{r['proxy_cpu_gb']:.2f} s/GB, broker {r['broker_cpu_gb']:.2f} s/GB, consumer {r['client_cpu_gb']:.2f} s/GB"
                      + (f", spliced {r['spliced']:.0%}" if r["spliced"] is not None else "")
                      + f"; other processes {r['other_cores']:.2f} cores", flush=True)
        return rows


def med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def ratio(rows: dict[str, list[dict]], num: str, den: str, key: str) -> str:
    per_round = [x[key] / y[key] for x, y in zip(rows[num], rows[den])]
    return f"{statistics.median(per_round):.2f} ({min(per_round):.2f}–{max(per_round):.2f})"


def table(consumer: str, rows: dict[str, list[dict]], rounds: int) -> list[str]:
    what = {"confluent": "confluent_kafka (librdkafka) Consumer, no fetch sessions",
            "java": "kafka-consumer-perf-test (Java consumer, incremental fetch sessions; rate = fetch.MB.sec, consumer CPU includes JVM start)"}[consumer]
    out = [f"\n**{what}**, medians of {rounds} rounds:\n",
           "| path | MB/s | records/s | proxy CPU s/GB | destination broker CPU s/GB | consumer CPU s/GB | proxy bytes spliced | "
           "MB/s per round | other processes (cores) |",
           "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for p, rs in rows.items():
        spliced = "–" if rs[0]["spliced"] is None else f"{statistics.median(r['spliced'] for r in rs):.0%}"
        proxy_cpu = f"{med(rs, 'proxy_cpu_gb'):.2f}" + (" (idle)" if not PATHS[p][1] else "")
        out.append(f"| ({p}) {PATHS[p][2]} | {med(rs, 'mb_s'):.0f} | {med(rs, 'rec_s'):,.0f} | {proxy_cpu} | "
                   f"{med(rs, 'broker_cpu_gb'):.2f} | {med(rs, 'client_cpu_gb'):.2f} | {spliced} | "
                   f"{', '.join(format(r['mb_s'], '.0f') for r in rs)} | {med(rs, 'other_cores'):.2f} |")
    out += ["", "| ratio (median of per-round ratios, range) | throughput (MB/s) | proxy CPU per GB | CPU per GB, proxy + broker + consumer |",
            "|---|---:|---:|---:|",
            f"| c/b: translated vs unshifted mirror topic, both through the proxy | {ratio(rows, 'c', 'b', 'mb_s')} | "
            f"{ratio(rows, 'c', 'b', 'proxy_cpu_gb')} | {ratio(rows, 'c', 'b', 'total_cpu_gb')} |",
            f"| c/a: translated through the proxy vs the broker directly | {ratio(rows, 'c', 'a', 'mb_s')} | "
            f"– (proxy idle in a: {med(rows['a'], 'proxy_cpu_gb'):.2f} vs {med(rows['c'], 'proxy_cpu_gb'):.2f} s/GB) | "
            f"{ratio(rows, 'c', 'a', 'total_cpu_gb')} |",
            f"| b/a: unshifted mirror topic through the proxy vs directly | {ratio(rows, 'b', 'a', 'mb_s')} | – | "
            f"{ratio(rows, 'b', 'a', 'total_cpu_gb')} |",
            f"| c/d: translated vs spliced (non-mirror topic), both through the proxy | {ratio(rows, 'c', 'd', 'mb_s')} | "
            f"{ratio(rows, 'c', 'd', 'proxy_cpu_gb')} | {ratio(rows, 'c', 'd', 'total_cpu_gb')} |"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=1024, help="MB (10^6 bytes) of records per topic")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--prefix", type=int, default=1_000_000, help="source log start of `shifted`, and shift_prefix_from")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--consumers", default="confluent,java", help="confluent, java (kafka-consumer-perf-test)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the mirror to catch up")
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "kafka-mirror-proxy"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--out", default=str(REPO / "docs" / "shift-consume-benchmark.md"))
    ap.add_argument("--append", action="store_true", help="append this run's table to --out")
    args = ap.parse_args()
    assert args.rounds >= 3, "at least 3 rounds (medians)"
    consumers = args.consumers.split(",")
    assert set(consumers) <= {"confluent", "java"}, f"unknown consumer in {consumers}"
    if not args.no_build and args.binary.endswith("target/release/kafka-mirror-proxy"):
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)
    from kmp_common import free_port_block
    work = bench_workdir("kmp-shift-consume-")
    bench = Bench(args, args.binary, work)
    bench.cp = classpath() if "java" in consumers else ""
    src = KafkaCluster("shift-src", 1, free_port_block(101), work)
    dst = KafkaCluster("shift-dst", 1, free_port_block(101), work)
    results = {}
    bench.proc, bench.src = None, src
    try:
        src.start(wait=False)
        dst.start(wait=False)
        src.wait_ready()
        dst.wait_ready()
        bench.setup(src, dst)
        bench.mirror(src, dst)
        bench.verify_against_source(src)
        for consumer in consumers:
            results[consumer] = bench.run(consumer, dst)
    finally:
        if bench.proc is not None:
            bench.proc.terminate()
            bench.proc.wait(60)
        src.stop()
        dst.stop()
    cmd = "python3 bench/shift_consume_bench.py " + " ".join(sys.argv[1:])
    text = [f"\n### {time.strftime('%Y-%m-%d')}: `{cmd.strip()}`\n"] + [f"- {n}" for n in bench.notes]
    for consumer, rows in results.items():
        text += table(consumer, rows, args.rounds)
    text = "\n".join(text) + "\n"
    print(text)
    if args.append:
        with open(args.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
