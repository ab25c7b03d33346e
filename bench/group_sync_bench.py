"""Consumer-group offset sync benchmark: kafka-mirror-proxy vs MirrorMaker 2's checkpoint
connector, same data, same machine, same run, same sync interval.

    python3 bench/group_sync_bench.py [--interval-s 10] [--rounds 10] [--groups 4] [--out docs/group-sync-benchmark.md]

Starts a 1-broker source and a 1-broker destination KRaft cluster (tests/harness). The source
topic ``orders`` (4 partitions) receives a steady load while, each round, ``--groups`` consumer
groups commit new offsets on the source (an offsets-only commit, like a consumer that stopped).
For each mirror — kafka-mirror-proxy (release build, ``group_offset_sync_interval_ms``) and
MirrorMaker 2 (dedicated mode, IdentityReplicationPolicy, ``sync.group.offsets.enabled``,
checkpoints and group sync every ``--interval-s``) — it measures, per committed partition offset:

* latency: source commit returned → the destination group first shows a new offset for it
  (each round starts at a random phase of the sync interval);
* error: source committed offset minus the destination's offset at the end of the round, i.e.
  records the group reads again after failing over (0 = exact; negative would be skipped data).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "bench"))

from kafka_cluster import classpath  # noqa: E402
from mirror_bench import create_topic, mm2_config, prepare, watermarks  # noqa: E402

TOPIC, PARTITIONS = "orders", 4


class Load:
    """A steady producer into the source topic (about ``rate`` records/s) until stopped."""

    def __init__(self, bootstrap: str, rate: int):
        from confluent_kafka import Producer
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.rate, self.stop = rate, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            for _ in range(self.rate // 10):
                self.p.produce(TOPIC, value=b"x" * 200, partition=i % PARTITIONS)
                i += 1
            self.p.poll(0)
            time.sleep(0.1)
        self.p.flush(30)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def committed(bootstrap: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        c.close()


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def measure(src: str, dst: str, groups: list[str], rounds: int, interval_s: float) -> dict:
    """Rounds of source commits; per partition offset the latency until the destination shows a
    new value and the final error (source minus destination)."""
    latencies, errors = [], []
    for r in range(rounds):
        # A random phase against the mirror's sync loop, so latencies sample the whole interval.
        time.sleep(1 + random.uniform(0, interval_s))
        ends = watermarks(src, TOPIC, PARTITIONS) or [0] * PARTITIONS
        want = {g: {p: max(0, ends[p] - random.randrange(1, 500)) for p in range(PARTITIONS)} for g in groups}
        before = {g: committed(dst, g) for g in groups}
        t0 = {}
        for g in groups:
            commit(src, g, want[g])
            t0[g] = time.time()
        pending = {(g, p) for g in groups for p in range(PARTITIONS)}
        deadline = time.time() + 3 * interval_s + 10
        while pending and time.time() < deadline:
            for g in {g for g, _ in pending}:
                now_c, now = committed(dst, g), time.time()
                for p in range(PARTITIONS):
                    if (g, p) in pending and now_c[p] != before[g][p] and now_c[p] >= 0:
                        latencies.append(now - t0[g])
                        pending.discard((g, p))
            time.sleep(0.1)
        missed = len(pending)
        time.sleep(1)
        for g in groups:
            final = committed(dst, g)
            errors += [want[g][p] - final[p] if final[p] >= 0 else None for p in range(PARTITIONS)]
        print(f"  round {r + 1}: {len(groups) * PARTITIONS - missed} offsets arrived, {missed} did not within {3 * interval_s + 10:.0f}s", flush=True)
    known = [e for e in errors if e is not None]
    return {
        "offsets": len(errors),
        "arrived": len(latencies),
        "latency_p50_s": statistics.median(latencies) if latencies else float("nan"),
        "latency_max_s": max(latencies) if latencies else float("nan"),
        "exact": sum(1 for e in known if e == 0),
        "replayed_mean": statistics.mean(known) if known else float("nan"),
        "replayed_max": max(known) if known else float("nan"),
        "skipped": sum(1 for e in known if e < 0),
        "missing": sum(1 for e in errors if e is None),
    }


def wait_caught_up(src: str, dst: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        a, b = watermarks(src, TOPIC, PARTITIONS), watermarks(dst, TOPIC, PARTITIONS)
        if a and b and all(y >= x - 2000 for x, y in zip(a, b)):
            return
        time.sleep(0.5)
    raise RuntimeError("mirror did not catch up")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval-s", type=int, default=10, help="sync interval of both mirrors (kafka-mirror-proxy's default)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--rate", type=int, default=2000, help="records/s of the steady load")
    ap.add_argument("--out", default=str(REPO / "docs" / "group-sync-benchmark.md"))
    args = ap.parse_args()

    from conftest import free_port, free_port_block  # noqa: E402

    mm2_libs, work, src, dst = prepare("group-sync-bench")
    cp = classpath()
    results: dict[str, dict] = {}
    load = None
    try:
        create_topic(cp, src.bootstrap, TOPIC, PARTITIONS)
        load = Load(src.bootstrap, args.rate)
        runs = [
            ("kafka-mirror-proxy", "kmp", lambda: [str(REPO / "target" / "release" / "kafka-mirror-proxy"), "run", "--upstream", dst.bootstrap,
                                                   "--listen", f"127.0.0.1:{free_port()}", "--node-port-base", str(free_port_block(4) - 1),
                                                   "--admin-listen", f"127.0.0.1:{free_port()}", "--config", str(proxy_cfg), "--log", "warn"]),
            ("MirrorMaker 2", "mm2", lambda: ["java", "-Xmx1g", "-cp", f"{mm2_libs}/*", "org.apache.kafka.connect.mirror.MirrorMaker",
                                              str(mm2_config(work, src.bootstrap, dst.bootstrap, TOPIC, 2, {
                                                  "src->dst.groups": "mm2-.*", "emit.checkpoints.enabled": "true",
                                                  "emit.checkpoints.interval.seconds": args.interval_s, "sync.group.offsets.enabled": "true",
                                                  "sync.group.offsets.interval.seconds": args.interval_s,
                                                  "refresh.groups.interval.seconds": 5}))]),
        ]
        proxy_cfg = work / "proxy.toml"
        proxy_cfg.write_text(f'[[mirrors]]\nname = "bench"\nsource_bootstrap_servers = ["{src.bootstrap}"]\ntopics = ["{TOPIC}"]\n'
                             f'group_offset_sync_interval_ms = {args.interval_s * 1000}\ngroups_include = ["kmp-.*"]\n')
        for name, prefix, argv in runs:
            print(f"{name}:", flush=True)
            proc = subprocess.Popen(argv(), stdout=open(work / f"{prefix}.log", "wb"), stderr=subprocess.STDOUT)
            try:
                wait_caught_up(src.bootstrap, dst.bootstrap)
                groups = [f"{prefix}-g{i}" for i in range(args.groups)]
                results[name] = measure(src.bootstrap, dst.bootstrap, groups, args.rounds, args.interval_s)
                print(f"  {results[name]}", flush=True)
            finally:
                proc.terminate()
                proc.wait(60)
            if name == "kafka-mirror-proxy":
                subprocess.run(["java", "-cp", cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", dst.bootstrap, "--delete", "--topic", TOPIC],
                               capture_output=True, check=True)
                while watermarks(dst.bootstrap, TOPIC, PARTITIONS) is not None:
                    time.sleep(0.5)
                time.sleep(2)
    finally:
        if load:
            load.close()
        src.stop()
        dst.stop()

    ours, mm2 = results["kafka-mirror-proxy"], results["MirrorMaker 2"]
    rows = ["| mirror | offsets committed | arrived | latency p50 / max (s) | exact | records replayed after failover, mean / max | skipped ahead |",
            "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        rows.append(f"| {name} | {r['offsets']} | {r['arrived']} | {r['latency_p50_s']:.2f} / {r['latency_max_s']:.2f} | {r['exact']} of {r['offsets']} |"
                    f" {r['replayed_mean']:.1f} / {r['replayed_max']} | {r['skipped']} |")
    ratio = mm2["latency_p50_s"] / ours["latency_p50_s"] if ours["latency_p50_s"] else float("nan")
    report = "\n".join([
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, Kafka 4.1.2, 1-broker source and destination,"
        f" topic `{TOPIC}` ({PARTITIONS} partitions) under {args.rate} records/s, {args.groups} groups × {args.rounds} rounds of source commits,"
        f" both mirrors syncing every {args.interval_s} s.", "",
        f"Command: `python3 bench/group_sync_bench.py --interval-s {args.interval_s} --rounds {args.rounds} --groups {args.groups} --rate {args.rate}`", "",
        *rows, "",
        f"Exact destination offsets: kafka-mirror-proxy {ours['exact']} of {ours['offsets']}, MirrorMaker 2 {mm2['exact']} of {mm2['offsets']};"
        f" records a group reads again after failing over, per partition: {ours['replayed_mean']:.1f} vs {mm2['replayed_mean']:.1f} on average"
        f" (max {ours['replayed_max']} vs {mm2['replayed_max']}).", "",
        f"Median commit-to-destination latency, MirrorMaker 2 / kafka-mirror-proxy: **{ratio:.1f}×** (both are bound by the sync interval).", "",
        "Latency = source commit returned → the destination group first shows a new offset for that partition (polled every 0.1 s; for MirrorMaker 2 that first value is usually behind the commit)."
        " Records replayed = source committed offset minus the destination's committed offset at the end of the round: what the group"
        " reads again after failing over. MirrorMaker 2 translates through its offset-sync topic (one sync per `offset.lag.max` = 100"
        " records by default) and commits only offsets it can prove, so it lands at or behind the source;"
        " kafka-mirror-proxy copies the offset itself because offsets are identical.",
    ])
    out = Path(args.out)
    out.write_text("# Group offset sync benchmark: kafka-mirror-proxy vs MirrorMaker 2\n\n" + report + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
