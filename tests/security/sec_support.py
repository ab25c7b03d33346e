"""Support for the security suite: proxies started with a config file (each with its own state
topic, so mirrors a test creates never reach the proxies of other tests), the machine's
non-loopback address, real-client round trips, the admin REST API, mirrored topics, and small
socket servers standing in for hostile or non-Kafka peers."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kmp_common
from kmp_common import PROXY_BIN, ProxyProcess, unique

CATCH_UP_TIMEOUT_S = 60


# ---- config files and proxies -----------------------------------------------------------------

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def config_text(sections: dict[str, dict], mirrors: list[dict] | None = None) -> str:
    out = []
    for name, values in sections.items():
        out.append(f"[{name}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        out.append("")
    for m in mirrors or []:
        out.append("[[mirrors]]")
        out += [f"{k} = {_toml_value(v)}" for k, v in m.items()]
        out.append("")
    return "\n".join(out)


def write_config(workdir: Path, sections: dict[str, dict] | None = None, mirrors: list[dict] | None = None) -> tuple[list[str], str | None]:
    """A config file with its own state topic (unless the engine is disabled or the caller names
    one); returns the ``--config`` arguments and the state topic."""
    sections = {k: dict(v) for k, v in (sections or {}).items()}
    engine = sections.setdefault("engine", {})
    state_topic = None
    if engine.get("enabled", True):
        state_topic = engine.setdefault("state_topic", f"__kmp_sec_state_{unique('s').replace('-', '_')}")
    path = Path(workdir) / f"sec-{unique('cfg')}.toml"
    path.write_text(config_text(sections, mirrors))
    return ["--config", str(path)], state_topic


def mirror_decl(name: str, source, topics: list[str]) -> dict:
    return {"name": name, "source_bootstrap_servers": source.bootstrap.split(","), "topics": topics}


@contextmanager
def running_proxy(destination, workdir, sections: dict | None = None, mirrors: list[dict] | None = None, **kwargs):
    """A proxy in front of ``destination`` with the given config sections (see write_config),
    stopped afterwards. ``kwargs`` go to ProxyProcess (listen_host, admin_host, env, wrapper)."""
    args, state_topic = write_config(workdir, sections, mirrors)
    proxy = ProxyProcess(destination.bootstrap, workdir, args, **kwargs)
    proxy.state_topic = state_topic
    proxy.config_args = args
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def scram_credentials(workdir, users: dict[str, str], mechanism: str = "SCRAM-SHA-256") -> str:
    """A `listener.auth.credentials_file` with ``users`` (name → password), made by the binary's
    `scram-credential` command."""
    blocks = []
    for user, password in users.items():
        out = subprocess.run([str(PROXY_BIN), "scram-credential", "--user", user, "--mechanism", mechanism, "--password-env", "KMP_PW"],
                             capture_output=True, text=True, timeout=30, env={**os.environ, "KMP_PW": password})
        assert out.returncode == 0, f"scram-credential --user {user} failed: {out.stderr}"
        blocks.append(out.stdout)
    path = Path(workdir) / f"{unique('users')}.toml"
    path.write_text("\n".join(blocks))
    path.chmod(0o600)
    return str(path)


def terminating_proxy(destination, workdir, users: dict[str, str], sections: dict | None = None, **auth):
    """A proxy in termination mode (SCRAM-SHA-256 and PLAIN against ``users``) with the engine
    off; ``auth`` adds `[listener.auth]` settings."""
    conf = {"mode": "terminate", "mechanisms": ["SCRAM-SHA-256", "PLAIN"], "credentials_file": scram_credentials(workdir, users), **auth}
    return running_proxy(destination, workdir, {"engine": {"enabled": False}, **(sections or {}), "listener.auth": conf})


def restart(proxy: ProxyProcess) -> ProxyProcess:
    """The same proxy (ports, config, log) started again."""
    proxy.stop()
    return proxy.start()


def stays_alive(proxy: ProxyProcess, seconds: float) -> bool:
    """Watches the process for ``seconds`` (a crash shows within milliseconds of its cause);
    False as soon as it is gone."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not proxy.alive():
            return False
        time.sleep(0.05)
    return proxy.alive()


def log_excerpt(proxy: ProxyProcess, chars: int = 2500) -> str:
    """The end of the proxy's log without backtrace frames (an abort prints dozens)."""
    lines = [ln for ln in proxy.log().splitlines() if not re.match(r"^\s+(\d+: |at )", ln)]
    return "\n".join(lines)[-chars:]


def assert_alive(proxy: ProxyProcess, what: str, watch_s: float = 0.5) -> None:
    """Fails when the proxy process is gone, or goes within ``watch_s`` (a process whose sockets
    were just closed by its crash can still look alive for a moment)."""
    assert stays_alive(proxy, watch_s), (f"the proxy process died ({what}); exit code {proxy.proc.returncode}; log:\n"
                                         f"{log_excerpt(proxy)}")


# ---- addresses --------------------------------------------------------------------------------

def non_loopback_ipv4() -> str:
    """The host's first non-loopback IPv4 address; fails the test (never skips) without one."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing address
        ip = s.getsockname()[0]
        if not ip.startswith("127."):
            return ip
    except OSError:
        pass
    finally:
        s.close()
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10).stdout.split()
    except OSError:
        out = []
    for ip in out:
        if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", ip) and not ip.startswith("127."):
            return ip
    raise AssertionError("this test needs a non-loopback IPv4 address on the machine (neither a UDP-connect probe nor "
                         "`hostname -I` found one): a connection from it is what the proxy must treat as remote")


# ---- real clients -----------------------------------------------------------------------------

def create_topic(bootstrap: str, topic: str, partitions: int = 1, rf: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf, config=config or {})])[topic].result(30)


def produce_values(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None, **conf) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 30000, **conf})
    errors = []
    for v in values:
        kw = {"partition": partition} if partition is not None else {}
        p.produce(topic, value=v, on_delivery=lambda err, _m: err and errors.append(err), **kw)
    left = p.flush(40)
    assert left == 0 and not errors, f"producing {len(values)} records to {topic} via {bootstrap}: {left} undelivered, errors {errors[:3]}"


def consume_values(bootstrap: str, topic: str, partitions: int = 1, expected: int | None = None, timeout: float = 30) -> list[bytes]:
    """Every record of ``topic`` from the beginning until ``expected`` were read or the partitions' ends."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("sec-read"), "enable.partition.eof": True,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got, eof, deadline = [], set(), time.time() + timeout
    try:
        while time.time() < deadline:
            if expected is not None and len(got) >= expected:
                break
            if expected is None and len(eof) == partitions:
                break
            for m in c.consume(500, 0.3):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise AssertionError(f"consuming {topic} via {bootstrap}: {m.error()}")
                got.append(m.value())
    finally:
        c.close()
    return got


def client_round_trip(bootstrap: str, what: str) -> None:
    """A real client (librdkafka) creates a topic, produces 20 records and reads them back."""
    topic = unique("sec-client")
    create_topic(bootstrap, topic)
    values = [f"{what}-{i}".encode() for i in range(20)]
    produce_values(bootstrap, topic, values)
    got = consume_values(bootstrap, topic, expected=len(values))
    assert got == values, f"a real client could not produce and consume through the proxy ({what}): read {len(got)} of {len(values)}"


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("sec-wm")})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    finally:
        c.close()


def read_records(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record (read_uncommitted) up to each partition's end."""
    ends = [hi for _, hi in watermarks(bootstrap, topic, partitions)]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("sec-all"), "enable.partition.eof": True,
                  "enable.auto.commit": False, "auto.offset.reset": "error", "isolation.level": "read_uncommitted"})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, done, deadline = [], {p for p in range(partitions) if ends[p] == 0}, time.time() + 60
    try:
        while len(done) < partitions and time.time() < deadline:
            for m in c.consume(1000, 0.3):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, f"reading {topic} via {bootstrap}: {m.error()}"
                    done.add(m.partition())
                    continue
                out.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    assert len(done) == partitions, f"{topic} via {bootstrap}: partitions {sorted(set(range(partitions)) - done)} not read to their end {ends}"
    return sorted(out)


def wait_caught_up(source, destination, topic: str, partitions: int, timeout: float = CATCH_UP_TIMEOUT_S) -> None:
    deadline = time.time() + timeout
    while True:
        src = [hi for _, hi in watermarks(source.bootstrap, topic, partitions)]
        try:
            dst = [hi for _, hi in watermarks(destination.bootstrap, topic, partitions)]
        except Exception:  # noqa: BLE001 - the destination topic is not created yet
            dst = None
        if src == dst:
            return
        assert time.time() < deadline, f"mirror of {topic} did not catch up within {timeout}s: source ends {src}, destination ends {dst}"
        time.sleep(0.3)


def mirrored_topic(source, partitions: int = 1, records: int = 30, prefix: str = "sec-mirrored") -> str:
    """A new source topic with ``records`` plain records (to be declared in a proxy's mirror)."""
    topic = unique(prefix)
    create_topic(source.bootstrap, topic, partitions)
    produce_values(source.bootstrap, topic, [f"r{i}".encode() for i in range(records)])
    return topic


def produce_error(bootstrap: str, topic: str, partition: int = 0) -> KafkaError | None:
    """The delivery error of one record produced through ``bootstrap`` (None: it was written)."""
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 20000})
    out = {}
    p.produce(topic, value=b"intruder", partition=partition, on_delivery=lambda err, _m: out.update(err=err))
    p.flush(30)
    assert "err" in out, f"no delivery report for a produce to {topic} via {bootstrap}"
    return out["err"]


# ---- admin REST -------------------------------------------------------------------------------

def rest(proxy: ProxyProcess, method: str, path: str, body: dict | None = None, host: str = "127.0.0.1",
         token: str | None = None, timeout: float = 60) -> tuple[int, dict | str]:
    """(status, JSON body or raw text) of one admin API call."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(f"http://{host}:{proxy.admin_port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except OSError as e:  # refused, reset, timed out: no HTTP answer at all
        return 0, f"no HTTP answer: {e}"
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def mirror_names(proxy: ProxyProcess) -> list[str]:
    status, body = rest(proxy, "GET", "/v1/mirrors")
    assert status == 200, f"GET /v1/mirrors from loopback answered {status}: {body}"
    return sorted(m["name"] for m in body["mirrors"])


def partition_states(proxy: ProxyProcess, mirror: str, topic: str) -> list[str]:
    status, body = rest(proxy, "GET", f"/v1/mirrors/{mirror}")
    assert status == 200, f"GET /v1/mirrors/{mirror} answered {status}: {body}"
    for t in body["topics"]:
        if t["topic"] == topic:
            return [p["state"] for p in sorted(t["partitions"], key=lambda p: p["partition"])]
    raise AssertionError(f"mirror {mirror} does not list topic {topic}: {body}")


def cli(proxy: ProxyProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, *args],
                          capture_output=True, text=True, timeout=120)


def metric_series(proxy: ProxyProcess, name: str) -> dict[str, float]:
    """Every series of metric ``name`` on /metrics (``{labels}`` -> value; "" for an unlabelled one).
    A labelled counter family has no series until its first increment."""
    status, text = proxy.http("/metrics")
    assert status == 200, f"/metrics answered {status} (proxy alive: {proxy.alive()})"
    out = {}
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            key, value = line.rsplit(" ", 1)
            out[key[len(name):]] = float(value)
    return out


def proc_status(pid: int, field: str) -> int:
    """A kB value of /proc/PID/status (VmRSS, VmPeak, ...)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no {field}")


# ---- socket servers standing in for other peers -------------------------------------------------

class TcpServer:
    """A listening socket on ``host`` whose connections are handed to ``handler(conn)`` in threads;
    records every accepted peer."""

    def __init__(self, handler=None, host: str = "127.0.0.1"):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.host, self.port = host, self.sock.getsockname()[1]
        self.handler = handler
        self.accepted: list[tuple[str, int]] = []
        self.closed = False
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted.append(peer)
            if self.handler:
                threading.Thread(target=self._run, args=(conn,), daemon=True).start()
            else:
                conn.close()

    def _run(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(30)
                self.handler(conn)
        except OSError:
            pass

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def http_like_handler(conn: socket.socket) -> None:
    """A non-Kafka service: whatever arrives gets an HTTP error answer (its first 4 bytes, "HTTP",
    read as a Kafka length are 1213486160)."""
    conn.recv(65536)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def closing_handler(conn: socket.socket) -> None:
    """An open port that reads the request and hangs up without a word."""
    conn.recv(65536)


class HostileBroker(TcpServer):
    """A fake Kafka broker: ApiVersions is answered sanely (relayed from a real broker), every
    Metadata request gets a response claiming 2^32-2 brokers (flexible) or 2^31-1 (classic) with a
    few bytes of garbage after the count, and anything else gets garbage. ``metadata_answers``
    counts the poisoned Metadata responses sent."""

    def __init__(self, real_broker: str):
        self.real = real_broker
        self.metadata_answers = 0
        self.requests: list[tuple[int, int]] = []
        super().__init__(self._serve)

    def _serve(self, conn: socket.socket) -> None:
        while True:
            head = conn.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return
            (size,) = struct.unpack(">i", head)
            data = b""
            while len(data) < size:
                chunk = conn.recv(size - len(data))
                if not chunk:
                    return
                data += chunk
            key, version, corr = struct.unpack_from(">hhi", data, 0)
            with self.lock:
                self.requests.append((key, version))
            if key == 18:  # ApiVersions: the real broker's answer
                with socket.create_connection(tuple(self._split(self.real)), timeout=10) as real:
                    real.sendall(head + data)
                    (n,) = struct.unpack(">i", real.recv(4, socket.MSG_WAITALL))
                    conn.sendall(struct.pack(">i", n) + real.recv(n, socket.MSG_WAITALL))
                continue
            if key == 3:
                if version >= 9:  # flexible: response header v1, throttle, compact broker count
                    body = struct.pack(">i", corr) + b"\x00" + struct.pack(">i", 0) + b"\xff\xff\xff\xff\x0f" + b"\x01" * 7
                else:
                    body = struct.pack(">i", corr) + (struct.pack(">i", 0) if version >= 3 else b"") + struct.pack(">i", 0x7FFFFFFF) + b"\x01" * 7
                conn.sendall(struct.pack(">i", len(body)) + body)
                with self.lock:
                    self.metadata_answers += 1
                continue
            body = struct.pack(">i", corr) + b"\x00" + b"\xff" * 12
            conn.sendall(struct.pack(">i", len(body)) + body)

    @staticmethod
    def _split(addr: str) -> tuple[str, int]:
        host, port = addr.rsplit(":", 1)
        return host, int(port)


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    """``kmp_common.wait_until`` with this suite's argument order."""
    return kmp_common.wait_until(what, predicate, timeout, interval)
