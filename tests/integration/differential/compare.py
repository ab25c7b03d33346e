"""The comparator: what consumers of the proxy see against what consumers of the source see.

Rules, per partition, for each isolation level read through the proxy:

* each isolation level of the proxy is compared with the same isolation level of the source:
  read_committed readers see the committed records, read_uncommitted readers every record,
  aborted transactions' included (the engine replays source transactions in destination
  transactions); fillers are masked as markers by the proxy at both levels;
* every expected record must be there at the same offset with the same key, value, headers,
  timestamp type and timestamp — a missing record fails, whatever is at its offset. One
  exception on the type: a LogAppendTime source topic's records may show as CreateTime with the
  same timestamp (the destination topic is CreateTime, forced, and a broker stamps a produced
  batch with its topic's type), never another timestamp;
* on a plain or retention topic nothing else may be there;
* on a compacted topic the destination may also hold records the source's cleaner removed
  *after* they were copied (the destination does not compact on its own, see
  ``mirror_ops.CONFIG_EXCLUDE``). Such an extra record is accepted only if it is exactly the
  record produced at that offset (the model from the delivery reports) and compaction could
  remove it: a tombstone, or a key written again later; or, read_uncommitted, a record of an
  aborted transaction (the cleaner removes those whatever their key);
* log start offsets and high watermarks are equal.

``/metrics`` must list every partition of the seed's mirror in ``kmp_mirror_failed`` with 0.

On a mismatch the report names the partition, the first differing offset with a few records on
either side from both sides, and counts/ranges of what is missing, extra or different.
"""

from __future__ import annotations

import re

from .kafka_io import TP, Rec

FILLER_KEY = b"__kmp_filler"
WINDOW = 3


def _short(v: bytes | None, n: int = 24) -> str:
    if v is None:
        return "null"
    return repr(v[:n]) + (f"..({len(v)}B)" if len(v) > n else "")


def show(rec: Rec | None) -> str:
    if rec is None:
        return "-"
    off, key, value, headers, ts_type, ts = rec
    hdrs = ",".join(f"{k}={_short(v, 8)}" for k, v in headers)
    return f"key={_short(key)} value={_short(value)} headers=[{hdrs}] ts={ts_type}:{ts}"


def ranges(offsets: list[int]) -> str:
    out, start, prev = [], None, None
    for o in sorted(offsets):
        if start is None:
            start = prev = o
        elif o == prev + 1:
            prev = o
        else:
            out.append(f"{start}-{prev}" if prev > start else str(start))
            start = prev = o
    if start is not None:
        out.append(f"{start}-{prev}" if prev > start else str(start))
    text = ", ".join(out[:12])
    return text + (f", … ({len(out)} runs)" if len(out) > 12 else "")


def failed_series(text: str, mirror: str) -> dict[TP, float]:
    """``kmp_mirror_failed`` of every partition of ``mirror`` on a /metrics page."""
    failed: dict[TP, float] = {}
    for line in text.splitlines():
        if not line.startswith("kmp_mirror_failed{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if labels.get("mirror") == mirror:
            failed[(labels["topic"], int(labels["partition"]))] = float(line.split()[-1])
    return failed


def counter(text: str, name: str) -> float:
    """The value of the unlabelled counter ``name`` on a /metrics page; missing fails."""
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} is not on /metrics")


class Comparison:
    def __init__(self, kinds: dict[str, str], model: dict, txn_outcome: dict[str, str]):
        self.kinds = kinds  # topic name -> plain / compact / retention
        self.model = model  # TP -> offset -> ProducedRecord
        self.txn_outcome = txn_outcome
        self.problems: list[str] = []
        self.first: tuple[str, TP, int] | None = None  # (what, partition, first differing offset) of the first problem

    def _extra_allowed(self, tp: TP, rec: Rec, uncommitted: bool) -> str | None:
        """None if a destination-only record is a legitimately compacted-away source record."""
        if self.kinds[tp[0]] != "compact":
            return "not in the source"
        off, key, value, headers, _, _ = rec
        produced = self.model.get(tp, {}).get(off)
        if produced is None:
            return "never produced at this offset"
        if (produced.key, produced.value, produced.headers) != (key, value, headers):
            return "differs from what was produced at this offset"
        if produced.txn and self.txn_outcome.get(produced.txn) == "aborted" and uncommitted:
            return None
        if produced.txn and self.txn_outcome.get(produced.txn) != "committed":
            return f"from transaction {produced.txn} ({self.txn_outcome.get(produced.txn, 'never ended')})"
        if key is None:
            return "a null key cannot be compacted"
        later = any(o > off and r.key == key and not (r.txn and self.txn_outcome.get(r.txn) != "committed")
                    for o, r in self.model[tp].items())
        return None if value is None or later else "the source cleaner could not have removed it (no later record with its key)"

    @staticmethod
    def same(exp: Rec, got: Rec) -> bool:
        if exp[4] == 2 and got[4] == 1:  # LogAppendTime on the source, CreateTime on the destination
            return exp[:4] + exp[5:] == got[:4] + got[5:]
        return exp == got

    def records(self, label: str, tp: TP, expected: list[Rec], got: list[Rec]) -> None:
        exp = {r[0]: r for r in expected}
        have = {r[0]: r for r in got}
        missing = [o for o in exp if o not in have]
        different = [o for o in exp if o in have and not self.same(exp[o], have[o])]
        uncommitted = "read_uncommitted" in label
        extra = {o: self._extra_allowed(tp, have[o], uncommitted) for o in have if o not in exp}
        extra = {o: why for o, why in extra.items() if why}
        bad = sorted(missing + different + list(extra))
        if not bad:
            return
        first = bad[0]
        if self.first is None:
            self.first = (label, tp, first)
        lines = [f"{label} {tp[0]}/{tp[1]}: {len(expected)} records expected, {len(got)} read; first difference at offset {first}"]
        if missing:
            lines.append(f"  missing ({len(missing)}): offsets {ranges(missing)}")
        if different:
            lines.append(f"  different ({len(different)}): offsets {ranges(different)}")
        if extra:
            whys = sorted(set(extra.values()))
            lines.append(f"  extra ({len(extra)}): offsets {ranges(list(extra))} — {'; '.join(whys)}")
        offsets = sorted(set(exp) | set(have))
        i = offsets.index(first)
        lines.append(f"  offset | source ({'read_uncommitted' if uncommitted else 'read_committed'}) | proxy")
        for o in offsets[max(0, i - WINDOW): i + WINDOW + 1]:
            mark = ">" if o in bad else " "
            lines.append(f"  {mark}{o:6d} | {show(exp.get(o))} | {show(have.get(o))}")
        self.problems.append("\n".join(lines))

    def watermarks(self, tp: TP, src: tuple[int, int], dst: tuple[int, int], what: str = "(log start, high watermark)") -> None:
        if src != dst:
            self.problems.append(f"{tp[0]}/{tp[1]}: source {what} {src} != destination through the proxy {dst}")

    def metrics(self, text: str, mirror: str, tps: list[TP]) -> None:
        failed = failed_series(text, mirror)
        absent = [tp for tp in tps if tp not in failed]
        if absent:
            self.problems.append(f"/metrics has no kmp_mirror_failed line for {absent} (mirror {mirror})")
        bad = {tp: v for tp, v in failed.items() if v != 0}
        if bad:
            self.problems.append(f"/metrics reports FAILED partitions of mirror {mirror}: {bad}")

    def report(self) -> str:
        return "\n\n".join(self.problems)
