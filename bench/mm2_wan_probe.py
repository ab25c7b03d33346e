"""Probe: why MirrorMaker 2 copies at a flat ~0.7 MB/s in bench/wan_bench.py once the source is
behind the toxiproxy relay, and what an operator would change so it becomes a fair WAN baseline.

    flock /tmp/kmp-kafka.lock python3 bench/mm2_wan_probe.py [--rtts 0,20,100] [--partitions 1] [--mb 64]
        [--set KEY=VALUE ...] [--label NAME] [--jstacks 4] [--jstack-every 5] [--debug] [--copy-limit 120]

Same setup as bench/wan_bench.py (1-broker source with a WAN listener behind toxiproxy, half the
round trip added to each direction; 1-broker destination; MirrorMaker 2 in dedicated mode with
wan_bench's settings: ``mm2_config`` + no checkpoints, lz4, linger.ms 10, batch.size 131072,
tasks.max 2) and the same copy measurement (``wan_bench.copy``). ``--set`` adds or overrides MM2
properties (repeatable; the "tuned" variant). While a copy runs, every ``--jstack-every`` seconds
(up to ``--jstacks`` times) it saves a ``jstack`` of the MM2 JVM and a list of the JVM's TCP
connections, each classified as relay (source through toxiproxy), source direct or destination.
``--debug``: DEBUG for org.apache.kafka.connect.mirror and the consumer's fetch path in MM2's log.
Artefacts (MM2 log, jstacks, connection lists, toxiproxy log) stay in the printed work directory.

Finding (2026-12-01): the flat 0.7 MB/s is not the WAN. wan_bench runs every MirrorMaker 2 with the
same internal topics on the (long-lived) destination, so from the second round trip on MM2 resumes
from the source offsets its previous run committed ("Seeking to offset N for partition ..." in its
log, "Starting with 0 previously uncommitted partitions"), copies only the records the other
mirrors' lag phases added since (2 x 100,000), never reaches the expected count and is cut off:
200,000 x 1 KiB / ~294 s = 0.7 MB/s. Reproduce / fix:

    flock /tmp/kmp-kafka.lock python3 bench/mm2_wan_probe.py --rtts 0,20 --mb 256 --pre-records 200000 --copy-limit 300
    flock /tmp/kmp-kafka.lock python3 bench/mm2_wan_probe.py --rtts 0,20,100 --pre-records 100000 --fresh-state
    flock /tmp/kmp-kafka.lock python3 bench/mm2_wan_probe.py --rtts 0,20,100 --pre-records 100000 --fresh-state \
        --label tuned --set src.consumer.max.partition.fetch.bytes=16777216
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from wan_bench import copy  # noqa: E402  (also puts tests/, tests/harness, tests/integration on sys.path)
from kafka_cluster import KafkaCluster, classpath  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402
from kmp_common import free_port_block, tcp_sockets  # noqa: E402
from latency import LatencyRelay  # noqa: E402
from mirror_bench import create_topic, delete_topic, mm2_config, producer_perf, watermarks  # noqa: E402

LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d{HH:mm:ss.SSS}] %p [%t] %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
"""
DEBUG_LOGGERS = ("org.apache.kafka.connect.mirror", "org.apache.kafka.clients.consumer.internals.AbstractFetch",
                 "org.apache.kafka.clients.consumer.internals.Fetcher")


def sockets(pid: int) -> list[tuple[str, int, int, str]]:
    """(local, local port, remote port, state) of the TCP sockets of ``pid`` (IPv4/6, from /proc)."""
    states = {"01": "ESTABLISHED", "0A": "LISTEN", "06": "TIME_WAIT", "08": "CLOSE_WAIT"}
    return [(f[1], int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16), states.get(f[3], f[3])) for f in tcp_sockets(pid)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtts", default="20")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE added to / overriding the MM2 properties")
    ap.add_argument("--label", default="defaults")
    ap.add_argument("--jstacks", type=int, default=0)
    ap.add_argument("--jstack-every", type=float, default=5)
    ap.add_argument("--debug", action="store_true")
    ap.add_argument("--copy-limit", type=float, default=120)
    ap.add_argument("--pre-records", type=int, default=0,
                    help="1 KiB records produced into the source topic before every run but the first (what the lag phases"
                         " of the mirrors wan_bench measures before MM2 at the same round trip add)")
    ap.add_argument("--fresh-state", action="store_true",
                    help="give every MM2 run its own internal topics (offset/config/status storage) instead of"
                         " wan_bench's shared mm2-*.src.internal, so no run resumes from an earlier run's source offsets")
    args = ap.parse_args()
    rtts = [int(x) for x in args.rtts.split(",")]
    extra = dict(kv.split("=", 1) for kv in args.set)

    mm2_libs = subprocess.run([str(REPO / "tests" / "harness" / "kafka-jars.sh"), "4.1.2", "mm2"], capture_output=True,
                              text=True, check=True).stdout.strip()
    work = bench_workdir("kmp-mm2-probe-")
    print(f"work directory: {work}", flush=True)
    log4j = work / "mm2-log4j2.properties"
    log4j.write_text(LOG4J2 + ("".join(f"logger.d{i}.name = {n}\nlogger.d{i}.level = DEBUG\n" for i, n in enumerate(DEBUG_LOGGERS))
                               if args.debug else ""))
    cp = classpath()
    src = KafkaCluster("probe-src", 1, free_port_block(101), work, wan=True)
    dst = KafkaCluster("probe-dst", 1, free_port_block(101), work)
    relay = None
    results = {}
    try:
        src.start(wait=False)
        dst.start(wait=False)
        src.wait_ready()
        dst.wait_ready()
        relay = LatencyRelay(src, work).start()
        ports = {src.port(1): "source direct", int(src.wan_addr(1).rsplit(":", 1)[1]): "source via relay",
                 int(src.wan_bind(1).rsplit(":", 1)[1]): "source WAN listener (bypassing relay?!)", dst.port(1): "destination"}
        topic = f"probe{args.partitions}"
        parts = args.partitions
        create_topic(cp, src.bootstrap, topic, parts)
        filled = args.mb * 1_000_000 // 1024
        print(f"fill: {producer_perf(cp, src.bootstrap, topic, filled)}", flush=True)
        for rtt in rtts:
            if args.pre_records and rtt != rtts[0]:
                print(f"pre-run records: {producer_perf(cp, src.bootstrap, topic, args.pre_records)}", flush=True)
            relay.set_rtt(rtt)
            print(f"relay round trip at {rtt} ms: {relay.measured_rtt_ms():.1f} ms", flush=True)
            expected = watermarks(src.bootstrap, topic, parts) or []
            if watermarks(dst.bootstrap, topic, parts) is not None:
                delete_topic(cp, dst.bootstrap, topic, parts)
            settings = {"emit.checkpoints.enabled": "false", "dst.producer.compression.type": "lz4",
                        "dst.producer.linger.ms": 10, "dst.producer.batch.size": 131072, **extra}
            if args.fresh_state:
                settings |= {f"{t}.storage.topic": f"mm2-{t}s.{args.label}-{rtt}ms.internal" for t in ("offset", "config", "status")}
            props = mm2_config(work, src.wan_bootstrap, dst.bootstrap, topic, args.tasks, settings)
            tag = f"{args.label}-{rtt}ms"
            (work / f"mm2-{tag}.properties").write_text(props.read_text())
            argv = ["java", "-Xmx2g", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{mm2_libs}/*",
                    "org.apache.kafka.connect.mirror.MirrorMaker", str(props)]
            started = time.time()
            proc = subprocess.Popen(argv, stdout=open(work / f"mm2-{tag}.log", "wb"), stderr=subprocess.STDOUT)
            stop = threading.Event()

            def sample(proc=proc, tag=tag, started=started) -> None:
                taken = 0
                while taken < args.jstacks and not stop.wait(args.jstack_every if taken else max(args.jstack_every, 10)):
                    t = time.time() - started
                    dump = subprocess.run(["jstack", str(proc.pid)], capture_output=True, text=True, timeout=60).stdout
                    (work / f"jstack-{tag}-{taken}.txt").write_text(dump)
                    conns = sockets(proc.pid)
                    lines = [f"{ports.get(r, f'port {r}')}\tlocal {lp}\tremote {r}\t{st}" for _, lp, r, st in conns if st != "LISTEN"]
                    (work / f"conns-{tag}-{taken}.txt").write_text("\n".join(sorted(lines)) + "\n")
                    hw = sum(watermarks(dst.bootstrap, topic, parts) or [])
                    print(f"  sample {taken} at {t:.0f}s: destination holds {hw} records; connections: "
                          + ", ".join(f"{k}={v}" for k, v in sorted(
                              {c: sum(1 for ln in lines if ln.startswith(c) and 'ESTABLISHED' in ln) for c in set(ports.values())}.items())),
                          flush=True)
                    taken += 1
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                r = copy(proc, started, dst.bootstrap, topic, parts, filled, expected, args.copy_limit)
                results[rtt] = r
                print(f"{args.label}, {parts} partitions, {rtt} ms: {r['mb_s']:.1f} MB/s {r}", flush=True)
            finally:
                stop.set()
                sampler.join(90)
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                for line in (work / f"mm2-{tag}.log").read_text(errors="replace").splitlines():
                    if any(k in line for k in ("previously uncommitted", "Seeking to offset", "replicating")):
                        print(f"  log: {line[:220]}", flush=True)
                print(f"  source end offsets {expected}, destination end offsets {watermarks(dst.bootstrap, topic, parts)}", flush=True)
    finally:
        if relay:
            relay.stop()
        src.stop()
        dst.stop()
    print(f"\nsummary ({args.label}; {parts} partition(s), {args.mb} MB of 1 KiB records; extra MM2 settings: {extra or 'none'}):")
    for rtt, r in results.items():
        print(f"  {rtt:>4} ms: {r['mb_s']:.1f} MB/s, copy {r['copy_s']:.1f} s, complete {r['complete']}, identical {r['identical']}")
    print(f"artefacts: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
