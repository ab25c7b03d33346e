"""Issue 11, finding 3 on a SASL-only cluster: authorization of the mirror RPCs never applies
before SaslAuthenticate succeeded. From the machine's non-loopback address, a connection that
sent SaslHandshake but not SaslAuthenticate gets CLUSTER_MIRROR_AUTHORIZATION_FAILED (144); after
authenticating as a principal listed in `mirror_admin_principals` the RPC is served, as any other
principal it is refused. (The engine cannot reach a SASL destination yet, #12, so these proxies run
without it: an authorized DeleteClusterMirror of an unknown mirror answers UNKNOWN_CLUSTER_MIRROR.)"""

import socket

import sec_wire as wire
from kmp_common import SASL_USERS
from sec_support import non_loopback_ipv4, running_proxy

UNKNOWN_CLUSTER_MIRROR = 137
NO_ENGINE = {"engine": {"enabled": False}, "listener": {"advertised_host": "127.0.0.1"}}


# sasl_cluster (tests/conftest.py): a 1-broker SASL/PLAIN-only cluster shared with
# integration/test_sasl_passthrough.py; users alice (alice-secret) and mallory (mallory-secret).


def delete_mirror_after(ip: str, port: int, user: str | None, password: str | None = None) -> int:
    """DeleteClusterMirror("no-such-mirror") on a connection from ``ip`` that first sent
    SaslHandshake(PLAIN) and, with ``user``, SaslAuthenticate; the mirror RPC's error code."""
    with socket.create_connection((ip, port), timeout=30) as s:
        s.settimeout(30)
        s.sendall(wire.sasl_handshake_v1(1))
        _, body = wire.read_response(s)
        assert wire.parse_error_first(body) == 0, f"SaslHandshake(PLAIN) through the proxy failed with {wire.parse_error_first(body)}"
        if user is not None:
            s.sendall(wire.sasl_authenticate_v1(2, user, password))
            _, body = wire.read_response(s)
            assert wire.parse_error_first(body) == 0, f"SaslAuthenticate as {user} through the proxy failed with {wire.parse_error_first(body)}"
        s.sendall(wire.delete_cluster_mirror(3, "no-such-mirror"))
        corr, body = wire.read_response(s, flexible_header=True)
        assert corr == 3
        return wire.parse_simple_response(body)[0]


def test_mirror_rpcs_between_sasl_handshake_and_authentication_are_refused(sasl_cluster, workdir):
    ip = non_loopback_ipv4()
    with running_proxy(sasl_cluster, workdir, NO_ENGINE, listen_host="0.0.0.0") as proxy:
        code = delete_mirror_after(ip, proxy.port, None)
        assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, (
            f"DeleteClusterMirror from {ip} after SaslHandshake but before SaslAuthenticate answered {code}, not 144")
        code = delete_mirror_after(ip, proxy.port, "alice", SASL_USERS["alice"])
        assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, (
            f"with no mirror_admin_principals configured, an authenticated remote principal must get 144, got {code}")


def test_a_listed_sasl_principal_may_manage_mirrors_and_others_may_not(sasl_cluster, workdir):
    ip = non_loopback_ipv4()
    sections = {**NO_ENGINE, "security": {"mirror_admin_principals": ["alice"]}}
    with running_proxy(sasl_cluster, workdir, sections, listen_host="0.0.0.0") as proxy:
        code = delete_mirror_after(ip, proxy.port, None)
        assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, f"before SaslAuthenticate a listed principal's connection must get 144, got {code}"
        code = delete_mirror_after(ip, proxy.port, "alice", SASL_USERS["alice"])
        assert code == UNKNOWN_CLUSTER_MIRROR, f"alice (listed in mirror_admin_principals) must be served (137 for an unknown mirror), got {code}"
        code = delete_mirror_after(ip, proxy.port, "mallory", SASL_USERS["mallory"])
        assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, f"mallory (authenticated, not listed) must get 144, got {code}"
