"""The test tier and its dials. tests/run.sh runs the quick tier (the per-submission run, at most
25 minutes on a 2-core machine) and `tests/run.sh --long` the long tier (everything at full length:
nightly, before a release). Two mechanisms, documented in README "Test":

* the `long` marker (tests/pytest.ini): a test that only the long tier runs (the container image,
  the fresh-install proof, the Kafka 4.4 clusters). tests/run.sh passes `-m "not long"` in the
  quick tier, so such tests are reported as deselected, never skipped; naming one on the pytest
  command line (`pytest path::test`) runs it.
* dials: the same test with a smaller knob in the quick tier (a shorter chaos window, fewer kills,
  restarts, connections, partitions or differential seeds). ``KMP_TIER`` (quick or long; quick
  when unset) picks the value; an explicit environment variable named by the dial wins over both.

Every dial is listed in DIALS so the session header shows what this run uses.
"""

from __future__ import annotations

import os

TIER = os.environ.get("KMP_TIER", "quick")
if TIER not in ("quick", "long"):
    raise SystemExit(f"KMP_TIER must be quick or long, not {TIER!r}")
LONG = TIER == "long"

DIALS: dict[str, tuple] = {}  # name -> (value used, quick, long, overriding environment variable)


def dial(name: str, quick, long, env: str | None = None):
    """``quick`` or ``long`` by tier, or the value of environment variable ``env`` when it is set
    (converted to the type of ``long``)."""
    value = long if LONG else quick
    if env and os.environ.get(env):
        value = type(long)(os.environ[env])
    DIALS[name] = (value, quick, long, env)
    return value
