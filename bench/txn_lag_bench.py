"""Lag behind an open transaction (issue 38): how long other producers' records take to reach the
destination while one source transaction on their partition stays open, before and after the
engine replays source transactions, side by side in one run.

    python3 bench/txn_lag_bench.py [--build] [--before-bin B] [--after-bin A] [--hold 300]
        [--interval 0.2] [--grace 15] [--rounds 1] [--out docs/txn-lag-benchmark.md]

Until a63446f the engine read the source read_committed: an open transaction held the partition's
last stable offset at its first offset, so nothing behind it reached the destination until it
ended. From d7d5a28 the engine reads read_uncommitted and replays each source transaction in a
destination transaction of its own, so other producers' records flow with the usual lag.

The two binaries (release builds):

* ``--before-bin`` (default /tmp/kmp-before-target/release/kafka-mirror-proxy): commit a63446f,
  built in a worktree: ``git worktree add /tmp/kmp-before a63446f`` then, in /tmp/kmp-before,
  ``CARGO_TARGET_DIR=/tmp/kmp-before-target cargo build --release --locked -p kafka-mirror-proxy``;
* ``--after-bin`` (default /tmp/kmp-after-target/release/kafka-mirror-proxy): this checkout's
  HEAD, built the same way in a worktree at /tmp/kmp-after with CARGO_TARGET_DIR=/tmp/kmp-after-target
  (a worktree, so edits in progress in the checkout do not leak into the binary halfway through
  a build; a target directory of its own, so the bench never touches target/ of a test run beside it).

``--build`` runs both steps first (``--before-rev``, default a63446f, and ``--after-rev``, default
HEAD, name the commits; an existing worktree is checked out at its commit first).

One 1-broker source and one 1-broker destination KRaft cluster (tests/harness, Kafka 4.1.2) serve
the whole run. For each variant, in turn (before, after; ``--rounds`` repeats the pair), on a
fresh 1-partition topic:

1. 5 plain records on the source; the proxy starts (its own state topic) mirroring the topic; the
   5 records on the destination show the mirror is running;
2. a transactional producer (transaction.timeout.ms 900000) opens a transaction with 5 records
   and leaves it open;
3. for ``--hold`` seconds a plain producer (linger.ms 0) writes one small record every
   ``--interval`` seconds, each with a unique key; its acknowledgement time is taken in the
   delivery callback. A consumer on the destination itself (read_uncommitted, so it sees a record
   the moment it is on the destination, inside a transaction or not) notes when each key first
   appears. Lag = appearance on the destination - acknowledgement by the source (same clock);
4. the transaction stays open ``--grace`` seconds more (the last records' normal lag), then the
   counts "appeared while the transaction was open" are taken;
5. the transaction is aborted; the consumer keeps going until every plain record is on the
   destination (at most ``--drain-timeout`` s), so a record that was held back gets its real lag
   (at least the time from its acknowledgement to the abort); one still missing then counts as
   never arrived (infinite lag). The proxy is stopped (SIGTERM).

Reported per variant: records written during the hold, how many appeared on the destination while
the transaction was open and how many did not, lag p50/p99/max (nearest rank, held-back records
included at their real lag), the time from the abort until the last held-back record was on the
destination, the destination's (last stable offset, high watermark) at the end of the hold, the
proxy's CPU seconds; and the before/after ratio of each lag figure. The table (and the
command, date, machine) is printed; ``--out`` writes it into that file after the line
``<!-- results -->`` (replacing what follows it), or appends it with ``--append``.

Ports: the harness picks them from KMP_PORT_RANGE; the test suite (tests/run.sh) uses
10000-32000, and the harness only hands out ports below the kernel's ephemeral range (32768 up),
so this bench defaults to KMP_PORT_RANGE=32001-32767.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("KMP_PORT_RANGE", "32001-32767")

from bench_workdir import bench_workdir  # noqa: E402
from kafka_cluster import KafkaCluster  # noqa: E402
from ports import free_port, free_port_block  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
BEFORE_REV = "a63446f"
BEFORE_TREE = Path("/tmp/kmp-before")
BEFORE_TARGET = Path("/tmp/kmp-before-target")
AFTER_TREE = Path("/tmp/kmp-after")
AFTER_TARGET = Path("/tmp/kmp-after-target")
WARMUP = 5
IN_TXN = 5


def cpu_seconds(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICKS


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def build(before_rev: str, after_rev: str) -> None:
    """The two release binaries, each from a worktree at its commit into a target directory of its own."""
    for rev, tree, target in ((before_rev, BEFORE_TREE, BEFORE_TARGET), (after_rev, AFTER_TREE, AFTER_TARGET)):
        want = git("rev-parse", rev)
        if tree.exists():  # this bench's own worktree: moved to the commit wanted, if nobody changed files in it
            if git("rev-parse", "HEAD", cwd=tree) != want:
                assert not git("status", "--porcelain", "--untracked-files=no", cwd=tree), f"{tree} has local changes"
                git("checkout", "--quiet", "--detach", want, cwd=tree)
        else:
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), want], cwd=REPO, check=True)
        print(f"building {rev} ({want[:7]}) in {tree} into {target}", flush=True)
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "kafka-mirror-proxy"], cwd=tree, check=True,
                       env={**os.environ, "CARGO_TARGET_DIR": str(target)})


# ---- Kafka clients -------------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def ends(bootstrap: str, topic: str) -> tuple[int, int] | None:
    """(last stable offset, high watermark) of partition 0, or None while the topic is missing."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    out = []
    try:
        for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
            r = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=15)
            out.append(r[tp].result().offset)
    except Exception:  # noqa: BLE001 - the destination topic is not there yet
        return None
    return out[0], out[1]


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, f"{what} within {timeout} s"
        time.sleep(0.2)


class Appearances(threading.Thread):
    """Reads the destination partition read_uncommitted from its start and notes when each key
    first appears (wall clock, like the producer's acknowledgements)."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        self.seen: dict[bytes, float] = {}
        self.stopping = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txnlag-{time.time_ns()}",
                                  "isolation.level": "read_uncommitted", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 100, "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                # poll, not consume(n, t): a batch consume waits out its timeout for more records,
                # which would add up to that timeout to a record's appearance time
                m = self.consumer.poll(0.1)
                now = time.time()
                if m is not None and m.error() is None and m.key() is not None:
                    self.seen.setdefault(m.key(), now)
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


# ---- the proxy ------------------------------------------------------------------------------


class Proxy:
    def __init__(self, binary: str, work: Path, name: str, src: KafkaCluster, dst: KafkaCluster, topic: str):
        cfg = work / f"{name}.toml"
        cfg.write_text(f'[engine]\nstate_topic = "__kmp_state_{name}"\n\n[[mirrors]]\nname = "txnlag"\n'
                       f'source_bootstrap_servers = ["{src.bootstrap}"]\ntopics = ["{topic}"]\n')
        self.admin_port = free_port()
        self.log_path = work / f"{name}.log"
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([binary, "run", "--upstream", dst.bootstrap, "--listen", f"127.0.0.1:{free_port()}",
                                      "--node-port-base", str(free_port_block(8)), "--admin-listen", f"127.0.0.1:{self.admin_port}",
                                      "--config", str(cfg), "--log", "warn"],
                                     stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "KMP_MIRROR_SOURCE_ALLOW": "127.0.0.1:*"})
        wait_for(f"the proxy ({binary}) ready", self.ready, 60)

    def ready(self) -> bool:
        assert self.proc.poll() is None, f"the proxy exited ({self.proc.returncode}); see {self.log_path}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> tuple[int, float]:
        cpu = cpu_seconds(self.proc.pid)
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60), cpu
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(), cpu


# ---- one variant ------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest rank; ``math.inf`` stands for a record that never arrived."""
    s = sorted(values)
    return s[max(0, math.ceil(p * len(s)) - 1)]


def measure(variant: str, binary: str, args, work: Path, src: KafkaCluster, dst: KafkaCluster, round_no: int) -> dict:
    from confluent_kafka import Producer
    topic = f"txnlag-{variant}-{round_no}-{time.time_ns() % 10**9}"
    create_topic(src.bootstrap, topic)
    plain = Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 0})
    for i in range(WARMUP):
        plain.produce(topic, key=f"warmup-{i}".encode(), value=b"before the transaction", partition=0)
    assert plain.flush(30) == 0
    tx = None
    proxy = Proxy(binary, work, f"{variant}-{round_no}", src, dst, topic)
    try:
        wait_for("the warm-up records on the destination", lambda: (ends(dst.bootstrap, topic) or (0, 0))[1] == WARMUP, 120)
        seen = Appearances(dst.bootstrap, topic)
        seen.start()

        tx = Producer({"bootstrap.servers": src.bootstrap, "transactional.id": f"txnlag-held-open-{topic}",
                       "transaction.timeout.ms": 900_000})
        tx.init_transactions(30)
        tx.begin_transaction()
        for i in range(IN_TXN):
            tx.produce(topic, key=f"open-{i}".encode(), value=b"inside the open transaction", partition=0)
        assert tx.flush(30) == 0
        assert ends(src.bootstrap, topic) == (WARMUP, WARMUP + IN_TXN), "the transaction is open on the source"
        print(f"[{variant}] transaction open on {topic} (offsets {WARMUP}..{WARMUP + IN_TXN - 1}); writing one record every "
              f"{args.interval} s for {args.hold:.0f} s", flush=True)

        acked: dict[bytes, float] = {}

        def delivered(err, msg) -> None:
            assert err is None, err
            acked[msg.key()] = time.time()

        start = time.time()
        next_at, n = start, 0
        while True:
            now = time.time()
            if now - start >= args.hold:
                break
            if now < next_at:
                plain.poll(next_at - now)  # serves the delivery callback the moment the ack arrives
                continue
            plain.produce(topic, key=f"plain-{n}".encode(), value=b"x" * 16, partition=0, on_delivery=delivered)
            plain.poll(0)
            n += 1
            next_at += args.interval
            if n % max(1, int(30 / args.interval)) == 0:
                got = sum(1 for k in acked if k in seen.seen)
                print(f"[{variant}] {now - start:5.0f} s: {n} written, {got} on the destination", flush=True)
        assert plain.flush(30) == 0 and len(acked) == n, f"every plain record acknowledged ({len(acked)} of {n})"
        hold_end = time.time()
        time.sleep(args.grace)
        src_ends, dst_ends = ends(src.bootstrap, topic), ends(dst.bootstrap, topic)
        assert src_ends[0] == WARMUP, f"the transaction was still open on the source at the end of the hold: {src_ends}"
        while_open = {k for k in acked if k in seen.seen}
        never_open = n - len(while_open)
        print(f"[{variant}] {hold_end - start:.0f} s hold + {args.grace:.0f} s: {len(while_open)} of {n} on the destination while the "
              f"transaction was open; source (LSO, HW) {src_ends}, destination {dst_ends}", flush=True)

        aborted_at = time.time()
        tx.abort_transaction(30)
        deadline = aborted_at + args.drain_timeout
        while any(k not in seen.seen for k in acked) and time.time() < deadline:
            time.sleep(0.05)
        missing = [k for k in acked if k not in seen.seen]
        held = [seen.seen[k] for k in acked if k in seen.seen and k not in while_open]
        seen.stop()
    finally:
        code, cpu = proxy.stop()
        del plain, tx
        gc.collect()  # destroys this variant's clients (the admin clients' futures hold them in cycles)
    lags = [seen.seen[k] - t if k in seen.seen else math.inf for k, t in acked.items()]
    row = {"variant": variant, "binary": binary, "round": round_no, "n": n, "while_open": len(while_open), "never_open": never_open,
           "missing": len(missing), "p50": percentile(lags, 0.50), "p99": percentile(lags, 0.99), "max": max(lags),
           "drain": math.inf if missing else (max(held) - aborted_at if held else None), "cpu": cpu, "exit": code,
           "src_ends": src_ends, "dst_ends": dst_ends}
    print(f"[{variant}] lag p50 {fmt(row['p50'])}, p99 {fmt(row['p99'])}, max {fmt(row['max'])}; {never_open} of {n} not on the "
          f"destination while the transaction was open, {len(missing)} never; the last held-back one on the destination "
          f"{fmt(row['drain'])} after the abort; proxy CPU {cpu:.1f} s, exit {code}", flush=True)
    return row


# ---- report ---------------------------------------------------------------------------------


def fmt(s: float | None) -> str:
    if s is None:
        return "— (none held back)"
    if math.isinf(s):
        return "never"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def ratio(a: float, b: float) -> str:
    if math.isinf(a) or math.isinf(b) or b <= 0:
        return "—"
    return f"{a / b:,.0f}x" if a / b >= 10 else f"{a / b:.1f}x"


def machine() -> str:
    mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine())
    return f"{os.cpu_count()} cores ({model}), {mem:.0f} GiB, Linux {platform.release()}"


def report(rows: list[dict], args, before_desc: str, after_desc: str) -> str:
    cmd = "python3 bench/txn_lag_bench.py " + " ".join(sys.argv[1:])
    out = [f"### {time.strftime('%Y-%m-%d %H:%M %Z')}: `{cmd.strip()}`", "",
           f"Machine: {machine()}; loopback, 1-broker source and 1-broker destination (Kafka 4.1.2, KRaft), release builds. "
           f"Before: {before_desc}. After: {after_desc}. Hold {args.hold:.0f} s, one record every {args.interval} s, "
           f"grace {args.grace:.0f} s.", ""]
    rounds = sorted({r["round"] for r in rows})
    for rn in rounds:
        b = next(r for r in rows if r["round"] == rn and r["variant"] == "before")
        a = next(r for r in rows if r["round"] == rn and r["variant"] == "after")
        if len(rounds) > 1:
            out += [f"Round {rn}:", ""]
        out += ["| | before (read_committed) | after (read_uncommitted, transactions replayed) | before / after |",
                "|---|---:|---:|---:|",
                f"| plain records written during the hold | {b['n']:,} | {a['n']:,} | |",
                f"| on the destination while the transaction was open | {b['while_open']:,} | {a['while_open']:,} | |",
                f"| not on the destination while the transaction was open | {b['never_open']:,} | {a['never_open']:,} | |",
                f"| never on the destination (not even {args.drain_timeout:.0f} s after the abort) | {b['missing']:,} | {a['missing']:,} | |",
                f"| lag p50 | {fmt(b['p50'])} | {fmt(a['p50'])} | {ratio(b['p50'], a['p50'])} |",
                f"| lag p99 | {fmt(b['p99'])} | {fmt(a['p99'])} | {ratio(b['p99'], a['p99'])} |",
                f"| lag max | {fmt(b['max'])} | {fmt(a['max'])} | {ratio(b['max'], a['max'])} |",
                f"| the last held-back record on the destination, after the abort | {fmt(b['drain'])} | {fmt(a['drain'])} | |",
                f"| destination (LSO, HW) at the end of the hold | {b['dst_ends']} | {a['dst_ends']} | |",
                f"| proxy CPU (whole variant) | {b['cpu']:.1f} s | {a['cpu']:.1f} s | |",
                ""]
    return "\n".join(out)


def describe(binary: str) -> str:
    """The commit a binary was built from, when it lies in one of the known target directories."""
    for tree, target in ((BEFORE_TREE, BEFORE_TARGET), (AFTER_TREE, AFTER_TARGET)):
        if binary.startswith(str(target)) and tree.exists():
            return f"`{binary}` (commit {git('rev-parse', '--short', 'HEAD', cwd=tree)}, worktree {tree})"
    return f"`{binary}`"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-bin", default=str(BEFORE_TARGET / "release" / "kafka-mirror-proxy"))
    ap.add_argument("--after-bin", default=str(AFTER_TARGET / "release" / "kafka-mirror-proxy"))
    ap.add_argument("--build", action="store_true", help="build both binaries first (see above)")
    ap.add_argument("--before-rev", default=BEFORE_REV)
    ap.add_argument("--after-rev", default="HEAD")
    ap.add_argument("--hold", type=float, default=300, help="seconds the transaction stays open while plain records are written")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between plain records")
    ap.add_argument("--grace", type=float, default=15, help="seconds the transaction stays open after the last plain record")
    ap.add_argument("--drain-timeout", type=float, default=120, help="seconds after the abort a held-back record may take")
    ap.add_argument("--rounds", type=int, default=1, help="before/after pairs, alternating")
    ap.add_argument("--out", default=str(REPO / "docs" / "txn-lag-benchmark.md"))
    ap.add_argument("--append", action="store_true", help="append the table to --out instead of replacing the results section")
    ap.add_argument("--no-write", action="store_true", help="print the table only")
    args = ap.parse_args()
    if args.build:
        build(args.before_rev, args.after_rev)
    for b in (args.before_bin, args.after_bin):
        assert Path(b).is_file(), f"{b} missing: build it (--build, or the steps at the top of this file)"
    work = bench_workdir("kmp-txnlag-")
    size = KafkaCluster.port_block_size(1)
    src = KafkaCluster("txnlag-src", 1, free_port_block(size), work, extra_config={"num.partitions": 1})
    dst = KafkaCluster("txnlag-dst", 1, free_port_block(size), work, extra_config={"num.partitions": 1})
    src.start()
    dst.start()
    rows = []
    try:
        for rn in range(1, args.rounds + 1):
            for variant, binary in (("before", args.before_bin), ("after", args.after_bin)):
                rows.append(measure(variant, binary, args, work, src, dst, rn))
    finally:
        src.stop()
        dst.stop()
    text = report(rows, args, describe(args.before_bin), describe(args.after_bin))
    print("\n" + text)
    if args.no_write:
        return
    out = Path(args.out)
    old = out.read_text() if out.exists() else ""
    marker = "<!-- results -->"
    if args.append or marker not in old:
        out.write_text(old.rstrip("\n") + "\n\n" + text + "\n" if old else text + "\n")
    else:
        out.write_text(old.split(marker, 1)[0] + marker + "\n\n" + text + "\n")


if __name__ == "__main__":
    main()
