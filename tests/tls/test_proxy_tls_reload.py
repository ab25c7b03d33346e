"""Reloading the client-facing TLS identity while clients stay connected (`[listener.tls]`
reload_interval_ms, SIGHUP): a new certificate in place of the proxy's files is served to new
connections within a few polls while a librdkafka producer connected before keeps its connection
and keeps delivering; a half-written certificate file keeps the previous certificate (and the log
says the reload failed); with polling off, SIGHUP reloads at once. The termination credentials
file reloads the same way."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from confluent_kafka import Producer

from kmp_common import unique
from tls.proxy_tls import (  # noqa: F401  (suite_env is a fixture)
    assert_alive,
    client,
    common_name,
    credentials_file,
    issue_server_cert,
    listener_tls,
    log_tail,
    round_trip,
    running_proxy,
    scrape,
    served_certificate,
    sighup,
    suite_env,
    terminate_auth,
    upstream_properties,
)
from tls.tls_clients import create_topic, metadata_ok


def proxy_files(env) -> tuple[Path, Path]:
    """A copy of the proxy's certificate chain and key the test may replace."""
    d = env.path("reload-files")
    d.mkdir()
    cert, key = d / "proxy.pem", d / "proxy.key"
    shutil.copy(env.certs.proxy.chain, cert)
    shutil.copy(env.certs.proxy.key, key)
    key.chmod(0o600)
    return cert, key


def swap_in(pair, cert: Path, key: Path) -> None:
    """Puts ``pair``'s chain and key in place of ``cert``/``key`` (each written whole, then renamed)."""
    for src, dst in ((pair.key, key), (pair.chain, cert)):
        tmp = dst.with_suffix(dst.suffix + ".tmp")
        shutil.copy(src, tmp)
        os.replace(tmp, dst)


def wait_for_cn(port: int, ca: Path, cn: str, timeout: float) -> str:
    """Polls new TLS connections to ``port`` until the certificate's CN is ``cn``; the last CN seen."""
    deadline, seen = time.time() + timeout, None
    while time.time() < deadline:
        seen = common_name(served_certificate("127.0.0.1", port, ca))
        if seen == cn:
            return seen
        time.sleep(0.1)
    return seen


def wait_for_log(proxy, text: str, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in proxy.log():
            return True
        time.sleep(0.1)
    return False


class StatsProducer:
    """A librdkafka producer that keeps its latest statistics (per-broker connects/disconnects)."""

    def __init__(self, conf: dict):
        self.stats: dict = {}
        self.p = Producer({**conf, "statistics.interval.ms": 100, "linger.ms": 5,
                           "stats_cb": lambda s: self.stats.update(json.loads(s))})

    def send(self, topic: str, values: list[str]) -> None:
        failed = []
        for v in values:
            self.p.produce(topic, value=v, on_delivery=lambda err, msg: failed.append(err) if err else None)
        left = self.p.flush(20)
        assert left == 0 and not failed, f"{left} undelivered, errors {failed[:3]}"

    def node(self, node_id: int) -> dict:
        """Fresh statistics of the connection to broker ``node_id`` (through the proxy's node port)."""
        self.stats.clear()
        deadline = time.time() + 5
        while time.time() < deadline and not self.stats:
            self.p.poll(0.1)
        for b in self.stats.get("brokers", {}).values():
            if b.get("nodeid") == node_id:
                return {k: b[k] for k in ("state", "connects", "disconnects")}
        raise AssertionError(f"no statistics for broker {node_id}: {list(self.stats.get('brokers', {}))}")


def test_new_certificate_is_served_to_new_connections_while_a_connected_producer_keeps_delivering(suite_env, secure_destination):
    env = suite_env
    ca = env.certs.ca.cert
    cert, key = proxy_files(env)
    sections = {"listener.tls": listener_tls(env.certs, reload_interval_ms=500, cert_file=cert, key_file=key),
                "upstream.properties": upstream_properties(env.certs, "INTERNAL")}
    with running_proxy(env, secure_destination.bootstrap_for("INTERNAL"), sections, "reload-poll") as proxy:
        assert common_name(served_certificate("127.0.0.1", proxy.port, ca)) == "kmp-proxy", "the proxy starts with its own certificate"
        conf = client(env, "tls").librdkafka(proxy.bootstrap)
        topic = unique("reload")
        create_topic(conf, topic)
        producer = StatsProducer(conf)
        producer.send(topic, [f"before-{i}" for i in range(5)])
        before = producer.node(1)
        assert before["state"] == "UP", f"the producer is connected to broker 1 through the proxy: {before}"

        fresh = issue_server_cert(env, "kmp-proxy-reloaded-1")
        swap_in(fresh, cert, key)
        for port, what in ((proxy.port, "bootstrap"), (proxy.node_port(1), "node 1")):
            seen = wait_for_cn(port, ca, "kmp-proxy-reloaded-1", timeout=5)
            assert seen == "kmp-proxy-reloaded-1", (
                f"a new TLS connection to the {what} port sees the new certificate within 5 s (reload_interval_ms = 500); "
                f"it still sees CN={seen}:\n{log_tail(proxy)}")
        assert "reloaded" in proxy.log(), f"the log says the TLS files were reloaded:\n{log_tail(proxy)}"

        producer.send(topic, [f"after-{i}" for i in range(5)])
        after = producer.node(1)
        assert after == before, (
            f"the producer's connection to broker 1 survived the reload (no reconnect, no disconnect): before {before}, after {after}")

        # A half-written certificate file: the reload fails and the previous certificate stays.
        text = Path(fresh.chain).read_text()
        cert.write_text(text[: len(text) // 2])
        assert wait_for_log(proxy, "reload failed", timeout=5), (
            f"a half-written certificate file is reported (`reload failed`) within 5 s:\n{log_tail(proxy)}")
        assert common_name(served_certificate("127.0.0.1", proxy.port, ca)) == "kmp-proxy-reloaded-1", (
            "after a failed reload new connections still get the last good certificate")
        producer.send(topic, [f"late-{i}" for i in range(5)])
        assert producer.node(1) == before, "the producer's connection survived the failed reload too"
        producer.p.flush(5)
        round_trip(conf, "reload-new-client", records=2)
        assert_alive(proxy, "after the reloads")
        scrape(env, proxy, "reload-poll")


def test_sighup_reloads_at_once_when_polling_is_off(suite_env, secure_destination):
    env = suite_env
    ca = env.certs.ca.cert
    cert, key = proxy_files(env)
    sections = {"listener.tls": listener_tls(env.certs, reload_interval_ms=0, cert_file=cert, key_file=key),
                "upstream.properties": upstream_properties(env.certs, "INTERNAL")}
    with running_proxy(env, secure_destination.bootstrap_for("INTERNAL"), sections, "reload-sighup") as proxy:
        swap_in(issue_server_cert(env, "kmp-proxy-reloaded-2"), cert, key)
        time.sleep(1.5)
        seen = common_name(served_certificate("127.0.0.1", proxy.port, ca))
        assert seen == "kmp-proxy", f"with reload_interval_ms = 0 changed files are not picked up by polling (saw CN={seen})"
        sighup(proxy)
        seen = wait_for_cn(proxy.port, ca, "kmp-proxy-reloaded-2", timeout=2)
        assert seen == "kmp-proxy-reloaded-2", f"SIGHUP reloads the certificate at once; new connections still see CN={seen}"
        assert "SIGHUP" in proxy.log(), f"the log names SIGHUP as the reason of the reload:\n{log_tail(proxy)}"
        assert_alive(proxy, "after SIGHUP")
        round_trip(client(env, "tls").librdkafka(proxy.bootstrap), "reload-after-sighup", records=2)
        scrape(env, proxy, "reload-sighup")


def test_sighup_does_not_stop_a_proxy_that_has_nothing_to_reload(suite_env, secure_destination):
    """Operators send SIGHUP to reload (docs/tls-sasl.md); a proxy without TLS or credentials
    files must not take it as a signal to die."""
    env = suite_env
    sections = {"upstream.properties": upstream_properties(env.certs, "INTERNAL")}
    with running_proxy(env, secure_destination.bootstrap_for("INTERNAL"), sections, "sighup-plain") as proxy:
        sighup(proxy)
        assert_alive(proxy, "SIGHUP to a proxy with nothing to reload", watch_s=1.0)
        assert metadata_ok(client(env, "plaintext").librdkafka(proxy.bootstrap)), "the proxy still serves after SIGHUP"


def test_credentials_file_reload_admits_a_new_user(suite_env, secure_destination):
    env = suite_env
    creds = credentials_file(env, [("alice", "SCRAM-SHA-512")])
    sections = {"listener.tls": listener_tls(env.certs, reload_interval_ms=500),
                "listener.auth": terminate_auth(creds),
                "upstream.properties": upstream_properties(env.certs, "SASL_SSL")}
    with running_proxy(env, secure_destination.bootstrap_for("SASL_SSL"), sections, "reload-credentials") as proxy:
        mirror = client(env, "tls", "mirror", "SCRAM-SHA-512").librdkafka(proxy.bootstrap)
        assert not metadata_ok(mirror, timeout=2), "a user not in the credentials file is refused"
        more = credentials_file(env, [("alice", "SCRAM-SHA-512"), ("mirror", "SCRAM-SHA-512")])
        tmp = creds.with_suffix(".new")
        shutil.copy(more, tmp)
        os.replace(tmp, creds)
        deadline = time.time() + 5
        while time.time() < deadline and not metadata_ok(mirror, timeout=1):
            time.sleep(0.2)
        assert metadata_ok(mirror, timeout=2), f"the new user logs in within 5 s of the credentials file changing:\n{log_tail(proxy)}"
        round_trip(client(env, "tls", "alice", "PLAIN").librdkafka(proxy.bootstrap), "reload-credentials-alice", records=2)
        scrape(env, proxy, "reload-credentials")
