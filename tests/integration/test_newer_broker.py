"""A broker newer than the audited table (Kafka 4.4) behind the proxy: it announces API versions
the proxy has not audited, the proxy clamps them away, and both an old-table client (librdkafka)
and the newer broker's own Java client work through it. Long tier (tests/run.sh --long)."""

import subprocess

import pytest

from conftest import PROXY_BIN, REPO, ProxyProcess, unique
from kmp_common import NEWER_KAFKA, java_command
from kafka_cluster import classpath
from client_scenarios import RECORDS, scenario

NEWER = NEWER_KAFKA

# Long tier only: the newer Kafka's clusters (tests/conftest.py newer_clusters, shared with the
# share-group sync of test_mirror_sync.py) cost two more cluster starts.
pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def newer_cluster(newer_clusters):
    """The 3-broker destination of the session's newer_clusters."""
    return newer_clusters[1]


def test_newer_broker_versions_are_clamped_and_clients_still_work(newer_cluster, workdir):
    direct = subprocess.run([str(PROXY_BIN), "versions", "--check-upstream", newer_cluster.addr(1)],
                            capture_output=True, text=True, timeout=30)
    assert direct.returncode == 1 and "UNAUDITED" in direct.stdout, (
        f"Kafka {NEWER} announces versions beyond the audited table:\n{direct.stdout}")
    proxy = ProxyProcess(newer_cluster.bootstrap, workdir).start()
    try:
        proxied = subprocess.run([str(PROXY_BIN), "versions", "--check-upstream", proxy.bootstrap],
                                 capture_output=True, text=True, timeout=30)
        assert proxied.returncode == 0, f"the proxy offers only audited versions:\n{proxied.stdout}"
        assert "has not audited" in proxy.log(), "the proxy warns about the unaudited upstream versions"

        assert scenario(proxy.bootstrap, unique("newer-rdk"), "zstd") == {"records": RECORDS, "rebalanced": True}
        java = subprocess.run([*java_command(classpath(NEWER), REPO / "tests/clients/java/ClientScenario.java"),
                               proxy.bootstrap, unique("newer-java"), "lz4", "consumer", "txn"],
                              capture_output=True, text=True, timeout=300)
        assert java.returncode == 0 and "OK" in java.stdout, (
            f"Kafka {NEWER}'s own Java client through the proxy:\n{java.stdout}\n{java.stderr[-4000:]}")
    finally:
        assert proxy.stop() == 0
