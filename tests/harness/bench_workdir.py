"""A benchmark's scratch directory (broker data and logs, proxy logs, configs). It is removed
when the benchmark's process exits: a 1 GiB data set left behind by every run fills the disk
within a few runs. ``KMP_BENCH_KEEP=1`` keeps it and prints where it is. What goes into it is
the benchmark's business."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path


def bench_workdir(prefix: str) -> Path:
    work = Path(tempfile.mkdtemp(prefix=prefix))
    if os.environ.get("KMP_BENCH_KEEP") == "1":
        print(f"scratch directory kept (KMP_BENCH_KEEP=1): {work}", file=sys.stderr)
    else:
        atexit.register(shutil.rmtree, work, True)
    return work
