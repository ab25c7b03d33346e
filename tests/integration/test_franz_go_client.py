"""franz-go through the proxy: admin create + describe configs, compressed produce, a two-member
consumer group through a rebalance, committed offsets re-read (tests/clients/go/main.go)."""

import subprocess

import pytest

from conftest import REPO, unique

GO_DIR = REPO / "tests" / "clients" / "go"


@pytest.fixture(scope="session")
def franz_client() -> str:
    out = subprocess.run(["go", "build", "-o", "franz-client", "."], cwd=GO_DIR, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"building the franz-go client failed:\n{out.stderr}"
    return str(GO_DIR / "franz-client")


@pytest.mark.parametrize("compression", ["snappy", "zstd"])
def test_franz_go_full_scenario_through_proxy(proxy, franz_client, compression):
    out = subprocess.run([franz_client, "-bootstrap", proxy.bootstrap, "-prefix", unique(f"franz-{compression}"),
                          "-compression", compression], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.startswith("OK"), (
        f"franz-go scenario failed (exit {out.returncode}):\n{out.stdout}\n{out.stderr[-4000:]}")
    assert "records=300 rebalanced=true committed=300" in out.stdout
