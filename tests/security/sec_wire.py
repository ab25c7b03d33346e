"""Hand-built Kafka frames for the security suite: exact bytes on the wire, both the classic
encoding (request header v1, int16/int32 lengths) and the flexible one (KIP-482: request header
v2, unsigned varints, compact strings and arrays, tagged fields), a reader for responses, the
KIP-1279 mirror RPCs (API keys 94-104, v0, flexible; protocol/src/mirror_api.rs) and the hostile
frames of issue 11."""

from __future__ import annotations

import socket
import struct
import time

CLIENT_ID = "kmp-security"

# Error codes the tests look for.
NONE = 0
TOPIC_AUTHORIZATION_FAILED = 29
POLICY_VIOLATION = 44
READ_ONLY_MIRROR_TOPIC = POLICY_VIOLATION  # what a Produce to a mirror topic gets through the proxy
CLUSTER_MIRROR_AUTHORIZATION_FAILED = 144

# API keys.
PRODUCE, FETCH, METADATA = 0, 1, 3
FIND_COORDINATOR = 10
SASL_HANDSHAKE, API_VERSIONS = 17, 18
DELETE_TOPICS, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 20, 22, 24, 26
DESCRIBE_CONFIGS, ALTER_CONFIGS, SASL_AUTHENTICATE, INCREMENTAL_ALTER_CONFIGS = 32, 33, 36, 44
CREATE_CLUSTER_MIRROR, STOP_MIRROR_TOPICS, LIST_CLUSTER_MIRRORS, DELETE_CLUSTER_MIRROR = 94, 96, 98, 104

BROKER_RESOURCE, TOPIC_RESOURCE, CLUSTER_MIRROR_RESOURCE = 4, 2, 64


# ---- encoding ---------------------------------------------------------------------------------

def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def bytes_field(b: bytes) -> bytes:
    return i32(len(b)) + b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstring(s: str | None) -> bytes:
    """Compact (nullable) string."""
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


def carray(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def array(items: list[bytes]) -> bytes:
    return i32(len(items)) + b"".join(items)


TAGS = b"\x00"  # no tagged fields


def request(api_key: int, version: int, correlation_id: int, body: bytes, flexible: bool = False, client_id: str | None = CLIENT_ID) -> bytes:
    """A whole request frame: length prefix, header v1 (v2 when ``flexible``), body."""
    header = i16(api_key) + i16(version) + i32(correlation_id) + string(client_id) + (TAGS if flexible else b"")
    payload = header + body
    return i32(len(payload)) + payload


# ---- reading ----------------------------------------------------------------------------------

class Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"response truncated: need {n} bytes at {self.pos} of {len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self._take(n).decode(errors="replace")

    def bytes(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self._take(n)

    def cstring(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode(errors="replace")

    def carray_len(self) -> int:
        return self.uvarint() - 1

    def tags(self) -> None:
        self.tagged()

    def tagged(self) -> list[tuple[int, bytes]]:
        """A tagged-field section as ``(tag, value bytes)``."""
        out = []
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out.append((tag, self._take(self.uvarint())))
        return out

    def uuid(self) -> bytes:
        return self._take(16)


from integration.kafka_wire import recv_exact  # noqa: E402 - one reader for both suites


def read_response(s: socket.socket, flexible_header: bool = False) -> tuple[int, bytes]:
    """(correlation id, body) of the next response frame; ``flexible_header``: response header v1
    (a tagged-field section after the correlation id), which every flexible response except
    ApiVersions has."""
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    data = recv_exact(s, size)
    r = Reader(data)
    corr = r.i32()
    if flexible_header:
        r.tags()
    return corr, data[r.pos:]


def closed_by_peer(s: socket.socket, timeout: float = 10.0) -> bool:
    """True once the peer closes the connection (EOF or reset) within ``timeout``; data it sends
    meanwhile is read and dropped."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            s.settimeout(left)
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def connect(host: str, port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection((host, port), timeout=timeout)
    s.settimeout(timeout)
    return s


def roundtrip(host: str, port: int, frame: bytes, flexible_header: bool = False, timeout: float = 30.0) -> bytes:
    """Sends one request on a new connection and returns the response body."""
    with connect(host, port, timeout) as s:
        s.sendall(frame)
        return read_response(s, flexible_header)[1]


# ---- ApiVersions ------------------------------------------------------------------------------

def api_versions_v0(correlation_id: int = 1) -> bytes:
    return request(API_VERSIONS, 0, correlation_id, b"")


def parse_api_versions_v0(body: bytes) -> dict[int, tuple[int, int]]:
    r = Reader(body)
    err = r.i16()
    assert err == 0, f"ApiVersions error {err}"
    out = {}
    for _ in range(r.i32()):
        k, lo, hi = r.i16(), r.i16(), r.i16()
        out[k] = (lo, hi)
    return out


def api_versions_ok(s: socket.socket, correlation_id: int = 1) -> bool:
    """One ApiVersions round trip on an open connection."""
    s.sendall(api_versions_v0(correlation_id))
    corr, body = read_response(s)
    return corr == correlation_id and Reader(body).i16() == 0


# ---- KIP-1279 mirror RPCs (v0, flexible) ------------------------------------------------------

def create_cluster_mirror(correlation_id: int, name: str, configs: dict[str, str]) -> bytes:
    body = cstring(name) + carray([cstring(k) + cstring(v) + TAGS for k, v in configs.items()]) + TAGS
    return request(CREATE_CLUSTER_MIRROR, 0, correlation_id, body, flexible=True)


def delete_cluster_mirror(correlation_id: int, name: str) -> bytes:
    return request(DELETE_CLUSTER_MIRROR, 0, correlation_id, cstring(name) + i64(-1) + TAGS, flexible=True)


def stop_mirror_topics(correlation_id: int, name: str, topics: list[str]) -> bytes:
    body = cstring(name) + carray([cstring(t) + TAGS for t in topics]) + i64(-1) + TAGS
    return request(STOP_MIRROR_TOPICS, 0, correlation_id, body, flexible=True)


def list_cluster_mirrors(correlation_id: int) -> bytes:
    return request(LIST_CLUSTER_MIRRORS, 0, correlation_id, b"\x01" + TAGS, flexible=True)


def parse_simple_response(body: bytes) -> tuple[int, str | None]:
    """(error code, message) of CreateClusterMirror / DeleteClusterMirror / ListClusterMirrors."""
    r = Reader(body)
    r.i32()  # throttle
    return r.i16(), r.cstring()


def parse_topics_response(body: bytes) -> tuple[int, str | None, list[tuple[str, int, str | None]]]:
    """(error code, message, [(topic, error code, message)]) of Stop/Pause/Resume/StartMirrorTopics."""
    r = Reader(body)
    r.i32()
    code, msg = r.i16(), r.cstring()
    topics = []
    for _ in range(r.carray_len()):
        topics.append((r.cstring(), r.i16(), r.cstring()))
        r.tags()
    return code, msg, topics


# ---- config requests (non-flexible versions) --------------------------------------------------

def incremental_alter_configs_v0(correlation_id: int, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
                                 validate_only: bool = False) -> bytes:
    """IncrementalAlterConfigs v0: resources of (type, name, [(key, op, value)]); op 0 SET, 1 DELETE."""
    body = array([i8(kind) + string(name) + array([string(k) + i8(op) + string(v) for k, op, v in ops])
                  for kind, name, ops in resources])
    return request(INCREMENTAL_ALTER_CONFIGS, 0, correlation_id, body + i8(1 if validate_only else 0))


def alter_configs_v0(correlation_id: int, resources: list[tuple[int, str, list[tuple[str, str | None]]]], validate_only: bool = False) -> bytes:
    body = array([i8(kind) + string(name) + array([string(k) + string(v) for k, v in configs]) for kind, name, configs in resources])
    return request(ALTER_CONFIGS, 0, correlation_id, body + i8(1 if validate_only else 0))


def parse_alter_configs_v0(body: bytes) -> dict[tuple[int, str], tuple[int, str | None]]:
    """(type, name) -> (error code, message) of an AlterConfigs / IncrementalAlterConfigs v0 response."""
    r = Reader(body)
    r.i32()
    out = {}
    for _ in range(r.i32()):
        code, msg, kind, name = r.i16(), r.string(), r.i8(), r.string()
        out[(kind, name)] = (code, msg)
    return out


def describe_configs_v1(correlation_id: int, resources: list[tuple[int, str]]) -> bytes:
    body = array([i8(kind) + string(name) + i32(-1) for kind, name in resources])
    return request(DESCRIBE_CONFIGS, 1, correlation_id, body + i8(0))


def parse_describe_configs_v1(body: bytes) -> dict[tuple[int, str], tuple[int, dict[str, str | None]]]:
    r = Reader(body)
    r.i32()
    out = {}
    for _ in range(r.i32()):
        code, _msg, kind, name = r.i16(), r.string(), r.i8(), r.string()
        configs = {}
        for _ in range(r.i32()):
            k, v = r.string(), r.string()
            r.i8(), r.i8(), r.i8()  # read_only, config_source, is_sensitive
            for _ in range(max(r.i32(), 0)):
                r.string(), r.string(), r.i8()
            configs[k] = v
        out[(kind, name)] = (code, configs)
    return out


# ---- hostile frames (issue 11, finding 1) ------------------------------------------------------
# Each is a complete, tiny frame whose array count claims far more elements than bytes follow.

HUGE_I32 = 0x7FFFFFFF                      # 2^31 - 1 elements
HUGE_COMPACT = uvarint(0xFFFFFFFF)         # compact count 2^32 - 1, i.e. 2^32 - 2 elements


def hostile_frames() -> dict[str, bytes]:
    return {
        "DescribeConfigs v1, resource count 2^31-1": request(DESCRIBE_CONFIGS, 1, 1, i32(HUGE_I32), client_id=None),
        "DescribeConfigs v4, compact resource count 2^32-2": request(DESCRIBE_CONFIGS, 4, 1, HUGE_COMPACT, flexible=True, client_id=None),
        "IncrementalAlterConfigs v1, compact resource count 2^32-2": request(INCREMENTAL_ALTER_CONFIGS, 1, 1, HUGE_COMPACT, flexible=True, client_id=None),
        # transactional_id null, acks 1, timeout 1000 ms, then the topic count.
        "Produce v7, topic count 2^31-1": request(PRODUCE, 7, 1, string(None) + i16(1) + i32(1000) + i32(HUGE_I32), client_id=None),
        "Produce v9, compact topic count 2^32-2": request(PRODUCE, 9, 1, cstring(None) + i16(1) + i32(1000) + HUGE_COMPACT, flexible=True, client_id=None),
        "DeleteTopics v4, compact topic count 2^32-2": request(DELETE_TOPICS, 4, 1, HUGE_COMPACT, flexible=True, client_id=None),
    }


# ---- producing and transactions ----------------------------------------------------------------

def record_batch(values: list[bytes], producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 transactional: bool = False) -> bytes:
    """A magic-v2 record batch (CRC-32C and all) built by kafka-python's record builder."""
    from kafka.record.memory_records import MemoryRecordsBuilder
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, producer_id=producer_id,
                             producer_epoch=producer_epoch, base_sequence=base_sequence, transactional=transactional)
    for v in values:
        b.append(timestamp=None, key=None, value=v, headers=[])
    b.close()
    return bytes(b.buffer())


def produce_v7(correlation_id: int, topic: str, partitions: list[int], batch: bytes, acks: int = -1, timeout_ms: int = 10000) -> bytes:
    body = string(None) + i16(acks) + i32(timeout_ms)
    body += array([string(topic) + array([i32(p) + bytes_field(batch) for p in partitions])])
    return request(PRODUCE, 7, correlation_id, body)


def parse_produce_v7(body: bytes) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (error code, base offset)."""
    r = Reader(body)
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p, code, base = r.i32(), r.i16(), r.i64()
            r.i64(), r.i64()  # log append time, log start offset
            out[(name, p)] = (code, base)
    return out


def find_coordinator_v1(correlation_id: int, key: str, key_type: int) -> bytes:
    return request(FIND_COORDINATOR, 1, correlation_id, string(key) + i8(key_type))


def parse_find_coordinator_v1(body: bytes) -> tuple[int, int, str, int]:
    """(error code, node id, host, port)."""
    r = Reader(body)
    r.i32()
    code, _msg = r.i16(), r.string()
    return code, r.i32(), r.string(), r.i32()


def init_producer_id_v1(correlation_id: int, transactional_id: str, timeout_ms: int = 60000) -> bytes:
    return request(INIT_PRODUCER_ID, 1, correlation_id, string(transactional_id) + i32(timeout_ms))


def parse_init_producer_id_v1(body: bytes) -> tuple[int, int, int]:
    """(error code, producer id, epoch)."""
    r = Reader(body)
    r.i32()
    return r.i16(), r.i64(), r.i16()


def add_partitions_to_txn_v4(correlation_id: int, transactional_id: str, producer_id: int, epoch: int, topic: str, partitions: list[int]) -> bytes:
    """The broker-to-broker form (v4+, KIP-890): a batch of transactions, each with verify_only."""
    topics = carray([cstring(topic) + uvarint(len(partitions) + 1) + b"".join(i32(p) for p in partitions) + TAGS])
    txn = cstring(transactional_id) + i64(producer_id) + i16(epoch) + i8(0) + topics + TAGS
    return request(ADD_PARTITIONS_TO_TXN, 4, correlation_id, carray([txn]) + TAGS, flexible=True)


def parse_add_partitions_to_txn_v4(body: bytes) -> tuple[int, list[int]]:
    """(top-level error code, every partition error code)."""
    r = Reader(body)
    r.i32()
    top = r.i16()
    codes = []
    for _ in range(r.carray_len()):
        r.cstring()
        for _ in range(r.carray_len()):
            r.cstring()
            for _ in range(r.carray_len()):
                r.i32()
                codes.append(r.i16())
                r.tags()
            r.tags()
        r.tags()
    return top, codes


def end_txn_v1(correlation_id: int, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> bytes:
    return request(END_TXN, 1, correlation_id, string(transactional_id) + i64(producer_id) + i16(epoch) + i8(1 if commit else 0))


def parse_end_txn_v1(body: bytes) -> int:
    r = Reader(body)
    r.i32()
    return r.i16()


# ---- Fetch, SASL ------------------------------------------------------------------------------

def fetch_v4(correlation_id: int, topic: str, partitions: list[int], offset: int = 0, max_wait_ms: int = 100) -> bytes:
    body = i32(-1) + i32(max_wait_ms) + i32(1) + i32(1 << 20) + i8(0)
    body += array([string(topic) + array([i32(p) + i64(offset) + i32(1 << 20) for p in partitions])])
    return request(FETCH, 4, correlation_id, body)


def parse_fetch_v4(body: bytes) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (error code, bytes of records)."""
    r = Reader(body)
    r.i32()
    out = {}
    for _ in range(r.i32()):
        name = r.string()
        for _ in range(r.i32()):
            p, code = r.i32(), r.i16()
            r.i64(), r.i64()  # high watermark, last stable offset
            n_aborted = r.i32()
            for _ in range(max(n_aborted, 0)):
                r.i64(), r.i64()
            records = r.bytes()
            out[(name, p)] = (code, len(records or b""))
    return out


def sasl_handshake_v1(correlation_id: int, mechanism: str = "PLAIN") -> bytes:
    return request(SASL_HANDSHAKE, 1, correlation_id, string(mechanism))


def sasl_authenticate_v1(correlation_id: int, user: str, password: str) -> bytes:
    return request(SASL_AUTHENTICATE, 1, correlation_id, bytes_field(f"\0{user}\0{password}".encode()))


def parse_error_first(body: bytes) -> int:
    """Error code of responses whose body starts with it (SaslHandshake, SaslAuthenticate)."""
    return Reader(body).i16()


# ---- Produce v13 by topic id (test_topic_id_guard.py, test_absent_mirror_topic.py) ----------

def produce_v13(correlation_id: int, tid: bytes, batch: bytes) -> bytes:
    partition = i32(0) + uvarint(len(batch) + 1) + batch + TAGS
    body = uvarint(0) + i16(-1) + i32(10000)  # no transactional id, acks=all
    body += carray([tid + carray([partition]) + TAGS]) + TAGS
    return request(0, 13, correlation_id, body, flexible=True)


def produce_v13_error(body: bytes) -> int:
    r = Reader(body)
    assert r.carray_len() == 1, "one topic answered"
    r._take(16)  # topic id
    assert r.carray_len() == 1, "one partition answered"
    r.i32()
    return r.i16()
