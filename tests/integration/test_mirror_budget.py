"""The engine's memory bound: with the destination stalled (its broker SIGSTOPped) after the
source received 128 MiB across 32 partitions, the proxy's resident memory grows by about
`engine.max_buffer_bytes`, not by what the source holds; a control run with a large budget shows
the same scenario does grow memory without the bound (long tier; the quick tier checks that the stall
filled the budget). After the destination resumes, mirroring
completes with identical offsets."""

import os
import signal
import time

import pytest
import tier
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import ProxyProcess, running_cluster, unique
from mirror import high_watermarks, read_all, strip_fillers, wait_caught_up, wait_for_records_metric

PARTITIONS = 32
PER_PARTITION = 4 * 1024 * 1024
FETCH_BYTES = 2 * 1024 * 1024
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def stallable_destination(workdir):
    with running_cluster("budget-dst", 1, workdir) as cluster:
        yield cluster


def rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def stalled_growth(source, destination, workdir, budget: int) -> tuple[int, float]:
    """Peak RSS growth (bytes) of a mirroring proxy while the destination is stopped and the
    source receives PARTITIONS * PER_PARTITION bytes; and the peak buffer metric."""
    topic = unique("mir-budget")
    admin = AdminClient({"bootstrap.servers": source.bootstrap})  # kept alive until the result arrives
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    cfg = workdir / f"{topic}.toml"
    # The proxy is frozen while the source fills and the destination broker (its election's
    # coordinator too) is stopped: a session that outlasts both keeps the lone instance the
    # active engine, which is what this test measures (the election itself: test_engine_takeover).
    cfg.write_text(f"[engine]\nmax_buffer_bytes = {budget}\nsession_timeout_ms = 180000\nheartbeat_interval_ms = 5000\n"
                   f'[[mirrors]]\nname = "budget"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = ["{topic}"]\n'
                   f"fetch_max_bytes = {FETCH_BYTES}\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(cfg)]).start()
    broker = destination.procs[1]
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            _, text = proxy.http("/metrics")
            ready = [l for l in text.splitlines() if l.startswith("kmp_mirror_destination_next_offset{") and f'topic="{topic}"' in l and l.endswith(" 0")]
            if len(ready) == PARTITIONS:
                break
            time.sleep(0.3)
        assert len(ready) == PARTITIONS, f"all {PARTITIONS} partitions mirroring before the stall ({len(ready)})"
        time.sleep(1)
        baseline = rss_bytes(proxy.proc.pid)
        os.kill(broker.pid, signal.SIGSTOP)
        # The proxy is paused while the source fills, so on resuming every partition finds
        # full fetches waiting and a destination that takes nothing.
        os.kill(proxy.proc.pid, signal.SIGSTOP)
        try:
            p = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 20, "batch.size": 256 * 1024, "queue.buffering.max.kbytes": 512 * 1024})
            value = os.urandom(1024)
            for i in range(PARTITIONS * PER_PARTITION // 1024):
                while True:
                    try:
                        p.produce(topic, value=value, partition=i % PARTITIONS)
                        break
                    except BufferError:  # local queue full: let deliveries drain
                        p.poll(0.05)
            assert p.flush(60) == 0
            os.kill(proxy.proc.pid, signal.SIGCONT)
            peak, until = baseline, time.time() + 8
            while time.time() < until:
                peak = max(peak, rss_bytes(proxy.proc.pid))
                time.sleep(0.1)
            buffer_peak = proxy.metric("kmp_mirror_buffer_peak_bytes")
        finally:
            os.kill(proxy.proc.pid, signal.SIGCONT)
            os.kill(broker.pid, signal.SIGCONT)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == high_watermarks(source.bootstrap, topic, PARTITIONS)
        # Equal high watermarks are not enough: a batch landing at another batch's offset keeps
        # them equal (seen here before the engine checked what a failed write left).
        src_records = read_all(source.bootstrap, topic, PARTITIONS, "read_committed")
        dst_records = strip_fillers(read_all(destination.bootstrap, topic, PARTITIONS, "read_uncommitted"))
        if dst_records != src_records:
            first = next(((s[:2], d[:2]) for s, d in zip(src_records, dst_records) if s != d), None)
            raise AssertionError(f"the destination equals the source record by record after the stall; first difference (partition, offset) source/destination: {first}")
        total = PARTITIONS * PER_PARTITION // 1024
        mirrored = wait_for_records_metric(proxy, "budget", topic, PARTITIONS, total)
        fillers = sum(proxy.metric("kmp_mirror_filler_records", f'mirror="budget",topic="{topic}",partition="{p}"') for p in range(PARTITIONS))
        assert fillers == 0, f"a topic without gaps needs no fillers, yet {fillers:.0f} were written (mirrored records {mirrored:.0f} of {total})"
        if mirrored != total:
            marks = high_watermarks(destination.bootstrap, topic, PARTITIONS)
            counted = {p: proxy.metric("kmp_mirror_records", f'mirror="budget",topic="{topic}",partition="{p}"') for p in range(PARTITIONS)}
            short = {p: (counted[p], marks[p]) for p in range(PARTITIONS) if counted[p] != marks[p]}
            log = [l for l in proxy.log().splitlines() if "WARN" in l or "ERROR" in l][-40:]
            raise AssertionError(f"every record mirrored after the stall ({mirrored} of {total}); partitions counted/high watermark: {short}; proxy warnings:\n" + "\n".join(log))
        print(f"\nbudget {budget / MIB:.0f} MiB: RSS {baseline / MIB:.0f} -> {peak / MIB:.0f} MiB during the stall, buffer peak {buffer_peak / MIB:.1f} MiB")
        return peak - baseline, buffer_peak
    finally:
        assert proxy.stop() == 0, proxy.log()[-2000:]


def test_engine_memory_stays_within_its_budget_while_the_destination_stalls(clusters, stallable_destination, workdir):
    source, _ = clusters
    small = 4 * MIB
    growth, buffer_peak = stalled_growth(source, stallable_destination, workdir, small)
    assert buffer_peak <= small + FETCH_BYTES, f"reserved bytes stay within the budget (+ at most one oversized batch): {buffer_peak}"
    assert buffer_peak >= small // 2, f"the stall filled the budget ({buffer_peak / MIB:.1f} of {small // MIB} MiB), so the scenario pressed on it"
    if not tier.LONG:
        # The quick tier leaves out the control run (a second 128 MiB through the proxy, 75 s):
        # the budget filling up above shows the scenario's pressure.
        assert growth < small + 32 * MIB, f"with a {small // MIB} MiB budget memory grew {growth / MIB:.0f} MiB"
        return
    control, _ = stalled_growth(source, stallable_destination, workdir, 1024 * MIB)
    assert control > 48 * MIB, f"control: without a tight budget the stall grows memory ({control / MIB:.0f} MiB), so the scenario is meaningful"
    assert growth < small + 32 * MIB, f"with a {small // MIB} MiB budget memory grew {growth / MIB:.0f} MiB (control {control / MIB:.0f} MiB)"
