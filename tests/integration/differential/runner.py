"""Runs one history end to end and judges it.

1. creates the history's source topics and the seed's cluster mirror (``POST /v1/mirrors``);
2. executes the operations in order, logging what each resolved to (offsets, brokers, timings);
3. converges: destination brokers back, then waits (bounded) until the destination, read through
   the proxy, has the source's log starts and committed ends on every partition and ``/metrics``
   lists every partition;
4. reads the source (read_committed) and the proxy (read_committed and read_uncommitted)
   concurrently and compares them (``compare``), plus ``/metrics``;
5. cleans up: the mirror's topics stopped and the mirror deleted (so later seeds and the proxy
   stay light), the topics deleted when the history passed (kept for inspection when it failed).

Any failure — a mismatch, a bounded wait that ran out, an operation the proxy refused — raises an
``AssertionError`` carrying the seed, the replay command, the diff, what the destination holds
at the first differing offset (read directly, fillers visible), the full history and the
execution log.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from .compare import FILLER_KEY, Comparison, counter, failed_series, show
from .history import describe_op, expensive, format_history
from .kafka_io import Admin, partition_counts, read_records, wait_until, watermarks
from .mirror_ops import MirrorSide
from .source_ops import SourceSide


@dataclass
class Env:
    source: object  # harness KafkaCluster, 1 broker
    destination: object  # harness KafkaCluster, 3 brokers
    proxy: object  # conftest.ProxyProcess, restarted in place by kill_proxy
    binary: Path


def binary_id(path: Path) -> str:
    digest = hashlib.sha1(path.read_bytes()).hexdigest()[:12]
    return f"{path} sha1 {digest} built {time.strftime('%H:%M:%S', time.localtime(path.stat().st_mtime))}"


class Run:
    def __init__(self, env: Env, history: dict, case: str, replay: str, run_tag: str):
        self.env, self.history, self.case, self.replay = env, history, case, replay
        tag = f"{run_tag}-{case}"
        self.names = [f"kmpdiff-{tag}-t{i}" for i in range(len(history["topics"]))]
        self.kinds = {n: t["kind"] for n, t in zip(self.names, history["topics"])}
        self.lines: list[str] = []
        self.src = SourceSide(env.source.bootstrap, env.source.dir / "data-1", self.names, history, tag, self.log)
        # Odd seeds mirror with a second Fetch in flight (the history itself is unchanged).
        hedge = int(history.get("seed", 0)) % 2 == 1
        self.mirror = MirrorSide(env.proxy, env.destination, env.source.bootstrap, f"diff-{tag}", self.names, self.log, hedge)
        self.records = 0
        # Comparisons made in the middle of the history (after each catch_up).
        self.mid_compares = 0

    def second_fetches(self) -> tuple[float, float]:
        """The proxy's counters of second Fetches sent and of older answers cut and used."""
        page = self.env.proxy.http("/metrics")[1]
        return counter(page, "kmp_mirror_fetch_second_sent_total"), counter(page, "kmp_mirror_fetch_answers_cut_total")

    def log(self, line: str) -> None:
        self.lines.append(line)

    def execute(self, i: int, op: dict) -> str:
        kind, src, m = op["op"], self.src, self.mirror
        if kind == "produce":
            return src.produce(i, op)
        if kind == "txn_produce":
            return src.txn_produce(i, op)
        if kind in ("txn_begin", "txn_end", "delete_records", "jump", "compact", "time_retention"):
            return getattr(src, kind)(op)
        if kind == "add_partitions":
            out = src.add_partitions(op)
            if op["topic"] in m.started:
                m.nudge()
            return out
        if kind in ("start", "pause", "resume", "kill_proxy", "kill_dest_leader", "restart_dest_broker"):
            return getattr(m, kind)(op)
        if kind == "catch_up":
            out = m.catch_up()
            running = sorted(m.started - m.paused)
            if running:
                # A comparison in the middle of the history, transactions maybe still open.
                t0 = time.time()
                counts = partition_counts(self.env.source.bootstrap, [self.names[t] for t in running])
                tps = [(self.names[t], p) for t in running for p in range(counts[self.names[t]])]
                self.compare(tps, f"at operation {i}")
                self.mid_compares += 1
                out += f"; source and proxy compared at both isolation levels ({time.time() - t0:.1f}s)"
            return out
        raise ValueError(f"unknown operation {kind}")

    def run(self) -> str:
        started = time.time()
        phases: dict[str, float] = {}
        failure: BaseException | None = None
        try:
            for i, t in enumerate(self.history["topics"]):
                Admin(self.env.source.bootstrap).create_topic(self.names[i], t["partitions"], t["config"])
            seconds_before = self.second_fetches()
            self.mirror.create()
            phases["setup"] = time.time() - started
            for i, op in enumerate(self.history["ops"]):
                t0 = time.time()
                try:
                    result = self.execute(i, op)
                finally:
                    self.log(f"{describe_op(i, op)}  ({time.time() - t0:.1f}s)")
                self.log(f"       -> {result}")
            phases["ops"] = time.time() - started - sum(phases.values())
            self.converge_and_compare(phases)
            # The counters start again at 0 when the history restarts the proxy.
            restarted = any(op["op"] == "kill_proxy" for op in self.history["ops"])
            sent, cut = (after if restarted else after - before for after, before in zip(self.second_fetches(), seconds_before))
            self.log(f"second Fetches sent {sent:.0f}, older answers cut and used {cut:.0f} (all cases of this proxy meanwhile"
                     + (", since its last restart)" if restarted else ")"))
            if self.mirror.hedge and not restarted:
                assert sent > 0, "the mirror keeps a second Fetch in flight when caught up, yet none was sent"
        except BaseException as e:  # noqa: BLE001 - reported with the whole context below
            failure = e
        t0 = time.time()
        cleanup_error = self.cleanup(passed=failure is None)
        phases["cleanup"] = time.time() - t0
        if failure is not None or cleanup_error:
            text = self.report(failure, cleanup_error)
            # Raised without the original traceback (its text is in the report): its frames would
            # keep this history's clients alive until the end of the session.
            failure = None
            raise AssertionError(text)
        ops = len(self.history["ops"])
        timing = " ".join(f"{k} {v:.1f}s" for k, v in phases.items())
        return (f"{self.case}: {len(self.names)} topic(s) {[t['kind'] for t in self.history['topics']]}, {ops} ops "
                f"{expensive(self.history)}, {self.records} committed records compared at the end and at {self.mid_compares} catch-ups before it, {time.time() - started:.1f}s ({timing}); "
                + next((l for l in reversed(self.lines) if l.startswith("second Fetches")), ""))

    def converge_and_compare(self, phases: dict[str, float]) -> None:
        t0 = time.time()
        self.mirror.ensure_brokers()
        if any(op["op"] == "add_partitions" for op in self.history["ops"]):
            self.mirror.nudge()
        self.mirror.catch_up(list(range(len(self.names))))
        counts = partition_counts(self.env.source.bootstrap, self.names)
        tps = [(n, p) for n in self.names for p in range(counts[n])]
        phases["converge"] = time.time() - t0
        self.log(f"converged in {phases['converge']:.1f}s")
        t0 = time.time()
        src_wm = watermarks(self.env.source.bootstrap, tps)
        lso = watermarks(self.env.source.bootstrap, tps, "read_committed")
        assert src_wm == lso, f"the history left a transaction open on the source: {src_wm} vs {lso}"
        self.records = self.compare(tps, "at the end")
        phases["compare"] = time.time() - t0

    def compare(self, tps: list[TP], when: str) -> int:
        """Reads the source and the proxy at both isolation levels (read_committed up to the last
        stable offset) and compares them, with their ends and ``/metrics``; returns the number
        of committed source records compared."""
        # An empty partition matches the source as soon as its destination topic exists, maybe
        # before its copy task reports: wait until every partition is on /metrics.
        wait_until("every partition of the mirror on /metrics (kmp_mirror_failed)",
                   lambda: set(tps) <= set(failed_series(self.env.proxy.http("/metrics")[1], self.mirror.mirror)), 15, 0.2,
                   lambda: f"want {tps}, /metrics has {failed_series(self.env.proxy.http('/metrics')[1], self.mirror.mirror)}")
        src_wm = watermarks(self.env.source.bootstrap, tps)
        src_stable = watermarks(self.env.source.bootstrap, tps, "read_committed")
        reads: dict[str, dict] = {}
        errors: list[BaseException] = []

        def read(label: str, bootstrap: str, isolation: str, ranges: dict) -> None:
            try:
                reads[label] = read_records(bootstrap, ranges, isolation)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        jobs = [("source read_committed", self.env.source.bootstrap, "read_committed", src_stable),
                ("source read_uncommitted", self.env.source.bootstrap, "read_uncommitted", src_wm),
                ("proxy read_committed", self.env.proxy.bootstrap, "read_committed", src_stable),
                ("proxy read_uncommitted", self.env.proxy.bootstrap, "read_uncommitted", src_wm)]
        threads = [threading.Thread(target=read, args=j) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        dst_wm = watermarks(self.env.proxy.bootstrap, tps)
        dst_stable = watermarks(self.env.proxy.bootstrap, tps, "read_committed")
        src_after = watermarks(self.env.source.bootstrap, tps)
        src_stable_after = watermarks(self.env.source.bootstrap, tps, "read_committed")
        cmp = Comparison(self.kinds, self.src.model, self.src.txn_outcome)
        for tp in tps:
            cmp.watermarks(tp, src_after[tp], dst_wm[tp])
            cmp.watermarks(tp, src_stable_after[tp], dst_stable[tp], "(log start, last stable offset)")
            for isolation in ("read_committed", "read_uncommitted"):
                cmp.records(f"{when}: proxy {isolation}", tp, reads[f"source {isolation}"][tp], reads[f"proxy {isolation}"][tp])
        _, metrics = self.env.proxy.http("/metrics")
        cmp.metrics(metrics, self.mirror.mirror, tps)
        if cmp.problems:
            raise AssertionError(cmp.report() + self.direct_view(cmp, src_wm))
        return sum(len(v) for v in reads["source read_committed"].values())

    def direct_view(self, cmp: Comparison, wm: dict) -> str:
        """What the destination itself holds around the first difference (fillers visible)."""
        if cmp.first is None:
            return ""
        _, tp, off = cmp.first
        lo, hi = wm[tp]
        start, end = max(lo, off - 3), min(hi, off + 8)
        if start >= end:
            return ""
        try:
            recs = read_records(self.env.destination.bootstrap, {tp: (start, end)}, "read_uncommitted")[tp]
        except BaseException as e:  # noqa: BLE001 - diagnostics only
            return f"\n\n(destination could not be read directly: {e})"
        lines = [f"\n\ndestination {tp[0]}/{tp[1]} read directly (read_uncommitted, fillers visible), offsets {start}-{end - 1}:"]
        for r in recs:
            lines.append(f"  {r[0]:6d} {'FILLER' if r[1] == FILLER_KEY else show(r)}")
        return "\n".join(lines)

    def cleanup(self, passed: bool) -> str:
        errors = []
        for step in (self.mirror.ensure_brokers, self.mirror.ensure_proxy, self.src.close, self.mirror.stop_and_delete):
            try:
                step()
            except BaseException as e:  # noqa: BLE001
                errors.append(f"{step.__name__}: {e}")
        if passed and not errors:
            # The topics of a passed history are not needed any more; deleting them needs no
            # waiting (the next history has its own topics), and failing to is not this test's concern.
            def delete(names=list(self.names), clusters=(self.env.source.bootstrap, self.env.destination.bootstrap)):
                for bootstrap in clusters:
                    try:
                        Admin(bootstrap).delete_topics(names)
                    except BaseException as e:  # noqa: BLE001
                        print(f"(deleting {names} on {bootstrap} failed: {e})")
            threading.Thread(target=delete, daemon=True).start()
        return "; ".join(errors)

    def report(self, failure: BaseException | None, cleanup_error: str) -> str:
        proxy_lines = [l for l in self.env.proxy.log().splitlines() if any(n in l for n in self.names) and ("WARN" in l or "ERROR" in l)]
        return "\n".join([
            f"differential history {self.case} FAILED (seed {self.history['seed']})",
            f"replay: {self.replay}",
            f"binary: {binary_id(self.env.binary)}",
            "",
            f"{type(failure).__name__}: {failure}" if isinstance(failure, AssertionError) else
            "".join(traceback.format_exception(failure)[-6:]) if failure is not None else "",
            f"cleanup: {cleanup_error}" if cleanup_error else "",
            "",
            "history:",
            format_history(self.history),
            "",
            "history as JSON (a regression case for differential/regressions.py):",
            json.dumps(self.history, sort_keys=True),
            "",
            f"execution log (topics {self.names}, mirror {self.mirror.mirror}):",
            *self.lines,
            "",
            f"proxy warnings/errors about these topics ({len(proxy_lines)}, last 30; full log {self.env.proxy.log_path}):",
            *proxy_lines[-30:],
        ])
