"""Real Apache Kafka clusters (KRaft, combined broker+controller nodes) on loopback for tests,
benchmarks and the demo.

Jars come from Maven Central through ``kafka-jars.sh`` (cached). Each cluster lives in its own
work directory; readiness is a Metadata probe over the Kafka protocol (no sleeps), so a cluster
is "up" only when every broker is registered and unfenced.

CLI (used by tests/run.sh and the demo):
    python3 tests/harness/kafka_cluster.py up   --dir DIR   # source (1 broker) + destination (3)
    python3 tests/harness/kafka_cluster.py down --dir DIR
``up`` writes DIR/clusters.json with the bootstrap addresses and broker pids.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
KAFKA_VERSION = os.environ.get("KMP_KAFKA_VERSION", "4.1.2")
READY_TIMEOUT_S = 120

LOG4J2 = """status = warn
appender.file.type = Console
appender.file.name = OUT
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """Directory holding the jars of Kafka ``version`` (downloaded once)."""
    out = subprocess.run([str(HERE / "kafka-jars.sh"), version], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def classpath(version: str = KAFKA_VERSION) -> str:
    return str(kafka_libs(version) / "*")


def metadata_broker_ids(addr: str, timeout: float = 2.0) -> list[int]:
    """Node ids of the brokers the broker at ``addr`` lists in a Metadata v1 response."""
    host, port = addr.rsplit(":", 1)
    client_id = b"kmp-harness"
    body = struct.pack(">hhih", 3, 1, 7, len(client_id)) + client_id + struct.pack(">i", 0)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        data = recv_exact(s, size)
    pos = 4  # correlation id
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    ids = []
    for _ in range(count):
        (node_id,) = struct.unpack_from(">i", data, pos)
        pos += 4
        (hlen,) = struct.unpack_from(">h", data, pos)
        pos += 2 + hlen + 4
        (rlen,) = struct.unpack_from(">h", data, pos)
        pos += 2 + max(rlen, 0)
        ids.append(node_id)
    return sorted(ids)


def recv_exact(s: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``s`` (ConnectionError if the peer closes first)."""
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def new_cluster_id() -> str:
    """A KRaft cluster id (base64 UUID) that cannot be mistaken for a command-line flag."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if cid[0].isalnum():
            return cid


# Listeners of a cluster started with ``secure=SecureListeners(...)`` and their port offsets: broker
# ``i`` listens on ``base_port + offset + i - 1`` (the controller quorum stays at offset 100).
SECURE_LISTENERS = {"SSL": 0, "INTERNAL": 50, "SASL_PLAINTEXT": 150, "SASL_SSL": 200}
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass
class SecureListeners:
    """What makes every broker of a cluster listen on four listeners instead of one:

    - ``INTERNAL``: PLAINTEXT; inter-broker traffic and the readiness probe (and test setup that
      must not depend on security, e.g. inspecting topics);
    - ``SSL``: TLS with a required client certificate signed by the test CA;
    - ``SASL_PLAINTEXT``: SASL with SCRAM-SHA-512 and PLAIN;
    - ``SASL_SSL``: TLS (no client certificate) + SASL with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.

    ``certs``: a ``certs.TestCerts`` (the broker's key + chain as a PEM keystore, the CA as PEM
    truststore). ``scram_users``: user -> {mechanism: password}, created by Kafka's StorageTool at
    format time (``--add-scram``). ``plain_users``: user -> password, in the listeners' PLAIN JAAS
    config (``user_<name>="<password>"``)."""
    certs: object
    scram_users: dict[str, dict[str, str]] = field(default_factory=dict)
    plain_users: dict[str, str] = field(default_factory=dict)

    @property
    def keystore(self) -> Path:
        return Path(self.certs.broker.combined)

    @property
    def truststore(self) -> Path:
        return Path(self.certs.ca.cert)

    def scram_args(self) -> list[str]:
        """``kafka.tools.StorageTool format`` arguments creating the SCRAM credentials."""
        args = []
        for user, mechs in self.scram_users.items():
            for mech, password in mechs.items():
                assert mech in SCRAM_MECHANISMS, f"unknown SCRAM mechanism {mech} for {user}"
                assert not set(user + password) & set(',=[]"'), f"SCRAM user/password of {user} needs quoting"
                args += ["--add-scram", f"{mech}=[name={user},password={password}]"]
        return args

    def broker_config(self) -> dict:
        plain = " ".join(f'user_{u}="{pw}"' for u, pw in self.plain_users.items())
        plain_jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain};"
        scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.truststore),
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.sasl_ssl.ssl.client.auth": "none",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram_jaas,
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram_jaas,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas,
        }


# Port offset of the OAUTH listener a cluster started with ``oauth=OAuthListener(...)`` adds (broker
# ``i`` on ``base_port + 80 + i - 1``): inside every cluster shape's port block (up to 20 brokers).
OAUTH_OFFSET = 80
OAUTHBEARER_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The JVM system property (Kafka 4.0+) listing the only URLs an OAUTHBEARER client or broker may
# fetch tokens or keys from (KIP-1139 default: none).
OAUTH_ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"


@dataclass
class OAuthListener:
    """What adds a listener ``OAUTH`` to every broker of a cluster: SASL with OAUTHBEARER only,
    whose JWTs the broker validates itself (``OAuthBearerValidatorCallbackHandler``) against
    ``idp``: its JWKS (``idp.jwks_url``), issuer (``idp.issuer``) and ``audience``.

    ``idp``: anything with ``issuer``, ``jwks_url`` and ``token_endpoint`` (an
    ``oidc_idp.OidcProvider``). ``tls``: SASL_SSL instead of SASL_PLAINTEXT; ``None`` (default)
    means SASL_SSL exactly when the cluster is ``secure`` (its broker certificate is used).
    ``principal_claim``: ``sasl.oauthbearer.sub.claim.name`` (Kafka's default ``sub``).
    ``reauth_ms``: ``connections.max.reauth.ms`` of this listener's OAUTHBEARER (KIP-368); the
    broker's SaslAuthenticate answer then carries session_lifetime_ms = min(token exp - now,
    reauth_ms). ``extra``: more broker config (full names). The brokers' JVMs get
    ``-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=<token endpoint>,<JWKS URL>``."""
    idp: object
    tls: bool | None = None
    audience: str = "kafka"
    principal_claim: str | None = None
    reauth_ms: int | None = None
    extra: dict = field(default_factory=dict)

    def protocol(self, secure: bool) -> str:
        tls = secure if self.tls is None else self.tls
        assert not tls or secure, "an OAUTH listener over TLS needs a secure cluster (its certificates)"
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"

    def allowed_urls(self) -> str:
        return f"{self.idp.token_endpoint},{self.idp.jwks_url}"

    def broker_config(self, secure: bool) -> dict:
        conf = {
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.server.callback.handler.class": OAUTHBEARER_VALIDATOR,
            "listener.name.oauth.oauthbearer.sasl.jaas.config": f"{OAUTHBEARER_LOGIN_MODULE} required ;",
            "sasl.oauthbearer.jwks.endpoint.url": self.idp.jwks_url,
            "sasl.oauthbearer.expected.audience": self.audience,
            "sasl.oauthbearer.expected.issuer": self.idp.issuer,
        }
        if self.principal_claim:
            conf["sasl.oauthbearer.sub.claim.name"] = self.principal_claim
        if self.reauth_ms is not None:
            conf["listener.name.oauth.oauthbearer.connections.max.reauth.ms"] = self.reauth_ms
        if self.protocol(secure) == "SASL_SSL":
            conf["listener.name.oauth.ssl.client.auth"] = "none"
        conf.update(self.extra)
        return conf

    def client_config(self, client_id: str, secret: str, jaas_credentials: bool = False) -> dict:
        """Java client properties (Kafka 4.1 names) that log in as ``client_id`` with the
        client-credentials grant: the credentials in ``sasl.oauthbearer.client.credentials.*``, or
        with ``jaas_credentials`` as the JAAS options ``clientId`` / ``clientSecret`` (deprecated
        since 4.1: the client logs a warning). The client's JVM also needs the token endpoint in
        the system property :data:`OAUTH_ALLOWED_URLS_PROPERTY` (and, for SASL_SSL, a truststore)."""
        conf = {
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.token.endpoint.url": self.idp.token_endpoint,
            "sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        }
        if jaas_credentials:
            conf["sasl.jaas.config"] = f'{OAUTHBEARER_LOGIN_MODULE} required clientId="{client_id}" clientSecret="{secret}";'
        else:
            conf["sasl.jaas.config"] = f"{OAUTHBEARER_LOGIN_MODULE} required ;"
            conf["sasl.oauthbearer.client.credentials.client.id"] = client_id
            conf["sasl.oauthbearer.client.credentials.client.secret"] = secret
        return conf


class KafkaCluster:
    """A KRaft cluster of ``brokers`` combined-mode nodes with node ids 1..n.

    Broker ``i`` listens for clients on ``base_port + i - 1`` and for the controller quorum on
    ``base_port + 100 + i - 1``. With ``secure``, see :data:`SECURE_LISTENERS` for the ports.
    """

    def __init__(self, name: str, brokers: int, base_port: int, workdir: Path, extra_config: dict | None = None,
                 version: str = KAFKA_VERSION, sasl_users: dict[str, str] | None = None,
                 secure: SecureListeners | None = None, wan: bool = False, oauth: OAuthListener | None = None,
                 jvm_props: dict[str, str] | None = None):
        """``sasl_users`` makes the client listener SASL_PLAINTEXT with PLAIN for those users; the
        brokers then talk to each other (and the readiness probe to them) on a plaintext listener
        at ``base_port + 50 + i - 1``.

        ``secure`` gives every broker the INTERNAL, SSL, SASL_PLAINTEXT and SASL_SSL listeners of
        :class:`SecureListeners` (address them with :meth:`addr_for` / :meth:`bootstrap_for`; there
        is no single client listener, so :meth:`addr` and :attr:`bootstrap` refuse).

        ``wan`` adds a plaintext listener WAN on ``base_port + 60 + i - 1`` that advertises
        ``base_port + 70 + i - 1`` instead (see :meth:`wan_addr`): put a latency-injecting relay
        (tests/harness/latency.py) from the advertised port to the bound one, and a client that
        bootstraps from :attr:`wan_bootstrap` reaches every broker through it, while clients of
        :attr:`bootstrap` stay direct.

        ``oauth`` adds the listener ``OAUTH`` of :class:`OAuthListener` on ``base_port + 80 + i - 1``
        (address it with ``addr_for("OAUTH", i)`` / ``bootstrap_for("OAUTH")``), next to whatever
        listeners the cluster has otherwise; inter-broker traffic stays where it was.

        ``jvm_props``: JVM system properties (``-Dkey=value``) for every broker (and StorageTool);
        ``oauth`` adds its allowed-URLs property to them."""
        assert not (sasl_users and secure), "sasl_users and secure are alternatives"
        assert not (wan and (sasl_users or secure)), "wan is for plain clusters"
        self.wan = wan
        self.oauth = oauth
        self.jvm_props = dict(jvm_props or {})
        if oauth:
            assert brokers <= 20, "the OAUTH listener's ports allow at most 20 brokers"
            urls = oauth.allowed_urls()
            prev = self.jvm_props.get(OAUTH_ALLOWED_URLS_PROPERTY)
            self.jvm_props[OAUTH_ALLOWED_URLS_PROPERTY] = f"{prev},{urls}" if prev else urls
        self.name = name
        self.version = version
        self.sasl_users = sasl_users
        self.secure = secure
        self.n = brokers
        self.base_port = base_port
        self.dir = Path(workdir) / name
        self.extra = extra_config or {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.cluster_id = new_cluster_id()

    def port(self, node_id: int) -> int:
        return self.base_port + node_id - 1

    @staticmethod
    def port_block_size(brokers: int, sasl_users=None, secure=None, oauth=None) -> int:
        """How many consecutive ports from ``base_port`` a cluster of this shape uses (an
        ``oauth`` listener fits in every shape's block: it changes nothing)."""
        if secure:
            return max(SECURE_LISTENERS.values()) + brokers
        return 151 if sasl_users else 100 + brokers

    def wan_bind(self, node_id: int) -> str:
        """Where broker ``node_id``'s WAN listener is bound (the relay's upstream)."""
        assert self.wan, f"{self.name} has no WAN listener"
        return f"127.0.0.1:{self.base_port + 60 + node_id - 1}"

    def wan_addr(self, node_id: int) -> str:
        """What broker ``node_id``'s WAN listener advertises (the relay listens here)."""
        assert self.wan, f"{self.name} has no WAN listener"
        return f"127.0.0.1:{self.base_port + 70 + node_id - 1}"

    @property
    def wan_bootstrap(self) -> str:
        return ",".join(self.wan_addr(i) for i in range(1, self.n + 1))

    def addr(self, node_id: int) -> str:
        if self.secure:
            raise ValueError(f"{self.name} has secure listeners only: use addr_for(listener, node_id) "
                             f"with one of {', '.join(SECURE_LISTENERS)}")
        return f"127.0.0.1:{self.port(node_id)}"

    def addr_for(self, listener: str, node_id: int) -> str:
        """Address of ``listener`` (INTERNAL, SSL, SASL_PLAINTEXT or SASL_SSL) on broker ``node_id``
        of a secure cluster, or of the OAUTH listener of a cluster started with ``oauth``."""
        if listener == "OAUTH":
            assert self.oauth, f"{self.name} has no OAUTH listener"
            return f"127.0.0.1:{self.base_port + OAUTH_OFFSET + node_id - 1}"
        assert self.secure, f"{self.name} has no secure listeners"
        assert listener in SECURE_LISTENERS, f"unknown listener {listener}; have {', '.join(SECURE_LISTENERS)}"
        return f"127.0.0.1:{self.base_port + SECURE_LISTENERS[listener] + node_id - 1}"

    def bootstrap_for(self, listener: str) -> str:
        """Bootstrap servers (every broker) of ``listener`` of a secure cluster (or OAUTH)."""
        return ",".join(self.addr_for(listener, i) for i in range(1, self.n + 1))

    def probe_addr(self, node_id: int) -> str:
        """Plaintext address for readiness checks (the internal listener of a SASL or secure cluster)."""
        if self.secure:
            return self.addr_for("INTERNAL", node_id)
        return f"127.0.0.1:{self.base_port + 50 + node_id - 1}" if self.sasl_users else self.addr(node_id)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addr(i) for i in range(1, self.n + 1))

    def _props(self, node_id: int, broker_only: bool = False) -> Path:
        voters = ",".join(f"{i}@127.0.0.1:{self.base_port + 100 + i - 1}" for i in range(1, self.n + 1))
        rf = min(3, self.n)
        controller = "" if broker_only else f",CONTROLLER://127.0.0.1:{self.base_port + 100 + node_id - 1}"
        conf = {
            "process.roles": "broker" if broker_only else "broker,controller",
            "node.id": node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port(node_id)}" + controller,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port(node_id)}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.dir / f"data-{node_id}"),
            "num.partitions": 1,
            "default.replication.factor": rf,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": 6,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 6,
            "group.initial.rebalance.delay.ms": 0,
            "log.cleaner.backoff.ms": 1000,  # compaction tests need the cleaner to run soon
            "log.retention.check.interval.ms": 1000,  # retention tests need deletion to run soon
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": 1,
        }
        if self.sasl_users:
            internal = f"INTERNAL://{self.probe_addr(node_id)}"
            conf["listeners"] = conf["listeners"].replace("PLAINTEXT://", f"{internal},SASL_PLAINTEXT://", 1)
            conf["advertised.listeners"] = f"{internal},SASL_PLAINTEXT://{self.addr(node_id)}"
            conf["inter.broker.listener.name"] = "INTERNAL"
            conf["listener.security.protocol.map"] = "INTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            conf["sasl.enabled.mechanisms"] = "PLAIN"
            users = " ".join(f'user_{u}="{pw}"' for u, pw in self.sasl_users.items())
            conf["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};")
        if self.secure:
            advertised = ",".join(f"{name}://{self.addr_for(name, node_id)}" for name in SECURE_LISTENERS)
            conf["listeners"] = advertised + controller
            conf["advertised.listeners"] = advertised
            conf["inter.broker.listener.name"] = "INTERNAL"
            conf["listener.security.protocol.map"] = (
                "INTERNAL:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT")
            conf.update(self.secure.broker_config())
        if self.wan:
            conf["listeners"] += f",WAN://{self.wan_bind(node_id)}"
            conf["advertised.listeners"] += f",WAN://{self.wan_addr(node_id)}"
            conf["listener.security.protocol.map"] += ",WAN:PLAINTEXT"
        if self.oauth:
            conf["listeners"] += f",OAUTH://{self.addr_for('OAUTH', node_id)}"
            conf["advertised.listeners"] += f",OAUTH://{self.addr_for('OAUTH', node_id)}"
            conf["listener.security.protocol.map"] += f",OAUTH:{self.oauth.protocol(bool(self.secure))}"
            conf.update(self.oauth.broker_config(bool(self.secure)))
        conf.update(self.extra)
        path = self.dir / f"server-{node_id}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        return path

    def _java(self, *args: str) -> list[str]:
        return ["java", "-Xms256m", "-Xmx768m", "-Djava.awt.headless=true", *(f"-D{k}={v}" for k, v in self.jvm_props.items()),
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}", "-cp", classpath(self.version), *args]

    def _format(self, props: Path) -> None:
        extra = self.secure.scram_args() if self.secure else []
        out = subprocess.run(self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(props), *extra),
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"{self.name}: formatting {props} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")

    def start(self, wait: bool = True) -> "KafkaCluster":
        """Formats (first time only) and starts every node; with ``wait=False`` returns once the
        JVMs are launched (call :meth:`wait_ready` later: lets two clusters boot side by side)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "log4j2.properties").write_text(LOG4J2)
        for i in range(1, self.n + 1):
            props = self._props(i)
            if not (self.dir / f"data-{i}" / "meta.properties").exists():
                self._format(props)
        for i in range(1, self.n + 1):
            self.start_broker(i, wait=False)
        if wait:
            self.wait_ready()
        return self

    def add_broker(self, node_id: int) -> None:
        """Adds a broker-only node (no controller role) to the running cluster and waits for it."""
        self._format(self._props(node_id, broker_only=True))
        self.start_broker(node_id)

    def start_broker(self, node_id: int, wait: bool = True) -> None:
        log = open(self.dir / f"broker-{node_id}.log", "ab")
        self.procs[node_id] = subprocess.Popen(self._java("kafka.Kafka", str(self.dir / f"server-{node_id}.properties")),
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready()

    def kill_broker(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs.pop(node_id)
        p.send_signal(sig)
        p.wait(timeout=60)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Waits until every running broker is listed by every running broker."""
        want = sorted(self.procs)
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            for i, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{self.name} broker {i} exited with {p.returncode}; see {self.dir}/broker-{i}.log")
            try:
                if all(metadata_broker_ids(self.probe_addr(i)) == want for i in want):
                    return
            except (OSError, struct.error) as e:
                last = e
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready after {timeout}s (want brokers {want}; last error {last})")

    def stop(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()

    def pids(self) -> dict[int, int]:
        return {i: p.pid for i, p in self.procs.items()}


@contextmanager
def started_together(*clusters: "KafkaCluster"):
    """Starts ``clusters`` side by side (each boots while the others do), yields them once all are
    ready, and stops them all afterwards, also when starting failed."""
    try:
        for c in clusters:
            c.start(wait=False)
        for c in clusters:
            c.wait_ready()
        yield clusters
    finally:
        for c in clusters:
            c.stop()


def _stop_groups(pids: list[int], timeout: float = 30) -> None:
    """SIGTERM to each process group, then wait until every group leader is gone; SIGKILL to
    what is still running after ``timeout`` s. Returns only when none is left."""
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + timeout

    def alive(pid: int) -> bool:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return False
        try:  # an exited broker not yet reaped by its new parent is a zombie: it is gone
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True  # the leader is gone (or going) but the group may not be: the next look decides

    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.2)
    for pid in pids:
        if alive(pid):
            print(f"broker process group {pid} did not stop within {timeout:.0f}s; killing it", file=sys.stderr)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    while any(alive(p) for p in pids):
        time.sleep(0.1)


def _main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["up", "down", "jars"])
    ap.add_argument("--dir", default=os.environ.get("KMP_CLUSTER_DIR", "/tmp/kmp-clusters"))
    ap.add_argument("--source-port", type=int, default=int(os.environ.get("KMP_SOURCE_PORT", "19092")))
    ap.add_argument("--dest-port", type=int, default=int(os.environ.get("KMP_DEST_PORT", "29092")))
    args = ap.parse_args()
    state = Path(args.dir) / "clusters.json"
    if args.action == "jars":
        print(kafka_libs())
        return 0
    if args.action == "down":
        if state.exists():
            info = json.loads(state.read_text())
            _stop_groups([pid for c in info.values() for pid in c["pids"].values()])
            state.unlink()
        return 0
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    src = KafkaCluster("source", 1, args.source_port, Path(args.dir))
    dst = KafkaCluster("destination", 3, args.dest_port, Path(args.dir))
    started = time.time()
    try:
        src.start()
        dst.start()
    except BaseException:
        # Nothing is recorded for `down` yet: stop what did start rather than leave it running.
        dst.stop()
        src.stop()
        raise
    info = {c.name: {"bootstrap": c.bootstrap, "pids": c.pids(), "dir": str(c.dir)} for c in (src, dst)}
    state.write_text(json.dumps(info, indent=2))
    print(f"clusters up in {time.time() - started:.1f}s: source {src.bootstrap}, destination {dst.bootstrap}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
