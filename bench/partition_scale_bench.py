"""Partition-scale benchmark: what mirroring N partitions costs the proxy and the source broker.

    python3 bench/partition_scale_bench.py [--sizes 100,1000,10000] [--idle-seconds 20]
        [--binary new=target/release/kafka-mirror-proxy] [--binary old=/path/to/older/build]
        [--out docs/partition-scale-benchmark.md]

Starts a 1-broker source and a 1-broker destination KRaft cluster (tests/harness). For each size N
it creates a source topic of N partitions holding ``--records-per-partition`` 200-byte records
each, and for each binary:

1. starts that proxy with a config-file mirror of the topic (its own state topic), and times the
   catch-up (destination high watermarks equal the source's);
2. idle, mirroring: over ``--idle-seconds`` measures proxy CPU, source broker CPU, the proxy's
   open file descriptors, RSS and TCP connections to each cluster (from /proc);
3. idle, paused: the same topic paused through the REST API, source broker CPU again;
4. baseline (once per size, no proxy): one consumer group (librdkafka) reading the same N
   partitions to their end, then idle for the same window: source broker CPU.

Reported: connections per broker per side, proxy idle CPU (% of a core), and the source broker's
idle overhead (mirroring minus paused) divided by that of the consumer group (group minus the
broker's CPU with nobody reading, the paused figure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests"))

from kafka_cluster import KafkaCluster, classpath  # noqa: E402
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


def broker_pid(cluster: KafkaCluster) -> int:
    return next(iter(cluster.procs.values())).pid


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000, "compression.type": "lz4"})
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


def pause(admin: int, topic: str) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{admin}/v1/mirrors/scale/pause", data=json.dumps({"topics": [topic]}).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200, f"pause answered {r.status}"


def paused_everywhere(admin: int, partitions: int) -> bool:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/v1/mirrors/scale", timeout=30).read().decode()
    return text.count('"state":"PAUSED"') + text.count('"state": "PAUSED"') >= partitions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--records-per-partition", type=int, default=20)
    ap.add_argument("--idle-seconds", type=float, default=20)
    ap.add_argument("--binary", action="append", default=[], help="name=path of a kafka-mirror-proxy build (repeatable)")
    ap.add_argument("--max-partitions", action="append", default=[], help="name=N: run that build only up to N partitions")
    ap.add_argument("--append", action="store_true", help="append this run's table to --out")
    ap.add_argument("--out", default=str(REPO / "docs" / "partition-scale-benchmark.md"))
    args = ap.parse_args()
    limits = {k: int(v) for k, v in (m.split("=", 1) for m in args.max_partitions)}
    binaries = dict(b.split("=", 1) for b in args.binary) or {"new": str(REPO / "target" / "release" / "kafka-mirror-proxy")}
    if "new" in binaries and binaries["new"].endswith("target/release/kafka-mirror-proxy"):
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)

    from kmp_common import free_port_block  # noqa: E402
    work = Path(tempfile.mkdtemp(prefix="kmp-scale-"))
    extra = {"num.partitions": 1, "log.segment.bytes": 16 * 1024 * 1024, "log.index.size.max.bytes": 65536}
    src = KafkaCluster("scale-src", 1, free_port_block(101), work, extra_config=extra).start()
    dst = KafkaCluster("scale-dst", 1, free_port_block(101), work, extra_config=extra).start()
    cp = classpath()
    ports = {"source": {int(src.bootstrap.rsplit(":", 1)[1])}, "destination": {int(dst.bootstrap.rsplit(":", 1)[1])}}
    rows = []
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
                want = watermarks(src.bootstrap, btopic, n)
                if group_pct is None:
                    group_pct = group_baseline(src.bootstrap, btopic, n, sum(want or []), broker_pid(src), args.idle_seconds)
                    print(f"N={n}: consumer group idle: source broker {group_pct:.1f}%", flush=True)
                proc, admin = run_proxy(binary, work, f"{name}-{n}", src, dst, btopic)
                started = time.time()
                while True:
                    assert proc.poll() is None, f"{name} exited with {proc.returncode}"
                    hw = watermarks(dst.bootstrap, btopic, n)
                    if hw == want:
                        break
                    assert time.time() - started < 1800, f"{name} did not catch up {n} partitions within 30 min: {sum(hw or [])} of {sum(want or [])}"
                    time.sleep(1)
                catch_up = time.time() - started
                time.sleep(5)
                proxy_pct, broker_pct = cpu_over([proc.pid, broker_pid(src)], args.idle_seconds)
                conns = connections(proc.pid, ports)
                row = {"n": n, "binary": name, "catch_up_s": catch_up, "proxy_cpu_pct": proxy_pct, "broker_cpu_pct": broker_pct,
                       "fds": fds(proc.pid), "rss_mib": rss_mib(proc.pid), "conn_source": conns["source"],
                       "conn_destination": conns["destination"], "group_pct": group_pct}
                pause(admin, btopic)
                deadline = time.time() + 120
                while not paused_everywhere(admin, n) and time.time() < deadline:
                    time.sleep(1)
                time.sleep(3)
                row["paused_broker_cpu_pct"] = cpu_over([broker_pid(src)], args.idle_seconds)[0]
                proc.terminate()
                proc.wait(60)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        src.stop()
        dst.stop()
    lines = ["| partitions | build | catch-up s | conns to source broker | conns to destination broker | fds | RSS MiB | proxy idle CPU % | source broker CPU % mirroring / paused / group | broker overhead vs one group |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mirror_over = r["broker_cpu_pct"] - r["paused_broker_cpu_pct"]
        group_over = max(r["group_pct"] - r["paused_broker_cpu_pct"], 0.05)
        lines.append(f"| {r['n']} | {r['binary']} | {r['catch_up_s']:.0f} | {r['conn_source']} | {r['conn_destination']} | {r['fds']} | "
                     f"{r['rss_mib']:.0f} | {r['proxy_cpu_pct']:.1f} | {r['broker_cpu_pct']:.1f} / {r['paused_broker_cpu_pct']:.1f} / "
                     f"{r['group_pct']:.1f} | {mirror_over / group_over:.1f}× |")
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
