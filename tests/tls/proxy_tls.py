"""The proxy in front of the secure clusters, for the proxy suites of tests/tls
(test_proxy_tls_*.py, test_admin_https.py): config files with `[listener.tls]`, `[listener.auth]`,
`[upstream.properties]` and `[admin.tls]`; termination credentials made with the binary's
`scram-credential`; the proxy started with `--log debug`, everything it showed recorded in the
leak corpus, stopped with SIGTERM and required to exit 0; how a client reaches it (``client``);
server certificates issued from the test CA on the fly (reload, admin HTTPS); raw Kafka frames
and TLS probes.

    with running_proxy(env, dst.bootstrap_for("SASL_SSL"), sections, "cell") as proxy:
        conf = client(env, "tls", "alice", "SCRAM-SHA-256").librdkafka(proxy.bootstrap)

``env`` is a :class:`SuiteEnv` (the session's certificates, users, workdir and leak corpus).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import re
import signal
import socket
import sys
import ssl
import struct
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kmp_common import PROXY_BIN, ProxyProcess, unique  # first: puts tests/harness on sys.path

import certs as harness_certs  # noqa: E402  (tests/harness)
from tls.tls_clients import LISTENER_PROTOCOL, ClientAuth, create_topic, produce, read_all

# The proxy's own password toward SASL listeners travels by reference only (never in a config file).
UPSTREAM_PW_ENV = "KMP_TEST_UPSTREAM_PW"
# Mechanism of the proxy's own login (user "proxy") per destination listener.
PROXY_LOGIN = {"SASL_PLAINTEXT": "SCRAM-SHA-512", "SASL_SSL": "PLAIN"}


@dataclass(frozen=True)
class SuiteEnv:
    """What the proxy tests need from the session fixtures, in one object."""
    certs: object            # certs.TestCerts
    users: dict
    workdir: Path
    corpus: Path             # the leak_corpus directory

    def path(self, stem: str, suffix: str = "") -> Path:
        d = self.workdir / "tls-proxy"
        d.mkdir(exist_ok=True)
        return d / f"{unique(stem)}{suffix}"


# ---- configuration ----------------------------------------------------------------------------

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (str, Path)):
        return json.dumps(str(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def config_text(sections: dict[str, dict]) -> str:
    """``{"listener.tls": {...}, "upstream.properties": {"security.protocol": "SSL"}}`` as TOML
    (keys quoted: Kafka property names contain dots)."""
    out = []
    for name, values in sections.items():
        out.append(f"[{name}]")
        out += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in values.items()]
        out.append("")
    return "\n".join(out)


def listener_tls(certs, mtls: bool = False, reload_interval_ms: int | None = None, cert_file=None, key_file=None) -> dict:
    """`[listener.tls]` (or `[admin.tls]`) with the proxy's certificate (chain), mutual TLS
    against the test CA with ``mtls``."""
    conf = {"cert_file": cert_file or certs.proxy.chain, "key_file": key_file or certs.proxy.key}
    if mtls:
        conf["client_ca_file"] = certs.ca.cert
    if reload_interval_ms is not None:
        conf["reload_interval_ms"] = reload_interval_ms
    return conf


def upstream_properties(certs, listener: str, **overrides) -> dict:
    """`[upstream.properties]` toward the broker listener ``listener`` (INTERNAL, SSL,
    SASL_PLAINTEXT, SASL_SSL): the test CA as truststore, the proxy's certificate as keystore on
    SSL (client certificate required there), the ``proxy`` user (by env reference) on SASL."""
    protocol = LISTENER_PROTOCOL[listener]
    props = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca.cert)})
    if protocol == "SSL":
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.proxy.combined)})
    if protocol.startswith("SASL_"):
        props.update({"sasl.mechanism": PROXY_LOGIN[protocol], "sasl.username": "proxy",
                      "sasl.password": f"env:{UPSTREAM_PW_ENV}"})
    props.update(overrides)
    return props


def credentials_file(env: SuiteEnv, entries: list[tuple[str, str]], password: str | None = None) -> Path:
    """A `listener.auth.credentials_file` with one `[[user]]` block per (user, SCRAM mechanism),
    made by `kafka-mirror-proxy scram-credential` (passwords by environment variable);
    ``password`` overrides the users' own."""
    blocks = []
    for user, mechanism in entries:
        out = subprocess.run([str(PROXY_BIN), "scram-credential", "--user", user, "--mechanism", mechanism,
                              "--password-env", "KMP_TEST_NEW_PW"], capture_output=True, text=True, timeout=30,
                             env={**os.environ, "KMP_TEST_NEW_PW": password or env.users[user]})
        assert out.returncode == 0 and "[[user]]" in out.stdout, (
            f"scram-credential --user {user} --mechanism {mechanism} failed (exit {out.returncode}): {out.stderr}")
        assert (password or env.users[user]) not in out.stdout + out.stderr, "scram-credential printed the password"
        blocks.append(out.stdout)
    path = env.path("credentials", ".toml")
    path.write_text("\n".join(blocks))
    path.chmod(0o600)
    return path


def terminate_auth(credentials: Path | None, mechanisms=("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")) -> dict:
    conf = {"mode": "terminate", "mechanisms": list(mechanisms)}
    if credentials is not None:
        conf["credentials_file"] = credentials
    return conf


def write_config(env: SuiteEnv, sections: dict[str, dict], name: str) -> Path:
    sections = {"engine": {"enabled": False}, **sections}
    path = env.path(f"proxy-{name}", ".toml")
    path.write_text(config_text(sections))
    return path


# ---- the proxy process ------------------------------------------------------------------------

class HttpsProxyProcess(ProxyProcess):
    """A proxy whose admin endpoint speaks HTTPS (`[admin.tls]`): readiness and ``http()`` go over
    TLS, trusting ``ca`` (with ``client_cert``: a (cert, key) pair for an mTLS admin endpoint)."""

    def __init__(self, *args, ca: Path, client_cert: tuple[Path, Path] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.ca, self.client_cert = ca, client_cert

    def http(self, path: str, token: str | None = None, host: str = "127.0.0.1") -> tuple[int, str]:
        try:
            return https_get(host, self.admin_port, path, self.ca, token=token, client_cert=self.client_cert)
        except OSError:
            return 0, ""


def https_context(ca: Path | None, client_cert: tuple[Path, Path] | None = None, server_hostname_check: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
    ctx.check_hostname = server_hostname_check
    if client_cert:
        ctx.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
    return ctx


def https_request(method: str, host: str, port: int, path: str, ca: Path | None, token: str | None = None,
                  client_cert: tuple[Path, Path] | None = None, body: dict | None = None,
                  timeout: float = 5) -> tuple[int, str]:
    """One request over HTTPS (certificate and host name verified against ``ca``; ``None``: the
    system's trust store); (status, body)."""
    conn = http.client.HTTPSConnection(host, port, context=https_context(ca, client_cert), timeout=timeout)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode(errors="replace")
    finally:
        conn.close()


def https_get(host: str, port: int, path: str, ca: Path | None, token: str | None = None,
              client_cert: tuple[Path, Path] | None = None, timeout: float = 5) -> tuple[int, str]:
    return https_request("GET", host, port, path, ca, token=token, client_cert=client_cert, timeout=timeout)


def record(env: SuiteEnv, what: str, text: str) -> Path:
    """Writes something the proxy showed (a scrape, a REST answer) into the leak corpus."""
    path = env.corpus / f"{unique(re.sub(r'[^A-Za-z0-9_.-]+', '-', what))}.txt"
    path.write_text(text)
    return path


def scrape(env: SuiteEnv, proxy: ProxyProcess, what: str) -> str:
    """/metrics, recorded in the leak corpus; returns the text."""
    status, text = proxy.http("/metrics")
    assert status == 200, f"/metrics of the {what} proxy answered {status} (alive: {proxy.alive()})"
    record(env, f"metrics-{what}", text)
    return text


def metric(text: str, name: str, labels: str = "") -> float | None:
    key = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return None


def start_proxy(env: SuiteEnv, upstream: str, sections: dict[str, dict], name: str, extra_env: dict | None = None,
                admin_ca: Path | None = None, admin_client_cert=None, wait: bool = True, **kwargs) -> ProxyProcess:
    """A proxy with ``sections`` (engine disabled unless given) in front of ``upstream``, logging
    at debug, with the ``proxy`` user's password in its environment (for ``env:`` references).
    ``admin_ca``: the admin endpoint speaks HTTPS trusting that CA. ``wait``: until /readyz."""
    path = write_config(env, sections, name)
    args = ["--config", str(path), "--log", "debug"]
    penv = {UPSTREAM_PW_ENV: env.users["proxy"], **(extra_env or {})}
    if admin_ca is not None:
        proxy = HttpsProxyProcess(upstream, env.workdir, args, env=penv, ca=admin_ca, client_cert=admin_client_cert, **kwargs)
    else:
        proxy = ProxyProcess(upstream, env.workdir, args, env=penv, **kwargs)
    proxy.config_path = path
    proxy.name = name
    if wait:
        proxy.start()
    else:
        log = open(proxy.log_path, "ab")
        proxy.proc = subprocess.Popen(proxy.args, stdout=log, stderr=subprocess.STDOUT, env=proxy.env)
    return proxy


def stop_proxy(env: SuiteEnv, proxy: ProxyProcess, scrape_metrics: bool = True) -> int:
    """Scrapes /metrics into the leak corpus (if the proxy is up), sends SIGTERM; the exit code."""
    if scrape_metrics and proxy.alive():
        status, text = proxy.http("/metrics")
        if status == 200:
            record(env, f"metrics-{getattr(proxy, 'name', 'proxy')}-at-stop", text)
    return proxy.stop()


@contextmanager
def running_proxy(env: SuiteEnv, upstream: str, sections: dict[str, dict], name: str, **kwargs):
    """start_proxy ... stop_proxy; the proxy must exit 0 on SIGTERM (checked when the body
    passed: a failing body's own error is the one reported)."""
    proxy = start_proxy(env, upstream, sections, name, **kwargs)
    try:
        yield proxy
    except BaseException:
        stop_proxy(env, proxy)
        raise
    code = stop_proxy(env, proxy)
    assert code == 0, f"the {name} proxy exited with {code} on SIGTERM; log:\n{log_tail(proxy)}"


def log_tail(proxy: ProxyProcess, chars: int = 3000) -> str:
    lines = [ln for ln in proxy.log().splitlines() if not re.match(r"^\s+(\d+: |at )", ln)]
    return "\n".join(lines)[-chars:]


def assert_alive(proxy: ProxyProcess, what: str, watch_s: float = 0.3) -> None:
    deadline = time.time() + watch_s
    while time.time() < deadline and proxy.alive():
        time.sleep(0.05)
    assert proxy.alive(), (f"the proxy process died ({what}); exit code {proxy.proc.returncode}; log:\n{log_tail(proxy)}")


def sighup(proxy: ProxyProcess) -> None:
    proxy.proc.send_signal(signal.SIGHUP)


def non_loopback_ipv4() -> str:
    """The machine's first non-loopback IPv4 address (tests/security/sec_support.py's lookup);
    fails the test without one."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
    from sec_support import non_loopback_ipv4 as lookup
    return lookup()


def client(env: SuiteEnv, tls: str, user: str | None = None, mechanism: str | None = None, password: str | None = None,
           cert: str = "app_client", ca: Path | None = None) -> ClientAuth:
    """How a client reaches the proxy: ``tls`` is ``plaintext``, ``tls`` (server verified against
    ``ca``, default the test CA) or ``mtls`` (also presents the client certificate ``cert``, a
    field of certs.TestCerts); with ``user`` it logs in with SASL ``mechanism`` (``password``
    overrides the user's)."""
    assert tls in ("plaintext", "tls", "mtls"), tls
    secure = tls != "plaintext"
    protocol = ("SASL_" if user else "") + ("SSL" if secure else "PLAINTEXT")
    kw = {}
    if secure:
        kw["ca"] = Path(ca or env.certs.ca.cert)
    if tls == "mtls":
        pair = getattr(env.certs, cert)
        kw.update(cert=Path(pair.cert), key=Path(pair.key), combined=Path(pair.combined))
    if user:
        assert mechanism, "a SASL client needs a mechanism"
        kw.update(mechanism=mechanism, username=user, password=env.users[user] if password is None else password)
    return ClientAuth(protocol, **kw)


def round_trip(conf: dict, what: str, records: int = 5) -> None:
    """librdkafka creates a one-partition topic, produces ``records`` (idempotent, acks=all) and
    reads them back from the beginning."""
    topic = unique(re.sub(r"[^a-z0-9]+", "-", what.lower())[:40])
    create_topic(conf, topic)
    values = [f"{what}-{i}" for i in range(records)]
    produce(conf, topic, values)
    got = read_all(conf, topic, "read_uncommitted", records, timeout=20)
    assert got == values, f"{what}: read back {got}, produced {values}"


# ---- certificates -----------------------------------------------------------------------------

def issue_server_cert(env: SuiteEnv, cn: str, san: tuple[str, ...] = harness_certs.SERVER_SAN):
    """A new server certificate signed by the test CA (new key, random serial), written to a new
    directory; returns certs.CertPair."""
    certs = env.certs
    ca_cert = x509.load_pem_x509_certificate(Path(certs.ca.cert).read_bytes())
    ca_key = serialization.load_pem_private_key(Path(certs.ca.key).read_bytes(), password=None)
    issuer = harness_certs._Issuer(ca_cert.subject, ca_key, ca_cert)
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    d = env.path("issued")
    d.mkdir()
    return harness_certs._leaf(d, "server", issuer, harness_certs._name(cn), server=True, san=san,
                               not_before=now - dt.timedelta(days=1), not_after=now + dt.timedelta(days=30), key_type="ec")


def served_certificate(host: str, port: int, ca: Path, timeout: float = 5) -> x509.Certificate:
    """The certificate a TLS server presents on a new connection (verified against ``ca``)."""
    ctx = https_context(ca, server_hostname_check=False)
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            return x509.load_der_x509_certificate(s.getpeercert(binary_form=True))


def common_name(cert: x509.Certificate) -> str:
    return cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)[0].value


# ---- raw Kafka frames -------------------------------------------------------------------------

def _request(api_key: int, version: int, correlation_id: int, body: bytes, client_id: str = "kmp-raw") -> bytes:
    cid = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def api_versions_request(correlation_id: int = 1) -> bytes:
    return _request(18, 0, correlation_id, b"")


def metadata_request(correlation_id: int = 2) -> bytes:
    return _request(3, 1, correlation_id, struct.pack(">i", -1))  # v1, topics null: all topics


def read_frame(sock: socket.socket, timeout: float = 5) -> bytes | None:
    """One response frame (without its size), or None when the peer closed the connection first."""
    sock.settimeout(timeout)
    def recv(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = sock.recv(n - len(buf))
            except (ConnectionResetError, ssl.SSLError, ssl.SSLEOFError):
                return None
            if not chunk:
                return None
            buf += chunk
        return buf
    size = recv(4)
    if size is None:
        return None
    return recv(struct.unpack(">i", size)[0])


@contextmanager
def raw_connection(port: int, ca: Path | None = None, client_cert: tuple[Path, Path] | None = None):
    """A socket to the proxy at 127.0.0.1:``port``, wrapped in TLS trusting ``ca`` if given."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        if ca is None:
            yield raw
        else:
            with https_context(ca, client_cert).wrap_socket(raw, server_hostname="127.0.0.1") as s:
                yield s
    finally:
        raw.close()


# ---- fixture ----------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def suite_env(tls_certs, tls_users, workdir, leak_corpus) -> SuiteEnv:
    """The session's certificates, users, workdir and leak corpus (import it into a test module)."""
    return SuiteEnv(tls_certs, tls_users, Path(workdir), Path(leak_corpus))
