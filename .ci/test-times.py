#!/usr/bin/env python3
"""Per-file and per-process test times of the last tests/run.sh, from the JUnit XML its two
pytest processes write (target/test-times/{first,second}.xml): what the split between the two
processes is balanced by (tests/run.sh). Setup and teardown of session fixtures (cluster starts)
count toward the test that triggered them, as pytest reports them.

    .ci/test-times.py [DIR]        default DIR: target/test-times
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "target" / "test-times")
    reports = sorted(root.glob("*.xml"))
    if not reports:
        print(f"no JUnit XML in {root}: run tests/run.sh first", file=sys.stderr)
        return 1
    for report in reports:
        suites = ET.parse(report).getroot()
        per_file: dict[str, float] = defaultdict(float)
        total = 0.0
        for case in suites.iter("testcase"):
            seconds = float(case.get("time", "0"))
            per_file[case.get("classname") or "?"] += seconds  # the module (or module.Class)
            total += seconds
        wall = sum(float(s.get("time", "0")) for s in suites.iter("testsuite"))
        print(f"== {report.stem}: tests {total:.0f} s, pytest wall {wall:.0f} s")
        for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1]):
            print(f"{seconds:8.0f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
