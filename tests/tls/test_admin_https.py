"""The admin endpoint over HTTPS (`[admin.tls]`): /healthz answers over TLS to a client that
trusts the test CA and refuses one that does not; plain HTTP to the port gets no answer; the
routes that need the admin token from a non-loopback caller (GET /v1/mirrors, /metrics, a POST)
refuse it without the bearer token and serve it with the token, which now travels encrypted; with
`client_ca_file` every admin caller needs a client certificate."""

from __future__ import annotations

import http.client
import secrets
import ssl
import urllib.error
import urllib.request

import pytest

from tls.proxy_tls import (  # noqa: F401  (suite_env is a fixture)
    assert_alive,
    https_get,
    https_request,
    issue_server_cert,
    non_loopback_ipv4,
    record,
    running_proxy,
    suite_env,
    upstream_properties,
)


def _admin_sections(env, cert, mtls: bool = False) -> dict:
    tls = {"cert_file": cert.chain, "key_file": cert.key}
    if mtls:
        tls["client_ca_file"] = env.certs.ca.cert
    return {"admin": {"token": "env:KMP_TEST_ADMIN_TOKEN"}, "admin.tls": tls,
            "upstream.properties": upstream_properties(env.certs, "INTERNAL")}


def _plain_http(port: int, path: str = "/healthz"):
    """A plain-HTTP GET to the HTTPS port: the exception it ends with, or (status, body) if answered."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as e:
        return e


def test_admin_endpoint_serves_https_and_the_token_routes_with_the_bearer_token(suite_env, secure_destination):
    env = suite_env
    ca = env.certs.ca.cert
    ip = non_loopback_ipv4()
    cert = issue_server_cert(env, "kmp-admin", san=("IP:127.0.0.1", "DNS:localhost", f"IP:{ip}"))
    token = secrets.token_hex(16)
    with running_proxy(env, secure_destination.bootstrap_for("INTERNAL"), _admin_sections(env, cert), "admin-https",
                       admin_ca=ca, admin_host="0.0.0.0", extra_env={"KMP_TEST_ADMIN_TOKEN": token}) as proxy:
        port = proxy.admin_port
        status, body = https_get("127.0.0.1", port, "/healthz", ca)
        assert (status, body.strip()) == (200, "ok"), f"https /healthz with the test CA answered {status} {body!r}"
        assert https_get("localhost", port, "/readyz", ca)[0] == 200, "https /readyz by the name on the certificate"

        with pytest.raises(ssl.SSLCertVerificationError):
            https_get("127.0.0.1", port, "/healthz", None)  # the system trust store does not know the test CA

        answer = _plain_http(port)
        assert isinstance(answer, Exception), f"plain HTTP to the HTTPS admin port was answered: {answer}"
        assert_alive(proxy, "plain HTTP to the HTTPS admin port")

        for path in ("/v1/mirrors", "/metrics"):
            status, body = https_get(ip, port, path, ca)
            assert status == 401, f"GET {path} over https from {ip} without the token answered {status}, not 401: {body[:300]}"
            status, body = https_get(ip, port, path, ca, token="not-" + token)
            assert status == 401, f"GET {path} over https from {ip} with a wrong token answered {status}, not 401"
            status, body = https_get(ip, port, path, ca, token=token)
            assert status == 200, f"GET {path} over https from {ip} with the bearer token answered {status}: {body[:300]}"
            record(env, f"admin-https{path.replace('/', '-')}", body)
        status, body = https_request("POST", ip, port, "/v1/mirrors/no-such-mirror/pause", ca, body={"topics": ["t"]})
        assert status == 403, f"a POST from {ip} without the token answered {status}, not 403: {body}"
        status, body = https_request("POST", ip, port, "/v1/mirrors/no-such-mirror/pause", ca, token=token, body={"topics": ["t"]})
        record(env, "admin-https-post", body)
        assert status not in (401, 403), f"a POST from {ip} with the bearer token reaches the route: {status} {body}"
        assert token not in proxy.log(), "the admin token appears in the proxy's log"


def test_admin_endpoint_with_client_ca_requires_a_client_certificate(suite_env, secure_destination):
    env = suite_env
    ca = env.certs.ca.cert
    cert = issue_server_cert(env, "kmp-admin-mtls")
    admin_cert = (env.certs.mirror_admin.cert, env.certs.mirror_admin.key)
    with running_proxy(env, secure_destination.bootstrap_for("INTERNAL"), _admin_sections(env, cert, mtls=True),
                       "admin-mtls", admin_ca=ca, admin_client_cert=admin_cert,
                       extra_env={"KMP_TEST_ADMIN_TOKEN": secrets.token_hex(16)}) as proxy:
        port = proxy.admin_port
        assert https_get("127.0.0.1", port, "/healthz", ca, client_cert=admin_cert)[0] == 200, (
            "https /healthz with the mirror_admin client certificate")
        for what, pair in (("no", None), ("an expired", (env.certs.expired_client.cert, env.certs.expired_client.key)),
                           ("an untrusted", (env.certs.rogue_client.cert, env.certs.rogue_client.key))):
            try:
                answer = https_get("127.0.0.1", port, "/healthz", ca, client_cert=pair)
            except (OSError, http.client.HTTPException) as e:  # ssl.SSLError is an OSError
                answer = e
            assert isinstance(answer, Exception), f"the mTLS admin endpoint answered a caller with {what} certificate: {answer}"
        assert_alive(proxy, "refused admin callers")
        status, body = https_get("127.0.0.1", port, "/metrics", ca, client_cert=admin_cert)
        assert status == 200, f"/metrics over mTLS answered {status}"
        record(env, "admin-mtls-metrics", body)
