"""Retention-prefix benchmark: how fast the engine fills a source partition's prefix (every offset
below the source's log start becomes a filler on the destination) and what it costs.

    python3 bench/prefix_bench.py [--sizes 10000000,100000000,1000000000] [--modes fill,shift]
        [--baseline-offsets 50000000] [--no-build] [--binary target/release/kafka-mirror-proxy]
        [--out docs/prefix-benchmark.md] [--append]

Starts a 1-broker source and a 1-broker destination KRaft cluster (tests/harness, 16 MiB
segments, retention checked every second). For each size N:

1. a source topic (one partition) gets a log start of N (tests/harness/prefix.py: raw gzip
   batches of 100,000 empty records, then DeleteRecords) and 10 records after it;
2. baseline, same run, same destination broker: the fill as it was before issue 38 — uncompressed
   filler batches of 20,000 records (the engine's old batch, byte for byte but without producer
   fields) sent straight to a scratch topic on the destination by raw Produce requests, 4 in
   flight, for ``--baseline-offsets`` offsets (or N if smaller): the destination's ceiling for
   that design (the old engine reached about this; docs/mirroring.md);
3. per mode, the proxy (release build) starts with a config-file mirror of the topic (its own
   state topic, the destination topic deleted between modes): ``fill`` with
   ``shift_prefix_from`` at its maximum (every prefix offset becomes a filler), ``shift`` with the
   default configuration (``shift_prefix_from`` 10^9: a prefix at least that long is shifted, the
   destination partition starts at 0; docs/mirroring.md "Shifted prefixes"); measured until the
   proxy shows the source's log start and high watermark and the 10 records at the source's
   offsets: time (proxy start included), offsets per second, the destination partition's peak
   size on disk (sampled every 0.5 s), proxy CPU seconds and destination broker CPU seconds.

Reported per size: time to mirrored, offsets/s, the baseline's offsets/s and the ratio, peak
destination disk, proxy and destination broker CPU. Every figure is measured; a step that cannot
measure its figure fails the run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests"))

from bench_workdir import bench_workdir  # noqa: E402
from kafka_cluster import KafkaCluster  # noqa: E402
from prefix import append_repeatedly, make_prefix, uncompressed_filler_batch  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
OLD_FILLER_BATCH = 20_000


def cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICKS


def partition_bytes(cluster: KafkaCluster, topic: str) -> int:
    d = Path(cluster.dir) / "data-1" / f"{topic}-0"
    return sum(f.stat().st_size for f in d.glob("*") if f.is_file()) if d.is_dir() else 0


def watermarks(bootstrap: str, topic: str) -> tuple[int, int] | None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{time.time_ns()}"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    except KafkaException:
        return None
    finally:
        c.close()


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the future is answered
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": str(16 * 1024 * 1024)})])[topic].result(30)


def produce_tail(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce(topic, value=f"after-the-prefix-{i}".encode(), partition=0)
    assert p.flush(30) == 0, "the 10 records after the prefix were written"


def run_proxy(binary: str, work: Path, name: str, src: KafkaCluster, dst: KafkaCluster, topic: str, mode: str) -> tuple[subprocess.Popen, str]:
    """The proxy mirroring ``topic`` in ``mode``, and its client bootstrap address."""
    from kmp_common import free_port, free_port_block
    cfg = work / f"{name}.toml"
    shift = "shift_prefix_from = 9223372036854775807\n" if mode == "fill" else ""
    cfg.write_text(f'[engine]\nstate_topic = "__kmp_state_{name}"\n\n[[mirrors]]\nname = "prefix"\n'
                   f'source_bootstrap_servers = ["{src.bootstrap}"]\ntopics = ["{topic}"]\n{shift}')
    log = open(work / f"{name}.log", "wb")
    listen = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([binary, "run", "--upstream", dst.bootstrap, "--listen", listen, "--node-port-base",
                             str(free_port_block(8)), "--admin-listen", f"127.0.0.1:{free_port()}", "--config", str(cfg), "--log", "warn"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "KMP_MIRROR_SOURCE_ALLOW": "127.0.0.1:*"})
    return proc, listen


def tail_offsets(bootstrap: str, topic: str, start: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the records from ``start`` to the end, read through ``bootstrap``."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tail-{time.time_ns()}", "enable.partition.eof": True,
                  "auto.offset.reset": "error"})
    c.assign([TopicPartition(topic, 0, start)])
    out, deadline = [], time.time() + 30
    try:
        while time.time() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            if m.error():
                break
            out.append((m.offset(), m.value()))
    finally:
        c.close()
    return out


def measure(n: int, args, binary: str, work: Path, src: KafkaCluster, dst: KafkaCluster) -> list[dict]:
    topic = f"prefix-{n}"
    create_topic(src.bootstrap, topic)
    t = time.time()
    log_start = make_prefix(src.bootstrap, topic, 0, n)
    setup = time.time() - t
    produce_tail(src.bootstrap, topic)
    print(f"{n:,}: source log start {log_start:,} made in {setup:.1f}s", flush=True)

    scratch = f"baseline-{n}"
    create_topic(dst.bootstrap, scratch)
    base_n = min(n, args.baseline_offsets)
    t = time.time()
    append_repeatedly(dst.bootstrap, scratch, 0, uncompressed_filler_batch(OLD_FILLER_BATCH), OLD_FILLER_BATCH, base_n)
    baseline_rate = base_n / (time.time() - t)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": dst.bootstrap})
    admin.delete_topics([scratch])[scratch].result(30)
    print(f"{n:,}: baseline (uncompressed fillers straight to the destination) {baseline_rate / 1e6:.2f} M offsets/s", flush=True)

    rows = []
    for mode in args.modes.split(","):
        rows.append(mirror_once(n, mode, log_start, baseline_rate, binary, work, src, dst, topic, args.timeout))
    return rows


def mirror_once(n: int, mode: str, log_start: int, baseline_rate: float, binary: str, work: Path, src: KafkaCluster,
                dst: KafkaCluster, topic: str, timeout: float) -> dict:
    end = log_start + 10
    dst_pid = next(iter(dst.procs.values())).pid
    dst_cpu = cpu_seconds(dst_pid)
    started = time.time()
    proc, via = run_proxy(binary, work, f"prefix-{n}-{mode}", src, dst, topic, mode)
    peak, proxy_cpu = 0, 0.0
    try:
        while True:
            peak = max(peak, partition_bytes(dst, topic))
            proxy_cpu = cpu_seconds(proc.pid)
            wm = watermarks(via, topic)
            if wm is not None and wm == (log_start, end):
                break
            assert proc.poll() is None, f"the proxy exited ({proc.returncode}); see {work}/prefix-{n}-{mode}.log"
            assert time.time() - started < timeout, f"{mode}: mirrored {n:,} prefix offsets within {timeout}s (at {wm})"
            time.sleep(0.5)
        elapsed = time.time() - started
        dst_cpu = cpu_seconds(dst_pid) - dst_cpu
        tail = tail_offsets(via, topic, log_start)
        assert tail == [(log_start + i, f"after-the-prefix-{i}".encode()) for i in range(10)], \
            f"{mode}: the 10 records at the source's offsets through the proxy: {tail}"
        direct = watermarks(dst.bootstrap, topic)
        assert direct is not None
    finally:
        proc.terminate()
        proc.wait(60)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": dst.bootstrap})
    admin.delete_topics([topic])[topic].result(30)  # the next mode creates it afresh
    time.sleep(2)
    row = {"n": log_start, "mode": mode, "seconds": elapsed, "rate": log_start / elapsed, "baseline": baseline_rate,
           "peak_mb": peak / 1e6, "proxy_cpu": proxy_cpu, "dst_cpu": dst_cpu, "direct_end": direct[1]}
    print(f"{n:,} {mode}: mirrored in {elapsed:.1f}s = {row['rate'] / 1e6:.2f} M offsets/s ({row['rate'] / baseline_rate:.1f}x the baseline); "
          f"destination partition ends at {direct[1]:,} unshifted; peak destination partition {row['peak_mb']:.1f} MB; "
          f"proxy CPU {proxy_cpu:.1f}s, destination broker CPU {dst_cpu:.1f}s", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000000,100000000,1000000000")
    ap.add_argument("--modes", default="fill,shift", help="fill (shift_prefix_from at its maximum), shift (the default configuration)")
    ap.add_argument("--baseline-offsets", type=int, default=50_000_000)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "kafka-mirror-proxy"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--out", default=str(REPO / "docs" / "prefix-benchmark.md"))
    ap.add_argument("--append", action="store_true", help="append this run's table to --out")
    args = ap.parse_args()
    if not args.no_build and args.binary.endswith("target/release/kafka-mirror-proxy"):
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)
    from kmp_common import free_port_block
    work = bench_workdir("kmp-prefix-")
    extra = {"num.partitions": 1, "log.segment.bytes": 16 * 1024 * 1024, "log.retention.check.interval.ms": 1000}
    src = KafkaCluster("prefix-src", 1, free_port_block(101), work, extra_config=extra).start()
    dst = KafkaCluster("prefix-dst", 1, free_port_block(101), work, extra_config=extra).start()
    rows = []
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.extend(measure(n, args, args.binary, work, src, dst))
    finally:
        src.stop()
        dst.stop()
    cmd = "python3 bench/prefix_bench.py " + " ".join(sys.argv[1:])
    table = [f"\n### {time.strftime('%Y-%m-%d')}: `{cmd.strip()}`\n",
             "| source log start | mode | time to mirrored | offsets/s | baseline offsets/s (uncompressed fillers, raw) | ratio | "
             "destination ends at (unshifted) | peak destination disk | proxy CPU | destination broker CPU |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        table.append(f"| {r['n']:,} | {r['mode']} | {r['seconds']:.1f} s | {r['rate'] / 1e6:.2f} M | {r['baseline'] / 1e6:.2f} M | "
                     f"{r['rate'] / r['baseline']:.1f}x | {r['direct_end']:,} | {r['peak_mb']:.1f} MB | {r['proxy_cpu']:.1f} s | {r['dst_cpu']:.1f} s |")
    text = "\n".join(table) + "\n"
    print(text)
    if args.append:
        with open(args.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
