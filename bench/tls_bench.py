"""TLS pass-through benchmark (issue #12): what client-facing TLS plus upstream TLS costs in the proxy,
measured with Kafka's own producer/consumer perf tools against one secure 1-broker KRaft cluster.

    flock /tmp/kmp-kafka.lock python3 bench/tls_bench.py [--records N] [--rounds K] [--out docs/benchmarks.md]

Three paths, measured back to back in every round (order rotating from round to round, medians over
``--rounds``), each with a fresh 6-partition topic, produce then consume of ``--records`` 1 KiB records:

    (a) plain:     plaintext client -> proxy (no TLS)           -> broker INTERNAL (PLAINTEXT) listener
    (b) tls-proxy: TLS client       -> proxy ([listener.tls])   -> broker SSL listener (upstream TLS, client cert)
    (c) tls-direct: TLS client      -> broker SSL listener (client cert required)

(b) and (c) use the same client .properties file (PEM truststore and keystore); the proxy of (b) does not
ask for client certificates. The proxies of (a) and (b) are separate processes started once; around
every measurement the script reads their CPU time (/proc/<pid>/stat utime+stime), the broker's, and the
proxy's /metrics ``kmp_bytes_total``. CPU per GB is CPU seconds over GB of records moved (records x
1 KiB; the /metrics byte count is shown next to it as a cross-check).

The perf tools log their NetworkClient at INFO, so a request that hung until the client's
request.timeout.ms (30 s) and was retried is counted ("client requests timed out" row) and named in the
reading: such stalls, not TLS, then dominate that path's numbers.

A failed measurement (perf tool exit status, an exception in its output, fewer records than asked)
stops the run with a non-zero exit and the reason; nothing is reported then.

Needs a release build (``cargo build --release -p kafka-mirror-proxy``); ``--proxy-bin`` picks another.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))
sys.path.insert(0, str(REPO / "tests"))

from certs import generate  # noqa: E402
from kafka_cluster import KAFKA_VERSION, KafkaCluster, SecureListeners, classpath  # noqa: E402
from kmp_common import free_port, free_port_block  # noqa: E402

SECTION = "## TLS pass-through (issue #12)"
PATHS = ("plain", "tls-proxy", "tls-direct")
LABEL = {"plain": "(a) plaintext → proxy → PLAINTEXT", "tls-proxy": "(b) TLS → proxy → TLS",
         "tls-direct": "(c) TLS → broker"}
RECORD_SIZE = 1024
PRODUCER_RE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                         r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")
# A Java stack trace header at the start of a line (ProducerPerformance prints failed sends this way
# and still counts them as sent).
EXCEPTION_RE = re.compile(r"^(?:Exception in thread .*|[\w.$]+(?:Exception|Error)(?::.*)?)$", re.M)
TICKS = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    pass


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def proxy_bytes(admin_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5).read().decode()
    values = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("kmp_bytes_total{")]
    if not values:
        raise BenchError(f"the proxy on admin port {admin_port} exports no kmp_bytes_total series")
    return sum(values)


# The perf tools' logging: errors only (as without a configuration), plus the NetworkClient's INFO lines,
# which are how a request that timed out shows ("Disconnecting from node N due to request timeout").
TOOLS_LOG4J2 = """status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ERROR
rootLogger.appenderRef.err.ref = ERR
logger.network.name = org.apache.kafka.clients.NetworkClient
logger.network.level = INFO
"""
TOOLS_LOG4J2_FILE: Path | None = None
CANCELLED_RE = re.compile(r"Cancelled in-flight (\w+) request .* due to node \S+ being disconnected \(elapsed time since "
                          r"creation: (\d+)ms")


def java(cp: str, what: str, main: str, *args: str) -> tuple[str, dict]:
    """Runs a Kafka tool; returns its stdout and how many of its requests timed out (and their APIs)."""
    log = [f"-Dlog4j2.configurationFile={TOOLS_LOG4J2_FILE}"] if TOOLS_LOG4J2_FILE else []
    try:
        out = subprocess.run(["java", "-Xmx1g", *log, "-cp", cp, main, *args], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{what}: {main} did not finish within 600 s") from None
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise BenchError(f"{what}: {main} exited with {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    exc = EXCEPTION_RE.search(text)
    if exc:
        raise BenchError(f"{what}: {main} reported {exc.group(0)!r}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    # One "due to request timeout" line per request that timed out; the "Cancelled in-flight" lines that
    # follow name every request of that connection, the timed-out one with its full age.
    count = out.stderr.count("due to request timeout")
    apis = sorted({api for api, age in CANCELLED_RE.findall(out.stderr) if int(age) >= 25_000})
    timed_out = {"count": count, "apis": apis}
    return out.stdout, timed_out


def produce(cp: str, what: str, bootstrap: str, props: Path, topic: str, records: int) -> dict:
    out, timed_out = java(cp, what, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
               "--record-size", str(RECORD_SIZE), "--throughput", "-1", "--producer.config", str(props),
               "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=5", "batch.size=65536")
    found = PRODUCER_RE.findall(out)
    if not found:
        raise BenchError(f"{what}: no summary line in the ProducerPerformance output:\n{out[-3000:]}")
    m = found[-1]
    if int(m[0]) != records or float(m[2]) <= 0:
        raise BenchError(f"{what}: ProducerPerformance sent {m[0]} records at {m[2]} MB/s, asked for {records}")
    return {"mb_s": float(m[2]), "rec_s": float(m[1]), "p50": float(m[5]), "p99": float(m[7]), "timeouts": timed_out}


def consume(cp: str, what: str, bootstrap: str, props: Path, topic: str, records: int) -> dict:
    out, timed_out = java(cp, what, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
               "--messages", str(records), "--timeout", "60000", "--consumer.config", str(props),
               "--group", f"tls-bench-{time.time_ns()}")
    lines = [l for l in out.strip().splitlines() if l.strip()]
    # header, then: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    try:
        row = [c.strip() for c in lines[-1].split(",")]
        n, mb_s, fetch_mb_s = int(row[4]), float(row[3]), float(row[8])
    except (IndexError, ValueError):
        raise BenchError(f"{what}: unreadable ConsumerPerformance output:\n{out[-3000:]}") from None
    if n < records or mb_s <= 0:
        raise BenchError(f"{what}: ConsumerPerformance consumed {n} of {records} records (MB/s {mb_s}):\n{out[-3000:]}")
    return {"mb_s": mb_s, "fetch_mb_s": fetch_mb_s, "rec_s": float(row[5]), "rebalance_ms": float(row[6]),
            "timeouts": timed_out}


def write_props(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


class Proxy:
    """One kafka-mirror-proxy process with a config file (engine off)."""

    def __init__(self, binary: Path, work: Path, name: str, upstream: str, upstream_props: dict[str, str],
                 tls: tuple[Path, Path] | None):
        self.name = name
        self.port, self.admin, self.node_base = free_port(), free_port(), free_port_block(4)
        lines = ["[listener]", f'listen = "127.0.0.1:{self.port}"', f"node_port_base = {self.node_base - 1}"]
        if tls:
            lines += ["", "[listener.tls]", f'cert_file = "{tls[0]}"', f'key_file = "{tls[1]}"']
        lines += ["", "[upstream]", f'bootstrap_servers = ["{upstream}"]']
        if upstream_props:
            lines += ["", "[upstream.properties]", *(f'"{k}" = "{v}"' for k, v in upstream_props.items())]
        lines += ["", "[engine]", "enabled = false", "", "[admin]", f'listen = "127.0.0.1:{self.admin}"', ""]
        self.config = work / f"{name}.toml"
        self.config.write_text("\n".join(lines))
        self.log = work / f"{name}.log"
        self.proc = subprocess.Popen([str(binary), "run", "--config", str(self.config), "--log", "warn"],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"proxy {self.name} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise BenchError(f"proxy {self.name} not ready within {timeout:.0f} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def create_topics(internal_bootstrap: str, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": internal_bootstrap})
    for name, fut in admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=60).items():
        try:
            fut.result(timeout=90)
        except Exception as e:  # noqa: BLE001
            raise BenchError(f"creating topic {name}: {e}") from None


def machine_note() -> str:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    java_v = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    load = Path("/proc/loadavg").read_text().split()[:3]
    return (f"{os.cpu_count()} cores ({model}), {java_v.strip()}, load average at start {' / '.join(load)}; "
            f"the broker, the perf tool and the proxy share these cores")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000, help="1 KiB records per produce and per consume measurement")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=50_000, help="records produced and consumed on every path before round 0")
    ap.add_argument("--proxy-bin", default=str(REPO / "target" / "release" / "kafka-mirror-proxy"))
    ap.add_argument("--out", help="markdown file in which to append or replace the section " + repr(SECTION))
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, cluster data)")
    args = ap.parse_args()
    if args.records <= 0 or args.rounds <= 0:
        ap.error("--records and --rounds must be positive")
    binary = Path(args.proxy_bin)
    if not os.access(binary, os.X_OK):
        ap.error(f"{binary}: not an executable (cargo build --release -p kafka-mirror-proxy)")
    command = "python3 bench/tls_bench.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    note = machine_note()
    started = time.time()

    work = Path(tempfile.mkdtemp(prefix="kmp-tls-bench-"))
    certs = generate(work / "certs")
    secure = SecureListeners(certs)
    cluster = KafkaCluster("tls-bench", 1, free_port_block(KafkaCluster.port_block_size(1, secure=secure)), work,
                           secure=secure)
    proxies: list[Proxy] = []
    try:
        results, cpu = run(args, binary, work, certs, cluster, proxies)
    except BenchError as e:
        print(f"\ntls_bench: FAILED, nothing reported: {e}\n(work directory kept: {work})", file=sys.stderr)
        args.keep = True
        return 2
    finally:
        for p in proxies:
            p.stop()
        cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    report = render(args, command, note, results, cpu, time.time() - started)
    print("\n" + report)
    if args.out:
        write_section(Path(args.out), report)
        print(f"\nwrote section {SECTION!r} to {args.out}")
    return 0


def run(args, binary: Path, work: Path, certs, cluster: KafkaCluster, proxies: list[Proxy]):
    global TOOLS_LOG4J2_FILE
    TOOLS_LOG4J2_FILE = work / "tools-log4j2.properties"
    TOOLS_LOG4J2_FILE.write_text(TOOLS_LOG4J2)
    cluster.start()
    broker_pid = cluster.pids()[1]
    cp = classpath()
    ssl_client = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca.cert),
                  "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.app_client.combined)}
    ssl_props = write_props(work / "client-ssl.properties", ssl_client)
    plain_props = write_props(work / "client-plain.properties", {"security.protocol": "PLAINTEXT"})
    upstream_tls = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca.cert),
                    "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.proxy.combined)}
    plain = Proxy(binary, work, "proxy-plain", cluster.addr_for("INTERNAL", 1), {}, None)
    proxies.append(plain)
    tls = Proxy(binary, work, "proxy-tls", cluster.addr_for("SSL", 1), upstream_tls, (certs.proxy.chain, certs.proxy.key))
    proxies.append(tls)
    for p in proxies:
        p.wait_ready()
    # path -> (bootstrap, client properties, proxy or None)
    paths = {"plain": (plain.bootstrap, plain_props, plain), "tls-proxy": (tls.bootstrap, ssl_props, tls),
             "tls-direct": (cluster.bootstrap_for("SSL"), ssl_props, None)}

    internal = cluster.bootstrap_for("INTERNAL")
    topics = {(r, p): f"tls-bench-{r}-{p}" for r in range(-1, args.rounds) for p in PATHS}
    create_topics(internal, list(topics.values()), args.partitions)

    warmup_timeouts = {}
    for p in PATHS:  # warm-up: JIT of broker and tools' TLS, the proxies' upstream connections
        bs, props, _ = paths[p]
        w = [produce(cp, f"warm-up {p} produce", bs, props, topics[(-1, p)], args.warmup),
             consume(cp, f"warm-up {p} consume", bs, props, topics[(-1, p)], args.warmup)]
        warmup_timeouts[p] = sum(x["timeouts"]["count"] for x in w)
        print(f"warm-up {p}: ok" + (f", {warmup_timeouts[p]} request timeout(s)" if warmup_timeouts[p] else ""), flush=True)

    results: dict[tuple[str, str], list[dict]] = {}   # (op, path) -> one dict per round
    cpu: dict[tuple[str, str], list[dict]] = {}        # (op, path) -> per round: proxy s, broker s, metric bytes
    for r in range(args.rounds):
        order = list(PATHS[r % 3:] + PATHS[:r % 3])
        for p in order:
            bs, props, proxy = paths[p]
            for op, fn in (("produce", produce), ("consume", consume)):
                what = f"round {r} {p} {op}"
                c0 = cpu_seconds(proxy.proc.pid) if proxy else 0.0
                b0 = proxy_bytes(proxy.admin) if proxy else 0.0
                k0 = cpu_seconds(broker_pid)
                res = fn(cp, what, bs, props, topics[(r, p)], args.records)
                k1 = cpu_seconds(broker_pid)
                c1 = cpu_seconds(proxy.proc.pid) if proxy else 0.0
                b1 = proxy_bytes(proxy.admin) if proxy else 0.0
                if proxy and proxy.proc.poll() is not None:
                    raise BenchError(f"{what}: proxy {proxy.name} exited with {proxy.proc.returncode}")
                results.setdefault((op, p), []).append(res)
                cpu.setdefault((op, p), []).append({"proxy_s": c1 - c0, "broker_s": k1 - k0, "metric_bytes": b1 - b0})
                t = res["timeouts"]
                print(f"{what}: {res['mb_s']:.1f} MB/s" + (f", proxy {c1 - c0:.2f} CPU s" if proxy else "")
                      + f", broker {k1 - k0:.2f} CPU s"
                      + (f", {t['count']} request timeout(s) ({', '.join(t['apis']) or '?'})" if t["count"] else ""), flush=True)
    return results, cpu


def rng(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def render(args, command: str, note: str, results, cpu, elapsed: float) -> str:
    med = lambda rows, k="mb_s": statistics.median(x[k] for x in rows)  # noqa: E731
    gb = args.records * RECORD_SIZE / 1e9  # per measurement
    L = [SECTION, "",
         f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {elapsed / 60:.1f} min. Machine: {note}.",
         f"Kafka {KAFKA_VERSION}, one broker (tests/harness `SecureListeners`: INTERNAL plaintext, SSL with a required client",
         f"certificate; EC P-256 test PKI from tests/harness/certs.py), {args.partitions} partitions, RF 1. Per measurement",
         f"{args.records:,} records of 1 KiB ({gb:.2f} GB), kafka-producer-perf-test (acks=1, linger.ms=5, batch.size=65536,",
         "unlimited rate) into a fresh topic, then kafka-consumer-perf-test reading them back. Every round measures the three",
         f"paths back to back, order rotating per round; {args.rounds} rounds, medians. Command:", "",
         "```sh", f"flock /tmp/kmp-kafka.lock {command}", "```", "",
         "- (a) plaintext client → proxy (no TLS) → broker INTERNAL (PLAINTEXT) listener",
         "- (b) TLS client → proxy (`[listener.tls]`, no client-certificate check) → broker SSL listener (the proxy presents",
         "  its certificate upstream: `[upstream.properties]` `security.protocol=SSL`, PEM trust and key store)",
         "- (c) TLS client → broker SSL listener directly (client certificate required)",
         "",
         "(b) and (c) use the same client properties (SSL, PEM truststore and keystore). Ratios are medians of the",
         "per-round ratios, measured back to back in the same round (range over rounds in parentheses). Consume MB/s is",
         "the tool's MB.sec (includes joining the group); fetch MB/s excludes it.", "",
         f"| MB/s (median) | {LABEL['plain']} | {LABEL['tls-proxy']} | {LABEL['tls-direct']} | (b)/(c) TLS proxy / TLS direct |"
         " (a)/(c) plaintext proxy / TLS direct |",
         "|---|---|---|---|---|---|"]
    for op, keys in (("produce", ("mb_s",)), ("consume", ("mb_s", "fetch_mb_s"))):
        for k in keys:
            a, b, c = (results[(op, p)] for p in PATHS)
            name = f"{op}" if k == "mb_s" else f"{op} (fetch only)"
            L.append(f"| {name} | {med(a, k):.1f} | {med(b, k):.1f} | {med(c, k):.1f} |"
                     f" {rng([y[k] / x[k] for x, y in zip(c, b)])} | {rng([y[k] / x[k] for x, y in zip(c, a)])} |")
    a, b, c = (results[("produce", p)] for p in PATHS)
    L.append(f"| produce p50 / p99 latency (ms, perf tool, at full load) | {med(a, 'p50'):.0f} / {med(a, 'p99'):.0f} |"
             f" {med(b, 'p50'):.0f} / {med(b, 'p99'):.0f} | {med(c, 'p50'):.0f} / {med(c, 'p99'):.0f} | | |")
    cells = []
    for p in PATHS:
        per_op = []
        for op in ("produce", "consume"):
            rows = results[(op, p)]
            n = sum(x["timeouts"]["count"] for x in rows)
            apis = sorted({a for x in rows for a in x["timeouts"]["apis"]})
            per_op.append(f"{n}" + (f" ({', '.join(apis)})" if apis else ""))
        cells.append(" / ".join(per_op))
    L.append(f"| client requests timed out (30 s each), produce / consume, all rounds | {' | '.join(cells)} | | |")

    L += ["", "CPU per GB of records moved (CPU seconds summed over the rounds / GB of records over the rounds; the",
          "proxy's /metrics `kmp_bytes_total` over the same measurements in parentheses, as a cross-check of what passed",
          "through it). TLS/plain is the median of the per-round ratios (range). The broker's CPU includes its background",
          "work (KRaft, GC), which grows with a measurement's duration.", "",
          "| | (a) proxy CPU s/GB | (b) proxy CPU s/GB | TLS proxy / plaintext proxy | broker CPU s/GB (a) / (b) / (c) |",
          "|---|---|---|---|---|"]
    for op in ("produce", "consume"):
        ca, cb, cc = (cpu[(op, p)] for p in PATHS)
        total_gb = gb * len(ca)
        per = lambda rows, k: sum(x[k] for x in rows) / total_gb  # noqa: E731
        mbytes = lambda rows: sum(x["metric_bytes"] for x in rows) / 1e9  # noqa: E731
        ratio = [y["proxy_s"] / x["proxy_s"] for x, y in zip(ca, cb) if x["proxy_s"] > 0]
        L.append(f"| {op} | {per(ca, 'proxy_s'):.2f} ({mbytes(ca):.2f} GB on /metrics) | {per(cb, 'proxy_s'):.2f}"
                 f" ({mbytes(cb):.2f} GB on /metrics) | {rng(ratio) if ratio else 'n/a'} |"
                 f" {per(ca, 'broker_s'):.2f} / {per(cb, 'broker_s'):.2f} / {per(cc, 'broker_s'):.2f} |")
    L += ["", reading(results, cpu, gb), ""]
    return "\n".join(L)


def reading(results, cpu, gb: float) -> str:
    """Sentences derived from the numbers only: medians, whether the per-round range spans 1, CPU ratios."""
    def verdict(vals: list[float]) -> str:
        m = statistics.median(vals)
        if min(vals) <= 1.0 <= max(vals):
            return f"{m:.2f} (rounds on both sides of 1: within this machine's noise)"
        return f"{m:.2f} ({'every round below' if max(vals) < 1 else 'every round above'} 1)"
    parts = []
    for op in ("produce", "consume"):
        a, b, c = (results[(op, p)] for p in PATHS)
        bc = [y["mb_s"] / x["mb_s"] for x, y in zip(c, b)]
        ac = [y["mb_s"] / x["mb_s"] for x, y in zip(c, a)]
        parts.append(f"{op}: TLS through the proxy / TLS direct {verdict(bc)}, plaintext through the proxy / TLS direct "
                     f"{verdict(ac)}")
    cpu_parts = []
    for op in ("produce", "consume"):
        ca, cb = cpu[(op, "plain")], cpu[(op, "tls-proxy")]
        sa, sb = sum(x["proxy_s"] for x in ca), sum(x["proxy_s"] for x in cb)
        if sa > 0:
            cpu_parts.append(f"{op} {sb / sa:.1f}× ({(sb - sa) / (gb * len(ca)):+.2f} s per GB, i.e. "
                             f"{100 * (sb - sa) / (gb * len(ca)) / 10:.1f} % of one core per 100 MB/s)")
    stalls = []
    for p in PATHS:
        for op in ("produce", "consume"):
            rows = results[(op, p)]
            n = sum(x["timeouts"]["count"] for x in rows)
            if n:
                hit = sum(1 for x in rows if x["timeouts"]["count"])
                apis = sorted({a for x in rows for a in x["timeouts"]["apis"]})
                stalls.append(f"{LABEL[p]} {op}: {n} request(s) ({', '.join(apis) or 'API not logged'}) timed out after the "
                              f"client's request.timeout.ms (30 s) and were retried, in {hit} of {len(rows)} rounds")
    stall_text = ""
    if stalls:
        stall_text = (" **Stalls:** " + "; ".join(stalls) + ". Each such wait adds 30 s to a measurement of a few seconds, "
                      "so on those paths the throughput and its ratios measure the stalls, not the cost of TLS.")
    return ("**Reading (computed from the numbers above).** " + "; ".join(parts) + "." + stall_text + " The proxy's CPU per GB with TLS on both "
            "sides vs plaintext: " + "; ".join(cpu_parts) + ". TLS termination and re-encryption cost the proxy CPU in "
            "proportion to the bytes; on this 2-core machine that CPU is taken from the broker and the perf tool, which also "
            "do TLS in (b) and (c), so the throughput ratios measure contention for the two cores as much as the proxy "
            "itself, and ratios whose rounds fall on both sides of 1 do not show a difference.")


def write_section(path: Path, section: str) -> None:
    """Replaces the section (from its heading to the next level-2 heading) or appends it."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start = text.find(SECTION + "\n")
    if start == -1:
        text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    else:
        nxt = re.search(r"^## ", text[start + len(SECTION):], re.M)
        end = start + len(SECTION) + nxt.start() if nxt else len(text)
        rest = text[end:]
        text = text[:start] + section.rstrip("\n") + "\n" + ("\n" + rest if rest else "")
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
