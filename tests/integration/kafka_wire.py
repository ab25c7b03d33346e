"""Hand-built Kafka request frames for tests that need exact control over the bytes on the wire
(pipelining, malformed frames, a long-poll Fetch in flight during shutdown)."""

from __future__ import annotations

import socket
import struct


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def request(api_key: int, version: int, correlation_id: int, body: bytes, client_id: str = "kmp-test") -> bytes:
    """A non-flexible (header v1) request frame with its length prefix."""
    payload = struct.pack(">hhi", api_key, version, correlation_id) + _str(client_id) + body
    return struct.pack(">i", len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    return request(18, 0, correlation_id, b"")


def metadata_v1_no_topics(correlation_id: int) -> bytes:
    return request(3, 1, correlation_id, struct.pack(">i", 0))


def fetch_v4(correlation_id: int, topic: str, partition: int, offset: int, max_wait_ms: int) -> bytes:
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, 1 << 20, 0)
    body += struct.pack(">i", 1) + _str(topic) + struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, 1 << 20)
    return request(1, 4, correlation_id, body)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_response(s: socket.socket) -> tuple[int, bytes]:
    """(correlation id, rest of the response) of the next response frame."""
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    data = recv_exact(s, size)
    return struct.unpack(">i", data[:4])[0], data[4:]


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    """True once the peer closes the connection (EOF or reset) within ``timeout``."""
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def fetch_v4_error_code(body: bytes) -> int:
    """Error code of the first partition in a Fetch v4 response body (after the correlation id)."""
    pos = 4 + 4  # throttle_time_ms, topic count
    (name_len,) = struct.unpack_from(">h", body, pos)
    pos += 2 + name_len + 4 + 4  # topic name, partition count, partition index
    return struct.unpack_from(">h", body, pos)[0]
