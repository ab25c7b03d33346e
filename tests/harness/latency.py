"""A latency-injecting TCP relay between a client and a cluster's WAN listener: Shopify's toxiproxy
(built by tests/harness/toxiproxy.sh) with one proxy per broker, from the broker's advertised WAN
address to its bound WAN listener (see ``KafkaCluster(wan=True)``). :meth:`LatencyRelay.set_rtt`
adds half the round trip to each direction (toxiproxy's ``latency`` toxic delays every chunk by
that much after it was read, so data streams through, delayed, instead of waiting chunk by chunk).

    with LatencyRelay(cluster, workdir) as relay:
        relay.set_rtt(100)            # milliseconds; 0 removes the toxics (still relayed)
        ... clients bootstrap from cluster.wan_bootstrap ...
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from kafka_cluster import recv_exact
from ports import free_port

HARNESS = Path(__file__).resolve().parent


class LatencyRelay:
    def __init__(self, cluster, workdir: Path):
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.api_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.rtt_ms = 0

    def _call(self, method: str, path: str, body: dict | None = None) -> object:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read()
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return text.decode(errors="replace")  # /version answers plain text

    def start(self) -> "LatencyRelay":
        binary = subprocess.run([str(HARNESS / "toxiproxy.sh")], capture_output=True, text=True, check=True).stdout.strip()
        log = open(self.workdir / f"toxiproxy-{self.api_port}.log", "wb")
        self.proc = subprocess.Popen([binary, "-host", "127.0.0.1", "-port", str(self.api_port)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                self._call("GET", "/version")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"toxiproxy did not start (exit {self.proc.poll()}); see {log.name}")
                time.sleep(0.1)
        for node in range(1, self.cluster.n + 1):
            self._call("POST", "/proxies", {"name": f"broker-{node}", "listen": self.cluster.wan_addr(node),
                                            "upstream": self.cluster.wan_bind(node), "enabled": True})
        return self

    def set_rtt(self, rtt_ms: int) -> None:
        """Every broker's relay delays each direction by ``rtt_ms / 2`` from now on (0: no delay)."""
        for node in range(1, self.cluster.n + 1):
            for stream in ("upstream", "downstream"):
                name = f"latency-{stream}"
                try:
                    self._call("DELETE", f"/proxies/broker-{node}/toxics/{name}")
                except urllib.error.HTTPError as e:
                    if e.code != 404:
                        raise
                if rtt_ms > 0:
                    self._call("POST", f"/proxies/broker-{node}/toxics",
                               {"name": name, "type": "latency", "stream": stream, "toxicity": 1.0,
                                "attributes": {"latency": rtt_ms // 2, "jitter": 0}})
        self.rtt_ms = rtt_ms

    def measured_rtt_ms(self) -> float:
        """Median time of a TCP round trip (a Kafka ApiVersions request) through broker 1's relay."""
        host, port = self.cluster.wan_addr(1).rsplit(":", 1)
        request = bytes.fromhex("0000000e" "0012" "0000" "00000007" "0004" "6b6d7070")  # ApiVersions v0, client "kmpp"
        times = []
        with socket.create_connection((host, int(port)), timeout=10) as s:
            for _ in range(5):
                t = time.perf_counter()
                s.sendall(request)
                size = int.from_bytes(recv_exact(s, 4), "big")
                recv_exact(s, size)
                times.append((time.perf_counter() - t) * 1000)
        return sorted(times)[len(times) // 2]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "LatencyRelay":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

