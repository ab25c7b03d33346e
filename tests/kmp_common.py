"""Helpers shared by the real-Kafka suites (tests/integration and tests/security): the proxy binary
as a process, free ports, dedicated clusters, unique names. The session fixtures that use them
(the two KRaft clusters, the shared proxy) live in tests/conftest.py, so both directories run
against the same brokers, started once per pytest session.

Test modules of tests/integration import these names through their conftest
(``from conftest import ProxyProcess, unique``); tests/security imports this module directly.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tests" / "harness") not in sys.path:
    sys.path.insert(0, str(REPO / "tests" / "harness"))

from kafka_cluster import KafkaCluster, classpath  # noqa: E402,F401  (classpath re-exported)

# The debug binary tests/run.sh builds: under CARGO_TARGET_DIR when that is set (as README says).
PROXY_BIN = Path(os.environ.get("KMP_PROXY_BIN", Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")).resolve() / "debug" / "kafka-mirror-proxy"))
PROXY_READY_TIMEOUT_S = 30

# SASL/PLAIN users of the session's sasl_cluster (tests/conftest.py): alice is listed as a mirror
# admin in security/test_mirror_admin_sasl.py, mallory is not; test_sasl_passthrough.py logs in as alice.
SASL_USERS = {"alice": "alice-secret", "mallory": "mallory-secret"}
# The Kafka of the session's newer_clusters: beyond the proxy's audited version table, share groups GA.
NEWER_KAFKA = os.environ.get("KMP_NEWER_KAFKA_VERSION", "4.4.0")

# API-created mirrors may only reach sources matching `security.mirror_source_allow` (empty by
# default: none). The test clusters all live on loopback, so every proxy a test starts allows them
# unless the test says otherwise (env={"KMP_MIRROR_SOURCE_ALLOW": ...}, or None to unset it).
DEFAULT_TEST_ENV = {"KMP_MIRROR_SOURCE_ALLOW": "127.0.0.1:*,localhost:*"}


def tcp_sockets(pid: int) -> list[list[str]]:
    """The /proc/net/tcp and tcp6 rows (split into fields) of the TCP sockets process ``pid`` holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    rows = (line.split() for table in ("/proc/net/tcp", "/proc/net/tcp6") for line in Path(table).read_text().splitlines()[1:])
    return [f for f in rows if f[9] in inodes]


def established(pid: int, ports: set[int]) -> int:
    """Established TCP connections of process ``pid`` to any of ``ports`` (read from /proc)."""
    return sum(1 for f in tcp_sockets(pid) if f[3] == "01" and int(f[2].rsplit(":", 1)[1], 16) in ports)  # 01 = ESTABLISHED


def wait_until(what: str, check, timeout: float, interval: float = 0.1):
    """Calls ``check`` every ``interval`` s until it returns something truthy and returns that;
    fails the test naming ``what`` (and the last value seen) after ``timeout`` s."""
    deadline = time.time() + timeout
    while True:
        last = check()
        if last:
            return last
        assert time.time() < deadline, f"{what}: not within {timeout}s (last: {last!r})"
        time.sleep(interval)


# Ports below the kernel's ephemeral range: the harness's (tests/harness/ports.py), re-exported.
from ports import free_port, free_port_block  # noqa: E402,F401


class ProxyProcess:
    """The kafka-mirror-proxy binary running in front of ``upstream``.

    ``listen_host`` / ``admin_host``: where the bootstrap (and node) listeners and the admin
    endpoint bind (``0.0.0.0`` or ``[::]`` to be reachable from a non-loopback address; tests
    still connect to 127.0.0.1). ``wrapper``: a command prefix such as ``["prlimit", "--as=..."]``
    (it must exec the proxy, so the pid is the proxy's). ``env``: added to the environment on top of
    :data:`DEFAULT_TEST_ENV`; a value of ``None`` removes that variable."""

    def __init__(self, upstream: str, workdir: Path, extra_args: list[str] | None = None, admin_host: str = "127.0.0.1", env: dict | None = None,
                 listen_host: str = "127.0.0.1", wrapper: list[str] | None = None):
        self.upstream = upstream
        self.port = free_port()
        self.node_port_base = free_port_block(16)
        self.admin_port = free_port()
        self.log_path = Path(workdir) / f"proxy-{self.port}.log"
        self.args = [*(wrapper or []), str(PROXY_BIN), "run", "--upstream", upstream, "--listen", f"{listen_host}:{self.port}",
                     "--node-port-base", str(self.node_port_base), "--admin-listen", f"{admin_host}:{self.admin_port}",
                     *(extra_args or [])]
        merged = {**DEFAULT_TEST_ENV, **os.environ, **(env or {})}
        self.env = {k: v for k, v in merged.items() if v is not None}
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "proxy not started"
        return self.proc.pid

    def node_port(self, node_id: int) -> int:
        return self.node_port_base + node_id

    def start(self) -> "ProxyProcess":
        assert PROXY_BIN.exists(), f"proxy binary {PROXY_BIN} missing: run `cargo build` first"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + PROXY_READY_TIMEOUT_S
        while time.time() < deadline:
            assert self.proc.poll() is None, f"proxy exited early with {self.proc.returncode}:\n{self.log()}"
            if self.http("/readyz")[0] == 200:
                return self
            time.sleep(0.1)
        self.proc.kill()  # never leave a proxy running behind a failed start
        self.proc.wait()
        raise TimeoutError(f"proxy not ready within {PROXY_READY_TIMEOUT_S}s:\n{self.log()}")

    def http(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str, labels: str = "") -> float:
        """Value of one metric line, e.g. metric('kmp_frame_errors_total', 'side="client"').

        A metric that is not on /metrics fails the test (AssertionError naming it and listing
        similar series that are there): a renamed or unexported metric must never read as 0."""
        value = self.metric_or_absent(name, labels)
        if value is None:
            raise AssertionError(self._missing_metric(name, labels))
        return value

    def metric_or_absent(self, name: str, labels: str = "") -> float | None:
        """Value of one metric line, or None when /metrics has no such series. Only for callers
        whose expected value is "absent" (say why at the call site); everyone else uses metric()."""
        status, text = self.http("/metrics")
        assert status == 200, f"/metrics answered {status} (proxy alive: {self.alive()})"
        key = f"{name}{{{labels}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        return None

    def _missing_metric(self, name: str, labels: str) -> str:
        import difflib
        _, text = self.http("/metrics")
        series = [line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
        names = sorted({s.split("{", 1)[0] for s in series})
        similar_names = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
        same_name = [s for s in series if s.split("{", 1)[0] == name][:10]
        key = f"{name}{{{labels}}}" if labels else name
        return (f"metric {key} is not on /metrics; "
                f"series of that name: {same_name or 'none'}; similar metric names: {similar_names or 'none'} "
                f"({len(names)} metric names exported)")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = 15, timeout: float = 60) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@contextmanager
def running_cluster(name: str, brokers: int, workdir: Path, **kwargs):
    """A dedicated cluster for one test module (ports picked free), stopped afterwards."""
    size = KafkaCluster.port_block_size(brokers, kwargs.get("sasl_users"), kwargs.get("secure"))
    cluster = KafkaCluster(name, brokers, free_port_block(size), workdir, **kwargs)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10_000_000}-{random.randrange(1000)}"


def wait_for_leader(admin, topic: str, partition: int = 0, timeout: float = 30) -> int:
    """Leader id of a freshly created partition, once metadata has it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if partition in parts and parts[partition].leader >= 0:
            return parts[partition].leader
        time.sleep(0.1)
    raise TimeoutError(f"{topic}-{partition} has no leader after {timeout}s")


def delete_topics(bootstrap: str, names, timeout: float = 60) -> list[str]:
    """Deletes ``names`` on the cluster at ``bootstrap``, ignoring ones that do not exist; returns
    a description of each deletion that failed otherwise (never raises: cleanup must not hide a
    test's own failure)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    problems = []
    try:
        futures = admin.delete_topics(list(names), operation_timeout=30, request_timeout=timeout)
    except KafkaException as e:
        return [f"{list(names)}: {e}"]
    for name, f in futures.items():
        try:
            f.result(timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                problems.append(f"{name}: {e}")
    return problems


def java_command(cp: str, source) -> list[str]:
    """``["java", "-cp", ..., Main]`` for a single-file Java program of tests/clients/java:
    compiled once with javac into target/java-classes/<name>-<hash of the source and classpath>
    instead of in source-file mode at every launch (javac costs seconds per launch on 2 cores,
    8 s measured under load against 0.5 s for the compiled class). A changed source or classpath
    gets a new directory; concurrent sessions (pytest-xdist workers) race safely (rename)."""
    import hashlib
    import shutil
    source = Path(source)
    key = hashlib.sha256(source.read_bytes() + b"\0" + cp.encode()).hexdigest()[:16]
    out = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")).resolve() / "java-classes" / f"{source.stem}-{key}"
    if not (out / f"{source.stem}.class").exists():
        tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        r = subprocess.run(["javac", "-nowarn", "-d", str(tmp), "-cp", cp, str(source)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"javac {source.name} failed:\n{r.stdout}{r.stderr[-3000:]}"
        try:
            tmp.rename(out)
        except OSError:  # another session compiled it first
            shutil.rmtree(tmp, ignore_errors=True)
    return ["java", "-cp", f"{out}:{cp}", source.stem]
