"""Full client scenarios through the proxy over TLS, against the real secure destination, with the
same results as directly: Java kafka-clients (ClientScenario: admin, compressed produce, a
two-member group through a rebalance, committed offsets, describe configs, transactions),
librdkafka (produce, consume in a group with committed offsets, transactions that commit and
abort read back read_committed and read_uncommitted) and franz-go (its scenario with -txn).

Three proxies, one per way in:
  tls-passthrough   TLS; the client's SASL_SSL SCRAM-SHA-512 login passes through to the
                    destination's SASL_SSL listener
  mtls-passthrough  mutual TLS (client certificates mirror_admin / app_client); the proxy reaches
                    the destination's SSL listener with its own certificate
  tls-terminate     TLS; the proxy terminates the client's SCRAM-SHA-256 login and logs in to the
                    SASL_SSL listener as the proxy user
Each client also runs once directly against the destination's SASL_SSL listener (as alice,
SCRAM-SHA-512); the proxied summaries must equal that run's (the Java one without its timing).
"""

from __future__ import annotations

import pytest

from kmp_common import unique
from tls.proxy_tls import (  # noqa: F401  (suite_env is a fixture)
    client,
    credentials_file,
    listener_tls,
    log_tail,
    scrape,
    start_proxy,
    stop_proxy,
    suite_env,
    terminate_auth,
    upstream_properties,
)
from tls.tls_clients import consume_in_group, create_topic, produce, run_franz, run_java_scenario, transactions

WAYS = ["tls-passthrough", "mtls-passthrough", "tls-terminate"]


@pytest.fixture(scope="module")
def proxies(suite_env, secure_destination):
    """The three proxies (started on first use; each must exit 0 on SIGTERM at the end)."""
    env = suite_env
    started = {}

    def get(way):
        if way not in started:
            if way == "tls-passthrough":
                dest, sections = "SASL_SSL", {"listener.tls": listener_tls(env.certs), "listener.auth": {"mode": "passthrough"}}
            elif way == "mtls-passthrough":
                dest, sections = "SSL", {"listener.tls": listener_tls(env.certs, mtls=True), "listener.auth": {"mode": "passthrough"}}
            else:
                creds = credentials_file(env, [("alice", "SCRAM-SHA-256")])
                dest, sections = "SASL_SSL", {"listener.tls": listener_tls(env.certs), "listener.auth": terminate_auth(creds)}
            sections["upstream.properties"] = upstream_properties(env.certs, dest)
            started[way] = start_proxy(env, secure_destination.bootstrap_for(dest), sections, f"clients-{way}")
        return started[way]

    yield get
    codes = {way: stop_proxy(env, p) for way, p in started.items()}
    assert all(c == 0 for c in codes.values()), f"exit codes on SIGTERM: {codes}"


def way_client(env, way: str, cert: str):
    if way == "tls-passthrough":
        return client(env, "tls", "alice", "SCRAM-SHA-512")
    if way == "mtls-passthrough":
        return client(env, "mtls", cert=cert)
    return client(env, "tls", "alice", "SCRAM-SHA-256")


@pytest.fixture(scope="module")
def direct(secure_destination, tls_auth):
    """Each client's direct run (once per module, on first use): SASL_SSL SCRAM-SHA-512 as alice."""
    auth = tls_auth("SASL_SSL", "alice", "SCRAM-SHA-512")
    bootstrap = secure_destination.bootstrap_for("SASL_SSL")
    done = {}

    def get(kind, run):
        if kind not in done:
            done[kind] = run(bootstrap, auth, f"direct-{kind}")
        return done[kind]

    return get


def _check_principal(proxy, way: str, cert: str) -> None:
    log = proxy.log()
    if way == "mtls-passthrough":
        subject = {"mirror_admin": "CN=mirror-admin,O=kmp-test", "app_client": "CN=app-client,O=kmp-test"}[cert]
        assert f"principal={subject}" in log, f"the proxy took {subject} as the client's principal:\n{log_tail(proxy)}"
    if way == "tls-terminate":
        assert "client authenticated principal=alice" in log, f"the proxy authenticated alice itself:\n{log_tail(proxy)}"


# ---- Java kafka-clients -------------------------------------------------------------------------

# About 40 s a way: the quick tier runs the KIP-848 group over mTLS pass-through and the classic one
# in termination mode; plain TLS pass-through (classic) is the long tier's.
@pytest.mark.parametrize("way", [pytest.param(w, marks=pytest.mark.long) if w == "tls-passthrough" else w for w in WAYS])
def test_java_client_full_scenario_with_transactions_through_the_proxy_matches_direct(suite_env, proxies, direct, way,
                                                                                       kafka_classpath, client_props_dir):
    protocol = "consumer" if way == "mtls-passthrough" else "classic"

    def run(bootstrap, auth, prefix):
        return run_java_scenario(kafka_classpath, bootstrap, auth, client_props_dir, unique(prefix), group_protocol=protocol)

    want = direct(f"java-{protocol}", run)
    proxy = proxies(way)
    auth = way_client(suite_env, way, "mirror_admin")
    got = run(proxy.bootstrap, auth, f"java-{way}")
    strip = lambda s: s.split(" ms=")[0]  # noqa: E731
    assert "txn_committed=15 txn_uncommitted=25" in got, f"Java transactions through the {way} proxy: {got}"
    assert strip(got) == strip(want), f"Java ({protocol} group) through the {way} proxy: {got!r}; directly: {want!r}"
    _check_principal(proxy, way, "mirror_admin")
    scrape(suite_env, proxy, f"clients-java-{way}")


# ---- librdkafka ---------------------------------------------------------------------------------

def librdkafka_scenario(conf: dict, prefix: str) -> dict:
    """200 records into two partitions, read by a group member that commits; then transactions
    (commit 10, abort 10, commit 5) read back both ways. A summary without names or timings."""
    topic = unique(f"{prefix}-rdk")
    create_topic(conf, topic, partitions=2)
    values = [f"v{i}" for i in range(200)]
    produce(conf, topic, values)
    got = consume_in_group(conf, topic, unique(f"{prefix}-group"), len(values))
    txn_topic = unique(f"{prefix}-rdk-txn")
    create_topic(conf, txn_topic)
    seen = transactions(conf, txn_topic, unique(f"{prefix}-tx"))
    return {"group_read_all_produced": sorted(got) == sorted(values), "group_read": len(got),
            "read_committed": seen["committed"], "read_uncommitted": len(seen["uncommitted"]),
            "aborted_seen_uncommitted": sum(v.startswith("aborted-") for v in seen["uncommitted"])}


@pytest.mark.parametrize("way", WAYS)
def test_librdkafka_group_and_transactions_through_the_proxy_match_direct(suite_env, proxies, direct, way):
    want = direct("librdkafka", lambda bootstrap, auth, prefix: librdkafka_scenario(auth.librdkafka(bootstrap), prefix))
    assert want["read_committed"] == [f"committed-{i}" for i in range(15)] and want["aborted_seen_uncommitted"] == 10, (
        f"direct librdkafka baseline: {want}")
    proxy = proxies(way)
    got = librdkafka_scenario(way_client(suite_env, way, "app_client").librdkafka(proxy.bootstrap), f"rdk-{way}")
    assert got == want, f"librdkafka through the {way} proxy: {got}; directly: {want}"
    _check_principal(proxy, way, "app_client")
    scrape(suite_env, proxy, f"clients-librdkafka-{way}")


# ---- franz-go -----------------------------------------------------------------------------------

@pytest.mark.parametrize("way", WAYS)
def test_franz_go_scenario_with_transactions_through_the_proxy_matches_direct(suite_env, proxies, direct, way, franz_client):
    def run(bootstrap, auth, prefix):
        return run_franz(franz_client, bootstrap, auth, unique(prefix)).stdout.strip()

    want = direct("franz", run)
    proxy = proxies(way)
    got = run(proxy.bootstrap, way_client(suite_env, way, "app_client"), f"franz-{way}")
    assert "txn_committed=15 txn_uncommitted=25" in got, f"franz-go transactions through the {way} proxy: {got}"
    assert got == want, f"franz-go through the {way} proxy: {got!r}; directly: {want!r}"
    _check_principal(proxy, way, "app_client")
    scrape(suite_env, proxy, f"clients-franz-{way}")
