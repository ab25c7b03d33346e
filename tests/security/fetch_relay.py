"""A relay standing in for a hostile source broker: every connection is passed through to one real
broker, Metadata answers name the relay instead of the broker (so the engine fetches through it
too), and Fetch answers (v12+, flexible) can be changed on their way back:

* ``dribble_bps``: sent at that many bytes per second (a source that dribbles its answers);
* ``shift``: every record batch's base offset moved by that much (a source relabelling its
  batches; the base offset is outside the batch CRC, so the batches stay valid);
* ``shift_from``: only batches at or after that (real) base offset are relabelled.

Only the relay's own threads run here; the test process talks to it over loopback.

``relayed_mirror`` runs a proxy mirroring a new source topic through a relay, and
``partition_status`` reads that topic's partition from the proxy's mirror status."""

from __future__ import annotations

import socket
import struct
import threading
import time
from contextlib import contextmanager

from sec_support import TcpServer, create_topic, mirror_decl, produce_values, rest, running_proxy, unique

# The relay listens on loopback, which a mirror's source may not name unless allowed.
RELAY_ENV = {"KMP_MIRROR_SOURCE_ALLOW": "127.0.0.1:*"}

FETCH, METADATA = 1, 3


def _recv_frame(sock: socket.socket) -> bytes | None:
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">i", head)
    body = bytearray()
    while len(body) < size:
        chunk = sock.recv(min(size - len(body), 1 << 20))
        if not chunk:
            return None
        body += chunk
    return head + bytes(body)


def _uvarint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def _skip_tags(buf: bytes, i: int) -> int:
    n, i = _uvarint(buf, i)
    for _ in range(n):
        _, i = _uvarint(buf, i)
        size, i = _uvarint(buf, i)
        i += size
    return i


def shift_fetch_batches(frame: bytearray, shift: int, shift_from: int, stale_marks: bool = False) -> int:
    """Moves the base offset of every batch (at or after ``shift_from``) of a flexible Fetch
    response frame (length prefix included) by ``shift``, in place; returns how many moved (with
    ``stale_marks``: how many partitions' marks were lowered). ``stale_marks`` lowers each
    partition's high watermark and last stable offset to where its last batch begins, as a broker
    that noted them just before that batch was committed answers (Kafka's ``readRecords`` reads
    the marks before it reads the log)."""
    i = 4 + 4  # length, correlation id
    i = _skip_tags(frame, i)
    i += 4 + 2 + 4  # throttle, error, session id
    topics, i = _uvarint(frame, i)
    moved = 0
    for _ in range(max(topics - 1, 0)):
        i += 16  # topic id
        parts, i = _uvarint(frame, i)
        for _ in range(max(parts - 1, 0)):
            marks = i + 4 + 2  # index, error; then high watermark, last stable, log start
            i += 4 + 2 + 8 + 8 + 8
            aborted, i = _uvarint(frame, i)
            for _ in range(max(aborted - 1, 0)):
                i += 16
                i = _skip_tags(frame, i)
            i += 4  # preferred read replica
            size, i = _uvarint(frame, i)
            end = i + max(size - 1, 0)
            j, last_base = i, None
            while j + 12 <= end:
                base, length = struct.unpack_from(">qi", frame, j)
                last_base = base
                if shift and base >= shift_from:
                    struct.pack_into(">q", frame, j, base + shift)
                    moved += 1
                j += 12 + length
            if stale_marks and last_base is not None:
                struct.pack_into(">qq", frame, marks, last_base, last_base)
                moved += 1
            i = _skip_tags(frame, end)
        i = _skip_tags(frame, i)
    return moved


class FetchRelay(TcpServer):
    def __init__(self, real_broker: str):
        host, port = real_broker.rsplit(":", 1)
        self.real = (host, int(port))
        self.dribble_bps = 0
        self.shift = 0
        self.shift_from = 0
        self.shifted_batches = 0
        self.stale_marks = False  # lower each answer's marks to its last batch (shift_fetch_batches)
        self.staled_answers = 0
        self.fetch_answers = 0
        super().__init__(self._serve)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        up = socket.create_connection(self.real, timeout=10)
        up.settimeout(None)
        asked: dict[int, tuple[int, int]] = {}
        lock = threading.Lock()

        def requests() -> None:
            try:
                while (frame := _recv_frame(conn)) is not None:
                    key, version, corr = struct.unpack_from(">hhi", frame, 4)
                    with lock:
                        asked[corr] = (key, version)
                    up.sendall(frame)
            except OSError:
                pass
            finally:
                up.close()

        threading.Thread(target=requests, daemon=True).start()
        try:
            while (frame := _recv_frame(up)) is not None:
                (corr,) = struct.unpack_from(">i", frame, 4)
                with lock:
                    key, version = asked.pop(corr, (-1, -1))
                if key == METADATA:
                    real = self.real[0].encode() + struct.pack(">i", self.real[1])
                    frame = frame.replace(real, self.real[0].encode() + struct.pack(">i", self.port))
                if key == FETCH and version >= 12:
                    with self.lock:
                        self.fetch_answers += 1
                    if self.shift:
                        out = bytearray(frame)
                        n = shift_fetch_batches(out, self.shift, self.shift_from)
                        with self.lock:
                            self.shifted_batches += n
                        frame = bytes(out)
                    if self.stale_marks:
                        out = bytearray(frame)
                        n = shift_fetch_batches(out, 0, 0, stale_marks=True)
                        with self.lock:
                            self.staled_answers += n
                        frame = bytes(out)
                    self._send(conn, frame)
                    continue
                conn.sendall(frame)
        except OSError:
            pass
        finally:
            conn.close()
            up.close()

    def _send(self, conn: socket.socket, frame: bytes) -> None:
        i = 0
        while i < len(frame):
            bps = self.dribble_bps
            if not bps:
                conn.sendall(frame[i:])
                return
            step = max(1, bps // 10)
            conn.sendall(frame[i:i + step])
            i += step
            time.sleep(0.1)


@contextmanager
def relayed_mirror(clusters, workdir, topic_prefix: str, mirror_prefix: str, values: list[bytes], shift: int = 0):
    """A new source topic holding ``values`` and a running proxy mirroring it through a
    ``FetchRelay`` (set to ``shift`` before the proxy starts); yields (proxy, relay, mirror name,
    topic). The relay is closed on the way out."""
    source, destination = clusters
    topic = unique(topic_prefix)
    create_topic(source.bootstrap, topic)
    produce_values(source.bootstrap, topic, values)
    relay = FetchRelay(source.bootstrap.split(",")[0])
    relay.shift = shift
    name = unique(mirror_prefix)
    decl = {**mirror_decl(name, source, [topic]), "source_bootstrap_servers": [relay.addr]}
    try:
        with running_proxy(destination, workdir, mirrors=[decl], env=RELAY_ENV) as proxy:
            yield proxy, relay, name, topic
    finally:
        relay.close()


def partition_status(proxy, mirror: str, topic: str) -> dict:
    """The status of partition 0 of ``topic`` in ``mirror`` ({} while it has none)."""
    status, body = rest(proxy, "GET", f"/v1/mirrors/{mirror}")
    assert status == 200, f"GET /v1/mirrors/{mirror} answered {status}: {body}"
    for t in body.get("topics", []):
        if t["topic"] == topic and t["partitions"]:
            return t["partitions"][0]
    return {}
