"""Re-authentication (KIP-368, issue #37). Brokers with `connections.max.reauth.ms` (common on
secured clusters and what managed services do) close a connection whose SASL session expired when
its next request arrives. Here a SASL_SSL source and a SASL_SSL destination both set it to 10 s, and
for a while (`KMP_REAUTH_SECONDS`: 40 s in the quick tier, 200 s in the long one) a mirror copies a
continuously written source topic while librdkafka clients produce and consume through a
pass-through proxy (their own SASL logins go through the proxy to the broker, so they re-authenticate
through it). What must hold:

* the proxy's own connections (engine fetches from the source, produces to the destination, the
  election, the state follower, metadata refreshes) renew their logins on the open connection before
  the session ends (`kmp_sasl_reauthentications_total` grows) instead of being closed by the broker:
  the proxy opens hardly any new connection over the run (`kmp_broker_connections_opened_total`),
  and its log has no broken connection;
* no partition leaves MIRRORING, the destination ends equal to the source record for record;
* the clients through the proxy see no failed request: every produce delivered, every record read.

In termination mode the proxy logs in to the broker with its own identity on every client's upstream
connection: those logins are renewed between the client's requests in the same way, so the clients
(authenticated by the proxy) see no failed request and the proxy opens no new upstream connection.
And the proxy enforces a session lifetime on its own clients (`listener.auth.session_lifetime_ms`,
10 s here): it tells them in its SaslAuthenticate answer, librdkafka logs in again on its
connections before it ends (`kmp_client_reauthentications_total`), and a raw client that does not
is closed at its first request after its session ended, as a Kafka broker closes it."""

from __future__ import annotations

import socket
import ssl
import struct
import sys
import time
from pathlib import Path

import pytest

from kmp_common import KafkaCluster, ProxyProcess, free_port_block, unique, wait_until
from tier import dial
from kafka_cluster import started_together  # noqa: E402  (tests/harness)
from tls.conftest import secure_listeners
from tls.proxy_tls import credentials_file, suite_env  # noqa: F401  (suite_env is a fixture)
from tls.reauth_load import Load, assert_renewed_without_reconnects, connection_counts
from tls.tls_clients import create_topic, read_records

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import sec_wire  # noqa: E402

REAUTH_MS = 10_000
RUN_SECONDS = dial("reauth_seconds", 25, 200, "KMP_REAUTH_SECONDS")
PARTITIONS = 2


@pytest.fixture(scope="module")
def reauth_clusters(workdir, tls_certs, tls_users):
    """(source, destination), one SASL_SSL broker each, with connections.max.reauth.ms = 10 s."""
    sec = secure_listeners(tls_certs, tls_users)
    size = KafkaCluster.port_block_size(1, secure=sec)
    base = free_port_block(2 * size)
    extra = {"connections.max.reauth.ms": REAUTH_MS}
    src = KafkaCluster("reauth-source", 1, base, workdir, secure=sec, extra_config=extra)
    dst = KafkaCluster("reauth-destination", 1, base + size, workdir, secure=sec, extra_config=extra)
    with started_together(src, dst):
        yield src, dst


def proxy_config(path: Path, certs, source_addr: str, topic: str, mirror_password: str) -> Path:
    ca = Path(certs.ca.cert)
    path.write_text(f"""
[listener.tls]
cert_file = "{certs.proxy.chain}"
key_file = "{certs.proxy.key}"

[upstream.properties]
"security.protocol" = "SASL_SSL"
"ssl.truststore.type" = "PEM"
"ssl.truststore.location" = "{ca}"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "proxy"
"sasl.password" = "env:KMP_TEST_PROXY_PASSWORD"

[upstream]
metadata_refresh_interval_ms = 600000

[engine]
state_topic = "__kmp_state_reauth"
state_flush_interval_ms = 1000

[[mirrors]]
name = "reauth"
source_bootstrap_servers = ["{source_addr}"]
topics = ["{topic}"]
# The passes that open a connection each time are spaced out past the run, so that every
# connection opened during it is one a broker closed (or a client's).
topic_config_sync_interval_ms = 600000
group_offset_sync_interval_ms = 600000
topic_refresh_interval_ms = 600000

[mirrors.source_properties]
"security.protocol" = "SASL_SSL"
"ssl.truststore.location" = "{ca}"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.jaas.config" = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="{mirror_password}";'
""")
    path.chmod(0o600)
    return path


def test_logins_are_renewed_on_open_connections_and_nothing_fails_while_brokers_expire_sessions_every_10s(
        reauth_clusters, tls_certs, tls_users, tls_auth, workdir):
    source, destination = reauth_clusters
    d = workdir / unique("reauth")
    d.mkdir()
    alice = tls_auth("SASL_SSL", "alice", "SCRAM-SHA-512")
    src_conf = alice.librdkafka(source.bootstrap_for("SASL_SSL"))
    topic, local = unique("reauth-mirrored"), unique("reauth-local")
    create_topic(src_conf, topic, PARTITIONS)
    config = proxy_config(d / "proxy.toml", tls_certs, source.bootstrap_for("SASL_SSL"), topic, tls_users["mirror"])
    proxy = ProxyProcess(destination.bootstrap_for("SASL_SSL"), workdir, ["--config", str(config)],
                         env={"KMP_TEST_PROXY_PASSWORD": tls_users["proxy"], "KMP_MIRROR_SOURCE_ALLOW": source.bootstrap_for("SASL_SSL")}).start()
    try:
        via_proxy = alice.librdkafka(proxy.bootstrap)
        create_topic(via_proxy, local, PARTITIONS)
        wait_until("the mirror's partitions are mirroring",
                   lambda: proxy.metric_or_absent("kmp_mirror_lag_records", f'mirror="reauth",topic="{topic}",partition="1"') is not None, 60)
        source_load = Load(src_conf, topic, "src")
        client_load = Load(via_proxy, local, "cli", group=unique("reauth-group"))
        time.sleep(5)  # every connection is open and past its first requests
        before, started = connection_counts(proxy), time.time()
        states = []
        while time.time() - started < RUN_SECONDS:
            states.append(proxy.metric("kmp_mirror_failed", f'mirror="reauth",topic="{topic}",partition="0"'))
            time.sleep(2)
        after = connection_counts(proxy)
        source_load.stop()
        client_load.stop()
        elapsed = time.time() - started

        assert not source_load.errors, f"writing the source directly failed: {source_load.errors[:3]}"
        renewed, opened = assert_renewed_without_reconnects(
            proxy, client_load, before, after, elapsed, ("broker closed the connection", "re-authentication failed", "lost the group coordinator"),
            "the proxy's own connections")
        assert all(s == 0 for s in states), f"no partition failed: {states}"
        # The destination ends equal to the source, read through the proxy.
        want = read_records(src_conf, topic, PARTITIONS, len(source_load.delivered))
        got = wait_until("the mirror caught up", lambda: (lambda r: r if r == want else None)(read_records(via_proxy, topic, PARTITIONS, len(want), 10)), 90)
        assert got == want
        print(f"\nre-authentication: {renewed:.0f} logins renewed, {opened:.0f} connections opened in {elapsed:.0f}s "
              f"(brokers expire sessions every {REAUTH_MS / 1000:.0f}s); {len(client_load.delivered)} records through the proxy, "
              f"{len(want)} mirrored")
    finally:
        assert proxy.stop() == 0, f"the proxy exits 0 on SIGTERM:\n{proxy.log()[-3000:]}"


def test_in_termination_mode_the_proxys_upstream_logins_are_renewed_between_the_clients_requests(
        reauth_clusters, tls_certs, tls_users, tls_auth, workdir, suite_env):
    _, destination = reauth_clusters
    d = workdir / unique("reauth-term")
    d.mkdir()
    users = credentials_file(suite_env, [("alice", "SCRAM-SHA-512")])
    config = d / "proxy.toml"
    config.write_text(f"""
[listener.tls]
cert_file = "{tls_certs.proxy.chain}"
key_file = "{tls_certs.proxy.key}"

[listener.auth]
mode = "terminate"
mechanisms = ["SCRAM-SHA-512", "PLAIN"]
credentials_file = "{users}"
session_lifetime_ms = {REAUTH_MS}

[upstream]
metadata_refresh_interval_ms = 600000

[upstream.properties]
"security.protocol" = "SASL_SSL"
"ssl.truststore.type" = "PEM"
"ssl.truststore.location" = "{tls_certs.ca.cert}"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "proxy"
"sasl.password" = "env:KMP_TEST_PROXY_PASSWORD"

[engine]
enabled = false
""")
    config.chmod(0o600)
    proxy = ProxyProcess(destination.bootstrap_for("SASL_SSL"), workdir, ["--config", str(config)],
                         env={"KMP_TEST_PROXY_PASSWORD": tls_users["proxy"]}).start()
    try:
        alice = tls_auth("SASL_SSL", "alice", "SCRAM-SHA-512")
        via_proxy = alice.librdkafka(proxy.bootstrap)
        topic = unique("reauth-term")
        create_topic(via_proxy, topic, PARTITIONS)
        load = Load(via_proxy, topic, "term", group=unique("reauth-term-group"))
        time.sleep(5)  # the clients' connections are open and past their first requests
        before, started = connection_counts(proxy), time.time()
        clients_before = proxy.metric("kmp_client_reauthentications_total")
        # Meanwhile a raw client logs in and then does not re-authenticate: its session ends.
        ctx = ssl.create_default_context(cafile=str(tls_certs.ca.cert))
        raw = ctx.wrap_socket(socket.create_connection(("127.0.0.1", proxy.port), timeout=15), server_hostname="127.0.0.1")
        raw.sendall(sec_wire.sasl_handshake_v1(1, "PLAIN"))
        sec_wire.read_response(raw)
        raw.sendall(sec_wire.sasl_authenticate_v1(2, "alice", tls_users["alice"]))
        _, body = sec_wire.read_response(raw)
        code, (msg_len,) = struct.unpack_from(">h", body)[0], struct.unpack_from(">h", body, 2)
        pos = 4 + max(msg_len, 0)
        (auth_len,) = struct.unpack_from(">i", body, pos)
        (lifetime,) = struct.unpack_from(">q", body, pos + 4 + max(auth_len, 0))
        assert code == 0 and lifetime == REAUTH_MS, f"the proxy tells the client its session lifetime: error {code}, session_lifetime_ms {lifetime}"
        raw.sendall(sec_wire.api_versions_v0(3))
        assert sec_wire.read_response(raw)[0] == 3, "within its session the client is served"
        time.sleep(REAUTH_MS / 1000 + 1)
        raw.sendall(sec_wire.api_versions_v0(4))
        assert sec_wire.closed_by_peer(raw, 10), "a request after the session ended (no re-authentication) closes the connection"
        raw.close()
        time.sleep(max(0, RUN_SECONDS - (time.time() - started)))
        after = connection_counts(proxy)
        clients_renewed = proxy.metric("kmp_client_reauthentications_total") - clients_before
        expired = proxy.metric("kmp_connections_closed_by_limit_total", 'reason="session_expired"')
        load.stop()
        elapsed = time.time() - started
        renewed, opened = assert_renewed_without_reconnects(
            proxy, load, before, after, elapsed, ("broker closed the connection", "failed; closing the connection"),
            "the terminating proxy's upstream connections")
        assert clients_renewed >= elapsed / 10, f"librdkafka re-authenticated with the proxy: {clients_renewed} in {elapsed:.0f}s"
        assert expired == 1, f"only the raw client that never re-authenticated was closed for its session: {expired}"
        print(f"\ntermination mode: {renewed:.0f} upstream logins renewed, {clients_renewed:.0f} client logins renewed, "
              f"{opened:.0f} connections opened in {elapsed:.0f}s; "
              f"{len(load.delivered)} records produced and read through the proxy")
    finally:
        assert proxy.stop() == 0, f"the proxy exits 0 on SIGTERM:\n{proxy.log()[-3000:]}"
