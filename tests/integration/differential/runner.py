"""Runs one history end to end and judges it.

1. creates the history's source topics and the seed's cluster mirror (``POST /v1/mirrors``; a
   history with ``shift_prefix_from`` declares its mirror in the config file of a proxy started
   for it alone, with its own state topic — REST cannot carry the setting, see ``mirror_ops`` —
   and every read, fault and ``/v1`` call of that history goes to that proxy);
2. executes the operations in order, logging what each resolved to (offsets, brokers, timings);
   with ``shift_prefix_from``, a topic's start records the source log starts just before it and
   waits (bounded) until the mirror has prepared the topic, so no later operation moves a log
   start while the mirror decides the shifts (if it cannot be prepared yet — a destination broker
   down — the log starts after every following operation are recorded until it is);
3. converges: destination brokers back, then waits (bounded) until the destination, read through
   the proxy, has the source's log starts and committed ends on every partition and ``/metrics``
   lists every partition;
4. reads the source (read_committed) and the proxy (read_committed and read_uncommitted)
   concurrently and compares them (``compare``), plus ``/metrics``, and reads the destination's
   log starts and high watermarks DIRECTLY: each must be the proxy's minus the partition's shift
   Δ — the source log start when its topic was started if that is at least
   ``shift_prefix_from``, else 0 (filled; always 0 without the setting, and for partitions added
   later) — proving a partition is shifted, or filled, as decided (also at every catch_up);
5. cleans up: the mirror's topics stopped and the mirror deleted (so later seeds and the proxy
   stay light), the topics deleted when the history passed (kept for inspection when it failed);
   a history's own proxy is stopped (SIGTERM, exit 0) and its state topic deleted with the topics.

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
from typing import Callable

from .compare import FILLER_KEY, Comparison, counter, failed_series, show
from .history import describe_op, expensive, format_history, shift_setting
from .kafka_io import TP, Admin, partition_counts, read_records, wait_until, watermarks
from .mirror_ops import PREPARED_S, MirrorSide
from .source_ops import SourceSide


@dataclass
class Env:
    source: object  # harness KafkaCluster, 1 broker
    destination: object  # harness KafkaCluster, 3 brokers
    proxy: object  # conftest.ProxyProcess, restarted in place by kill_proxy
    binary: Path
    # A new (not started) conftest.ProxyProcess in front of the destination with ``--config`` the
    # given file: the proxy of a history whose mirror must be declared in a config file.
    new_proxy: Callable[[Path], object] | None = None
    workdir: Path | None = None


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
        # A stored history without the field (every regression recorded before shifts): no shift.
        self.shift_from: int | None = history.get("shift_prefix_from")
        self.proxy = env.proxy
        self.own_proxy = None  # the history's own proxy (a mirror declared in its config file)
        self.state_topic: str | None = None
        if self.shift_from is not None:
            assert env.new_proxy is not None and env.workdir is not None, "a shifting history needs Env.new_proxy and Env.workdir"
            self.state_topic = f"__kmp_diff_state_{tag}"
        self.mirror = MirrorSide(env.proxy, env.destination, env.source.bootstrap, f"diff-{tag}", self.names, self.log, hedge,
                                 declared=self.shift_from is not None)
        if self.shift_from is not None:
            config = Path(env.workdir) / f"differential-{tag}.toml"
            config.write_text(self.mirror.declared_config(self.state_topic, self.shift_from))
            self.own_proxy = self.proxy = self.mirror.proxy = env.new_proxy(config)
        self.records = 0
        # Comparisons made in the middle of the history (after each catch_up).
        self.mid_compares = 0
        # With shift_prefix_from: topic index -> partition -> the source log starts it may have had
        # when the mirror decided the shifts (one, unless the topic could not be prepared at once).
        self.creation: dict[int, dict[int, set[int]]] = {}
        # Started topics not known to be prepared yet (topic index -> partitions at the start).
        self.pending: dict[int, int] = {}
        # Per partition, the proxy's offsets minus the destination's read directly, at the last comparison.
        self.observed_shift: dict[TP, int] = {}
        self.direct_checks = 0

    def second_fetches(self) -> tuple[float, float]:
        """The proxy's counters of second Fetches sent and of older answers cut and used."""
        page = self.proxy.http("/metrics")[1]
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
        if kind == "start":
            return self.start(op)
        if kind == "kill_proxy":
            out = m.kill_proxy(op)
            if m.declared and self.pending:
                out += "; " + m.start_again(sorted(self.pending))
            return out
        if kind in ("pause", "resume", "kill_dest_leader", "restart_dest_broker"):
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

    # -- shifts ------------------------------------------------------------------------------

    def source_log_starts(self, topic: int) -> dict[int, int]:
        name = self.names[topic]
        n = partition_counts(self.env.source.bootstrap, [name])[name]
        wm = watermarks(self.env.source.bootstrap, [(name, p) for p in range(n)])
        return {p: wm[(name, p)][0] for p in range(n)}

    def start(self, op: dict) -> str:
        """StartMirrorTopics; with ``shift_prefix_from``, the source log starts just before it are
        what the mirror decides the shifts from, once it prepares the topic: waits (bounded) for
        that, so the next operation cannot move a log start meanwhile."""
        t = op["topic"]
        if self.shift_from is None or t in self.creation:
            return self.mirror.start(op)
        starts = self.source_log_starts(t)
        out = self.mirror.start(op)
        self.creation[t] = {p: {lo} for p, lo in starts.items()}
        wait = PREPARED_S if self.mirror.down is None else 3
        t0 = time.time()
        if self.mirror.wait_prepared(t, len(starts), wait):
            return f"{out}; prepared in {time.time() - t0:.1f}s: {self.shifts_text(t)}"
        self.pending[t] = len(starts)
        return (f"{out}; not prepared within {wait}s (destination broker down: {self.mirror.down}): source log starts "
                f"{starts}; recorded again after every operation until it is")

    def poll_pending(self) -> None:
        """For each started topic not known to be prepared: the source log starts now (the mirror
        may decide from them), then whether it is prepared now."""
        for t, n in sorted(self.pending.items()):
            for p, lo in self.source_log_starts(t).items():
                # A partition added meanwhile may be past the shifts decided (not shifted).
                self.creation[t].setdefault(p, {0}).add(lo)
            if self.mirror.prepared(t, n):
                del self.pending[t]
                self.log(f"       ({self.names[t]} prepared now: {self.shifts_text(t)})")

    def settle_pending(self, topics: set[int]) -> None:
        for t in sorted(topics & set(self.pending)):
            assert self.mirror.wait_prepared(t, self.pending[t], PREPARED_S), \
                f"{self.names[t]} caught up through the proxy but not described by the mirror within {PREPARED_S}s:\n{self.mirror.describe()}"
            del self.pending[t]

    def expected_shifts(self, tp: TP) -> set[int]:
        """The shifts Δ partition ``tp`` may have: 0 without ``shift_prefix_from`` and for a
        partition added after its topic was prepared, else its source log start when the mirror
        decided if that is at least ``shift_prefix_from``, else 0."""
        starts = self.creation.get(self.names.index(tp[0]), {}).get(tp[1]) if self.shift_from is not None else None
        if starts is None:
            return {0}
        return {lo if lo >= self.shift_from else 0 for lo in starts}

    def shifts_text(self, topic: int) -> str:
        parts = []
        for p, starts in sorted(self.creation.get(topic, {}).items()):
            want = sorted(self.expected_shifts((self.names[topic], p)))
            los = "/".join(str(lo) for lo in sorted(starts))
            parts.append(f"p{p} log start {los} -> " + ("filled" if want == [0] else f"shifted by {'/'.join(map(str, want))}"))
        return ", ".join(parts)

    def check_direct(self, cmp: Comparison, tps: list[TP], via_proxy: dict[TP, tuple[int, int]]) -> None:
        """The destination read directly: (log start, high watermark) = the proxy's minus the
        partition's shift, which must be the one expected (``expected_shifts``)."""
        self.settle_pending({self.names.index(n) for n, _ in tps})
        direct = watermarks(self.env.destination.bootstrap, tps)
        for tp in tps:
            (plo, phi), (dlo, dhi) = via_proxy[tp], direct[tp]
            got, want = phi - dhi, self.expected_shifts(tp)
            self.observed_shift[tp] = got
            if got not in want or plo - dlo != got:
                cmp.problems.append(
                    f"{tp[0]}/{tp[1]}: destination read directly (log start, high watermark) ({dlo}, {dhi}), through the proxy ({plo}, {phi}): "
                    f"shown {plo - dlo} / {got} above the destination; expected shift {' or '.join(map(str, sorted(want)))} "
                    f"({shift_setting(self.history)}; source log start when the topic was started: "
                    f"{sorted(self.creation.get(self.names.index(tp[0]), {}).get(tp[1], [])) or 'partition added later'})")
        self.direct_checks += 1

    def run(self) -> str:
        started = time.time()
        phases: dict[str, float] = {}
        failure: BaseException | None = None
        try:
            for i, t in enumerate(self.history["topics"]):
                Admin(self.env.source.bootstrap).create_topic(self.names[i], t["partitions"], t["config"])
            if self.own_proxy is not None:
                self.own_proxy.start()
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
                if self.pending:
                    self.poll_pending()
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
                + self.shift_summary() + "; "
                + next((l for l in reversed(self.lines) if l.startswith("second Fetches")), ""))

    def shift_summary(self) -> str:
        if self.shift_from is None:
            return "no shift_prefix_from"
        shifted = {f"{tp[0].rsplit('-', 1)[-1]}/{tp[1]}": d for tp, d in sorted(self.observed_shift.items()) if d}
        return (f"shift_prefix_from {self.shift_from}: shifted {shifted or 'none'}, "
                f"{sum(1 for d in self.observed_shift.values() if not d)} partition(s) filled (checked directly {self.direct_checks} time(s))")

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
                   lambda: set(tps) <= set(failed_series(self.proxy.http("/metrics")[1], self.mirror.mirror)), 15, 0.2,
                   lambda: f"want {tps}, /metrics has {failed_series(self.proxy.http('/metrics')[1], self.mirror.mirror)}")
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
                ("proxy read_committed", self.proxy.bootstrap, "read_committed", src_stable),
                ("proxy read_uncommitted", self.proxy.bootstrap, "read_uncommitted", src_wm)]
        threads = [threading.Thread(target=read, args=j) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        dst_wm = watermarks(self.proxy.bootstrap, tps)
        dst_stable = watermarks(self.proxy.bootstrap, tps, "read_committed")
        src_after = watermarks(self.env.source.bootstrap, tps)
        src_stable_after = watermarks(self.env.source.bootstrap, tps, "read_committed")
        cmp = Comparison(self.kinds, self.src.model, self.src.txn_outcome)
        for tp in tps:
            cmp.watermarks(tp, src_after[tp], dst_wm[tp])
            cmp.watermarks(tp, src_stable_after[tp], dst_stable[tp], "(log start, last stable offset)")
            for isolation in ("read_committed", "read_uncommitted"):
                cmp.records(f"{when}: proxy {isolation}", tp, reads[f"source {isolation}"][tp], reads[f"proxy {isolation}"][tp])
        _, metrics = self.proxy.http("/metrics")
        cmp.metrics(metrics, self.mirror.mirror, tps)
        self.check_direct(cmp, tps, dst_wm)
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
        # A shifted partition holds source offset s at destination offset s - Δ.
        delta = self.observed_shift.get(tp, 0)
        try:
            recs = read_records(self.env.destination.bootstrap, {tp: (max(0, start - delta), max(0, end - delta))}, "read_uncommitted")[tp]
        except BaseException as e:  # noqa: BLE001 - diagnostics only
            return f"\n\n(destination could not be read directly: {e})"
        lines = [f"\n\ndestination {tp[0]}/{tp[1]} read directly (read_uncommitted, fillers visible), offsets {start}-{end - 1}"
                 + (f" (destination offsets {start - delta}-{end - 1 - delta}: shifted by {delta})" if delta else "") + ":"]
        for r in recs:
            lines.append(f"  {r[0] + delta:6d} {'FILLER' if r[1] == FILLER_KEY else show(r)}")
        return "\n".join(lines)

    def cleanup(self, passed: bool) -> str:
        errors = []
        for step in (self.mirror.ensure_brokers, self.mirror.ensure_proxy, self.src.close, self.mirror.stop_and_delete, self.stop_own_proxy):
            try:
                step()
            except BaseException as e:  # noqa: BLE001
                errors.append(f"{step.__name__}: {e}")
        if passed and not errors:
            # The topics of a passed history are not needed any more; deleting them needs no
            # waiting (the next history has its own topics), and failing to is not this test's concern.
            extra = [self.state_topic] if self.state_topic else []
            def delete(names=list(self.names), clusters=((self.env.source.bootstrap, []), (self.env.destination.bootstrap, extra))):
                for bootstrap, more in clusters:
                    try:
                        Admin(bootstrap).delete_topics(names + more)
                    except BaseException as e:  # noqa: BLE001
                        print(f"(deleting {names + more} on {bootstrap} failed: {e})")
            threading.Thread(target=delete, daemon=True).start()
        return "; ".join(errors)

    def stop_own_proxy(self) -> None:
        """The history's own proxy stopped (SIGTERM must end it with 0); its log stays."""
        if self.own_proxy is None or not self.own_proxy.alive():
            return
        code = self.own_proxy.stop()
        assert code == 0, f"the history's proxy exited with {code} on SIGTERM (log {self.own_proxy.log_path})"

    def report(self, failure: BaseException | None, cleanup_error: str) -> str:
        proxy_lines = [l for l in self.proxy.log().splitlines() if any(n in l for n in self.names) and ("WARN" in l or "ERROR" in l)]
        shifts = [f"  {self.names[t]}: {self.shifts_text(t)}" + (" (not known to be prepared)" if t in self.pending else "")
                  for t in sorted(self.creation)]
        return "\n".join([
            f"differential history {self.case} FAILED (seed {self.history['seed']})",
            f"replay: {self.replay}",
            f"binary: {binary_id(self.env.binary)}",
            f"mirror: {shift_setting(self.history)}"
            + (f"; declared in the config file of its own proxy (log {self.own_proxy.log_path}, state topic {self.state_topic})" if self.own_proxy else ""),
            *(["shifts decided when the topics were started (source log start -> shift):", *shifts] if shifts else []),
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
            f"proxy warnings/errors about these topics ({len(proxy_lines)}, last 30; full log {self.proxy.log_path}):",
            *proxy_lines[-30:],
        ])
