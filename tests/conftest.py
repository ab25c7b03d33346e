"""Session fixtures of the real-Kafka suites (tests/integration, tests/security): two KRaft clusters
started once per pytest session (source with 1 broker, destination with 3), the proxy binary in
front of the destination, and the Kafka classpath. Nothing here is faked: every test talks to real
brokers through the real binary. Helpers (ProxyProcess, unique, ...) live in kmp_common.py.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kmp_common import KafkaCluster, ProxyProcess, classpath, free_port_block  # noqa: E402


@pytest.fixture(scope="session")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="kmp-it-"))
    yield d


@pytest.fixture(scope="session")
def clusters(workdir):
    """(source, destination): started once for the whole session."""
    src = KafkaCluster("source", 1, free_port_block(101), workdir)
    dst = KafkaCluster("destination", 3, free_port_block(104), workdir)
    started = time.time()
    try:
        src.start()
        dst.start()
        print(f"\nclusters ready in {time.time() - started:.1f}s: source {src.bootstrap}, destination {dst.bootstrap}")
        yield src, dst
    finally:
        src.stop()
        dst.stop()


@pytest.fixture(scope="session")
def destination(clusters) -> KafkaCluster:
    return clusters[1]


@pytest.fixture(scope="session")
def proxy(destination, workdir):
    """One proxy in front of the 3-broker destination cluster, shared by the client tests."""
    p = ProxyProcess(destination.bootstrap, workdir).start()
    yield p
    code = p.stop()
    assert code == 0, f"proxy exited with {code} on SIGTERM:\n{p.log()[-4000:]}"


@pytest.fixture(scope="session")
def kafka_classpath() -> str:
    return classpath()
