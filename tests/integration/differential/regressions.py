"""Histories that once failed, kept as fixed cases so they keep running whatever the generator
becomes. They live in ``regressions.json``: a list of ``{"name", "why", "history"}`` — ``name``
gives the pytest case id ``regression-<name>``, ``why`` says what failed, on which binary and why,
and ``history`` is the full history exactly as the failure report printed it ("history as JSON").

Add a case by appending the failing report's JSON history with a name and a why. A case whose
history is exactly what the generator makes for a seed that the same run covers anyway is not run
twice (``duplicates``).
"""

from __future__ import annotations

import json
from pathlib import Path

from .history import generate

REGRESSIONS: list[dict] = json.loads((Path(__file__).with_name("regressions.json")).read_text())


def duplicates(seeds: range) -> set[str]:
    """Names of the cases whose history the generator makes for one of ``seeds``."""
    return {r["name"] for r in REGRESSIONS if r["history"]["seed"] in seeds and generate(r["history"]["seed"]) == r["history"]}
