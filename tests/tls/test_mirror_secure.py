"""Mirroring end to end between two secured clusters: a SASL_SSL source into a SASL_SSL destination,
through a proxy that clients reach over TLS and that terminates their SASL authentication. The whole
mirror life cycle runs through the secured proxy with the mirrors CLI (`--command-config`): create
(source credentials by file reference), start, catch up with identical offsets, group offset sync,
describe, failover — plus a mirror declared in the config file with an inline secret, whose stored
definition must not hold it. Everything the proxy showed goes to the leak corpus for the secrets
grep (test_secrets_never_leak.py)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from kmp_common import PROXY_BIN, ProxyProcess, unique, wait_until
from tls.tls_clients import consume_in_group, create_topic, read_records

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "security"))
import sec_wire  # noqa: E402

PARTITIONS = 2
RECORDS = 400
CLUSTER_MIRROR = 64


def produce_keyed(conf: dict, topic: str, n: int, start: int = 0) -> None:
    p = Producer({**conf, "enable.idempotence": True, "compression.type": "lz4", "linger.ms": 5})
    failed = []
    for i in range(start, start + n):
        p.produce(topic, key=f"k{i % 7}", value=f"v{i}", partition=i % PARTITIONS,
                  on_delivery=lambda e, m: failed.append(e) if e else None)
    assert p.flush(30) == 0 and not failed, f"producing to the source failed: {failed[:3]}"


def committed(conf: dict, group: str, topic: str) -> dict[int, int]:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    admin = AdminClient(conf)  # kept referenced until the future resolves
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def cli(proxy: ProxyProcess, command_config: Path, *args: str) -> tuple[int, str]:
    out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, "--command-config", str(command_config), *args],
                         capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout + out.stderr


def sasl_tls_socket(proxy: ProxyProcess, ca: Path, user: str, password: str) -> ssl.SSLSocket:
    """A raw Kafka connection to the proxy: TLS, then SASL PLAIN (answered by the proxy itself)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", proxy.port), timeout=15), server_hostname="127.0.0.1")
    s.sendall(sec_wire.sasl_handshake_v1(1, "PLAIN"))
    _, body = sec_wire.read_response(s)
    assert sec_wire.parse_error_first(body) == 0, "the proxy accepts the PLAIN handshake"
    s.sendall(sec_wire.sasl_authenticate_v1(2, user, password))
    _, body = sec_wire.read_response(s)
    assert sec_wire.parse_error_first(body) == 0, f"the proxy authenticates {user} over PLAIN"
    return s


def wait_for(what: str, check, timeout: float = 90):
    return wait_until(what, check, timeout, interval=0.5)


def test_a_sasl_ssl_source_is_mirrored_into_a_sasl_ssl_destination_through_its_whole_life_cycle(
        secure_source, secure_destination, tls_certs, tls_users, tls_auth, workdir, leak_corpus):
    d = workdir / unique("mirror-secure")
    d.mkdir()
    alice = tls_auth("SASL_SSL", "alice", "SCRAM-SHA-512")
    src_conf = alice.librdkafka(secure_source.bootstrap_for("SASL_SSL"))
    dst_conf = alice.librdkafka(secure_destination.bootstrap_for("SASL_SSL"))
    topic, file_topic, group = unique("sec-mir"), unique("sec-cfg"), unique("sec-group")
    for t in (topic, file_topic):
        create_topic(src_conf, t, PARTITIONS)
        produce_keyed(src_conf, t, RECORDS)
    consume_in_group(src_conf, topic, group, RECORDS)  # commits RECORDS offsets on the source

    ca = Path(tls_certs.ca.cert)
    env = {"KMP_PW": tls_users["alice"]}
    entry = subprocess.run([str(PROXY_BIN), "scram-credential", "--user", "alice", "--mechanism", "SCRAM-SHA-512", "--password-env", "KMP_PW",
                            "--iterations", "4096"], capture_output=True, text=True, env={**env, "PATH": "/usr/bin:/bin"}, timeout=30)
    assert entry.returncode == 0 and tls_users["alice"] not in entry.stdout, f"scram-credential failed or echoed the password: {entry.stderr}"
    users = write(d / "users.toml", entry.stdout)
    mirror_pw = write(d / "mirror-password", tls_users["mirror"] + "\n")
    source_addr = secure_source.bootstrap_for("SASL_SSL")
    config = write(d / "proxy.toml", f"""
[listener.tls]
cert_file = "{tls_certs.proxy.chain}"
key_file = "{tls_certs.proxy.key}"

[listener.auth]
mode = "terminate"
mechanisms = ["SCRAM-SHA-512", "PLAIN"]
credentials_file = "{users}"

[upstream.properties]
"security.protocol" = "SASL_SSL"
"ssl.truststore.type" = "PEM"
"ssl.truststore.location" = "{ca}"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "proxy"
"sasl.password" = "env:KMP_TEST_PROXY_PASSWORD"

[security]
mirror_admin_loopback = false
mirror_admin_principals = ["alice"]

[[mirrors]]
name = "from-file"
source_bootstrap_servers = ["{source_addr}"]
topics = ["{file_topic}"]

[mirrors.source_properties]
"security.protocol" = "SASL_SSL"
"ssl.truststore.location" = "{ca}"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.jaas.config" = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="{tls_users["mirror"]}";'
""")
    proxy = ProxyProcess(secure_destination.bootstrap_for("SASL_SSL"), workdir, ["--config", str(config), "--log", "debug"],
                         env={"KMP_TEST_PROXY_PASSWORD": tls_users["proxy"], "KMP_MIRROR_SOURCE_ALLOW": source_addr}).start()
    try:
        via_proxy = alice.librdkafka(proxy.bootstrap)
        admin_props = write(d / "admin.properties", "\n".join(f"{k}={v}" for k, v in alice.java_config().items()) + "\n")

        # Create through the API: an inline secret is refused (and not echoed), a file reference accepted.
        base = {"bootstrap.servers": source_addr, "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(ca), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mirror"}
        inline = write(d / "inline.properties", "".join(f"{k}={v}\n" for k, v in {**base, "sasl.password": tls_users["mirror"]}.items()))
        code, out = cli(proxy, admin_props, "--create", "--mirror", "sec", "--mirror-config", str(inline))
        assert code != 0 and "by reference" in out and tls_users["mirror"] not in out, f"an inline source password is refused: {out}"
        by_ref = write(d / "mirror.properties", "".join(f"{k}={v}\n" for k, v in {**base, "sasl.password": f"file:{mirror_pw}"}.items()))
        code, out = cli(proxy, admin_props, "--create", "--mirror", "sec", "--mirror-config", str(by_ref))
        assert code == 0, f"creating the mirror through the TLS+SASL proxy: {out}"
        code, out = cli(proxy, admin_props, "--start", "--mirror", "sec", "--topics", topic, "--output", "json")
        assert code == 0, f"starting {topic}: {out}"

        # Catch up with identical offsets, for the API mirror and the config-file mirror.
        for t in (topic, file_topic):
            want = read_records(src_conf, t, PARTITIONS, RECORDS)
            assert len(want) == RECORDS, f"source {t} holds {len(want)} records"
            got = wait_for(f"{t} mirrored record for record", lambda t=t: (lambda r: r if r == want else None)(read_records(dst_conf, t, PARTITIONS, RECORDS, 5)))
            assert got == want
        # Through the proxy the topic is read-only and reads the same records.
        assert read_records(via_proxy, topic, PARTITIONS, RECORDS) == read_records(src_conf, topic, PARTITIONS, RECORDS), "reading through the proxy"
        errors = []
        p = Producer({**via_proxy, "message.timeout.ms": 10000})
        p.produce(topic, value=b"not allowed", on_delivery=lambda e, m: errors.append(e))
        p.flush(15)
        assert errors and errors[0] is not None, "a write to a mirror topic through the proxy is refused"

        # Group offsets of the source group are synced to the destination.
        want_offsets = committed(src_conf, group, topic)
        assert sum(want_offsets.values()) == RECORDS
        wait_for("the source group's offsets synced", lambda: committed(dst_conf, group, topic) == want_offsets)

        # Describe: states, configs (the secret sensitive, without value), listing; all to the corpus.
        code, out = cli(proxy, admin_props, "--describe", "--mirror", "sec", "--output", "json")
        assert code == 0, out
        desc = json.loads(out)
        assert {(p["topic"], p["state"], p["lag"]) for p in desc["partitions"]} == {(topic, "mirroring", 0)}, desc
        (leak_corpus / "mirror-secure-describe.json").write_text(out)
        code, out = cli(proxy, admin_props, "--list", "--output", "json")
        (leak_corpus / "mirror-secure-list.json").write_text(out)
        with sasl_tls_socket(proxy, ca, "alice", tls_users["alice"]) as s:
            s.sendall(sec_wire.describe_configs_v1(3, [(CLUSTER_MIRROR, "sec"), (CLUSTER_MIRROR, "from-file")]))
            _, body = sec_wire.read_response(s)
            described = sec_wire.parse_describe_configs_v1(body)
            s.sendall(sec_wire.list_cluster_mirrors(4))
            _, listing = sec_wire.read_response(s, flexible_header=True)
        (leak_corpus / "mirror-secure-describe-configs.txt").write_text(repr(described))
        (leak_corpus / "mirror-secure-list-cluster-mirrors.bin").write_bytes(listing)
        code, configs = described[(CLUSTER_MIRROR, "sec")]
        assert code == 0 and configs.get("security.protocol") == "SASL_SSL" and configs.get("sasl.username") == "mirror", configs
        assert "sasl.password" in configs and configs["sasl.password"] is None, f"the secret is described without a value: {configs}"
        code, configs = described[(CLUSTER_MIRROR, "from-file")]
        assert code == 0 and "sasl.jaas.config" in configs and configs["sasl.jaas.config"] is None, configs
        for path in ("/v1/mirrors", "/v1/mirrors/sec", "/v1/mirrors/from-file", "/metrics"):
            status, text = proxy.http(path)
            assert status == 200, f"{path}: {status}"
            (leak_corpus / f"mirror-secure{path.replace('/', '_')}.txt").write_text(text)

        # The state topic (read directly on the plaintext internal listener) holds no secret: the
        # config-file mirror's inline JAAS line was stored redacted, the API mirror's reference as is.
        state = Consumer({"bootstrap.servers": secure_destination.bootstrap_for("INTERNAL"), "group.id": unique("state"),
                          "enable.auto.commit": False, "enable.partition.eof": True})
        state.assign([TopicPartition("__kmp_mirror_state", 0, 0)])
        values, deadline = [], time.time() + 30
        while time.time() < deadline:
            m = state.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(m.error())
            if m.value():
                values.append(m.value().decode())
        state.close()
        stored = "\n".join(values)
        (leak_corpus / "mirror-secure-state-topic.txt").write_text(stored)
        assert "from-file" in stored and "<redacted>" in stored and f"file:{mirror_pw}" in stored, "both definitions are stored"

        # Failover through the secured proxy: stopped topics become writable and keep their offsets.
        ends = {p: len([r for r in read_records(src_conf, topic, PARTITIONS, RECORDS) if r[0] == p]) for p in range(PARTITIONS)}
        code, out = cli(proxy, admin_props, "--stop", "--mirror", "sec", "--topics", topic, "--output", "json")
        assert code == 0, f"stop (failover): {out}"
        p = Producer({**via_proxy, "enable.idempotence": True})
        delivered = []
        p.produce(topic, value=b"after-failover", partition=0, on_delivery=lambda e, m: delivered.append((e, m.offset() if m else None)))
        assert p.flush(30) == 0 and delivered[0][0] is None, f"a write after failover: {delivered}"
        assert delivered[0][1] == ends[0], f"the first write after failover lands right after the mirrored records: {delivered}"
        assert proxy.alive()
    finally:
        assert proxy.stop() == 0, f"proxy exit on SIGTERM:\n{proxy.log()[-3000:]}"
