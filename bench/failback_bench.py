"""The disaster-recovery drill, timed: a proxy in front of each of two clusters (PA before A, PB
before B, each mirror's source the other proxy, docs/disaster-recovery.md), and a topic of
RECORDS 1 KiB records (ProducerPerformance, lz4, 8 partitions) taken A → B → A → B → A:

1. initial copy A → B (PB) — the baseline every other row is a ratio of, measured in the run;
2. planned failover on PB (graceful stop: lag 0, then writable) — the RTO of a planned move;
3. 10,000 records written on B through PB, then failback B → A on PA: incremental (A ends at
   the line), from the start call until A's high watermarks equal B's;
4. failover back to A (graceful stop on PA), 10,000 records on A through PA, then the stopped
   topic started again on PB: the second failback, incremental;
5. a disaster: PB's copy paused, TAIL records written on A that B never gets, PB stopped without
   waiting (the line is what B had), 10,000 records written on B; the stopped way back started
   again on PA: A's tail is quarantined, A's topic re-created and restored from B — from the
   start call until A's high watermarks equal B's, and the quarantine holds exactly TAIL records.

    python3 bench/failback_bench.py [RECORDS [TAIL]]   (default 1048576 records = 1 GiB, tail 10000)

Uses target/release/kafka-mirror-proxy (KMP_PROXY_BIN overrides); starts its own clusters with
ports picked free. Prints each phase and a markdown table (recorded in docs/disaster-recovery.md).
"""
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("KMP_PROXY_BIN", str(REPO / "target" / "release" / "kafka-mirror-proxy"))
for p in ("bench", "tests", "tests/harness"):
    sys.path.insert(0, str(REPO / p))
import mirror_bench as mb  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402
from conftest import free_port_block  # noqa: E402
from kafka_cluster import KafkaCluster, classpath  # noqa: E402
from kmp_common import ProxyProcess  # noqa: E402
from mirror import call  # noqa: E402

RECORDS = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
TAIL = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
PARTITIONS = 8
TOPIC = "drill"


def ok(status_body, what):
    status, body = status_body
    assert status in (200, 201) and body.get("error_code", 0) == 0 and all(r["error_code"] == 0 for r in body.get("results", [])), f"{what}: {status} {body}"
    return body


def caught_up(src: str, dst: str, timeout: float = 1800) -> float:
    start = time.time()
    while time.time() - start < timeout:
        want, got = mb.watermarks(src, TOPIC, PARTITIONS), mb.watermarks(dst, TOPIC, PARTITIONS)
        if want is not None and want == got:
            return time.time() - start
        time.sleep(0.05)
    raise AssertionError(f"{dst} did not catch up with {src}")


def states(proxy, mirror) -> set:
    _, body = call(proxy, "GET", f"/v1/mirrors/{mirror}")
    return {p["state"] for t in body.get("topics", []) if t["topic"] == TOPIC for p in t["partitions"]}


def wait_state(proxy, mirror, state, timeout=120):
    deadline = time.time() + timeout
    while states(proxy, mirror) != {state}:
        assert time.time() < deadline, f"{mirror}: {states(proxy, mirror)}, not {state}"
        time.sleep(0.05)


def main() -> None:
    work = bench_workdir("kmp-failback-")
    a = KafkaCluster("dr-a", 1, free_port_block(101), work).start()
    b = KafkaCluster("dr-b", 1, free_port_block(101), work).start()
    cp = classpath()
    rows = []
    pa = pb = None
    try:
        pa = ProxyProcess(a.bootstrap, work).start()
        pb = ProxyProcess(b.bootstrap, work).start()
        mb.create_topic(cp, a.bootstrap, TOPIC, PARTITIONS)
        mb.producer_perf(cp, a.bootstrap, TOPIC, RECORDS)

        ok(call(pb, "POST", "/v1/mirrors", {"name": "fwd", "configs": {"bootstrap.servers": pa.bootstrap}}), "create fwd")
        t0 = time.time()
        ok(call(pb, "POST", "/v1/mirrors/fwd/start", {"topics": [TOPIC]}), "start fwd")
        caught_up(a.bootstrap, b.bootstrap)
        copy = time.time() - t0
        rows.append(("initial copy A → B", copy))

        t0 = time.time()
        ok(call(pb, "POST", "/v1/mirrors/fwd/stop", {"topics": [TOPIC], "graceful_timeout_ms": 60000}), "planned failover")
        wait_state(pb, "fwd", "stopped")
        rows.append(("planned failover to B (stop answered, topic writable)", time.time() - t0))

        mb.producer_perf(cp, pb.bootstrap, TOPIC, 10_000)
        ok(call(pa, "POST", "/v1/mirrors", {"name": "back", "configs": {"bootstrap.servers": pb.bootstrap}}), "create back")
        t0 = time.time()
        ok(call(pa, "POST", "/v1/mirrors/back/start", {"topics": [TOPIC]}), "start back")
        caught_up(b.bootstrap, a.bootstrap)
        rows.append(("failback B → A, incremental (10,000 records past the line)", time.time() - t0))

        ok(call(pa, "POST", "/v1/mirrors/back/stop", {"topics": [TOPIC], "graceful_timeout_ms": 60000}), "failover to A")
        wait_state(pa, "back", "stopped")
        mb.producer_perf(cp, pa.bootstrap, TOPIC, 10_000)
        t0 = time.time()
        ok(call(pb, "POST", "/v1/mirrors/fwd/start", {"topics": [TOPIC]}), "start fwd again")
        caught_up(a.bootstrap, b.bootstrap)
        rows.append(("second failback A → B, incremental (10,000 records)", time.time() - t0))

        ok(call(pb, "POST", "/v1/mirrors/fwd/pause", {"topics": [TOPIC]}), "pause fwd")
        wait_state(pb, "fwd", "paused")
        mb.producer_perf(cp, pa.bootstrap, TOPIC, TAIL)  # A's tail B never gets
        t0 = time.time()
        ok(call(pb, "POST", "/v1/mirrors/fwd/stop", {"topics": [TOPIC]}), "disaster failover")
        wait_state(pb, "fwd", "stopped")
        rows.append(("disaster failover to B (stop without waiting)", time.time() - t0))
        mb.producer_perf(cp, pb.bootstrap, TOPIC, 10_000)
        t0 = time.time()
        ok(call(pa, "POST", "/v1/mirrors/back/start", {"topics": [TOPIC]}), "start back again")
        wait_state(pa, "back", "mirroring", timeout=1800)
        caught_up(b.bootstrap, a.bootstrap)
        rows.append((f"failback B → A, restore ({TAIL:,} records quarantined, the topic re-created and copied)", time.time() - t0))
        from confluent_kafka.admin import AdminClient
        quarantine = [t for t in AdminClient({"bootstrap.servers": a.bootstrap}).list_topics(timeout=30).topics if t.startswith("kmp-quarantine.")]
        kept = sum(mb.watermarks(a.bootstrap, quarantine[0], PARTITIONS) or []) if quarantine else 0
        assert kept == TAIL, f"the quarantine holds A's tail: {kept} of {TAIL} ({quarantine})"
    finally:
        for p in (pa, pb):
            if p is not None:
                p.stop()
        a.stop()
        b.stop()
    print(f"\n{RECORDS:,} records of 1 KiB, {PARTITIONS} partitions; binary {os.environ['KMP_PROXY_BIN']}\n")
    print("| phase | seconds | × initial copy |")
    print("|---|---:|---:|")
    for what, s in rows:
        print(f"| {what} | {s:.2f} | {s / copy:.2f} |")
    print(f"\nquarantine: {kept:,} records (exactly A's tail)")


if __name__ == "__main__":
    main()
