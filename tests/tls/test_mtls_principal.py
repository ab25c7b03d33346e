"""Under mutual TLS the client certificate's subject is the connection's principal: a certificate
listed in security.mirror_admin_principals may manage mirrors over the Kafka port (loopback alone is
not enough here: mirror_admin_loopback = false), another certificate of the same CA may not and gets
CLUSTER_MIRROR_AUTHORIZATION_FAILED (144)."""

import sys
from pathlib import Path

from kmp_common import unique
from tls.proxy_tls import listener_tls, raw_connection, running_proxy, suite_env, upstream_properties  # noqa: F401  (fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import sec_wire as wire  # noqa: E402

ADMIN_SUBJECT = "CN=mirror-admin,O=kmp-test"


def list_mirrors(proxy, env, cert_name: str) -> tuple[int, str | None]:
    pair = getattr(env.certs, cert_name)
    with raw_connection(proxy.port, ca=Path(env.certs.ca.cert), client_cert=(Path(pair.cert), Path(pair.key))) as s:
        s.sendall(wire.list_cluster_mirrors(5))
        _, body = wire.read_response(s, flexible_header=True)
    return wire.parse_simple_response(body)


def test_a_listed_certificate_subject_may_manage_mirrors_and_another_certificate_may_not(suite_env, secure_destination):
    sections = {
        "listener.tls": listener_tls(suite_env.certs, mtls=True),
        "upstream.properties": upstream_properties(suite_env.certs, "SSL"),
        "engine": {"state_topic": unique("__kmp_state_mtls")},
        "security": {"mirror_admin_loopback": False, "mirror_admin_principals": [ADMIN_SUBJECT]},
    }
    with running_proxy(suite_env, secure_destination.bootstrap_for("SSL"), sections, "mtls-principal") as proxy:
        code, msg = list_mirrors(proxy, suite_env, "mirror_admin")
        assert code == 0, f"{ADMIN_SUBJECT} is a listed principal: ListClusterMirrors answered {code} {msg}"
        code, msg = list_mirrors(proxy, suite_env, "app_client")
        assert code == 144 and msg and "not authorized" in msg, f"CN=app-client is not listed: got {code} {msg}"
        assert proxy.alive()
