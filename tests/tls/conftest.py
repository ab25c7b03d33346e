"""Session fixtures of the TLS/SASL suite (tests/tls). On top of tests/conftest.py (workdir,
kafka_classpath): the test PKI, the session's users and their random passwords, and two
single-broker KRaft clusters, each listening on INTERNAL (plaintext), SSL (client certificate
required), SASL_PLAINTEXT and SASL_SSL (kafka_cluster.SecureListeners), started once per session
and side by side.

Fixtures:
    tls_certs           certs.TestCerts: CA, rogue CA, broker/proxy/wrong-host server certs, client certs
    tls_users           {"alice": password, "proxy": password, "mirror": password}, random per session
                        (mechanisms: tls_clients.USER_MECHANISMS; every user exists on both clusters)
    wrong_password      a random password no user has
    suite_secrets       every secret string the suite uses (passwords, wrong_password): nothing
                        the proxy logs, exports or answers may contain one
    secure_source       KafkaCluster (1 broker); secure_source.bootstrap_for("SASL_SSL") etc.
    secure_destination  KafkaCluster (1 broker)
    tls_auth            tls_auth(listener, identity=None, mechanism=None, password=None) -> ClientAuth,
                        e.g. tls_auth("SSL", "app_client"), tls_auth("SASL_SSL", "alice", "SCRAM-SHA-256");
                        then .librdkafka(bootstrap), .java_properties(dir), .franz_flags()
    client_props_dir    directory for the Java .properties files
    franz_client        path of the built franz-go client (tests/clients/go)

The package's __init__.py is there so that this conftest imports as ``tls.conftest``: without it,
it would take the plain module name ``conftest`` from tests/integration/conftest.py, whose test
modules import from it.
"""

from __future__ import annotations

import functools
import secrets
import time

import pytest

from kmp_common import KafkaCluster, free_port_block

from certs import generate  # noqa: E402  (tests/harness is on sys.path through kmp_common)
from kafka_cluster import SecureListeners  # noqa: E402
from kafka_cluster import started_together  # noqa: E402
from tls.tls_clients import USER_MECHANISMS, build_franz_client, client_auth  # noqa: E402


def secure_listeners(certs, users: dict[str, str]) -> SecureListeners:
    """Every user of ``users`` with the mechanisms of USER_MECHANISMS (SCRAM via StorageTool at
    format time, PLAIN in the listeners' JAAS config)."""
    scram = {u: {m: users[u] for m in mechs if m.startswith("SCRAM-")} for u, mechs in USER_MECHANISMS.items()}
    plain = {u: users[u] for u, mechs in USER_MECHANISMS.items() if "PLAIN" in mechs}
    return SecureListeners(certs, scram_users=scram, plain_users=plain)


@pytest.fixture(scope="session")
def tls_certs(workdir):
    return generate(workdir / "tls-certs")


@pytest.fixture(scope="session")
def tls_users() -> dict[str, str]:
    return {user: secrets.token_hex(16) for user in USER_MECHANISMS}


@pytest.fixture(scope="session")
def wrong_password(tls_users) -> str:
    pw = secrets.token_hex(16)
    assert pw not in tls_users.values()
    return pw


@pytest.fixture(scope="session")
def suite_secrets(tls_users, wrong_password) -> list[str]:
    return [*tls_users.values(), wrong_password]


@pytest.fixture(scope="session")
def secure_clusters(workdir, tls_certs, tls_users):
    """(source, destination), one broker each, booted side by side."""
    sec = secure_listeners(tls_certs, tls_users)
    size = KafkaCluster.port_block_size(1, secure=sec)
    base = free_port_block(2 * size)  # one block for both: two random blocks could overlap
    src = KafkaCluster("secure-source", 1, base, workdir, secure=sec)
    dst = KafkaCluster("secure-destination", 1, base + size, workdir, secure=sec)
    started = time.time()
    with started_together(src, dst):
        print(f"\nsecure clusters ready in {time.time() - started:.1f}s: source SASL_SSL {src.bootstrap_for('SASL_SSL')}, "
              f"destination SASL_SSL {dst.bootstrap_for('SASL_SSL')}")
        yield src, dst


@pytest.fixture(scope="session")
def secure_source(secure_clusters) -> KafkaCluster:
    return secure_clusters[0]


@pytest.fixture(scope="session")
def secure_destination(secure_clusters) -> KafkaCluster:
    return secure_clusters[1]


@pytest.fixture(scope="session")
def tls_auth(tls_certs, tls_users):
    return functools.partial(client_auth, tls_certs, tls_users)


@pytest.fixture(scope="session")
def client_props_dir(workdir):
    d = workdir / "tls-client-props"
    d.mkdir(exist_ok=True)
    return d


@pytest.fixture(scope="session")
def franz_client() -> str:
    return build_franz_client()


@pytest.fixture(scope="session")
def leak_corpus(workdir):
    """A directory every TLS test writes what the proxy showed it into (REST answers, /metrics
    scrapes, DescribeConfigs / ListClusterMirrors answers, CLI output), one file each; the proxies'
    logs stay in workdir as proxy-*.log. test_secrets_never_leak.py — run last (see
    pytest_collection_modifyitems) — greps all of it for every secret of the session."""
    d = workdir / "tls-leak-corpus"
    d.mkdir(exist_ok=True)
    return d


def pytest_collection_modifyitems(session, config, items):
    """The secrets grep runs after every other test of the session, so it sees everything."""
    last = [i for i in items if "test_secrets_never_leak" in i.nodeid]
    items[:] = [i for i in items if i not in last] + last
