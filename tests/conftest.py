"""Session fixtures of the real-Kafka suites (tests/integration, tests/security): two KRaft clusters
started once per pytest session (source with 1 broker, destination with 3), the proxy binary in
front of the destination, and the Kafka classpath. Nothing here is faked: every test talks to real
brokers through the real binary. Helpers (ProxyProcess, unique, ...) live in kmp_common.py.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kmp_common import KafkaCluster, ProxyProcess, classpath, free_port_block, running_cluster  # noqa: E402
from kmp_common import NEWER_KAFKA, SASL_USERS, delete_topics  # noqa: E402
import tier  # noqa: E402  (tests/harness/tier.py: the quick or long tier and its dials)


@pytest.fixture(scope="session")
def workdir(request):
    """The session's directory for broker data, proxy logs and generated configs (kmp-it-* under
    the temporary directory, several hundred MB after a full run). Removed when the session ends
    with every test passed; kept, and named in the summary, when one failed or the run was
    interrupted, or always with KMP_KEEP_WORKDIR=1."""
    d = Path(tempfile.mkdtemp(prefix="kmp-it-"))
    request.config.stash[WORKDIR_KEY] = d
    yield d


WORKDIR_KEY = pytest.StashKey[Path]()
KEPT_KEY = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Runs last, after the runner tore down every fixture (brokers and proxies stopped), so the
    outcome is final."""
    d = session.config.stash.get(WORKDIR_KEY, None)
    if d is None or not d.exists():
        return
    if os.environ.get("KMP_KEEP_WORKDIR") == "1":
        session.config.stash[KEPT_KEY] = f"{d} kept (KMP_KEEP_WORKDIR=1)"
    elif session.testsfailed or exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.config.stash[KEPT_KEY] = (f"{d} kept because the run did not pass (exit {int(exitstatus)}): "
                                          "broker logs <cluster>/broker-N.log, proxy logs proxy-<port>.log")
    else:
        shutil.rmtree(d, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    kept = terminalreporter.config.stash.get(KEPT_KEY, None)
    if kept:
        terminalreporter.write_sep("-", "kmp test directory")
        terminalreporter.write_line(kept)
    if tier.DIALS:
        terminalreporter.write_sep("-", f"kmp {tier.TIER} tier: dials of the tests that ran")
        for name, (value, quick, long, env) in sorted(tier.DIALS.items()):
            terminalreporter.write_line(f"{name} = {value} (quick {quick}, long {long}{f'; {env} overrides' if env else ''})")


def pytest_report_header(config):
    how = "tests/run.sh" if tier.TIER == "quick" else "tests/run.sh --long"
    return (f"kmp tier: {tier.TIER} (KMP_TIER, set by {how}); tests marked long are "
            f"{'deselected' if 'not long' in (config.option.markexpr or '') else 'selected'} by -m")


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


def down_brokers(cluster: KafkaCluster) -> list[int]:
    """The cluster's own brokers (1..n; not ones a test added) that are not running."""
    return [i for i in range(1, cluster.n + 1) if i not in cluster.procs or cluster.procs[i].poll() is not None]


@pytest.fixture(autouse=True)
def clusters_left_whole(request):
    """After each test that used the shared clusters: every broker they started with is running
    again. A test that left one down fails here, naming the broker and its log, instead of the
    tests after it failing with misleading messages (a broker missing from metadata). The broker is
    started again once so that the rest of the session keeps its clusters."""
    yield
    if "clusters" not in request.fixturenames:
        return
    problems = []
    for cluster in request.getfixturevalue("clusters"):
        for i in down_brokers(cluster):
            problems.append(f"{cluster.name} broker {i} was left down (log: {cluster.dir}/broker-{i}.log)")
            try:
                cluster.start_broker(i)
            except (RuntimeError, TimeoutError) as e:
                problems.append(f"starting it again failed: {e}")
    if problems:
        pytest.fail("this test left the shared clusters degraded: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def drop_topics(clusters):
    """``drop_topics(name, ...)``: topics to delete, when the test ends, on both shared clusters
    (a source topic and the mirror topic of the same name on the destination). The shared clusters
    otherwise keep every topic to the end of the session, and each broker restart later in the
    session recovers every log it holds; tests that create many partitions hand them here."""
    names: list[str] = []
    yield lambda *more: names.extend(more)
    for cluster in clusters if names else ():
        for problem in delete_topics(cluster.bootstrap, names):
            print(f"deleting a topic on {cluster.name} after the test failed: {problem}")


@pytest.fixture(scope="session")
def destination(clusters) -> KafkaCluster:
    return clusters[1]


@pytest.fixture(scope="session")
def proxy(destination, workdir):
    """One proxy in front of the 3-broker destination cluster, shared by the client tests. It lives
    for the whole session, so it has a state topic of its own: on the default one it would be the
    elected engine that every test's proxy on the default state topic stands by for."""
    config = workdir / "session-proxy.toml"
    config.write_text('[engine]\nstate_topic = "__kmp_state_session_proxy"\n')
    p = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]).start()
    yield p
    code = p.stop()
    assert code == 0, f"proxy exited with {code} on SIGTERM:\n{p.log()[-4000:]}"


@pytest.fixture(scope="session")
def kafka_classpath() -> str:
    return classpath()


# ---- clusters of other shapes: one per shape, session-scoped and started when a test first asks -----
# (a pytest session fixture is created only when a selected test uses it). A module gets a cluster
# of its own only when a test destroys it (test_mirror_budget.py's SIGSTOPped destination,
# test_mirror_sync.py's lost DR source, test_mirror_source_link.py's source behind a latency relay).



@pytest.fixture(scope="session")
def sasl_cluster(workdir):
    """A 1-broker cluster whose only listener is SASL_PLAINTEXT/PLAIN (users SASL_USERS):
    test_sasl_passthrough.py and security/test_mirror_admin_sasl.py."""
    with running_cluster("sasl", 1, workdir, sasl_users=SASL_USERS) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def newer_clusters(workdir):
    """(source with 1 broker, destination with 3) of Kafka NEWER_KAFKA: test_newer_broker.py
    (version clamping, clients through the proxy) and test_mirror_sync.py's share-group sync. Both
    are long-tier tests, so the quick tier never starts these."""
    with running_cluster("newer-source", 1, workdir, version=NEWER_KAFKA) as source, \
            running_cluster("newer-destination", 3, workdir, version=NEWER_KAFKA) as destination:
        yield source, destination
