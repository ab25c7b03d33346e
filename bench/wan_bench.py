"""WAN benchmark: kafka-mirror-proxy vs MirrorMaker 2 reading a source cluster that is 0, 20 or 100 ms
of round trip away, same data, same machine, same run.

    python3 bench/wan_bench.py [--rtts 0,20,100] [--partitions 1,64] [--mb 256] [--rate 5000]
                               [--lag-seconds 20] [--no-mm2] [--also NAME=PATH] [--out docs/wan-benchmark.md]

Starts a 1-broker source KRaft cluster with a second listener (WAN) whose advertised address is a
toxiproxy relay (tests/harness/latency.py; half the round trip added to each direction), and a
1-broker destination. Mirrors reach the source only through the relay (they bootstrap from the WAN
listener, whose metadata names the relay); the load producer and the lag consumer stay direct.

For every partition count a topic is filled with ``--mb`` MB of 1 KiB records (lz4,
ProducerPerformance). Then, for every round trip and every mirror (kafka-mirror-proxy's release
build, the builds given with ``--also``, MirrorMaker 2), on an emptied destination:
copy throughput (first record on the destination until the topic's fill is there; later lag phases
add records, which are copied too but not timed) and the end-to-end
lag p50/p99 (destination receive time minus CreateTime) while ``--rate`` records/s of 1 KiB are
produced for ``--lag-seconds``. The report gives each throughput also as a ratio to the same
mirror's at 0 ms in this run.

``KMP_BENCH_LOG`` sets the proxies' log filter (default ``warn``; e.g.
``warn,kmp_mirror_engine::fetch_stream=trace`` shows when each Fetch was answered), and
``KMP_BENCH_KEEP=1`` keeps the scratch directory with their logs.
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
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from kafka_cluster import KafkaCluster, classpath  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402
from latency import LatencyRelay  # noqa: E402
from mirror_bench import create_topic, delete_topic, mm2_config, producer_perf, steady_lag, watermarks  # noqa: E402
from proxy_bench import cpu_seconds  # noqa: E402


def copy(proc: subprocess.Popen, started: float, dst: str, topic: str, partitions: int, filled: int,
         expected: list[int], limit_s: float) -> dict:
    """Waits until the destination holds ``expected`` records of ``topic`` (or ``limit_s``
    passed). Throughput counts the first ``filled`` records (the topic's fill, the same for every
    mirror; records the lag phases of earlier runs added come after them)."""
    first = filled_at = None
    hw: list[int] = []
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"mirroring process exited with {proc.returncode}")
        hw = watermarks(dst, topic, partitions) or []
        now = time.time()
        if hw and sum(hw) > 0 and first is None:
            first, cpu_first = now, cpu_seconds(proc.pid)
        if hw and sum(hw) >= filled and filled_at is None:
            filled_at, cpu_filled = now, cpu_seconds(proc.pid)
        if hw and sum(hw) >= sum(expected):
            break
        if now - started > limit_s:
            break
        time.sleep(0.1)
    if first is None:
        raise RuntimeError(f"nothing reached the destination within {limit_s} s")
    if filled_at is None:
        seconds, copied, cpu = now - first, sum(hw), cpu_seconds(proc.pid) - cpu_first
    else:
        seconds, copied, cpu = filled_at - first, filled, cpu_filled - cpu_first
    seconds = max(seconds, 0.1)
    return {"startup_s": first - started, "copy_s": seconds, "mb_s": copied * 1024 / 1e6 / seconds,
            "complete": sum(hw) >= sum(expected), "identical": hw == expected, "copy_cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtts", default="0,20,100", help="round trips to the source in ms (comma-separated; 0 first)")
    ap.add_argument("--partitions", default="1,64", help="partition counts (one topic each)")
    ap.add_argument("--mb", type=int, default=256, help="MB of 1 KiB records per topic")
    ap.add_argument("--rate", type=int, default=5_000, help="records/s (1 KiB) of the steady load for the lag")
    ap.add_argument("--lag-seconds", type=int, default=20)
    ap.add_argument("--copy-limit", type=float, default=300, help="seconds a copy may take before it is cut off")
    ap.add_argument("--mm2-tasks", type=int, default=2)
    ap.add_argument("--no-mm2", action="store_true", help="skip MirrorMaker 2")
    ap.add_argument("--also", action="append", default=[],
                    help="NAME=PATH[,KEY=VALUE...]: also measure another kafka-mirror-proxy build (or the same one) with these"
                         " [[mirrors]] settings, e.g. hedge=target/release/kafka-mirror-proxy,fetch_hedge_min_rtt_ms=20")
    ap.add_argument("--binary", help="kafka-mirror-proxy binary to measure (default: build this tree's release binary)")
    ap.add_argument("--out", default=str(REPO / "docs" / "wan-benchmark.md"))
    args = ap.parse_args()
    rtts = [int(x) for x in args.rtts.split(",")]
    counts = [int(x) for x in args.partitions.split(",")]

    from kmp_common import free_port, free_port_block  # noqa: E402

    if not args.binary:
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)
    mm2_libs = subprocess.run([str(REPO / "tests" / "harness" / "kafka-jars.sh"), "4.1.2", "mm2"], capture_output=True,
                              text=True, check=True).stdout.strip()
    work = bench_workdir("kmp-wan-bench-")
    cp = classpath()
    src = KafkaCluster("wan-src", 1, free_port_block(101), work, wan=True).start()
    dst = KafkaCluster("wan-dst", 1, free_port_block(101), work).start()
    builds = [("kafka-mirror-proxy", args.binary or str(REPO / "target" / "release" / "kafka-mirror-proxy"))]
    builds += [(f"kafka-mirror-proxy ({e.split('=', 1)[0]})", e.split("=", 1)[1].split(",")[0]) for e in args.also]
    # Extra [[mirrors]] settings per build ("KEY=VALUE" after the path, as TOML lines).
    settings = {f"kafka-mirror-proxy ({e.split('=', 1)[0]})": "".join(f"{kv.split('=', 1)[0]} = {kv.split('=', 1)[1]}\n"
                                                                        for kv in e.split("=", 1)[1].split(",")[1:])
                for e in args.also}
    mm2_variants = {"MirrorMaker 2": {}, "MirrorMaker 2 (fetch 16 MiB)": {"src.consumer.max.partition.fetch.bytes": 16 * 1024 * 1024}}
    mirrors = [name for name, _ in builds] + ([] if args.no_mm2 else list(mm2_variants))
    results: dict[tuple[int, int, str], dict] = {}
    measured_rtt: dict[int, float] = {}
    relay = LatencyRelay(src, work).start()
    try:
        for parts in counts:
            topic = f"wan{parts}"
            create_topic(cp, src.bootstrap, topic, parts)
            filled = args.mb * 1_000_000 // 1024
            producer_perf(cp, src.bootstrap, topic, filled)
            for rtt in rtts:
                relay.set_rtt(rtt)
                measured_rtt[rtt] = relay.measured_rtt_ms()
                for name in mirrors:
                    expected = watermarks(src.bootstrap, topic, parts) or []
                    if watermarks(dst.bootstrap, topic, parts) is not None:
                        delete_topic(cp, dst.bootstrap, topic, parts)
                    tag = f"{parts}p-{rtt}ms-{mirrors.index(name)}"
                    if name in mm2_variants:
                        # Internal topics of its own per run: with shared ones MirrorMaker 2 resumes from the
                        # offsets an earlier run stored and never copies the fill (found by bench/mm2_wan_probe.py).
                        fresh = {f"{t}.storage.topic": f"mm2-{t}s.{tag}.internal" for t in ("offset", "config", "status")}
                        props = mm2_config(work, src.wan_bootstrap, dst.bootstrap, topic, args.mm2_tasks,
                                           {"emit.checkpoints.enabled": "false", "dst.producer.compression.type": "lz4",
                                            "dst.producer.linger.ms": 10, "dst.producer.batch.size": 131072, **fresh,
                                            **mm2_variants[name]})
                        argv = ["java", "-Xmx2g", "-cp", f"{mm2_libs}/*", "org.apache.kafka.connect.mirror.MirrorMaker", str(props)]
                    else:
                        binary = dict(builds)[name]
                        cfg = work / f"proxy-{tag}.toml"
                        cfg.write_text(f'[engine]\nstate_topic = "__kmp_state_{tag}"\n\n[[mirrors]]\nname = "wan"\n'
                                       f'source_bootstrap_servers = ["{src.wan_bootstrap}"]\ntopics = ["{topic}"]\n'
                                       + settings.get(name, ""))
                        argv = [binary, "run", "--upstream", dst.bootstrap, "--listen", f"127.0.0.1:{free_port()}",
                                "--node-port-base", str(free_port_block(4) - 1), "--admin-listen", f"127.0.0.1:{free_port()}",
                                "--config", str(cfg), "--log", os.environ.get("KMP_BENCH_LOG", "warn")]
                    started = time.time()
                    proc = subprocess.Popen(argv, stdout=open(work / f"{tag}.log", "wb"), stderr=subprocess.STDOUT)
                    try:
                        r = copy(proc, started, dst.bootstrap, topic, parts, filled, expected, args.copy_limit)
                        if r["complete"]:
                            r |= steady_lag(cp, src.bootstrap, dst.bootstrap, parts, args.rate, args.lag_seconds, topic)
                        results[(parts, rtt, name)] = r
                        print(f"{parts} partitions, {rtt} ms, {name}: {r}", flush=True)
                    finally:
                        proc.terminate()
                        proc.wait(60)
    finally:
        relay.stop()
        src.stop()
        dst.stop()

    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, Kafka 4.1.2, 1-broker source"
             " and 1-broker destination on loopback; the mirrors reach the source through toxiproxy 2.5.0 (half the round"
             f" trip added to each direction); {args.mb} MB of 1 KiB records (lz4) per topic; lag under {args.rate:,} records/s.",
             f"Command: `python3 bench/wan_bench.py --rtts {args.rtts} --partitions {args.partitions} --mb {args.mb} --rate {args.rate}"
             f" --lag-seconds {args.lag_seconds}" + (" --no-mm2" if args.no_mm2 else "")
             + "".join(f" --also {e.split('=', 1)[0]}=…" + "".join("," + kv for kv in e.split(",")[1:]) for e in args.also) + "`", "",
             "Measured round trip through the relay (ApiVersions, median of 5): "
             + ", ".join(f"{rtt} ms → {measured_rtt[rtt]:.1f} ms" for rtt in rtts) + ".", "",
             "| partitions | RTT | mirror | copy MB/s | vs same mirror at 0 ms | MB/s per partition | copy s | copy CPU s | complete, offsets identical | lag p50 / p99 / max | floor p50 / p99 | added by the mirror p50 / p99 / max |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for parts in counts:
        for rtt in rtts:
            for name in mirrors:
                r = results.get((parts, rtt, name))
                if r is None:
                    continue
                base = results.get((parts, rtts[0], name))
                ratio = f"{r['mb_s'] / base['mb_s']:.2f}" if base else "–"
                lag = (f"{r['lag_p50_ms']:.0f} / {r['lag_p99_ms']:.0f} / {r['lag_max_ms']:.0f} ms | "
                       f"{r['floor_p50_ms']:.0f} / {r['floor_p99_ms']:.0f} ms | "
                       f"{r['added_p50_ms']:.0f} / {r['added_p99_ms']:.0f} / {r['added_max_ms']:.0f} ms" if "lag_p50_ms" in r
                       else "not measured (copy incomplete) | – | –")
                lines.append(f"| {parts} | {rtt} ms | {name} | {r['mb_s']:.1f} | {ratio} | {r['mb_s'] / parts:.1f} | {r['copy_s']:.1f} |"
                             f" {r['copy_cpu_s']:.1f} | {'yes' if r['complete'] else 'NO'}, {'yes' if r['identical'] else 'NO'} | {lag} |")
    lines += ["", "MB = 10^6 bytes of record payload. MirrorMaker 2: dedicated mode, tasks.max = "
              f"{args.mm2_tasks}, its default consumer settings (max.partition.fetch.bytes 1 MiB), lz4, linger.ms 10,"
              " batch.size 131072, internal topics of its own per run; \"fetch 16 MiB\": the same with"
              " src.consumer.max.partition.fetch.bytes = 16 MiB (what an operator tunes for a distant source; the"
              " size kafka-mirror-proxy's fetches grow to). kafka-mirror-proxy: default settings (fetch_max_bytes 1 MiB growing to"
              " fetch_grow_max_bytes 16 MiB while answers come back full).", "",
              "Lag, per record, read on both sides at once by librdkafka consumers polling one record at a time (direct, not"
              " through the relay): lag = destination receive time − CreateTime; floor = source receive time − CreateTime (the"
              " load producer's linger.ms 10 and a direct consumer, no mirror); added by the mirror = destination − source"
              " receive time of the same record (same partition and offset)."]
    report = "\n".join(lines)
    print("\n" + report)
    Path(args.out).write_text("# WAN benchmark: mirroring from a distant source\n\n" + report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
