"""The integration suite's conftest. The session fixtures (clusters, destination, proxy, workdir,
kafka_classpath) moved to tests/conftest.py so that tests/security shares the same brokers; the
helpers live in tests/kmp_common.py and are re-exported here, so test modules (and the benchmarks,
which put this directory on sys.path) keep writing ``from conftest import ProxyProcess, unique``.
Helpers several test modules share live in tests/harness (mirror.py, instances.py, records.py,
client_scenarios.py), never in a test module: no test module imports another.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for kmp_common

from kmp_common import (  # noqa: E402,F401  (re-exported for `from conftest import ...`)
    PROXY_BIN,
    PROXY_READY_TIMEOUT_S,
    REPO,
    KafkaCluster,
    ProxyProcess,
    classpath,
    free_port,
    free_port_block,
    running_cluster,
    unique,
    wait_for_leader,
)


def pytest_addoption(parser):
    """Options of the randomized differential test (test_mirror_differential.py)."""
    group = parser.getgroup("kmp-differential", "randomized differential mirror test")
    group.addoption("--seeds", type=int, default=None,
                    help="run generated histories of seeds 1..N plus the regression cases (default by tier: quick 3 seeds "
                         "that rotate by date, long seeds 1..200)")
    group.addoption("--seed", type=int, default=None, help="replay exactly one generated seed (no regression cases)")
    group.addoption("--first-seed", type=int, default=1, help="with --seeds N: run seeds F..F+N-1 (long runs in chunks)")
