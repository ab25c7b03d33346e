"""The proxy's security matrix against a real broker: clients reach the proxy over plaintext, TLS
or mutual TLS; the proxy reaches the destination on its INTERNAL (plaintext), SSL (client
certificate required), SASL_PLAINTEXT (SCRAM-SHA-512) or SASL_SSL (PLAIN) listener; clients'
SASL passes through to the broker or the proxy terminates it. Every cell produces and reads back
records with librdkafka through a proxy of its own (engine disabled).

Then what must be refused, as the broker refuses it directly (test_direct_baseline.py): wrong
passwords (pass-through: the broker's answer; termination: the proxy's), expired and untrusted
client certificates against the mutual-TLS proxy, a plaintext client on the TLS port, a client
that does not trust the proxy's CA, requests before authentication in termination mode — and
after each the proxy is still up and a good client still works. Last, the proxy's hostname
verification toward an SSL destination.
"""

from __future__ import annotations

import re
import socket
import time

import pytest

from tls.proxy_tls import (  # noqa: F401  (suite_env is a fixture)
    api_versions_request,
    assert_alive,
    client,
    credentials_file,
    listener_tls,
    log_tail,
    metadata_request,
    metric,
    raw_connection,
    read_frame,
    round_trip,
    running_proxy,
    scrape,
    start_proxy,
    stop_proxy,
    suite_env,
    terminate_auth,
    upstream_properties,
)
from tls.tls_clients import (
    authentication_failed,
    connection_errors,
    error_names,
    metadata_ok,
    tls_rejected,
)

SIDES = ["plaintext", "tls", "mtls"]
DESTINATIONS = ["INTERNAL", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
# Pass-through toward a SASL listener: the client logs in at the broker with one of its mechanisms.
PASSTHROUGH_LOGIN = {"SASL_PLAINTEXT": "SCRAM-SHA-512", "SASL_SSL": "SCRAM-SHA-256"}
# Termination: the client logs in at the proxy; a different mechanism per client side.
TERMINATE_LOGIN = {"plaintext": "SCRAM-SHA-512", "tls": "SCRAM-SHA-256", "mtls": "PLAIN"}

CELLS = [(side, dest, mode) for mode in ("passthrough", "terminate") for side in SIDES for dest in DESTINATIONS]


def _cell_id(cell) -> str:
    side, dest, mode = cell
    return f"{mode}-{side}-to-{dest.lower().replace('_', '-')}"


@pytest.fixture(scope="module")
def alice_credentials(suite_env):
    """Termination credentials: alice with both SCRAM mechanisms (PLAIN checks against either)."""
    return credentials_file(suite_env, [("alice", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-256")])


def proxy_sections(env, side: str, dest: str, mode: str, credentials=None, mechanisms=None) -> dict:
    sections = {"upstream.properties": upstream_properties(env.certs, dest)}
    if side != "plaintext":
        sections["listener.tls"] = listener_tls(env.certs, mtls=side == "mtls")
    if mode == "terminate":
        sections["listener.auth"] = (terminate_auth(credentials) if mechanisms is None
                                     else terminate_auth(credentials, mechanisms))
    else:
        sections["listener.auth"] = {"mode": "passthrough"}
    return sections


def cell_client(env, side: str, dest: str, mode: str):
    if mode == "terminate":
        return client(env, side, "alice", TERMINATE_LOGIN[side])
    if dest in PASSTHROUGH_LOGIN:
        return client(env, side, "alice", PASSTHROUGH_LOGIN[dest])
    return client(env, side)


@pytest.mark.parametrize("cell", CELLS, ids=[_cell_id(c) for c in CELLS])
def test_client_produces_and_consumes_through_the_proxy(suite_env, secure_destination, alice_credentials, cell):
    side, dest, mode = cell
    name = _cell_id(cell)
    sections = proxy_sections(suite_env, side, dest, mode, alice_credentials)
    with running_proxy(suite_env, secure_destination.bootstrap_for(dest), sections, name) as proxy:
        auth = cell_client(suite_env, side, dest, mode)
        round_trip(auth.librdkafka(proxy.bootstrap), f"{name} as {auth.label()}")
        log = proxy.log()
        if mode == "terminate":
            assert "client authenticated" in log and "principal=alice" in log, (
                f"{name}: the proxy terminated alice's {auth.mechanism} login (debug log 'client authenticated principal=alice'):\n"
                f"{log_tail(proxy)}")
        if side == "mtls":
            assert "CN=app-client,O=kmp-test" in log, (
                f"{name}: the proxy took the client certificate's subject as principal:\n{log_tail(proxy)}")
        scrape(suite_env, proxy, name)


def test_terminate_with_no_mechanisms_authenticates_clients_by_certificate(suite_env, secure_destination):
    sections = proxy_sections(suite_env, "mtls", "SASL_SSL", "terminate", mechanisms=[])
    with running_proxy(suite_env, secure_destination.bootstrap_for("SASL_SSL"), sections, "terminate-cert-only") as proxy:
        auth = client(suite_env, "mtls", cert="mirror_admin")
        round_trip(auth.librdkafka(proxy.bootstrap), "terminate-cert-only")
        assert "CN=mirror-admin,O=kmp-test" in proxy.log(), (
            f"the certificate subject is the principal of a certificate-only client:\n{log_tail(proxy)}")
        sasl = client(suite_env, "mtls", "alice", "PLAIN", cert="mirror_admin")
        errors = connection_errors(sasl.librdkafka(proxy.bootstrap))
        assert any("Unsupported SASL mechanism" in e.str() for e in errors), (
            f"a SASL login against a proxy offering no mechanisms is refused (UNSUPPORTED_SASL_MECHANISM); "
            f"librdkafka reported {error_names(errors)}")
        assert not metadata_ok(sasl.librdkafka(proxy.bootstrap), timeout=1), "the SASL client gets no metadata"
        assert_alive(proxy, "after a SASL login to a certificate-only proxy")
        round_trip(auth.librdkafka(proxy.bootstrap), "terminate-cert-only-after")
        scrape(suite_env, proxy, "terminate-cert-only")


# ---- refusals ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def module_proxies(suite_env, secure_destination, alice_credentials):
    """Proxies the refusal tests share (started on first use, stopped at the end of the module;
    each must exit 0 on SIGTERM)."""
    specs = {
        "tls-passthrough": ("SASL_SSL", proxy_sections(suite_env, "tls", "SASL_SSL", "passthrough")),
        "tls-terminate": ("SASL_SSL", proxy_sections(suite_env, "tls", "SASL_SSL", "terminate", alice_credentials)),
        "plaintext-terminate": ("INTERNAL", proxy_sections(suite_env, "plaintext", "INTERNAL", "terminate", alice_credentials)),
        "mtls-passthrough": ("SSL", proxy_sections(suite_env, "mtls", "SSL", "passthrough")),
    }
    started = {}

    def get(name):
        if name not in started:
            dest, sections = specs[name]
            started[name] = start_proxy(suite_env, secure_destination.bootstrap_for(dest), sections, f"refusals-{name}")
        return started[name]

    yield get
    codes = {name: stop_proxy(suite_env, p) for name, p in started.items()}
    assert all(c == 0 for c in codes.values()), f"exit codes on SIGTERM: {codes}"


GOOD_CLIENT = {
    "tls-passthrough": lambda env: client(env, "tls", "alice", "PLAIN"),
    "tls-terminate": lambda env: client(env, "tls", "alice", "SCRAM-SHA-512"),
    "plaintext-terminate": lambda env: client(env, "plaintext", "alice", "SCRAM-SHA-256"),
    "mtls-passthrough": lambda env: client(env, "mtls"),
}


def still_serves(env, proxies, name: str, after: str) -> None:
    proxy = proxies(name)
    assert_alive(proxy, after)
    auth = GOOD_CLIENT[name](env)
    round_trip(auth.librdkafka(proxy.bootstrap), f"{name}-after", records=2)


def _auth_messages(errors) -> set[str]:
    """The error messages of SASL_AUTHENTICATION_FAILED answers librdkafka passed on."""
    return {m.group(1) for e in errors if (m := re.search(r"SASL authentication error: (.*?) \(after \d+ms", e.str()))}


@pytest.mark.parametrize("mode,mechanism", [("passthrough", "SCRAM-SHA-256"), ("passthrough", "PLAIN"),
                                            ("terminate", "SCRAM-SHA-512"), ("terminate", "PLAIN")])
def test_wrong_password_is_an_authentication_failure_as_directly(suite_env, secure_destination, tls_auth, module_proxies,
                                                                 wrong_password, mode, mechanism):
    direct = connection_errors(tls_auth("SASL_SSL", "alice", mechanism, password=wrong_password)
                               .librdkafka(secure_destination.bootstrap_for("SASL_SSL")))
    assert authentication_failed(direct), f"direct baseline: {error_names(direct)}"
    name = f"tls-{mode}"
    proxy = module_proxies(name)
    conf = client(suite_env, "tls", "alice", mechanism, password=wrong_password).librdkafka(proxy.bootstrap)
    proxied = connection_errors(conf)
    assert authentication_failed(proxied), (
        f"a wrong {mechanism} password through the {name} proxy is reported as _AUTHENTICATION like directly "
        f"(direct: {error_names(direct)}); through the proxy librdkafka reported {error_names(proxied)}")
    assert _auth_messages(proxied) == _auth_messages(direct), (
        f"the {name} proxy's SASL_AUTHENTICATION_FAILED message for a wrong {mechanism} password is the broker's: "
        f"direct {_auth_messages(direct)}, through the proxy {_auth_messages(proxied)}")
    assert not metadata_ok(conf, timeout=1), f"a client with a wrong password gets no metadata through the {name} proxy"
    still_serves(suite_env, module_proxies, name, f"a wrong {mechanism} password")


@pytest.mark.parametrize("identity", ["expired_client", "rogue_client"], ids=["expired", "untrusted-ca"])
def test_mtls_proxy_refuses_a_client_certificate_it_cannot_trust(suite_env, module_proxies, identity):
    proxy = module_proxies("mtls-passthrough")
    before = metric(scrape(suite_env, proxy, f"mtls-before-{identity}"), "kmp_connections_closed_by_limit_total",
                    'reason="tls_handshake"') or 0
    conf = client(suite_env, "mtls", cert=identity).librdkafka(proxy.bootstrap)
    errors = connection_errors(conf)
    assert tls_rejected(errors), (
        f"the mTLS proxy refuses the {identity} certificate with a TLS alert, as the broker's SSL listener does; "
        f"librdkafka reported {error_names(errors)}")
    assert not metadata_ok(conf, timeout=2), f"a client with the {identity} certificate gets no metadata"
    after = metric(scrape(suite_env, proxy, f"mtls-after-{identity}"), "kmp_connections_closed_by_limit_total",
                   'reason="tls_handshake"') or 0
    assert after > before, f"failed handshakes are counted as reason=tls_handshake ({before} -> {after})"
    assert "client TLS handshake failed" in proxy.log(), f"the proxy logs the failed handshake:\n{log_tail(proxy)}"
    still_serves(suite_env, module_proxies, "mtls-passthrough", f"a {identity} certificate")


def test_plaintext_client_on_the_tls_port_is_refused_as_by_a_broker(suite_env, secure_destination, tls_auth, module_proxies):
    direct_conf = tls_auth("INTERNAL").librdkafka(secure_destination.bootstrap_for("SSL"))
    direct = connection_errors(direct_conf, timeout=8)
    assert direct and not metadata_ok(direct_conf, timeout=2), f"direct baseline: {error_names(direct)}"
    proxy = module_proxies("tls-passthrough")
    conf = client(suite_env, "plaintext").librdkafka(proxy.bootstrap)
    proxied = connection_errors(conf, timeout=8)
    assert proxied, "a plaintext client on the proxy's TLS port gets an error, as on a broker's SSL port"
    assert not metadata_ok(conf, timeout=2), f"a plaintext client gets no metadata from the TLS port: {error_names(proxied)}"
    assert {e.name() for e in proxied} <= {e.name() for e in direct} | {"_TRANSPORT", "_ALL_BROKERS_DOWN"}, (
        f"the plaintext client sees the errors it sees at a broker's SSL port: direct {error_names(direct)}, "
        f"proxied {error_names(proxied)}")
    with raw_connection(proxy.port) as s:
        s.sendall(api_versions_request())
        assert read_frame(s) is None, "the TLS port answers no plaintext Kafka request (the connection is closed)"
    still_serves(suite_env, module_proxies, "tls-passthrough", "a plaintext client on the TLS port")


def test_client_that_does_not_trust_the_proxy_ca_refuses_it(suite_env, secure_destination, tls_auth, module_proxies):
    direct = connection_errors(tls_auth("SASL_SSL", "alice", "PLAIN", ca=suite_env.certs.rogue_ca.cert)
                               .librdkafka(secure_destination.bootstrap_for("SASL_SSL")))
    # librdkafka names it _SSL or, depending on timing (seen under load), _TRANSPORT: the text is what counts.
    distrusted = lambda errs: any(e.name() in ("_SSL", "_TRANSPORT") and "certificate verify failed" in e.str() for e in errs)  # noqa: E731
    assert distrusted(direct), f"direct: {error_names(direct)}"
    proxy = module_proxies("tls-passthrough")
    auth = client(suite_env, "tls", "alice", "PLAIN", ca=suite_env.certs.rogue_ca.cert)
    proxied = connection_errors(auth.librdkafka(proxy.bootstrap))
    assert distrusted(proxied), (
        f"librdkafka refuses the proxy's certificate when it does not trust its CA (as directly: {error_names(direct)}); "
        f"it reported {error_names(proxied)}")
    still_serves(suite_env, module_proxies, "tls-passthrough", "a client that distrusts the proxy's CA")


@pytest.mark.parametrize("transport", ["tls", "plaintext"])
def test_terminate_closes_the_connection_on_a_request_before_authentication(suite_env, module_proxies, transport):
    name = f"{transport}-terminate"
    proxy = module_proxies(name)
    ca = suite_env.certs.ca.cert if transport == "tls" else None
    before = metric(scrape(suite_env, proxy, f"{name}-before-unauth"), "kmp_connections_closed_by_limit_total",
                    'reason="unauthenticated_request"') or 0
    with raw_connection(proxy.port, ca) as s:
        s.sendall(metadata_request(correlation_id=7))
        answer = read_frame(s)
        assert answer is None, f"Metadata before SASL over {transport}: the connection is closed, not answered ({answer[:40]!r})"
    with raw_connection(proxy.port, ca) as s:
        s.sendall(api_versions_request(correlation_id=8))
        answer = read_frame(s)
        assert answer is not None and answer[:4] == (8).to_bytes(4, "big"), (
            f"ApiVersions before SASL over {transport} is answered (correlation id 8): {answer!r}")
        s.sendall(metadata_request(correlation_id=9))
        answer = read_frame(s)
        assert answer is None, f"Metadata after ApiVersions but before SASL over {transport} closes the connection ({answer!r})"
    after = metric(scrape(suite_env, proxy, f"{name}-after-unauth"), "kmp_connections_closed_by_limit_total",
                   'reason="unauthenticated_request"') or 0
    assert after >= before + 2, f"both closed connections counted as reason=unauthenticated_request ({before} -> {after})"
    still_serves(suite_env, module_proxies, name, f"a request before authentication over {transport}")


# ---- hostname verification toward the destination ---------------------------------------------

def _name_not_on_the_broker_certificate() -> str:
    """A host name that resolves to 127.0.0.1 but is not on the broker certificate (whose SAN is
    IP:127.0.0.1, DNS:localhost): the machine's own name, when /etc/hosts maps it to loopback."""
    name = socket.gethostname()
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(name, None, socket.AF_INET)}
    except socket.gaierror:
        addrs = set()
    assert name not in ("localhost", "") and addrs == {"127.0.0.1"}, (
        f"this test needs a host name other than localhost that resolves to 127.0.0.1 only (the broker listens on "
        f"127.0.0.1; its certificate names 127.0.0.1 and localhost): the machine's name {name!r} resolves to {addrs}")
    return name


def test_proxy_verifies_the_destination_host_name_unless_identification_is_off(suite_env, secure_destination):
    host = _name_not_on_the_broker_certificate()
    port = secure_destination.bootstrap_for("SSL").rsplit(":", 1)[1]
    upstream = f"{host}:{port}"
    checked = start_proxy(suite_env, upstream, {"upstream.properties": upstream_properties(suite_env.certs, "SSL")},
                          "hostname-checked", wait=False)
    try:
        deadline, log = time.time() + 15, ""
        while time.time() < deadline:
            log = checked.log()
            if "NotValidForName" in log or "not valid for name" in log.lower():
                break
            assert checked.alive(), f"the proxy exited ({checked.proc.returncode}):\n{log_tail(checked)}"
            time.sleep(0.2)
        assert "NotValidForName" in log or "not valid for name" in log.lower(), (
            f"connecting to the broker as {host!r} (not on its certificate) fails hostname verification, and the log says so:\n"
            f"{log_tail(checked)}")
        assert checked.http("/readyz")[0] == 503, "a proxy that cannot verify its destination is not ready"
    finally:
        code = stop_proxy(suite_env, checked)
    assert code == 0, f"the hostname-checked proxy exited with {code} on SIGTERM:\n{log_tail(checked)}"

    props = upstream_properties(suite_env.certs, "SSL", **{"ssl.endpoint.identification.algorithm": ""})
    with running_proxy(suite_env, upstream, {"upstream.properties": props}, "hostname-unchecked") as proxy:
        round_trip(client(suite_env, "plaintext").librdkafka(proxy.bootstrap), "hostname-unchecked")
