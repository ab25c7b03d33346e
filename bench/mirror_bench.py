"""Mirror benchmark: kafka-mirror-proxy vs Apache Kafka MirrorMaker 2, same data, same machine,
same run.

    python3 bench/mirror_bench.py [--records 1048576] [--partitions 8] [--out docs/mirror-benchmark.md]

Starts a 1-broker source and a 1-broker destination KRaft cluster (tests/harness), fills the
source topic ``bench`` with ``--records`` 1 KiB records (lz4, Kafka's ProducerPerformance), then:

1. destination ceiling: ProducerPerformance writes the same records straight into a topic of the
   destination (its payload generator is seeded, so the same bytes; lz4, acks=all, linger.ms=10,
   batch.size=131072) — what the destination takes from one producer in this run, the limit a
   copy into it is measured against;
2. kafka-mirror-proxy (release build) mirrors ``bench``; then MirrorMaker 2 (connect-mirror jars
   from Maven Central via `tests/harness/kafka-jars.sh 4.1.2 mm2`, dedicated mode, IdentityReplicationPolicy) mirrors
   the same topic after the destination copy was deleted.

The report has one row for the ceiling and one per mirror; its columns:

- startup s: process start to the first record on the destination (mirrors only);
- copy s: first record on the destination until it holds every record (watermarks read every
  0.25 s); for the ceiling, ProducerPerformance's own time from its first send to its flush
  (records / its records/s);
- records/s, MB/s: records and uncompressed record bytes (MB = 10^6 bytes) per copy second; for
  the ceiling, ProducerPerformance's records/s (its own MB/sec is MiB/s, so MB/s is converted from
  records/s the same way as for the mirrors);
- × ceiling: the mirror's records/s over the ceiling's (issue #38's goal: at least 0.9);
- CPU s (all / copy): /proc utime+stime of the mirroring process from its start to caught-up, and
  during the copy only; for the ceiling, the producer's (JVM start to exit, from its rusage);
- MB per copy CPU s, × MirrorMaker 2 per copy CPU s: throughput per CPU second of the copy, and
  its ratio to MirrorMaker 2's (mirrors only);
- destination broker CPU s: the destination broker's /proc utime+stime during the copy (for the
  ceiling: during the producer's run);
- offsets identical, lag p50 / p99 / max, added by the mirror p50 / p99 (mirrors only): end-to-end
  lag (destination receive time minus the record's CreateTime) under a steady ``--rate`` producer,
  and the part of it the mirror adds (see :func:`steady_lag`).

A figure that cannot be measured fails the run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from kafka_cluster import KafkaCluster, classpath  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402
from proxy_bench import PRODUCER_RE, cpu_seconds, java  # noqa: E402

TOPIC = "bench"


def source_linger_ms(batch_bytes: int) -> int:
    """linger.ms of a fill with batches of up to ``batch_bytes``: 10, or 0 where a batch holds a
    single 1 KiB record anyway (below about 1.1 KiB)."""
    return 10 if batch_bytes > 2048 else 0


def producer_perf(cp: str, bootstrap: str, topic: str, records: int, rate: int = -1, timeout: int = 1800,
                  batch_bytes: int = 131072) -> dict:
    """ProducerPerformance: ``records`` 1 KiB records, lz4, acks=all; linger.ms=10 with batches of up
    to ``batch_bytes`` (see :func:`source_linger_ms`)."""
    linger = source_linger_ms(batch_bytes)
    out = subprocess.run(["java", "-Xmx1g", "-cp", cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                          "--num-records", str(records), "--record-size", "1024", "--throughput", str(rate),
                          "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "compression.type=lz4",
                          f"linger.ms={linger}", f"batch.size={batch_bytes}"], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"ProducerPerformance failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    m = PRODUCER_RE.findall(out.stdout)[-1]
    return {"rec_s": float(m[1]), "mb_s": float(m[2])}


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[int] | None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{time.time_ns()}"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    except KafkaException:
        return None
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """High watermarks of ``topic``; fails the run if they cannot be read."""
    hw = watermarks(bootstrap, topic, partitions)
    if hw is None:
        raise RuntimeError(f"cannot read the end offsets of {topic} on {bootstrap}")
    return hw


def ceiling_run(cp: str, dst: KafkaCluster, topic: str, records: int) -> dict:
    """The destination ceiling: :func:`producer_perf` writes ``records`` straight into ``topic`` on
    ``dst``. Adds the producer's CPU seconds (JVM start to exit: rusage of the reaped child) and
    the destination broker's over the same span."""
    (broker,) = dst.pids().values()
    before, broker_before = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(broker)
    r = producer_perf(cp, dst.bootstrap, topic, records)
    after, broker_after = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(broker)
    return r | {"cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, "dst_cpu_s": broker_after - broker_before}


def create_topic(cp: str, bootstrap: str, topic: str, partitions: int) -> None:
    java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
         "--partitions", str(partitions), "--replication-factor", "1")


def delete_topic(cp: str, bootstrap: str, topic: str, partitions: int) -> None:
    java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--delete", "--topic", topic)
    deadline = time.time() + 60
    while watermarks(bootstrap, topic, partitions) is not None and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(2)


def copy_run(proc: subprocess.Popen, started: float, src: str, dst: str, partitions: int, expected: list[int],
             topic: str = TOPIC, dst_pid: int | None = None) -> dict:
    """Waits until the destination holds ``expected`` records per partition of ``topic``; with
    ``dst_pid`` (the destination broker) also its CPU seconds during the copy."""
    first = None
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"mirroring process exited with {proc.returncode}")
        hw = watermarks(dst, topic, partitions)
        now = time.time()
        if hw and sum(hw) > 0 and first is None:
            first, cpu_first = now, cpu_seconds(proc.pid)
            dst_first = cpu_seconds(dst_pid) if dst_pid is not None else None
        if hw and sum(hw) >= sum(expected):
            done = now
            break
        if now - started > 3600:
            raise RuntimeError("mirror did not catch up within an hour")
        time.sleep(0.25)
    cpu = cpu_seconds(proc.pid)
    r = {"startup_s": first - started, "copy_s": done - first, "cpu_s": cpu, "copy_cpu_s": cpu - cpu_first, "identical": hw == expected}
    if dst_pid is not None:
        r["dst_cpu_s"] = cpu_seconds(dst_pid) - dst_first
    return r


def steady_lag(cp: str, src: str, dst: str, partitions: int, rate: int, seconds: int, topic: str = TOPIC) -> dict:
    """Produces ``rate`` rec/s for ``seconds`` into ``topic`` on the source and reads it on both
    sides at once, one consumer per side (librdkafka, ``poll`` per record so no batching delay is
    added). Per record: ``lag`` = destination receive time minus CreateTime; ``floor`` = source
    receive time minus CreateTime (what the producer's linger and a direct consumer cost, with no
    mirror); ``added`` = destination minus source receive time of the same record (matched by
    partition and offset, which a mirror with identical offsets keeps): the mirror's own delay."""
    from confluent_kafka import Consumer, TopicPartition
    stop = threading.Event()
    seen: dict[str, dict[tuple[int, int], tuple[float, int]]] = {"src": {}, "dst": {}}

    def reader(side: str, bootstrap: str) -> Consumer:
        ends = end_offsets(bootstrap, topic, partitions)
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lag-{side}-{time.time_ns()}", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 5, "fetch.error.backoff.ms": 5})
        c.assign([TopicPartition(topic, p, ends[p]) for p in range(partitions)])
        return c
    consumers = {"src": reader("src", src), "dst": reader("dst", dst)}

    def read(side: str) -> None:
        c, out = consumers[side], seen[side]
        while not stop.is_set():
            m = c.poll(0.05)
            if m is not None and not m.error():
                out[(m.partition(), m.offset())] = (time.time() * 1000, m.timestamp()[1])
    threads = [threading.Thread(target=read, args=(side,)) for side in consumers]
    for t in threads:
        t.start()
    producer_perf(cp, src, topic, rate * seconds, rate)
    expected = sum(end_offsets(src, topic, partitions))
    deadline = time.time() + 120
    while sum(watermarks(dst, topic, partitions) or []) < expected:
        if time.time() > deadline:
            stop.set()
            raise RuntimeError("the destination did not receive the lag phase's records within 120 s of the producer's end")
        time.sleep(0.2)
    time.sleep(1)
    stop.set()
    for t in threads:
        t.join()
    for c in consumers.values():
        c.close()
    lag = sorted(t - ts for t, ts in seen["dst"].values())
    floor = sorted(t - ts for t, ts in seen["src"].values())
    added = sorted(seen["dst"][k][0] - seen["src"][k][0] for k in seen["dst"].keys() & seen["src"].keys())
    assert lag and floor and added, f"lag phase read nothing: {len(lag)} destination, {len(floor)} source, {len(added)} matched"

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))]
    return {"lag_p50_ms": q(lag, 0.50), "lag_p99_ms": q(lag, 0.99), "lag_max_ms": lag[-1], "lag_n": len(lag),
            "floor_p50_ms": q(floor, 0.50), "floor_p99_ms": q(floor, 0.99),
            "added_p50_ms": q(added, 0.50), "added_p99_ms": q(added, 0.99), "added_max_ms": added[-1], "matched": len(added)}


def mm2_config(work: Path, src: str, dst: str, topic: str, tasks: int, settings: dict[str, object]) -> Path:
    """MirrorMaker 2 (dedicated mode) copying ``topic`` from ``src`` to ``dst`` under the same name
    (IdentityReplicationPolicy), 1-broker replication factors, no heartbeats, ACL or config sync;
    ``settings`` add to or override that."""
    conf: dict[str, object] = {
        "clusters": "src, dst",
        "src.bootstrap.servers": src,
        "dst.bootstrap.servers": dst,
        "src->dst.enabled": "true",
        "src->dst.topics": topic,
        "dst->src.enabled": "false",
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "tasks.max": tasks,
        **{f"{t}.replication.factor": 1 for t in ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic", "offset.storage",
                                                    "status.storage", "config.storage")},
        "replication.factor": 1,
        "emit.heartbeats.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "sync.topic.configs.enabled": "false",
        "refresh.topics.interval.seconds": 5,
        **settings,
    }
    path = work / "mm2.properties"
    path.write_text("".join(f"{k} = {v}\n" for k, v in conf.items()))
    return path


def prepare(name: str, build: bool = True) -> tuple[str, Path, KafkaCluster, KafkaCluster]:
    """What both mirror benchmarks start from: the release binary built (unless ``build`` is
    false), MirrorMaker 2's jars, a work directory and a running 1-broker source and destination."""
    from conftest import free_port_block  # noqa: E402
    if build:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)
    mm2_libs = subprocess.run([str(REPO / "tests" / "harness" / "kafka-jars.sh"), "4.1.2", "mm2"], capture_output=True, text=True, check=True).stdout.strip()
    work = bench_workdir(f"kmp-{name}-")
    src = KafkaCluster(f"{name}-src", 1, free_port_block(101), work).start()
    dst = KafkaCluster(f"{name}-dst", 1, free_port_block(101), work).start()
    return mm2_libs, work, src, dst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_048_576, help="1 KiB records in the data set (default 1 GiB)")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rate", type=int, default=5_000, help="records/s of the steady load for the lag measurement")
    ap.add_argument("--lag-seconds", type=int, default=30)
    ap.add_argument("--mm2-tasks", type=int, default=2, help="MirrorMaker 2 tasks.max (2 cores here)")
    ap.add_argument("--also", action="append", default=[],
                    help="NAME=PATH: also measure another kafka-mirror-proxy build (e.g. an older commit) in the same run")
    ap.add_argument("--binary", help="kafka-mirror-proxy binary to measure (default: build this tree's release binary)")
    ap.add_argument("--source-batch-bytes", type=int, default=131072,
                    help="batch.size of the source fill (bytes; 1024 gives one record per batch, the case where "
                         "a mirror that keeps the source's batches writes one batch per record)")
    ap.add_argument("--out", default=str(REPO / "docs" / "mirror-benchmark.md"))
    args = ap.parse_args()

    from conftest import free_port, free_port_block  # noqa: E402

    mm2_libs, work, src, dst = prepare("mirror-bench", build=args.binary is None)
    cp = classpath()
    n, parts = args.records, args.partitions
    mb = n * 1024 / 1e6
    results: dict[str, dict] = {}
    try:
        create_topic(cp, src.bootstrap, TOPIC, parts)
        t = time.time()
        prep = producer_perf(cp, src.bootstrap, TOPIC, n, batch_bytes=args.source_batch_bytes)
        print(f"source filled: {n} records in {time.time() - t:.0f}s ({prep['mb_s']:.1f} MB/s)", flush=True)
        expected = end_offsets(src.bootstrap, TOPIC, parts)
        (dst_pid,) = dst.pids().values()

        create_topic(cp, dst.bootstrap, "ceiling", parts)
        results["ceiling"] = ceiling_run(cp, dst, "ceiling", n)
        delete_topic(cp, dst.bootstrap, "ceiling", parts)
        print(f"destination ceiling: {results['ceiling']}", flush=True)

        cfg = work / "proxy.toml"
        cfg.write_text(f'[[mirrors]]\nname = "bench"\nsource_bootstrap_servers = ["{src.bootstrap}"]\ntopics = ["{TOPIC}"]\n')
        port, admin = free_port(), free_port()

        def measure(name: str, argv: list[str], log: str, expected: list[int]) -> None:
            """Runs one mirroring process until it copied ``expected``, then the lag phase."""
            started = time.time()
            proc = subprocess.Popen(argv, stdout=open(work / log, "wb"), stderr=subprocess.STDOUT)
            try:
                results[name] = copy_run(proc, started, src.bootstrap, dst.bootstrap, parts, expected, dst_pid=dst_pid)
                print(f"{name}: {results[name]}", flush=True)
                results[name] |= steady_lag(cp, src.bootstrap, dst.bootstrap, parts, args.rate, args.lag_seconds)
            finally:
                proc.terminate()
                proc.wait(60)

        measure("kafka-mirror-proxy", [args.binary or str(REPO / "target" / "release" / "kafka-mirror-proxy"), "run", "--upstream", dst.bootstrap,
                                       "--listen", f"127.0.0.1:{port}", "--node-port-base", str(free_port_block(4) - 1),
                                       "--admin-listen", f"127.0.0.1:{admin}", "--config", str(cfg), "--log", "warn"], "proxy.log", expected)
        for extra in args.also:
            name, binary = extra.split("=", 1)
            expected = end_offsets(src.bootstrap, TOPIC, parts)
            delete_topic(cp, dst.bootstrap, TOPIC, parts)
            extra_cfg = work / f"proxy-{name}.toml"
            extra_cfg.write_text(f'[engine]\nstate_topic = "__kmp_state_{name}"\n\n' + cfg.read_text())
            port, admin = free_port(), free_port()
            measure(f"kafka-mirror-proxy ({name})", [binary, "run", "--upstream", dst.bootstrap, "--listen", f"127.0.0.1:{port}",
                                                     "--node-port-base", str(free_port_block(4) - 1), "--admin-listen",
                                                     f"127.0.0.1:{admin}", "--config", str(extra_cfg), "--log", "warn"],
                    f"proxy-{name}.log", expected)
        expected = end_offsets(src.bootstrap, TOPIC, parts)
        delete_topic(cp, dst.bootstrap, TOPIC, parts)
        props = mm2_config(work, src.bootstrap, dst.bootstrap, TOPIC, args.mm2_tasks,
                           {"emit.checkpoints.enabled": "false", "dst.producer.compression.type": "lz4",
                            "dst.producer.linger.ms": 10, "dst.producer.batch.size": 131072})
        measure("MirrorMaker 2", ["java", "-Xmx2g", "-cp", f"{mm2_libs}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(props)],
                "mm2.log", expected)
    finally:
        src.stop()
        dst.stop()

    ceiling = results["ceiling"]
    src_linger = source_linger_ms(args.source_batch_bytes)
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, Kafka 4.1.2, 1-broker source and"
             f" 1-broker destination on loopback, topic `{TOPIC}`: {parts} partitions, {n:,} records of 1 KiB ({mb / 1000:.2f} GB),"
             f" lz4, produced by ProducerPerformance (acks=all, linger.ms={src_linger},"
             f" batch.size={args.source_batch_bytes}" + ("" if src_linger else ": one record per batch") + ").",
             f"Command: `python3 bench/mirror_bench.py --records {n} --partitions {parts} --rate {args.rate} --lag-seconds {args.lag_seconds}"
             f" --mm2-tasks {args.mm2_tasks} --source-batch-bytes {args.source_batch_bytes}" + "".join(f" --also {e.split('=', 1)[0]}=…" for e in args.also) + "`", "",
             "| mirror | startup s | copy s | records/s | MB/s | × ceiling | CPU s (all / copy) | MB per copy CPU s | × MirrorMaker 2 per copy CPU s |"
             f" destination broker CPU s | offsets identical | lag p50 / p99 / max at {args.rate} rec/s | added by the mirror p50 / p99 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
             f"| destination ceiling (ProducerPerformance straight into the destination, no mirror) | — | {n / ceiling['rec_s']:.1f} |"
             f" {ceiling['rec_s']:,.0f} | {ceiling['rec_s'] * 1024 / 1e6:.1f} | 1 | {ceiling['cpu_s']:.1f} (producer) / — | — | — |"
             f" {ceiling['dst_cpu_s']:.1f} | — | — | — |"]
    extras = [f"kafka-mirror-proxy ({e.split('=', 1)[0]})" for e in args.also]
    names = ("kafka-mirror-proxy", *extras, "MirrorMaker 2")
    for name in names:
        if results[name]["copy_cpu_s"] <= 0:
            raise RuntimeError(f"{name}: no CPU time measured during the copy ({results[name]['copy_cpu_s']} s); use more --records")
    per_cpu = {name: mb / results[name]["copy_cpu_s"] for name in names}
    to_ceiling = {name: n / results[name]["copy_s"] / ceiling["rec_s"] for name in names}
    for name in names:
        r = results[name]
        rec_s, mb_s = n / r["copy_s"], mb / r["copy_s"]
        lines.append(f"| {name} | {r['startup_s']:.1f} | {r['copy_s']:.1f} | {rec_s:,.0f} | {mb_s:.1f} | {to_ceiling[name]:.2f} |"
                     f" {r['cpu_s']:.1f} / {r['copy_cpu_s']:.1f} | {per_cpu[name]:.1f} | {per_cpu[name] / per_cpu['MirrorMaker 2']:.1f} |"
                     f" {r['dst_cpu_s']:.1f} | {'yes' if r['identical'] else 'no'} |"
                     f" {r['lag_p50_ms']:.0f} / {r['lag_p99_ms']:.0f} / {r['lag_max_ms']:.0f} ms |"
                     f" {r['added_p50_ms']:.0f} / {r['added_p99_ms']:.0f} ms |")
    lines += ["", f"Copy throughput / the destination ceiling (records/s): kafka-mirror-proxy **{to_ceiling['kafka-mirror-proxy']:.2f}**"
              + "".join(f"; {e}: {to_ceiling[e]:.2f}" for e in extras) + f"; MirrorMaker 2 {to_ceiling['MirrorMaker 2']:.2f}"
              " (issue #38's goal for the mirror: at least 0.9).",
              f"Throughput per CPU second, kafka-mirror-proxy / MirrorMaker 2: "
              f"**{per_cpu['kafka-mirror-proxy'] / per_cpu['MirrorMaker 2']:.1f}×**"
              + "".join(f"; {e}: {per_cpu[e] / per_cpu['MirrorMaker 2']:.1f}×" for e in extras) + ".", "",
              "MB = 10^6 bytes of record payload (uncompressed). Copy time runs from the first record on the destination to",
              "the last; startup is process start to the first record. CPU seconds of the mirroring process: from its start",
              "to caught-up (all, JVM start-up included for MM2) and during the copy only (used for MB per CPU s).",
              "The ceiling is one Java producer (ProducerPerformance, acks=all, lz4, linger.ms = 10, batch.size = 131072) writing",
              f"the same records straight into the destination: {n / ceiling['rec_s']:.1f} s of sending by its own clock,"
              f" {ceiling['cpu_s']:.1f} CPU s of the producer (JVM start included)",
              f"and {ceiling['dst_cpu_s']:.1f} CPU s of the destination broker; the producer compresses every batch, which a mirror"
              " forwarding compressed batches does not.",
              f"MirrorMaker 2 ran with tasks.max = {args.mm2_tasks}, lz4, linger.ms = 10, batch.size = 131072; it decompresses",
              "and recompresses every batch, kafka-mirror-proxy forwards the compressed batches."]
    report = "\n".join(lines)
    print("\n" + report)
    out = Path(args.out)
    out.write_text("# Mirror benchmark: kafka-mirror-proxy vs MirrorMaker 2\n\n" + report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
