"""Java kafka-clients (the version the brokers ship) through the proxy: admin, compressed
produce, a two-member consumer group through a rebalance, committed offsets, describe configs
and transactions that commit and abort; with both the classic and the KIP-848 group protocol."""

import subprocess

import pytest

from conftest import REPO, unique
from kmp_common import java_command

SCENARIO = REPO / "tests" / "clients" / "java" / "ClientScenario.java"


def run_scenario(classpath: str, bootstrap: str, *args: str) -> str:
    out = subprocess.run([*java_command(classpath, SCENARIO), bootstrap, *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, (
        f"Java scenario failed against {bootstrap} (exit {out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}")
    return out.stdout


# The classic group's run is the long tier's: test_java_client_behaves_the_same_direct_and_through_proxy
# runs the scenario with the classic group in the quick tier.
@pytest.mark.parametrize("group_protocol,compression", [pytest.param("classic", "lz4", marks=pytest.mark.long), ("consumer", "zstd")])
def test_java_client_full_scenario_through_proxy(proxy, kafka_classpath, group_protocol, compression):
    out = run_scenario(kafka_classpath, proxy.bootstrap, unique(f"java-{group_protocol}"), compression, group_protocol, "txn")
    assert "txn_committed=15 txn_uncommitted=25" in out


def test_java_client_behaves_the_same_direct_and_through_proxy(proxy, destination, kafka_classpath):
    direct = run_scenario(kafka_classpath, destination.bootstrap, unique("java-direct"), "snappy", "classic")
    proxied = run_scenario(kafka_classpath, proxy.bootstrap, unique("java-proxied"), "snappy", "classic")
    strip = lambda s: s.split(" ms=")[0]  # noqa: E731
    assert strip(direct) == strip(proxied), f"direct: {direct!r} proxied: {proxied!r}"
