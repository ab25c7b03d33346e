"""Issue 11, finding 11: right after a start, before the engine has read its state topic, the proxy
does not yet know which topics are mirror topics. Requests that could write must wait (bounded)
or be refused with a retriable error until it does — never reach the broker. The proxy is
restarted again and again (2 times in the quick tier, 8 in the long) while raw producers hammer
the mirror topic's partition leader (and the bootstrap listener) through it from the moment its
ports open: no produce is ever acknowledged, and the destination holds exactly the source's
records at their offsets."""

import socket
import threading
import time
from collections import Counter

from confluent_kafka.admin import AdminClient

import sec_wire as wire
import tier
from sec_support import (
    log_excerpt,
    mirrored_topic,
    read_records,
    rest,
    running_proxy,
    unique,
    wait_caught_up,
    wait_until,
)

RESTARTS = tier.dial("proxy restarts in the start-up window", quick=2, long=8, env="KMP_STARTUP_RESTARTS")


class Hammer:
    """One thread per port: connect as soon as the port accepts, then send acks=1 Produce
    requests for ``topic``-0 back to back; slow down once they are refused (steady state)."""

    def __init__(self, ports: list[int], topic: str):
        self.topic = topic
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.codes: Counter = Counter()
        self.acknowledged: list[tuple[int, int]] = []  # (port, base offset)
        self.responses = 0
        self.batch = wire.record_batch([b"hammered-in-the-start-up-window"])
        self.threads = [threading.Thread(target=self._run, args=(p,), daemon=True) for p in ports]
        for t in self.threads:
            t.start()

    def _run(self, port: int) -> None:
        corr = 0
        while not self.stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=0.5)
            except OSError:
                time.sleep(0.001)
                continue
            try:
                s.settimeout(45)  # a held request may wait for the engine (limits.startup_write_wait_ms)
                while not self.stop.is_set():
                    corr += 1
                    s.sendall(wire.produce_v7(corr, self.topic, [0], self.batch, acks=1))
                    _, body = wire.read_response(s)
                    results = wire.parse_produce_v7(body)
                    with self.lock:
                        self.responses += 1
                        for (_t, _p), (code, base) in results.items():
                            self.codes[code] += 1
                            if code == 0:
                                self.acknowledged.append((port, base))
                    if any(code == wire.READ_ONLY_MIRROR_TOPIC for code, _ in results.values()):
                        time.sleep(0.02)
            except (OSError, ConnectionError, ValueError):
                pass
            finally:
                s.close()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def test_writes_to_a_mirror_topic_are_never_accepted_while_the_proxy_starts(clusters, workdir):
    source, destination = clusters
    topic = mirrored_topic(source, records=30, prefix="sec-window")
    name = unique("window")
    with running_proxy(destination, workdir) as proxy:
        status, body = rest(proxy, "POST", "/v1/mirrors", {"name": name, "configs": {"bootstrap.servers": source.bootstrap}})
        assert status == 201, f"creating the mirror over REST answered {status}: {body}"
        status, body = rest(proxy, "POST", f"/v1/mirrors/{name}/start", {"topics": [topic]})
        assert status == 200 and body["results"][0]["error_code"] == 0, f"starting {topic}: {status} {body}"
        wait_caught_up(source, destination, topic, 1)
        leader = AdminClient({"bootstrap.servers": destination.bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions[0].leader

        hammer = Hammer([proxy.node_port(leader), proxy.port], topic)
        try:
            for i in range(RESTARTS):
                seen = hammer.responses
                proxy.stop()
                proxy.start()
                wait_until(lambda: hammer.responses > seen, 30, f"the hammer to be answered by the proxy after restart {i + 1}")
        finally:
            hammer.finish()
        assert proxy.alive(), f"the proxy died during the restarts:\n{log_excerpt(proxy)}"
        assert hammer.responses >= RESTARTS, f"the hammer was answered only {hammer.responses} times over {RESTARTS} restarts"
        assert not hammer.acknowledged, (
            f"{len(hammer.acknowledged)} produce requests to mirror topic {topic} were acknowledged while the proxy started "
            f"(port, base offset): {hammer.acknowledged[:10]}; all answers by error code: {dict(hammer.codes)}")

        wait_caught_up(source, destination, topic, 1)
        src, dst = read_records(source.bootstrap, topic, 1), read_records(destination.bootstrap, topic, 1)
        assert dst == src, (f"the destination topic differs from its source after the restarts: {len(dst)} records vs {len(src)}; "
                            f"foreign: {[r for r in dst if r not in src][:5]}")
