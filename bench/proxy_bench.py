"""Pass-through benchmark: Kafka's own producer/consumer perf tools, direct to the broker vs
through kafka-mirror-proxy, in the same run, 1 KiB records, two load levels.

    python3 bench/proxy_bench.py [--records N] [--rate R] [--rounds K] [--out docs/benchmarks.md]
                                 [--baseline-bin PATH]

Starts its own 1-broker KRaft cluster (tests/harness) and a release build of the proxy, runs each
measurement alternately direct and proxied (``--rounds`` times, medians reported), and prints a
markdown table: throughput ratio (proxy/direct), added p50/p99 produce latency, and proxy CPU
seconds per GB moved (from /proc, with bytes from the proxy's own /metrics).

With ``--baseline-bin PATH`` (another build of the proxy, e.g. an older commit's release binary) it
runs both proxies in front of the same broker and every round measures three paths alternately:
direct, through the baseline ("before") and through this tree's release build ("after"); the
order rotates from round to round. The tables then give both proxies' ratios to direct, added
latency and CPU per GB, and the after/before ratio (per round, then the median). The baseline gets
the same command line as the current build, nothing more.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from kafka_cluster import KAFKA_VERSION, KafkaCluster, classpath  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402

PRODUCER_RE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                         r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def proxy_bytes(admin_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5).read().decode()
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("kmp_bytes_total{"))


def java(cp: str, main: str, *args: str) -> str:
    out = subprocess.run(["java", "-Xmx1g", "-cp", cp, main, *args], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{main} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return out.stdout


def produce(cp: str, bootstrap: str, topic: str, records: int, rate: int) -> dict:
    out = java(cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
               "--record-size", "1024", "--throughput", str(rate),
               "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=5", "batch.size=65536")
    m = PRODUCER_RE.findall(out)[-1]
    return {"rec_s": float(m[1]), "mb_s": float(m[2]), "p50": float(m[5]), "p99": float(m[7]), "avg": float(m[3])}


def consume(cp: str, bootstrap: str, topic: str, records: int) -> dict:
    out = java(cp, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
               "--messages", str(records), "--timeout", "120000", "--group", f"bench-{time.time_ns()}")
    row = [c.strip() for c in out.strip().splitlines()[-1].split(",")]
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, ...
    return {"mb_s": float(row[3]), "rec_s": float(row[5])}


def latency(cp: str, bootstrap: str, topic: str, count: int) -> dict:
    out = subprocess.run(["java", "-cp", cp, str(REPO / "bench" / "LatencyProbe.java"), bootstrap, topic, str(count)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"LatencyProbe failed:\n{out.stderr[-2000:]}")
    return {k: float(v) for k, v in (kv.split("=") for kv in out.stdout.split())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=600_000, help="records per unlimited-rate run")
    ap.add_argument("--rate", type=int, default=10_000, help="records/s of the rate-limited level")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--probe", type=int, default=3000, help="sequential sends per latency-probe run")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--baseline-bin", help="a second proxy binary (the 'before') measured in the same run")
    args = ap.parse_args()
    if args.baseline_bin and not os.access(args.baseline_bin, os.X_OK):
        ap.error(f"--baseline-bin {args.baseline_bin}: not an executable file")

    from conftest import free_port, free_port_block  # noqa: E402

    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)
    work = bench_workdir("kmp-bench-")
    cluster = KafkaCluster("bench", 1, free_port_block(101), work).start()
    cp = classpath()

    def start_proxy(binary: str, log: str) -> tuple[subprocess.Popen, str, int]:
        port, admin, base = free_port(), free_port(), free_port_block(8)
        proc = subprocess.Popen([binary, "run", "--upstream", cluster.bootstrap,
                                 "--listen", f"127.0.0.1:{port}", "--node-port-base", str(base - 1),
                                 "--admin-listen", f"127.0.0.1:{admin}", "--log", "warn"],
                                stdout=open(work / log, "wb"), stderr=subprocess.STDOUT)
        return proc, f"127.0.0.1:{port}", admin

    proxies = [start_proxy(str(REPO / "target" / "release" / "kafka-mirror-proxy"), "proxy.log")]
    proxy, proxied_bs, admin = proxies[0]
    # mode -> (bootstrap, the proxy whose CPU and bytes are read around it, its admin port); "proxy" is
    # this tree's build ("after"), "before" the baseline; direct reads the idle current proxy, unused
    modes = {"direct": (cluster.bootstrap, proxy, admin)}
    if args.baseline_bin:
        proxies.append(start_proxy(str(Path(args.baseline_bin).resolve()), "proxy-baseline.log"))
        modes["before"] = (proxies[1][1], proxies[1][0], proxies[1][2])
    modes["proxy"] = (proxied_bs, proxy, admin)
    time.sleep(1)
    results: dict[tuple[str, str], list[dict]] = {}
    cpu: dict[str, list[tuple[float, float]]] = {}
    try:
        java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", cluster.bootstrap, "--create",
             "--topic", "warmup", "--partitions", "6", "--replication-factor", "1")
        for _, bs, _ in proxies:
            produce(cp, bs, "warmup", 50_000, -1)
        java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", cluster.bootstrap, "--create",
             "--topic", "latency-probe", "--partitions", "1", "--replication-factor", "1")
        levels = [("unlimited", -1, args.records), (f"{args.rate} rec/s", args.rate, args.rate * 10)]
        for r in range(args.rounds):
            order = list(modes)
            if args.baseline_bin:  # three paths: rotate the order so none is always first or last
                order = order[r % 3:] + order[:r % 3]
            for level, rate, n in levels:
                for mode in order:
                    bs, pproc, padmin = modes[mode]
                    topic = f"bench-{r}-{rate}-{mode}"
                    java(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", cluster.bootstrap, "--create",
                         "--topic", topic, "--partitions", "6", "--replication-factor", "1")
                    c0, b0 = cpu_seconds(pproc.pid), proxy_bytes(padmin)
                    p = produce(cp, bs, topic, n, rate)
                    c1, b1 = cpu_seconds(pproc.pid), proxy_bytes(padmin)
                    results.setdefault((level, f"produce-{mode}"), []).append(p)
                    if rate == -1:
                        c = consume(cp, bs, topic, n)
                        c2, b2 = cpu_seconds(pproc.pid), proxy_bytes(padmin)
                        results.setdefault((level, f"consume-{mode}"), []).append(c)
                        if mode != "direct":
                            cpu.setdefault(f"consume|{mode}", []).append((c2 - c1, b2 - b1))
                    if mode != "direct":
                        cpu.setdefault(f"produce {level}|{mode}", []).append((c1 - c0, b1 - b0))
                    print(f"round {r} {level} {mode}: produce {p}" + (f" consume {c}" if rate == -1 else ""), flush=True)
            for mode in order:
                bs = modes[mode][0]
                lat = latency(cp, bs, "latency-probe", args.probe)
                results.setdefault(("probe", mode), []).append(lat)
                print(f"round {r} latency probe {mode}: {lat}", flush=True)
    finally:
        for proc, _, _ in proxies:
            proc.terminate()
            proc.wait(30)
        cluster.stop()

    med = lambda rows, k: statistics.median(x[k] for x in rows)  # noqa: E731

    def ratio(d: list[dict], p: list[dict], k: str) -> str:
        r = [b[k] / a[k] for a, b in zip(d, p)]
        return f"{statistics.median(r):.3f} ({min(r):.2f}–{max(r):.2f})"
    if args.baseline_bin:
        report = baseline_report(args, levels, results, cpu, med, ratio)
    else:
        report = default_report(args, levels, results, cpu, med, ratio)
    print("\n" + report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = "# Benchmarks\n\n## Pass-through: direct vs through the proxy\n\n"
    if args.baseline_bin:
        header = "# Benchmarks\n\n## Pass-through: baseline (before) vs current (after) proxy, same run\n\n"
    out.write_text(header + report + "\n")
    return 0


def default_report(args, levels, results, cpu, med, ratio) -> str:
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, Kafka 4.1.2 (1 broker, "
             f"6 partitions, RF 1), 1 KiB records, acks=1, medians of {args.rounds} alternating rounds.",
             f"Command: `python3 bench/proxy_bench.py --records {args.records} --rate {args.rate} --rounds {args.rounds} --probe {args.probe}`", "",
             "Ratio = median over rounds of (proxy / direct) measured back to back in the same round; the range shows",
             "how noisy the 2-core machine is (the broker, the perf tool and the proxy share it).", "",
             "| load | direct (median) | through proxy (median) | ratio (range) | p50 added | p99 added |", "|---|---|---|---|---|---|"]
    for level, rate, _ in levels:
        d, p = results[(level, "produce-direct")], results[(level, "produce-proxy")]
        lines.append(f"| produce {level} | {med(d, 'rec_s'):,.0f} rec/s ({med(d, 'mb_s'):.1f} MB/s), p50 {med(d, 'p50'):.0f} ms,"
                     f" p99 {med(d, 'p99'):.0f} ms | {med(p, 'rec_s'):,.0f} rec/s ({med(p, 'mb_s'):.1f} MB/s), p50 {med(p, 'p50'):.0f} ms,"
                     f" p99 {med(p, 'p99'):.0f} ms | {ratio(d, p, 'rec_s')} |"
                     f" {med(p, 'p50') - med(d, 'p50'):+.0f} ms | {med(p, 'p99') - med(d, 'p99'):+.0f} ms |")
        if rate == -1:
            d, p = results[(level, "consume-direct")], results[(level, "consume-proxy")]
            lines.append(f"| consume {level} | {med(d, 'rec_s'):,.0f} rec/s ({med(d, 'mb_s'):.1f} MB/s) |"
                         f" {med(p, 'rec_s'):,.0f} rec/s ({med(p, 'mb_s'):.1f} MB/s) | {ratio(d, p, 'rec_s')} | | |")
    d, p = results[("probe", "direct")], results[("probe", "proxy")]
    lines += ["", f"Produce round trip, one 1 KiB record at a time (acks=1, bench/LatencyProbe.java, {args.probe} sends per run):", "",
              "| | direct | through proxy | added |", "|---|---|---|---|"]
    for k in ("p50_us", "p99_us", "avg_us"):
        lines.append(f"| {k[:-3]} | {med(d, k):.0f} µs | {med(p, k):.0f} µs | {med(p, k) - med(d, k):+.0f} µs |")
    lines += ["", "| proxy CPU | CPU seconds | GB moved | CPU s per GB | millicores per MB/s |", "|---|---|---|---|---|"]
    for k, rows in cpu.items():
        s, b = sum(x[0] for x in rows), sum(x[1] for x in rows)
        lines.append(f"| {k.split('|')[0]} | {s:.2f} | {b / 1e9:.2f} | {s / (b / 1e9):.2f} | {1000 * s / (b / 1e6):.2f} |")
    return "\n".join(lines)


def baseline_report(args, levels, results, cpu, med, ratio) -> str:
    """Three paths: direct, "before" (--baseline-bin) and "proxy" (this tree's build, the "after")."""
    lines = [f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, Kafka {KAFKA_VERSION} (1 broker, "
             f"6 partitions, RF 1), 1 KiB records, acks=1, medians of {args.rounds} rounds, each measuring direct, before and "
             "after back to back (order rotating per round).",
             f"Command: `python3 bench/proxy_bench.py --records {args.records} --rate {args.rate} --rounds {args.rounds} --probe {args.probe}"
             f" --baseline-bin {args.baseline_bin}`", "",
             "before = the baseline binary, after = this tree's release build. proxy/direct and after/before are medians over",
             "rounds of the per-round ratio (range in parentheses); added latency = median through the proxy minus median direct.", "",
             "| load | direct (median) | before: proxy/direct | after: proxy/direct | after/before | p50 added (before / after) |"
             " p99 added (before / after) |", "|---|---|---|---|---|---|---|"]
    for level, rate, _ in levels:
        for op in ("produce",) + (("consume",) if rate == -1 else ()):
            d, b, a = (results[(level, f"{op}-{m}")] for m in ("direct", "before", "proxy"))
            row = (f"| {op} {level} | {med(d, 'rec_s'):,.0f} rec/s ({med(d, 'mb_s'):.1f} MB/s) | {ratio(d, b, 'rec_s')} |"
                   f" {ratio(d, a, 'rec_s')} | {ratio(b, a, 'rec_s')} |")
            if op == "produce":
                row += (f" {med(b, 'p50') - med(d, 'p50'):+.0f} / {med(a, 'p50') - med(d, 'p50'):+.0f} ms |"
                        f" {med(b, 'p99') - med(d, 'p99'):+.0f} / {med(a, 'p99') - med(d, 'p99'):+.0f} ms |")
            else:
                row += " | |"
            lines.append(row)
    d, b, a = (results[("probe", m)] for m in ("direct", "before", "proxy"))
    lines += ["", f"Produce round trip, one 1 KiB record at a time (acks=1, bench/LatencyProbe.java, {args.probe} sends per run):", "",
              "| | direct | before | after | added before | added after |", "|---|---|---|---|---|---|"]
    for k in ("p50_us", "p99_us", "avg_us"):
        lines.append(f"| {k[:-3]} | {med(d, k):.0f} µs | {med(b, k):.0f} µs | {med(a, k):.0f} µs |"
                     f" {med(b, k) - med(d, k):+.0f} µs | {med(a, k) - med(d, k):+.0f} µs |")
    lines += ["", "| proxy CPU | before: CPU s / GB moved | before: CPU s per GB | after: CPU s / GB moved | after: CPU s per GB |"
              " after/before |", "|---|---|---|---|---|---|"]
    for k in dict.fromkeys(key.split("|")[0] for key in cpu):
        cells, per_gb = [], []
        for m in ("before", "proxy"):
            rows = cpu[f"{k}|{m}"]
            s, g = sum(x[0] for x in rows), sum(x[1] for x in rows) / 1e9
            cells.append(f"{s:.2f} / {g:.2f} | {s / g:.2f}")
            per_gb.append(s / g)
        lines.append(f"| {k} | {cells[0]} | {cells[1]} | {per_gb[1] / per_gb[0]:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
