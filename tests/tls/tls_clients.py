"""Clients over TLS and SASL, for the tests/tls suites: how a client authenticates (``ClientAuth``:
one object that renders the librdkafka config, the Java .properties file and the franz-go flags),
and the client runs themselves (Java ClientScenario, franz-go, librdkafka produce / group consume /
transactions / connection errors). Nothing here knows whether the bootstrap is a broker or the
proxy: the direct baseline passes a broker listener, the proxy tests the proxy's.

    auth = client_auth(certs, users, "SASL_SSL", "alice", "SCRAM-SHA-256")
    auth.librdkafka(bootstrap)            # confluent-kafka config dict
    auth.java_properties(dir)             # path of a .properties file for KMP_CLIENT_PROPS
    auth.franz_flags()                    # ["-tls-ca", ..., "-sasl-mechanism", ...]
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kmp_common import REPO, java_command

JAVA_SCENARIO = REPO / "tests" / "clients" / "java" / "ClientScenario.java"
GO_DIR = REPO / "tests" / "clients" / "go"

# Which SASL mechanisms each test user has (on both secure clusters), and the default mechanism
# per SASL listener. The SSL listener authenticates with client certificates, named like the
# fields of certs.TestCerts.
USER_MECHANISMS = {
    "alice": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "proxy": ("PLAIN", "SCRAM-SHA-512"),
    "mirror": ("PLAIN", "SCRAM-SHA-512"),
}
LISTENER_MECHANISMS = {
    "SASL_PLAINTEXT": ("SCRAM-SHA-512", "PLAIN"),
    "SASL_SSL": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
}
CLIENT_CERTS = ("mirror_admin", "app_client", "expired_client", "rogue_client")
# The protocol a client speaks to each broker listener (INTERNAL is the plaintext one).
LISTENER_PROTOCOL = {"INTERNAL": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT", "SSL": "SSL",
                     "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}


@dataclass(frozen=True)
class ClientAuth:
    """How one client authenticates: ``protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the CA
    it verifies the server with (TLS), its certificate and key (SSL with client auth), and its SASL
    mechanism, user and password."""
    protocol: str
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    combined: Path | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def label(self) -> str:
        who = self.username or (self.cert.stem if self.cert else "anonymous")
        return "-".join(x for x in (self.protocol, self.mechanism, who) if x)

    def librdkafka(self, bootstrap: str, **extra) -> dict:
        """confluent-kafka / librdkafka configuration for ``bootstrap`` (``extra`` merged last)."""
        conf = {"bootstrap.servers": bootstrap, "security.protocol": self.protocol}
        if self.tls:
            conf["ssl.ca.location"] = str(self.ca)
            if self.cert:
                conf["ssl.certificate.location"] = str(self.cert)
                conf["ssl.key.location"] = str(self.key)
        if self.sasl:
            conf.update({"sasl.mechanisms": self.mechanism, "sasl.username": self.username, "sasl.password": self.password})
        return {**conf, **extra}

    def java_config(self) -> dict[str, str]:
        """Java kafka-clients security properties (PEM trust and key stores)."""
        conf = {"security.protocol": self.protocol}
        if self.tls:
            conf.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca)})
            if self.cert:
                conf.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.combined)})
        if self.sasl:
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if self.mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            conf["sasl.mechanism"] = self.mechanism
            conf["sasl.jaas.config"] = f'{module} required username="{self.username}" password="{self.password}";'
        return conf

    def java_properties(self, dir: Path) -> Path:
        """Writes :meth:`java_config` as a .properties file in ``dir`` (for ``KMP_CLIENT_PROPS``)."""
        dir = Path(dir)
        dir.mkdir(parents=True, exist_ok=True)
        path = dir / f"{self.label()}.properties"
        for k, v in self.java_config().items():
            assert "\\" not in v and "\n" not in v, f"{k} would need escaping in a .properties file"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.java_config().items()))
        path.chmod(0o600)
        return path

    def franz_flags(self, server_name: str | None = None) -> list[str]:
        """franz-client (tests/clients/go) flags."""
        flags = []
        if self.tls:
            flags += ["-tls-ca", str(self.ca)]
            if self.cert:
                flags += ["-tls-cert", str(self.cert), "-tls-key", str(self.key)]
            if server_name:
                flags += ["-tls-server-name", server_name]
        if self.sasl:
            flags += ["-sasl-mechanism", self.mechanism, "-sasl-user", self.username, "-sasl-password", self.password]
        return flags


def client_auth(certs, users: dict[str, str], listener: str, identity: str | None = None, mechanism: str | None = None,
                password: str | None = None, ca: Path | None = None) -> ClientAuth:
    """The ``ClientAuth`` of ``identity`` on ``listener`` (INTERNAL/PLAINTEXT, SSL, SASL_PLAINTEXT or
    SASL_SSL; the proxy's listeners use the same names).

    ``identity``: on SSL a client certificate of ``certs`` (mirror_admin — the default —,
    app_client, expired_client, rogue_client, or ``"anonymous"`` for none); on SASL a user of
    ``users`` (alice, proxy, mirror). ``mechanism``: defaults to the listener's first one the user
    has. ``password``: overrides the user's (wrong-password tests). ``ca``: the CA to trust
    (default the test CA; e.g. ``certs.rogue_ca.cert`` to distrust the server)."""
    protocol = LISTENER_PROTOCOL[listener]
    ca = Path(ca or certs.ca.cert)
    if protocol == "PLAINTEXT":
        return ClientAuth("PLAINTEXT")
    if protocol == "SSL":
        name = identity or "mirror_admin"
        if name == "anonymous":
            return ClientAuth("SSL", ca=ca)
        assert name in CLIENT_CERTS, f"unknown client certificate {name}; have {CLIENT_CERTS}"
        pair = getattr(certs, name)
        return ClientAuth("SSL", ca=ca, cert=Path(pair.cert), key=Path(pair.key), combined=Path(pair.combined))
    assert identity in users, f"unknown SASL user {identity}; have {sorted(users)}"
    have = USER_MECHANISMS[identity]
    if mechanism is None:
        mechanism = next(m for m in LISTENER_MECHANISMS[protocol] if m in have)
    assert mechanism in have, f"{identity} has no {mechanism} credentials (has {have})"
    return ClientAuth(protocol, ca=ca if protocol == "SASL_SSL" else None, mechanism=mechanism, username=identity,
                      password=users[identity] if password is None else password)


# ---- Java kafka-clients (tests/clients/java/ClientScenario.java) ------------------------------

def run_java_scenario(classpath: str, bootstrap: str, auth: ClientAuth, props_dir: Path, prefix: str,
                      compression: str = "lz4", group_protocol: str = "classic", txn: bool = True,
                      replication: int = 1, timeout: float = 300) -> str:
    """Runs ClientScenario against ``bootstrap`` with ``auth``'s properties; returns its OK line
    (asserting it succeeded)."""
    env = {**os.environ, "KMP_CLIENT_PROPS": str(auth.java_properties(props_dir)), "KMP_REPLICATION_FACTOR": str(replication)}
    args = [bootstrap, prefix, compression, group_protocol, *(["txn"] if txn else [])]
    out = subprocess.run([*java_command(classpath, JAVA_SCENARIO), *args], capture_output=True, text=True,
                         timeout=timeout, env=env)
    ok = [line for line in out.stdout.splitlines() if line.startswith("OK")]
    assert out.returncode == 0 and ok, (
        f"Java scenario as {auth.label()} against {bootstrap} failed (exit {out.returncode}):\n"
        f"{out.stdout[-3000:]}\n{out.stderr[-6000:]}")
    return ok[-1]


# ---- franz-go (tests/clients/go) ----------------------------------------------------------------

def build_franz_client() -> str:
    """Builds tests/clients/go into its franz-client binary (as test_franz_go_client.py does)."""
    out = subprocess.run(["go", "build", "-o", "franz-client", "."], cwd=GO_DIR, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"building the franz-go client failed:\n{out.stderr}"
    return str(GO_DIR / "franz-client")


def run_franz(binary: str, bootstrap: str, auth: ClientAuth, prefix: str, compression: str = "zstd", txn: bool = True,
              replication: int = 1, server_name: str | None = None, timeout: float = 300,
              expect_ok: bool = True) -> subprocess.CompletedProcess:
    """Runs the franz-go scenario with ``auth``'s flags; with ``expect_ok`` asserts it printed OK."""
    cmd = [binary, "-bootstrap", bootstrap, "-prefix", prefix, "-compression", compression,
           "-replication", str(replication), *(["-txn"] if txn else []), *auth.franz_flags(server_name)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if expect_ok:
        assert out.returncode == 0 and out.stdout.startswith("OK"), (
            f"franz-go scenario as {auth.label()} against {bootstrap} failed (exit {out.returncode}):\n"
            f"{out.stdout}\n{out.stderr[-4000:]}")
    return out


# ---- librdkafka (confluent-kafka) ---------------------------------------------------------------

def create_topic(conf: dict, topic: str, partitions: int = 1, replication: int = -1, timeout: float = 30) -> None:
    """Creates ``topic`` (replication -1: the broker's default) and waits until it has a leader."""
    admin = AdminClient(conf)
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication)],
                              operation_timeout=timeout)[topic]
    fut.result(timeout=timeout)
    deadline = time.time() + timeout
    while time.time() < deadline:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if len(parts) == partitions and all(p.leader >= 0 for p in parts.values()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{topic} has no leader for every partition after {timeout}s")


def produce(conf: dict, topic: str, values: list[str], timeout: float = 30) -> None:
    """Produces ``values`` (idempotent, acks=all) and asserts every one was delivered."""
    failed = []
    p = Producer({**conf, "enable.idempotence": True})
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, msg: failed.append(err) if err else None)
    left = p.flush(timeout)
    assert left == 0 and not failed, f"produce to {topic}: {left} undelivered, errors {failed[:3]}"


def consume_in_group(conf: dict, topic: str, group: str, count: int, timeout: float = 60) -> list[str]:
    """Subscribes as a member of ``group``, reads ``count`` records, commits synchronously and checks
    the group's committed offsets add up to ``count``; returns the values in the order read."""
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got, deadline = [], time.time() + timeout
        while len(got) < count and time.time() < deadline:
            for m in c.consume(100, 0.2):
                if m.error():
                    raise KafkaException(m.error())
                got.append(m.value().decode())
        assert len(got) == count, f"group {group} read {len(got)} of {count} records of {topic} within {timeout}s"
        c.commit(asynchronous=False)
        parts = c.committed([TopicPartition(topic, p) for p in range(_partitions(conf, topic))], timeout=10)
        committed = sum(tp.offset for tp in parts if tp.offset >= 0)
        assert committed == count, f"group {group} committed offsets add up to {committed}, want {count}: {parts}"
        return got
    finally:
        c.close()


def _partitions(conf: dict, topic: str) -> int:
    return len(AdminClient(conf).list_topics(topic, timeout=10).topics[topic].partitions)


def read_all(conf: dict, topic: str, isolation: str, want: int, timeout: float = 30) -> list[str]:
    """Reads partition 0 of ``topic`` from the beginning with ``isolation`` until ``want`` records
    (or the timeout); returns the values."""
    c = Consumer({**conf, "group.id": f"reader-{topic}", "isolation.level": isolation, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.time() + timeout
        while len(got) < want and time.time() < deadline:
            for m in c.consume(100, 0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                got.append(m.value().decode())
        return got
    finally:
        c.close()


def read_records(conf: dict, topic: str, partitions: int, want: int, timeout: float = 60) -> list[tuple[int, int, bytes | None, bytes]]:
    """Every record of ``topic``'s ``partitions`` as (partition, offset, key, value), sorted,
    read_committed from offset 0, until ``want`` (or the timeout); a consumer error fails."""
    c = Consumer({**conf, "group.id": f"reader-{topic}-{time.time_ns()}", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, deadline = [], time.time() + timeout
        while len(got) < want and time.time() < deadline:
            for m in c.consume(500, 0.2):
                if m.error():
                    raise KafkaException(m.error())
                got.append((m.partition(), m.offset(), m.key(), m.value()))
        return sorted(got)
    finally:
        c.close()


def transactions(conf: dict, topic: str, transactional_id: str, timeout: float = 30) -> dict:
    """On a single-partition ``topic`` (created by the caller): commits 10 records, aborts 10,
    commits 5 more (so aborted records sit between committed ones), then reads the partition
    read_committed and read_uncommitted. Returns {"committed": [...], "uncommitted": [...]}."""
    p = Producer({**conf, "transactional.id": transactional_id})
    p.init_transactions(timeout)
    for values, commit in (([f"committed-{i}" for i in range(10)], True), ([f"aborted-{i}" for i in range(10)], False),
                           ([f"committed-{i}" for i in range(10, 15)], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, partition=0)
        if commit:
            p.commit_transaction(timeout)
        else:
            assert p.flush(timeout) == 0, "aborted batch was not written before the abort"
            p.abort_transaction(timeout)
    return {"committed": read_all(conf, topic, "read_committed", 15, timeout),
            "uncommitted": read_all(conf, topic, "read_uncommitted", 25, timeout)}


def connection_errors(conf: dict, timeout: float = 15, settle: float = 1.0) -> list[KafkaError]:
    """Connects a producer with ``conf`` and collects the errors librdkafka reports through
    ``error_cb`` until the first one (plus ``settle`` seconds, to catch the ones that follow it)
    or ``timeout``. An empty list means the client connected without complaint."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append, "log_level": 0, "reconnect.backoff.ms": 200})
    deadline = time.time() + timeout
    while time.time() < deadline and not errors:
        p.poll(0.2)
    end = time.time() + settle
    while errors and time.time() < end:
        p.poll(0.1)
    return errors


def metadata_ok(conf: dict, timeout: float = 15) -> bool:
    """True when a metadata request with ``conf`` succeeds."""
    try:
        AdminClient(conf).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def error_names(errors: list[KafkaError]) -> list[str]:
    """``["_AUTHENTICATION: <message>", ...]``: librdkafka error names with their messages."""
    return [f"{e.name()}: {e.str()}" for e in errors]


def authentication_failed(errors: list[KafkaError]) -> bool:
    """librdkafka reported a SASL authentication failure (``_AUTHENTICATION``)."""
    return any(e.code() == KafkaError._AUTHENTICATION and "SASL authentication" in e.str() for e in errors)


_TLS_FAILURE = re.compile(r"SSL handshake failed|ssl/tls alert|certificate verify failed|SSL routines", re.I)


def tls_rejected(errors: list[KafkaError]) -> bool:
    """librdkafka reported the TLS session failing: ``_SSL`` (handshake failed) or, with TLS 1.3
    where the server judges the client certificate after the client's handshake is done,
    ``_TRANSPORT`` carrying the server's TLS alert (bad certificate, certificate unknown, ...)."""
    return any(e.code() in (KafkaError._SSL, KafkaError._TRANSPORT) and _TLS_FAILURE.search(e.str()) for e in errors)
