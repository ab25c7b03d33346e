"""Client load and the verdict of the re-authentication tests (test_reauthentication.py,
test_oauthbearer.py): a producer and a consumer that check every request while brokers or the proxy
end SASL sessions, and what the proxy must show afterwards — logins renewed on open connections,
no reconnect storm, nothing broken in its log."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer

from kmp_common import ProxyProcess


class Load:
    """A producer (idempotent, acks=all) writing ``topic`` at a steady pace until stopped, every
    delivery checked; with ``group``, a consumer in that group reading it alongside."""

    def __init__(self, conf: dict, topic: str, label: str, group: str | None = None):
        self.conf, self.topic, self.label, self.group = conf, topic, label, group
        self.done = threading.Event()
        self.produced = threading.Event()  # the producer flushed: ``delivered`` is final
        self.errors: list = []
        self.delivered: set[str] = set()
        self.consumed: set[str] = set()
        self.threads = [threading.Thread(target=self._produce, daemon=True)]
        if group:
            self.threads.append(threading.Thread(target=self._consume, daemon=True))
        for t in self.threads:
            t.start()

    def _produce(self):
        p = Producer({**self.conf, "enable.idempotence": True, "acks": "all", "linger.ms": 5})

        def on_delivery(err, msg):
            if err is not None:
                self.errors.append(("produce", err))
            else:
                self.delivered.add(msg.value().decode())

        i = 0
        while not self.done.is_set():
            p.produce(self.topic, key=f"k{i % 5}", value=f"{self.label}-{i}", on_delivery=on_delivery)
            p.poll(0)
            i += 1
            time.sleep(0.01)
        try:
            if p.flush(60) != 0:
                self.errors.append(("produce", "records still undelivered 60 s after the end"))
        finally:
            self.produced.set()

    def _consume(self):
        c = Consumer({**self.conf, "group.id": self.group, "auto.offset.reset": "earliest", "enable.partition.eof": False})
        c.subscribe([self.topic])
        try:
            # Until the producer has flushed, records still in flight may be delivered after the
            # consumer caught up with what was delivered so far: only then is the set final.
            while not self.produced.is_set() or not self.delivered <= self.consumed:
                for m in c.consume(500, 0.2):
                    if m.error():
                        self.errors.append(("consume", m.error()))
                    else:
                        self.consumed.add(m.value().decode())
                if self.done.is_set() and time.time() > self.stop_at + 90:  # the flush takes at most 60 s
                    break
        finally:
            c.close()

    def stop(self):
        self.stop_at = time.time()
        self.done.set()
        for t in self.threads:
            t.join(120)


def connection_counts(proxy: ProxyProcess) -> tuple[float, float]:
    """(SASL logins renewed, broker connections opened) so far."""
    return proxy.metric("kmp_sasl_reauthentications_total"), proxy.metric("kmp_broker_connections_opened_total")


def assert_renewed_without_reconnects(proxy: ProxyProcess, load: "Load", before: tuple[float, float], after: tuple[float, float],
                                      elapsed: float, broken: tuple[str, ...], what: str) -> tuple[float, float]:
    """The clients of ``load`` saw no failed request and read all they produced, the proxy renewed
    its logins (about one per long-lived connection every 8.5 s: 85 % of 10 s) and opened at most 2
    connections — without renewal the broker closes each of them as often and every one is opened
    again — and its log has none of ``broken``. Returns (renewed, opened)."""
    assert not load.errors, f"a client request through the proxy failed: {load.errors[:3]}"
    assert load.delivered and load.delivered <= load.consumed, \
        f"every record produced through the proxy was read through it: {len(load.delivered - load.consumed)} missing"
    renewed, opened = after[0] - before[0], after[1] - before[1]
    assert opened <= 2, f"no reconnect storm ({what}): {opened} connections opened beside {renewed} renewals in {elapsed:.0f}s"
    assert renewed >= elapsed / 8.5, f"{what}: logins renewed on their connections: {renewed} renewals in {elapsed:.0f}s"
    log = proxy.log()
    for needle in broken:
        assert needle not in log, f"the proxy's log shows {needle!r}:\n" + "\n".join(l for l in log.splitlines() if needle in l)[:3000]
    return renewed, opened
