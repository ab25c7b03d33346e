"""Accept-burst benchmark: N clients connect at the same instant (a fleet reconnecting after a
restart) and each sends ApiVersions; measured is the time until every one has its answer,
through each given proxy build and directly to the broker, in the same run.

    python3 bench/accept_burst_bench.py [--clients 1000] [--rounds 5]
        [--binary new=target/release/kafka-mirror-proxy] [--binary old=/path/to/older/build]

Starts a 1-broker KRaft cluster (tests/harness) and each proxy build in front of it (mirror
engine off). Reports the median and worst of ``--rounds`` rounds per target.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests"))

from kafka_cluster import KafkaCluster  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--binary", action="append", default=[], help="name=path of a kafka-mirror-proxy build (repeatable)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    binaries = dict(b.split("=", 1) for b in args.binary) or {"new": str(REPO / "target" / "release" / "kafka-mirror-proxy")}
    if any(p.endswith("target/release/kafka-mirror-proxy") for p in binaries.values()):
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=REPO, check=True)

    from kmp_common import free_port, free_port_block  # noqa: E402
    work = Path(tempfile.mkdtemp(prefix="kmp-burst-"))
    # The broker queues the same burst too (its default backlog of 50 would measure SYN retries of
    # the proxy's upstream connections, not the proxy).
    broker = KafkaCluster("burst", 1, free_port_block(101), work, extra_config={"socket.listen.backlog.size": 4096}).start()
    procs, targets = [], {"direct": broker.bootstrap}
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
            deadline = time.time() + 60
            while time.time() < deadline:
                try:
                    if urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2).status == 200:
                        break
                except OSError:
                    time.sleep(0.2)
            targets[name] = f"127.0.0.1:{port}"
        results: dict[str, list[float]] = {t: [] for t in targets}
        for _ in range(args.rounds):
            for name, addr in targets.items():  # rotating order within each round
                results[name].append(asyncio.run(burst(addr, args.clients)))
                time.sleep(1)
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        broker.stop()
    print(f"{args.clients} simultaneous connections, each answered one ApiVersions ({args.rounds} rounds):")
    print("| target | median s | worst s |\n|---|---|---|")
    for name, times in results.items():
        print(f"| {name} | {statistics.median(times):.3f} | {max(times):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
