"""The TLS/SASL baseline, directly against the brokers (no proxy): the secure listeners of the
harness work with Java kafka-clients, librdkafka and franz-go over SSL with a client certificate,
SASL_PLAINTEXT SCRAM-SHA-512, SASL_SSL PLAIN and SASL_SSL SCRAM-SHA-256, and they refuse a wrong
password, a client certificate from an untrusted CA and an expired one. The proxy suites run the
same clients (tls_clients) against the proxy and compare with what happens here."""

from __future__ import annotations

import re

import pytest

from kmp_common import unique
from tls.tls_clients import (
    USER_MECHANISMS,
    authentication_failed,
    connection_errors,
    consume_in_group,
    create_topic,
    error_names,
    metadata_ok,
    produce,
    run_franz,
    run_java_scenario,
    tls_rejected,
    transactions,
)

# (listener, identity, mechanism): the four ways in that every client must manage.
WAYS_IN = [
    ("SSL", "mirror_admin", None),
    ("SASL_PLAINTEXT", "alice", "SCRAM-SHA-512"),
    ("SASL_SSL", "alice", "PLAIN"),
    ("SASL_SSL", "alice", "SCRAM-SHA-256"),
]
WAY_IDS = ["ssl-client-cert", "sasl-plaintext-scram-sha-512", "sasl-ssl-plain", "sasl-ssl-scram-sha-256"]


def _name(listener: str, mechanism: str | None) -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"{listener}-{mechanism or 'cert'}".lower())


# The scenarios direct are baselines: the proxied tests (test_proxy_tls_clients) compare against
# their own direct runs, so the quick tier runs librdkafka and franz-go over SASL_SSL with SCRAM and
# leaves Java (about 25 s a way) and the other ways to the long tier.
JAVA_WAYS_IN = [pytest.param(*way, id=way_id, marks=pytest.mark.long) for way, way_id in zip(WAYS_IN, WAY_IDS)]
CLIENT_WAYS_IN = [pytest.param(*way, id=way_id, marks=() if way_id == "sasl-ssl-scram-sha-256" else pytest.mark.long)
                  for way, way_id in zip(WAYS_IN, WAY_IDS)]


@pytest.mark.parametrize("listener,identity,mechanism", JAVA_WAYS_IN)
def test_java_client_runs_full_scenario_with_transactions_directly(secure_destination, tls_auth, kafka_classpath,
                                                                     client_props_dir, listener, identity, mechanism):
    auth = tls_auth(listener, identity, mechanism)
    # Both group protocols, alternating: the classic and the KIP-848 consumer group over security.
    protocol = "consumer" if listener == "SSL" or mechanism == "PLAIN" else "classic"
    out = run_java_scenario(kafka_classpath, secure_destination.bootstrap_for(listener), auth, client_props_dir,
                            unique(f"java-{_name(listener, mechanism)}"), group_protocol=protocol)
    assert "records=300 rebalanced=true" in out, f"Java group scenario over {auth.label()}: {out}"
    assert "txn_committed=15 txn_uncommitted=25" in out, f"Java transactions over {auth.label()}: {out}"


@pytest.mark.parametrize("listener,identity,mechanism", CLIENT_WAYS_IN)
def test_librdkafka_produces_consumes_in_a_group_and_commits_transactions_directly(secure_destination, tls_auth,
                                                                                    listener, identity, mechanism):
    auth = tls_auth(listener, identity, mechanism)
    conf = auth.librdkafka(secure_destination.bootstrap_for(listener))
    topic = unique(f"rdk-{_name(listener, mechanism)}")
    create_topic(conf, topic, partitions=2)
    values = [f"v{i}" for i in range(200)]
    produce(conf, topic, values)
    got = consume_in_group(conf, topic, unique("rdk-group"), len(values))
    assert sorted(got) == sorted(values), f"group over {auth.label()} read {len(got)} records, not the 200 produced"

    txn_topic = unique(f"rdk-txn-{_name(listener, mechanism)}")
    create_topic(conf, txn_topic)
    seen = transactions(conf, txn_topic, unique("rdk-tx"))
    assert seen["committed"] == [f"committed-{i}" for i in range(15)], (
        f"read_committed over {auth.label()} sees exactly the committed records in order, got {seen['committed']}")
    assert len(seen["uncommitted"]) == 25 and sum(v.startswith("aborted-") for v in seen["uncommitted"]) == 10, (
        f"read_uncommitted over {auth.label()} sees committed and aborted records, got {seen['uncommitted']}")


@pytest.mark.parametrize("listener,identity,mechanism", CLIENT_WAYS_IN)
def test_franz_go_runs_full_scenario_with_transactions_directly(secure_destination, tls_auth, franz_client,
                                                                listener, identity, mechanism):
    auth = tls_auth(listener, identity, mechanism)
    out = run_franz(franz_client, secure_destination.bootstrap_for(listener), auth, unique(f"franz-{_name(listener, mechanism)}"))
    assert "records=300 rebalanced=true committed=300 txn_committed=15 txn_uncommitted=25" in out.stdout, (
        f"franz-go scenario over {auth.label()}: {out.stdout}")


def test_every_user_authenticates_with_each_of_its_mechanisms_on_both_clusters(secure_source, secure_destination, tls_auth):
    failures = []
    for cluster in (secure_source, secure_destination):
        for user, mechanisms in USER_MECHANISMS.items():
            for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
                for mechanism in mechanisms:
                    if listener == "SASL_PLAINTEXT" and mechanism == "SCRAM-SHA-256":
                        continue  # not enabled on SASL_PLAINTEXT
                    conf = tls_auth(listener, user, mechanism).librdkafka(cluster.bootstrap_for(listener))
                    if not metadata_ok(conf):
                        failures.append(f"{cluster.name} {listener} {mechanism} {user}")
    assert not failures, f"these users could not authenticate: {failures}"


def test_sasl_plaintext_listener_offers_only_scram_sha_512_and_plain(secure_destination, tls_auth):
    conf = tls_auth("SASL_PLAINTEXT", "alice", "SCRAM-SHA-256").librdkafka(secure_destination.bootstrap_for("SASL_PLAINTEXT"))
    errors = connection_errors(conf)
    assert errors and any("SCRAM-SHA-512" in e.str() and "PLAIN" in e.str() for e in errors), (
        f"SCRAM-SHA-256 on SASL_PLAINTEXT is refused, naming the enabled mechanisms; librdkafka reported {error_names(errors)}")


@pytest.mark.parametrize("listener,mechanism", [("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"),
                                                ("SASL_SSL", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256")])
def test_wrong_password_is_reported_as_sasl_authentication_failure(secure_destination, tls_auth, wrong_password,
                                                                    listener, mechanism):
    auth = tls_auth(listener, "alice", mechanism, password=wrong_password)
    conf = auth.librdkafka(secure_destination.bootstrap_for(listener))
    errors = connection_errors(conf)
    assert authentication_failed(errors), (
        f"a wrong password over {listener} {mechanism} is reported as _AUTHENTICATION "
        f"(SASL authentication error); librdkafka reported {error_names(errors)}")
    assert not metadata_ok(conf, timeout=3), f"a client with a wrong password over {listener} {mechanism} gets no metadata"


def _ssl_handshake_failures(cluster) -> int:
    log = (cluster.dir / "broker-1.log").read_text(errors="replace")
    return len(re.findall(r"Failed authentication with .*\(SSL handshake failed\)", log))


@pytest.mark.parametrize("identity", ["rogue_client", "expired_client", "anonymous"],
                         ids=["untrusted-ca", "expired", "no-certificate"])
def test_ssl_listener_refuses_client_certificate_it_cannot_trust(secure_destination, tls_auth, identity):
    before = _ssl_handshake_failures(secure_destination)
    conf = tls_auth("SSL", identity).librdkafka(secure_destination.bootstrap_for("SSL"))
    errors = connection_errors(conf)
    assert tls_rejected(errors), (
        f"the SSL listener refuses the {identity} certificate with a TLS alert; librdkafka reported {error_names(errors)}")
    assert not metadata_ok(conf, timeout=3), f"a client with the {identity} certificate gets no metadata"
    assert _ssl_handshake_failures(secure_destination) > before, (
        f"the broker logs the {identity} connection as an SSL handshake failure")


def test_client_that_does_not_trust_the_broker_ca_refuses_the_connection(secure_destination, tls_auth, tls_certs):
    auth = tls_auth("SASL_SSL", "alice", "PLAIN", ca=tls_certs.rogue_ca.cert)
    errors = connection_errors(auth.librdkafka(secure_destination.bootstrap_for("SASL_SSL")))
    # librdkafka files the same handshake failure under _SSL or, when the socket's state changes
    # first (seen on a loaded machine), under _TRANSPORT; the OpenSSL reason is what matters.
    assert any(e.name() in ("_SSL", "_TRANSPORT") and "certificate verify failed" in e.str() for e in errors), (
        f"librdkafka refuses a broker certificate from a CA it does not trust; it reported {error_names(errors)}")


def test_franz_go_verifies_the_broker_certificate_against_tls_server_name(secure_destination, tls_auth, franz_client):
    auth = tls_auth("SASL_SSL", "alice", "SCRAM-SHA-512")
    bootstrap = secure_destination.bootstrap_for("SASL_SSL")
    ok = run_franz(franz_client, bootstrap, auth, unique("franz-sni-ok"), txn=False, server_name="localhost")
    assert "records=300" in ok.stdout, f"-tls-server-name localhost matches the broker's DNS SAN: {ok.stdout}"
    bad = run_franz(franz_client, bootstrap, auth, unique("franz-sni-bad"), txn=False, server_name="wrong.example",
                    expect_ok=False, timeout=120)
    assert bad.returncode != 0 and "x509" in bad.stderr and "wrong.example" in bad.stderr, (
        f"-tls-server-name wrong.example fails certificate verification (exit {bad.returncode}): {bad.stderr[-2000:]}")
