"""Takeover benchmark of the high-availability engine (issue #14, `engine.role = "auto"`).

    flock /tmp/kmp-kafka.lock python3 bench/takeover_bench.py [--kills 20] [--graceful 3] [--session-timeout-ms 6000]
        [--heartbeat-interval-ms 500] [--partitions 4] [--throughput-partitions 8]
        [--throughput-records 200000] [--record-bytes 500] [--instance-counts 1,2,3] [--modes standby,shared]
        [--kill-share-work]
        [--seed N] [--binary PATH]

Starts its own clusters (tests/harness, ports picked free): a 1-broker source and a 3-broker
destination, as the integration suite does; the destination accepts group sessions down to 1 s
(group.min.session.timeout.ms = 1000), so shorter session timeouts can be measured.

1. Takeovers: three role-auto proxies share one config (a fresh state topic, the given session
   timeout and heartbeat interval, each its own KMP_INSTANCE_ID). A mirror of a ``--partitions``
   source topic is created through the active and caught up; a source load runs throughout
   (the integration test's SourceLoad: ~200 compressed records/s from idempotent producers and a
   transaction every ~1 s, a third aborted). ``--kills`` times: wait until all three run and exactly
   one is active, wait 2-4 s (seeded), SIGKILL the active, and measure
     - time to a new active: from the kill until a survivor reports active (/readyz and
       kmp_engine_active, polled every 50 ms) with a higher generation;
     - replication stall: from the kill until the destination's high watermarks (summed) exceed
       what they were 0.3 s after the kill (writes in flight from the killed instance land in that
       window; no takeover can happen that early);
   then restart the killed instance with the same instance id (on fresh ports). Then ``--graceful`` times the same
   with SIGTERM (a planned restart: the active leaves the group at once, no session timeout to
   wait for; it must exit 0). At the end the load stops, the
   destination catches up and must equal the source record for record at identical offsets.
2. Throughput: the same data set (``--throughput-records`` records of ``--record-bytes`` random
   bytes over ``--throughput-partitions`` partitions, lz4) in one source topic per run, mirrored
   by 1, 2 and 3 role-auto instances (fresh state topic each): time from the start call to the
   destination's high watermarks equal to the source's. ``--modes``: `standby` (only the active
   copies, so the rows should match) and `shared` (``engine.share_work = true``: every instance
   copies its share of the partitions); "vs 1 instance" is the throughput ratio to the 1-instance
   run, and the CPU columns are the proxies' CPU seconds during the catch-up (the busiest one's and
   all together): what one instance must have to keep up.

Prints the figures and a markdown table (docs/high-availability.md has the recorded runs).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def run_takeovers(args, rng, seed, bound, timing, work, source, destination, takeovers, stalls) -> None:
    """Part 1: ``--kills`` SIGKILLs and ``--graceful`` SIGTERMs of the active under load, measured
    into ``takeovers`` and ``stalls``; the destination must then equal the source."""
    from kmp_common import unique
    from test_engine_takeover import SourceLoad, assert_same_log, auto_instances, start_mirror, wait_one_active
    from test_mirror_engine import create, high_watermarks, wait_caught_up
    topic, mirror = unique("ha-bench"), unique("hab")
    create(source.bootstrap, topic, args.partitions)
    with auto_instances(destination, work, share_work=args.kill_share_work, **timing) as instances:
        active, view = wait_one_active(instances, "one active instance", bound)
        start_mirror(active, source, mirror, topic)
        load = SourceLoad(source.bootstrap, topic, args.partitions, seed).start()
        try:
            for k, how in enumerate(["kill"] * args.kills + ["term"] * args.graceful):
                active, view = wait_one_active(instances, f"one active before {how} {k + 1}", bound)
                time.sleep(rng.uniform(2, 4))
                if how == "kill":
                    active.proxy.proc.kill()
                else:
                    active.proxy.proc.terminate()
                hit = time.time()
                code = active.proxy.proc.wait()
                assert how == "kill" or code == 0, f"{active.instance_id} exited with {code} on SIGTERM ({active.proxy.log_path})"
                time.sleep(0.3)
                before = high_watermarks(destination.bootstrap, topic, args.partitions)
                stall = {}

                def watch():
                    # Standby mode: the summed high watermarks grow (the one active copies all).
                    # Shared work: every partition grew (the victim's share is the one that waits).
                    grown = set()
                    while time.time() - hit < bound + 30:
                        now = high_watermarks(destination.bootstrap, topic, args.partitions)
                        grown |= {p for p in range(args.partitions) if now[p] > before[p]}
                        if (len(grown) == args.partitions) if args.kill_share_work else sum(now) > sum(before):
                            stall["at"] = time.time()
                            return
                        time.sleep(0.05)

                watcher = threading.Thread(target=watch, daemon=True)
                watcher.start()
                survivors = [i for i in instances if i is not active]
                new_active, new_view = wait_one_active(survivors, f"{how} {k + 1}: a survivor becomes active", bound, min_generation=view[2])
                took = time.time() - hit
                watcher.join(bound + 30)
                assert "at" in stall, f"{how} {k + 1}: the destination never grew again (seed {seed})"
                takeovers[how].append(took)
                stalls[how].append(stall["at"] - hit)
                print(f"{how} {k + 1:2}: {active.instance_id} -> {new_active.instance_id} (generation {new_view[2]}): "
                      f"active after {took:.2f}s, replication stall {stalls[how][-1]:.2f}s", flush=True)
                active.restart()  # the same instance id (fresh ports: see Instance)
        finally:
            load.stop()
        wait_one_active(instances, "one active at the end", bound)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: args.partitions})
        assert_same_log(source, destination, topic, args.partitions, f"seed {seed}")
        print(f"destination equals the source record for record after {args.kills} kills and {args.graceful} SIGTERMs ({load.records} records, "
              f"transactions {load.transactions})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--graceful", type=int, default=3, help="SIGTERMs of the active after the kills (planned restarts)")
    ap.add_argument("--session-timeout-ms", type=int, default=6000, help="engine.session_timeout_ms (default: the product's)")
    ap.add_argument("--heartbeat-interval-ms", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=4, help="partitions of the topic mirrored during the kills")
    ap.add_argument("--throughput-partitions", type=int, default=8)
    ap.add_argument("--throughput-records", type=int, default=200_000)
    ap.add_argument("--record-bytes", type=int, default=500)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--instance-counts", default="1,2,3", help="instance counts of the throughput runs, in this order")
    ap.add_argument("--kill-share-work", action="store_true",
                    help="the kills run with engine.share_work = true; the stall is then until every partition grew again")
    ap.add_argument("--modes", default="standby,shared",
                    help="throughput runs per instance count, in this order: `standby` (only the active copies) and/or "
                         "`shared` (engine.share_work = true: every instance copies its share)")
    ap.add_argument("--binary", default=os.environ.get("KMP_PROXY_BIN", str(REPO / "target" / "debug" / "kafka-mirror-proxy")))
    args = ap.parse_args()
    os.environ["KMP_PROXY_BIN"] = str(Path(args.binary).resolve())  # read by kmp_common at import
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "tests" / "integration"))  # first: its conftest re-exports kmp_common's helpers
    from confluent_kafka import Producer
    from kmp_common import running_cluster, unique
    from test_engine_takeover import auto_instances, start_mirror, wait_one_active
    from test_mirror_engine import create, high_watermarks

    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    session_s = args.session_timeout_ms / 1000
    bound = 3 * session_s + 10
    timing = {"session_timeout_ms": args.session_timeout_ms, "heartbeat_interval_ms": args.heartbeat_interval_ms}
    print(f"binary {os.environ['KMP_PROXY_BIN']}; seed {seed}; session {args.session_timeout_ms} ms, heartbeat {args.heartbeat_interval_ms} ms",
          flush=True)
    from bench_workdir import bench_workdir

    work = bench_workdir("kmp-takeover-")
    # The destination accepts sessions down to 1 s (the broker default minimum is 6 s).
    with running_cluster("ha-src", 1, work) as source, \
            running_cluster("ha-dst", 3, work, extra_config={"group.min.session.timeout.ms": 1000}) as destination:
        # 1. Takeovers under load.
        takeovers, stalls = {"kill": [], "term": []}, {"kill": [], "term": []}
        if args.kills + args.graceful:
            run_takeovers(args, rng, seed, bound, timing, work, source, destination, takeovers, stalls)

        # 2. Throughput with 1, 2 and 3 instances on the same data set.
        rows = []
        if not args.skip_throughput:
            data_rng = random.Random(seed)
            values = [data_rng.randbytes(args.record_bytes) for _ in range(1000)]
            runs = [(int(c), mode) for c in args.instance_counts.split(",") for mode in args.modes.split(",")
                    if not (int(c) == 1 and mode == "shared" and "standby" in args.modes.split(","))]
            for n, mode in runs:
                ttopic = unique(f"ha-tput-{n}")
                create(source.bootstrap, ttopic, args.throughput_partitions)
                p = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "compression.type": "lz4"})
                for i in range(args.throughput_records):
                    while True:
                        try:
                            p.produce(ttopic, value=values[i % len(values)], partition=i % args.throughput_partitions)
                            break
                        except BufferError:
                            p.poll(0.1)
                assert p.flush(120) == 0, "the data set reached the source"
                with auto_instances(destination, work, n=n, share_work=mode == "shared", **timing) as instances:
                    active, _ = wait_one_active(instances, f"one active of {n}", bound)
                    tmirror = unique("hat")
                    cpu_before = {i.instance_id: cpu_seconds(i.proxy.pid) for i in instances}
                    started = time.time()
                    start_mirror(active, source, tmirror, ttopic)
                    want = high_watermarks(source.bootstrap, ttopic, args.throughput_partitions)
                    while True:
                        try:
                            got = high_watermarks(destination.bootstrap, ttopic, args.throughput_partitions)
                        except Exception:  # noqa: BLE001 - the destination topic is not created yet
                            got = None
                        if got == want:
                            break
                        assert time.time() - started < 900, f"{n} instances: no catch-up within 900 s ({got} vs {want})"
                        time.sleep(0.1)
                    secs = time.time() - started
                    cpu = sorted(cpu_seconds(i.proxy.pid) - cpu_before[i.instance_id] for i in instances)
                    mb = args.throughput_records * args.record_bytes / 1e6
                    copying = n if mode == "shared" else sum(1 for i in instances if (v := i.engine()) is not None and v[3] == 1)
                    rows.append((n, mode, copying, secs, mb / secs, args.throughput_records / secs, cpu[-1], sum(cpu)))
                    print(f"{n} instance(s), {mode}, {copying} copying: {args.throughput_records} records ({mb:.0f} MB of values) in {secs:.1f}s = "
                          f"{mb / secs:.1f} MB/s, {args.throughput_records / secs:,.0f} records/s; proxy CPU s per instance {cpu}", flush=True)

    print(f"\nseed {seed}, session {args.session_timeout_ms} ms, heartbeat {args.heartbeat_interval_ms} ms"
          f"{', kills with share_work (stall: until every partition grew)' if args.kill_share_work else ''}")
    if any(takeovers.values()):
        print("| event | takeovers | time to a new active p50 / p90 / max s | replication stall p50 / p90 / max s |\n|---|---|---|---|")
    for how, label in (("kill", "SIGKILL of the active"), ("term", "SIGTERM of the active")):
        t, st = takeovers[how], stalls[how]
        if t:
            print(f"| {label} | {len(t)} | {statistics.median(t):.2f} / {percentile(t, 0.9):.2f} / {max(t):.2f} | "
                  f"{statistics.median(st):.2f} / {percentile(st, 0.9):.2f} / {max(st):.2f} |")
    if rows:
        base = next((r[4] for r in rows if r[0] == 1), None)
        print("\n| instances | mode | copying | catch-up s | MB/s of values | records/s | vs 1 instance | busiest proxy CPU s | all proxies CPU s |"
              "\n|---|---|---|---|---|---|---|---|---|")
        for n, mode, copying, secs, mbs, rps, busiest, total in rows:
            ratio = f"{mbs / base:.2f}" if base else "-"
            print(f"| {n} | {mode} | {copying} | {secs:.1f} | {mbs:.1f} | {rps:,.0f} | {ratio} | {busiest:.1f} | {total:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
