"""Accept-burst benchmark: N clients connect at the same instant (a fleet reconnecting after a
restart) and each sends ApiVersions; measured is the time until every one has its answer,
through each given proxy build and directly to the broker, in the same run.

    python3 bench/accept_burst_bench.py [--clients 1000] [--rounds 5] [--warmup 1]
        [--client go|python] [--no-cargo-build]
        [--binary new=target/release/kafka-mirror-proxy] [--binary old=/path/to/older/build]

Starts a 1-broker KRaft cluster (tests/harness) and each proxy build in front of it (mirror
engine off). After ``--warmup`` unmeasured bursts per target (the broker's first burst runs
before its JIT has warmed up), each round bursts every target once, the order rotating from
round to round; reports the median and worst of ``--rounds`` rounds per target and the ratio
of the medians to direct-to-broker.

The client (``--client go``, the default) is bench/burst, a Go program built once per run into the
bench's work directory: its goroutines wait on one barrier and then all dial at once. ``--client
python`` is the older single-process asyncio client, itself ~0.3 s for 1,000 connections on two
cores, kept for comparison. A build path ending in target/release/kafka-mirror-proxy is rebuilt with
cargo first unless ``--no-cargo-build``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests"))

from kafka_cluster import KafkaCluster  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402

# ApiVersions v0: api key 18, version 0, correlation id 1, client id "burst".
REQUEST = struct.pack(">hhih", 18, 0, 1, 5) + b"burst"
FRAME = struct.pack(">i", len(REQUEST)) + REQUEST


async def one(host: str, port: int) -> None:
    r, w = await asyncio.open_connection(host, port)
    w.write(FRAME)
    await w.drain()
    size = struct.unpack(">i", await r.readexactly(4))[0]
    await r.readexactly(size)
    w.close()


async def burst(addr: str, clients: int) -> float:
    host, port = addr.rsplit(":", 1)
    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(one(host, int(port)) for _ in range(clients))), 60)
    return time.perf_counter() - start


def python_burst(addr: str, clients: int) -> tuple[float, int, str]:
    """The asyncio client: (seconds, failed, first error); the first failure ends the burst."""
    start = time.perf_counter()
    try:
        return asyncio.run(burst(addr, clients)), 0, ""
    except Exception as e:  # noqa: BLE001 - reported, the run goes on
        return time.perf_counter() - start, clients, repr(e)


def build_go_client(work: Path) -> Path:
    exe = work / "burst-client"  # work / "burst" is the cluster's directory
    if not exe.exists():
        subprocess.run(["go", "build", "-o", str(exe), "."], cwd=REPO / "bench" / "burst", check=True)
    return exe


def go_burst(exe: Path, addr: str, clients: int) -> tuple[float, int, str]:
    """The Go client (bench/burst): (seconds from barrier release to last answer, failed, first error)."""
    p = subprocess.run([str(exe), "-addr", addr, "-clients", str(clients), "-timeout", "60s"], capture_output=True, text=True, timeout=120)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return float("inf"), clients, f"exit {p.returncode}: {p.stderr.strip()[-300:]}"
    return r["seconds"], r["failed"], r["first_error"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def early_answers(admin: int) -> str:
    """kmp_api_versions_answered_early_total from the build's /metrics; "absent" for a build without it."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("kmp_api_versions_answered_early_total"):
            return line.split()[-1]
    return "absent"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured bursts per target first (the broker's JIT, the proxy's allocator)")
    ap.add_argument("--binary", action="append", default=[], help="name=path of a kafka-mirror-proxy build (repeatable)")
    ap.add_argument("--client", choices=("go", "python"), default="go", help="burst client: bench/burst (Go) or the asyncio one")
    ap.add_argument("--no-cargo-build", action="store_true", help="use target/release/kafka-mirror-proxy as it is")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    binaries = dict(b.split("=", 1) for b in args.binary) or {"new": str(REPO / "target" / "release" / "kafka-mirror-proxy")}
    if not args.no_cargo_build and any(p.endswith("target/release/kafka-mirror-proxy") for p in binaries.values()):
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)

    from kmp_common import free_port, free_port_block  # noqa: E402
    work = bench_workdir("kmp-burst-")
    client_exe = build_go_client(work) if args.client == "go" else None
    # The broker queues the same burst too (its default backlog of 50 would measure SYN retries of
    # the proxy's upstream connections, not the proxy).
    broker = KafkaCluster("burst", 1, free_port_block(101), work, extra_config={"socket.listen.backlog.size": 4096}).start()
    procs, targets = [], {"direct": broker.bootstrap}
    pids: dict[str, int] = {}
    admins: dict[str, int] = {}
    try:
        for name, binary in binaries.items():
            port, admin = free_port(), free_port()
            log = open(work / f"{name}.log", "wb")
            cfg = work / f"{name}.toml"
            cfg.write_text("[engine]\nenabled = false\n")
            p = subprocess.Popen([binary, "run", "--upstream", broker.bootstrap, "--listen", f"127.0.0.1:{port}", "--node-port-base",
                                  str(free_port_block(8)), "--admin-listen", f"127.0.0.1:{admin}", "--config", str(cfg), "--log", "warn"],
                                 stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            pids[name], admins[name] = p.pid, admin
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    if urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2).status == 200:
                        break
                except OSError:
                    time.sleep(0.2)
            targets[name] = f"127.0.0.1:{port}"
        results: dict[str, list[float]] = {t: [] for t in targets}
        failures: dict[str, list[str]] = {t: [] for t in targets}
        names = list(targets)

        cpu: dict[str, list[float]] = {t: [] for t in targets}

        def run(label: str, name: str) -> tuple[float, int, str]:
            before = cpu_seconds(pids[name]) if name in pids else 0.0
            if client_exe:
                secs, failed, err = go_burst(client_exe, targets[name], args.clients)
            else:
                secs, failed, err = python_burst(targets[name], args.clients)
            used = cpu_seconds(pids[name]) - before if name in pids else 0.0
            if label.startswith("round"):
                cpu[name].append(used)
            print(f"{label} {name}: {secs:.3f} s{f' ({failed} failed)' if failed else ''}, proxy CPU {used:.3f} s", file=sys.stderr, flush=True)
            time.sleep(1)
            return secs, failed, err

        for _ in range(args.warmup):
            for name in names:
                run("warm-up", name)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:  # the order rotates from round to round
                secs, failed, err = run(f"round {r + 1}", name)
                results[name].append(secs)
                if failed:
                    failures[name].append(f"round {r + 1}: {failed} failed, first: {err}")
        early = {name: early_answers(admin) for name, admin in admins.items()}
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        broker.stop()
    client = "Go (bench/burst)" if client_exe else "Python asyncio, one process"
    print(f"{args.clients} simultaneous connections, each answered one ApiVersions ({args.rounds} rotating rounds after {args.warmup} warm-up, client: {client}):")
    print("| target | median s | worst s | median vs direct | proxy CPU-s per burst (median) | answered early (all bursts) | failed rounds |")
    print("|---|---|---|---|---|---|---|")
    base = statistics.median(results["direct"])
    for name, times in results.items():
        med = statistics.median(times)
        used = f"{statistics.median(cpu[name]):.3f}" if cpu[name] and name in pids else "-"
        print(f"| {name} | {med:.3f} | {max(times):.3f} | {med / base:.2f} | {used} | {early.get(name, '-')} | {len(failures[name])} |")
    for name, fs in failures.items():
        for f in fs:
            print(f"{name}: {f}")
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
