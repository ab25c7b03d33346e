"""OAUTHBEARER (KIP-255/768) against a real identity provider: Keycloak (tests/harness/oidc_idp.py,
from Maven Central) issues client-credentials tokens that live 30 s, and the source and destination
brokers each have Kafka's own OIDC listener (`OAuthBearerValidatorCallbackHandler` against
Keycloak's JWKS, audience `kafka`, issuer checked, principal from `preferred_username`) with
`connections.max.reauth.ms` = 10 s.

1. Toward clusters: the proxy logs in to the destination (`[upstream.properties]`, client
   `kmp-proxy`, secret by `env:` reference) and a mirror to the source (`source_properties`,
   client `kmp-mirror`, the whole JAAS line by `file:` reference) with tokens it fetches itself.
   While a mirror copies a continuously written topic and librdkafka clients (their own OIDC
   logins pass through the proxy to the broker) produce and consume through the proxy, the
   brokers end every session after at most 10 s: the proxy renews its logins on the open
   connections, with a new token once the old one is 80 % through its life — no failed request,
   no reconnect storm, the destination equal to the source.
2. Termination: the proxy checks clients' tokens itself (`[listener.auth.oauthbearer]`, the same
   JWKS, audience and issuer as the brokers) and logs in to the destination as `kmp-proxy`. Java
   kafka-clients (produce, consume, transactions) and librdkafka authenticate with their own
   client-credentials tokens and re-authenticate within the 10 s session the proxy gives them; the
   principal (`preferred_username`) decides mirror management; a token for another audience, a
   forged one and garbage get exactly the answers Kafka's own OIDC listener gives them."""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kmp_common import PROXY_BIN, KafkaCluster, ProxyProcess, free_port, free_port_block, unique, wait_until
from tier import dial
from tls.reauth_load import Load, assert_renewed_without_reconnects, connection_counts
from tls.tls_clients import ClientAuth, authentication_failed, connection_errors, create_topic, error_names, read_records, run_java_scenario

from kafka_cluster import OAUTH_ALLOWED_URLS_PROPERTY, OAuthListener, started_together  # noqa: E402  (tests/harness)
from oidc_idp import WRONG_AUDIENCE_CLIENT, OidcProvider  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import sec_wire  # noqa: E402

REAUTH_MS = 10_000
TOKEN_LIFETIME_S = 30
RUN_SECONDS = dial("oauth_seconds", 30, 150, "KMP_OAUTH_SECONDS")
PARTITIONS = 2
JAAS_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@pytest.fixture(scope="module")
def idp(workdir):
    provider = OidcProvider(workdir, free_port(), token_lifetime_s=TOKEN_LIFETIME_S)
    try:
        provider.start()
        print(f"\nKeycloak ready in {provider.start_seconds:.1f}s at {provider.base_url}")
        yield provider
    finally:
        provider.stop()


@pytest.fixture(scope="module")
def oauth_clusters(idp, workdir):
    """(source, destination): one broker each with the OAUTH listener (and a plaintext one for setup)."""
    listener = OAuthListener(idp, principal_claim="preferred_username", reauth_ms=REAUTH_MS)
    size = KafkaCluster.port_block_size(1)
    base = free_port_block(2 * size)
    src = KafkaCluster("oauth-source", 1, base, workdir, oauth=listener)
    dst = KafkaCluster("oauth-destination", 1, base + size, workdir, oauth=listener)
    with started_together(src, dst):
        yield src, dst


@dataclass(frozen=True)
class OAuthClient(ClientAuth):
    """A client that logs in with its own client-credentials token (Java: Kafka 4.1 property names;
    librdkafka: `sasl.oauthbearer.method=oidc`)."""
    token_endpoint: str = ""
    client_id: str = ""
    client_secret: str = ""

    def label(self) -> str:
        return f"{self.protocol}-OAUTHBEARER-{self.client_id}"

    def java_config(self) -> dict[str, str]:
        return {"security.protocol": self.protocol, "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.token.endpoint.url": self.token_endpoint,
                "sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                "sasl.jaas.config": f"{JAAS_MODULE} required ;",
                "sasl.oauthbearer.client.credentials.client.id": self.client_id,
                "sasl.oauthbearer.client.credentials.client.secret": self.client_secret}

    def librdkafka(self, bootstrap: str, **extra) -> dict:
        return {"bootstrap.servers": bootstrap, "security.protocol": self.protocol, "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": self.client_id,
                "sasl.oauthbearer.client.secret": self.client_secret,
                "sasl.oauthbearer.token.endpoint.url": self.token_endpoint, **extra}


def oauth_client(idp: OidcProvider, client_id: str) -> OAuthClient:
    return OAuthClient("SASL_PLAINTEXT", mechanism="OAUTHBEARER", username=client_id, token_endpoint=idp.token_endpoint,
                       client_id=client_id, client_secret=idp.secrets[client_id])


def oauth_properties(idp: OidcProvider, client_id: str) -> str:
    """`[…properties]` lines (TOML) of an OAUTHBEARER login of ``client_id`` whose secret is in
    the environment variable KMP_TEST_<CLIENT>_SECRET."""
    env = "KMP_TEST_" + re.sub(r"\W", "_", client_id).upper() + "_SECRET"
    return (f'"security.protocol" = "SASL_PLAINTEXT"\n"sasl.mechanism" = "OAUTHBEARER"\n'
            f'"sasl.oauthbearer.token.endpoint.url" = "{idp.token_endpoint}"\n'
            f'"sasl.oauthbearer.client.credentials.client.id" = "{client_id}"\n'
            f'"sasl.oauthbearer.client.credentials.client.secret" = "env:{env}"\n')


def secrets_env(idp: OidcProvider) -> dict[str, str]:
    return {"KMP_TEST_" + re.sub(r"\W", "_", c).upper() + "_SECRET": s for c, s in idp.secrets.items()}


def assert_no_secret_in(idp: OidcProvider, proxy: ProxyProcess) -> None:
    text = proxy.log() + proxy.http("/metrics")[1]
    for client, secret in idp.secrets.items():
        assert secret not in text, f"the proxy showed {client}'s client secret"
    assert not re.search(r"eyJ[\w-]{20,}\.[\w-]{20,}\.", text), "the proxy logged an access token"


# ---- 1. the proxy's own OAUTHBEARER logins ------------------------------------------------------

def test_the_proxy_logs_in_to_destination_and_source_with_oauth_tokens_and_renews_them_while_brokers_expire_sessions(
        idp, oauth_clusters, workdir):
    source, destination = oauth_clusters
    d = workdir / unique("oauth-own")
    d.mkdir()
    topic, local = unique("oauth-mirrored"), unique("oauth-local")
    create_topic({"bootstrap.servers": source.bootstrap}, topic, PARTITIONS)
    jaas = d / "mirror-jaas.conf"
    jaas.write_text(f'{JAAS_MODULE} required clientId="kmp-mirror" clientSecret="{idp.secrets["kmp-mirror"]}";\n')
    jaas.chmod(0o600)
    config = d / "proxy.toml"
    config.write_text(f"""
[upstream]
metadata_refresh_interval_ms = 600000

[upstream.properties]
{oauth_properties(idp, "kmp-proxy")}
[engine]
state_topic = "__kmp_state_oauth"
state_flush_interval_ms = 1000

[[mirrors]]
name = "oauth"
source_bootstrap_servers = ["{source.bootstrap_for("OAUTH")}"]
topics = ["{topic}"]
topic_config_sync_interval_ms = 600000
group_offset_sync_interval_ms = 600000
topic_refresh_interval_ms = 600000

[mirrors.source_properties]
"security.protocol" = "SASL_PLAINTEXT"
"sasl.mechanism" = "OAUTHBEARER"
"sasl.oauthbearer.token.endpoint.url" = "{idp.token_endpoint}"
"sasl.jaas.config" = "file:{jaas}"
""")
    proxy = ProxyProcess(destination.bootstrap_for("OAUTH"), workdir, ["--config", str(config)], env=secrets_env(idp)).start()
    try:
        app = oauth_client(idp, "app-client")
        via_proxy = app.librdkafka(proxy.bootstrap)
        create_topic(via_proxy, local, PARTITIONS)
        wait_until("the mirror's partitions are mirroring",
                   lambda: proxy.metric_or_absent("kmp_mirror_lag_records", f'mirror="oauth",topic="{topic}",partition="1"') is not None, 60)
        source_load = Load({"bootstrap.servers": source.bootstrap}, topic, "src")
        client_load = Load(via_proxy, local, "cli", group=unique("oauth-group"))
        time.sleep(5)
        before, started = connection_counts(proxy), time.time()
        tokens_before = proxy.metric("kmp_oauth_tokens_fetched_total")
        states = []
        while time.time() - started < RUN_SECONDS:
            states.append(proxy.metric("kmp_mirror_failed", f'mirror="oauth",topic="{topic}",partition="0"'))
            time.sleep(2)
        after = connection_counts(proxy)
        tokens = proxy.metric("kmp_oauth_tokens_fetched_total") - tokens_before
        source_load.stop()
        client_load.stop()
        elapsed = time.time() - started
        assert not source_load.errors, f"writing the source directly failed: {source_load.errors[:3]}"
        renewed, opened = assert_renewed_without_reconnects(
            proxy, client_load, before, after, elapsed,
            ("broker closed the connection", "re-authentication failed", "refused the OAuth token", "no OAuth access token"),
            "the proxy's OAUTHBEARER connections")
        # Two logins (kmp-proxy, kmp-mirror), each a new token once 80 % of 30 s have passed and
        # one of its logins asks (renewals come every 8.5 s): at least one per 30 s each (no token
        # is used past its life), at most one per 24 s each — not one per renewal nor per connection.
        least, most = 2 * elapsed / TOKEN_LIFETIME_S - 2, 2 * elapsed / (0.8 * TOKEN_LIFETIME_S) + 3
        assert least <= tokens <= most, f"{tokens} tokens fetched in {elapsed:.0f}s (expected {least:.0f} to {most:.0f})"
        assert all(s == 0 for s in states), f"no partition failed: {states}"
        want = read_records({"bootstrap.servers": source.bootstrap}, topic, PARTITIONS, len(source_load.delivered))
        got = wait_until("the mirror caught up", lambda: (lambda r: r if r == want else None)(read_records(via_proxy, topic, PARTITIONS, len(want), 10)), 90)
        assert got == want
        assert_no_secret_in(idp, proxy)
        print(f"\nOAUTHBEARER toward clusters: {renewed:.0f} logins renewed, {tokens:.0f} tokens fetched, {opened:.0f} connections "
              f"opened in {elapsed:.0f}s (sessions end every {REAUTH_MS / 1000:.0f}s, tokens live {TOKEN_LIFETIME_S}s); "
              f"{len(client_load.delivered)} records through the proxy, {len(want)} mirrored")
    finally:
        assert proxy.stop() == 0, f"the proxy exits 0 on SIGTERM:\n{proxy.log()[-3000:]}"


# ---- 2. termination: the proxy checks clients' tokens ---------------------------------------------

def sasl_authenticate_raw(correlation_id: int, data: bytes) -> bytes:
    return sec_wire.request(sec_wire.SASL_AUTHENTICATE, 1, correlation_id, sec_wire.bytes_field(data))


def parse_sasl_authenticate_v1(body: bytes) -> tuple[int, str | None, bytes, int]:
    """(error code, error message, auth bytes, session lifetime ms)."""
    r = sec_wire.Reader(body)
    return r.i16(), r.string(), r.bytes() or b"", r.i64()


def oauth_exchange(addr: str, token: str) -> list[tuple[int, str | None, bytes, int]]:
    """A raw OAUTHBEARER login with ``token`` at ``addr``: SaslHandshake v1, the client message, and
    after an error challenge the client's `\\x01`; every SaslAuthenticate answer."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as s:
        s.sendall(sec_wire.sasl_handshake_v1(1, "OAUTHBEARER"))
        _, body = sec_wire.read_response(s)
        assert sec_wire.parse_error_first(body) == 0, f"{addr} accepts the OAUTHBEARER handshake"
        s.sendall(sasl_authenticate_raw(2, b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"))
        answers = [parse_sasl_authenticate_v1(sec_wire.read_response(s)[1])]
        if answers[0][0] == 0 and answers[0][2]:
            s.sendall(sasl_authenticate_raw(3, b"\x01"))
            answers.append(parse_sasl_authenticate_v1(sec_wire.read_response(s)[1]))
    return answers


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_in_termination_mode_the_proxy_checks_client_tokens_as_kafkas_oidc_listener_does(idp, oauth_clusters, workdir, kafka_classpath,
                                                                                        tmp_path, monkeypatch):
    _, destination = oauth_clusters
    d = workdir / unique("oauth-term")
    d.mkdir()
    config = d / "proxy.toml"
    config.write_text(f"""
[listener.auth]
mode = "terminate"
mechanisms = ["OAUTHBEARER"]
session_lifetime_ms = {REAUTH_MS}

[listener.auth.oauthbearer]
jwks_endpoint_url = "{idp.jwks_url}"
expected_audience = ["kafka"]
expected_issuer = "{idp.issuer}"
sub_claim_name = "preferred_username"

[upstream]
metadata_refresh_interval_ms = 600000

[upstream.properties]
{oauth_properties(idp, "kmp-proxy")}
[security]
mirror_admin_loopback = false
mirror_admin_principals = ["app-client"]

[engine]
enabled = false
""")
    proxy = ProxyProcess(destination.bootstrap_for("OAUTH"), workdir, ["--config", str(config), "--log", "debug"], env=secrets_env(idp)).start()
    try:
        # The same tokens get the same answers from the proxy as from Kafka's own OIDC listener.
        good = idp.token("app-client")
        header, payload, _ = good.split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        forged = ".".join([header, b64url(json.dumps({**claims, "preferred_username": "admin"}).encode()), good.split(".")[2]])
        cases = {"valid": good, "another audience": idp.token(WRONG_AUDIENCE_CLIENT), "forged claims": forged, "garbage": "not-a-jwt"}
        for what, token in cases.items():
            broker = oauth_exchange(destination.bootstrap_for("OAUTH"), token)
            ours = oauth_exchange(proxy.bootstrap, token)
            # Session lifetimes differ by the milliseconds between the two logins.
            shape = lambda answers: [(c, m, a, lt > 0) for c, m, a, lt in answers]  # noqa: E731
            assert shape(ours) == shape(broker), f"{what} token: the proxy answered {ours}, Kafka's listener {broker}"
            if what == "valid":
                assert ours[0][0] == 0 and 0 < ours[0][3] <= REAUTH_MS, f"valid token: {ours}"
            else:
                assert [a[0] for a in ours] == [0, 58] and ours[1][1] == '{"status":"invalid_token"}', f"{what} token: {ours}"

        # Java kafka-clients: produce, consume (classic group), transactions.
        monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-D{OAUTH_ALLOWED_URLS_PROPERTY}={idp.token_endpoint}")
        app = oauth_client(idp, "app-client")
        ok = run_java_scenario(kafka_classpath, proxy.bootstrap, app, tmp_path, unique("oauth-java"))
        print(f"\nJava client with OAUTHBEARER through the terminating proxy: {ok}")

        # librdkafka under load while sessions end every 10 s: clients and proxy re-authenticate.
        via_proxy = app.librdkafka(proxy.bootstrap)
        topic = unique("oauth-term")
        create_topic(via_proxy, topic, PARTITIONS)
        load = Load(via_proxy, topic, "term", group=unique("oauth-term-group"))
        time.sleep(5)
        before, started = connection_counts(proxy), time.time()
        clients_before = proxy.metric("kmp_client_reauthentications_total")
        time.sleep(RUN_SECONDS)
        after = connection_counts(proxy)
        clients_renewed = proxy.metric("kmp_client_reauthentications_total") - clients_before
        load.stop()
        elapsed = time.time() - started
        renewed, opened = assert_renewed_without_reconnects(
            proxy, load, before, after, elapsed, ("broker closed the connection", "failed; closing the connection"),
            "the terminating proxy's upstream OAUTHBEARER connections")
        assert clients_renewed >= elapsed / 10, f"librdkafka re-authenticated with the proxy: {clients_renewed} in {elapsed:.0f}s"

        errors = connection_errors(oauth_client(idp, WRONG_AUDIENCE_CLIENT).librdkafka(proxy.bootstrap))
        assert authentication_failed(errors), f"a client whose tokens are for another audience is refused: {error_names(errors)}"
        assert "client OAuth token refused" in proxy.log() and "not for an expected audience" in proxy.log(), \
            "the proxy logs why it refused a token"

        # The principal is the token's preferred_username: app-client may manage mirrors, kmp-mirror may not.
        for client, allowed in (("app-client", True), ("kmp-mirror", False)):
            props = tmp_path / f"{client}.properties"
            props.write_text("".join(f"{k}={v}\n" for k, v in oauth_client(idp, client).java_config().items()))
            out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, "--command-config", str(props), "--list"],
                                               capture_output=True, text=True, timeout=60)
            if allowed:
                assert out.returncode == 0, f"{client} is in mirror_admin_principals: exit {out.returncode}\n{out.stderr}"
            else:
                assert out.returncode == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out.stderr, \
                    f"{client} is not a mirror admin: exit {out.returncode}\n{out.stdout}{out.stderr}"
        assert_no_secret_in(idp, proxy)
        print(f"termination with OAUTHBEARER: {renewed:.0f} upstream logins renewed, {clients_renewed:.0f} client logins renewed, "
              f"{opened:.0f} connections opened in {elapsed:.0f}s; {len(load.delivered)} records produced and read")
    finally:
        assert proxy.stop() == 0, f"the proxy exits 0 on SIGTERM:\n{proxy.log()[-3000:]}"
