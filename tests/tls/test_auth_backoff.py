"""A source that refuses the mirror's credentials: the proxy says so once, partitions show a clear
reason, and the source broker sees one login attempt per back-off — not one per partition and
retry (no retry storm). Fixing the referenced password file lets the mirror recover by itself."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from kmp_common import ProxyProcess, unique
from tls.tls_clients import create_topic, produce

PARTITIONS = 8
WINDOW_S = 12


def failed_logins(cluster, listener: str) -> int:
    """Failed authentications the broker logged on ``listener`` so far."""
    port = cluster.addr_for(listener, 1).rsplit(":", 1)[1]
    log = (Path(cluster.dir) / "broker-1.log").read_text(errors="replace")
    return len(re.findall(rf"Failed authentication with /127\.0\.0\.1 \(channelId=127\.0\.0\.1:{port}-", log))


def test_a_refused_source_login_is_logged_once_backs_off_and_recovers_when_the_secret_is_fixed(
        secure_source, secure_destination, tls_certs, tls_users, tls_auth, workdir, leak_corpus):
    d = workdir / unique("auth-backoff")
    d.mkdir()
    src_conf = tls_auth("SASL_SSL", "alice", "SCRAM-SHA-512").librdkafka(secure_source.bootstrap_for("SASL_SSL"))
    topic = unique("backoff")
    create_topic(src_conf, topic, PARTITIONS)
    produce(src_conf, topic, [f"r{i}" for i in range(200)])
    ca = tls_certs.ca.cert
    source_addr = secure_source.bootstrap_for("SASL_SSL")
    pw_file = d / "mirror-password"
    pw_file.write_text("certainly-not-the-password\n")
    # A mirror declared in the config file starts its topics at boot, whatever the source says.
    config = d / "proxy.toml"
    config.write_text(f"""
[upstream.properties]
"security.protocol" = "SSL"
"ssl.truststore.location" = "{ca}"
"ssl.keystore.location" = "{tls_certs.mirror_admin.combined}"

[[mirrors]]
name = "refused"
source_bootstrap_servers = ["{source_addr}"]
topics = ["{topic}"]

[mirrors.source_properties]
"security.protocol" = "SASL_SSL"
"ssl.truststore.location" = "{ca}"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "mirror"
"sasl.password" = "file:{pw_file}"
""")
    before = failed_logins(secure_source, "SASL_SSL")
    started = time.time()
    proxy = ProxyProcess(secure_destination.bootstrap_for("SSL"), workdir, ["--config", str(config), "--log", "debug"]).start()
    try:
        time.sleep(WINDOW_S)  # the observation window itself: attempts are counted over it
        attempts = failed_logins(secure_source, "SASL_SSL") - before
        elapsed = time.time() - started
        # One probe per back-off (1, 2, 4, 8 s …): about log2(window) + 1 attempts, whatever the partition count.
        assert 1 <= attempts <= 6, f"{attempts} failed logins reached the source in {elapsed:.0f}s for {PARTITIONS} partitions (want ≤ 6: one per back-off)"
        log = proxy.log()
        refused = [l for l in log.splitlines() if "authentication to the source cluster failed" in l]
        assert len(refused) == 1, f"the refusal is logged once, not {len(refused)} times:\n" + "\n".join(refused[:5])
        status, body = proxy.http("/v1/mirrors/refused")
        (leak_corpus / "auth-backoff-describe.json").write_text(body)
        assert status == 200 and "authentication failed" in body, f"the mirror shows why: {body[:2000]}"
        # Retried meanwhile, not FAILED: the credentials may be fixed without touching the mirror.
        assert "FAILED" not in body, f"a refused login is not a reason to fail the partitions: {body[:2000]}"

        pw_file.write_text(tls_users["mirror"] + "\n")
        deadline, state = time.time() + 120, None
        while time.time() < deadline:
            status, body = proxy.http("/v1/mirrors/refused")
            parts = [p for t in json.loads(body).get("topics", []) for p in t["partitions"]] if status == 200 else []
            state = sorted({(p["state"].upper(), p["lag"]) for p in parts})
            if len(parts) == PARTITIONS and state == [("MIRRORING", 0)]:
                break
            time.sleep(1)
        assert state == [("MIRRORING", 0)], f"after the password file was fixed every partition catches up: {state}"
        assert "authentication to the source cluster succeeds again" in proxy.log()
        status, metrics = proxy.http("/metrics")
        (leak_corpus / "auth-backoff-metrics.txt").write_text(metrics)
    finally:
        assert proxy.stop() == 0, proxy.log()[-3000:]
