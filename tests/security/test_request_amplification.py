"""Issue 35, N1: one small request must not take gigabytes. Before, one 8 MiB AlterConfigs frame of
2,097,143 BROKER resources named "" drove the proxy to 2,675 MiB (a 572 MiB answer); an 8 MiB
DescribeConfigs v4 of resource type 64 from a remote address to 1,691 MiB; an IncrementalAlterConfigs
setting log.retention.ms on 300,000 BROKER resources to 1,171 MiB. Under a 2 GiB memory limit the
process aborted. Now a frame decodes into at most 16× its size (kafka-protocol's decode budget),
a resource named many times is refused once, and equal refusal messages share one buffer: each
attack below is sent to a proxy started under a 2 GiB address-space limit, which must stay up,
keep its peak resident memory within a small multiple of the frame, answer (or close the
connection) quickly, and serve a real client afterwards."""

import socket
import struct
import time

import pytest

import sec_wire as wire
from sec_support import assert_alive, client_round_trip, non_loopback_ipv4, proc_status, running_proxy

ADDRESS_SPACE = 2 * 1024 * 1024 * 1024
FRAME_BYTES = 8 * 1024 * 1024
# Peak resident growth allowed for one 8 MiB frame: the decode budget (16×) plus the frame,
# its forwarded remainder and the allocator's slack; each attack took 1.1-2.6 GiB before.
GROWTH_BOUND_KB = 256 * 1024
ANSWER_BOUND = 1024 * 1024
WILDCARD = {"listener": {"advertised_host": "127.0.0.1"}}


def alter_configs_v1_brokers(count: int) -> bytes:
    """AlterConfigs v1: ``count`` BROKER resources named "" with no configs (7 bytes each)."""
    resource = wire.i8(4) + wire.string("") + wire.i32(0)
    return wire.request(33, 1, 1, wire.i32(count) + resource * count + wire.i8(0))


def describe_configs_v4_type64(count: int) -> bytes:
    """DescribeConfigs v4 (flexible): ``count`` resources of type 64 (cluster mirror) named "",
    4 bytes each."""
    resource = wire.i8(64) + wire.cstring("") + b"\x00" + wire.TAGS
    body = wire.uvarint(count + 1) + resource * count + wire.i8(0) + wire.i8(0) + wire.TAGS
    return wire.request(32, 4, 1, body, flexible=True)


def incremental_alter_log_retention(count: int) -> bytes:
    """IncrementalAlterConfigs v0: ``count`` BROKER resources named "" each setting
    log.retention.ms (a broker default of a topic config, which the proxy refuses)."""
    config = wire.string("log.retention.ms") + wire.i8(0) + wire.string("1000")
    resource = wire.i8(4) + wire.string("") + wire.i32(1) + config
    return wire.request(44, 0, 1, wire.i32(count) + resource * count + wire.i8(0))


def send_and_read(host: str, port: int, frame: bytes, timeout: float = 60) -> bytes | None:
    """Sends one frame and returns the answer's body, or None when the proxy closed the
    connection instead of answering."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(frame)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        (size,) = struct.unpack(">i", head)
        assert size <= ANSWER_BOUND, f"the proxy answered a {len(frame) >> 20} MiB request with {size} bytes (bound {ANSWER_BOUND})"
        body = b""
        while len(body) < size:
            chunk = s.recv(min(1 << 16, size - len(body)))
            assert chunk, "the proxy closed the connection in the middle of its answer"
            body += chunk
        return body


ATTACKS = {
    "alter_configs_2m_empty_broker_resources": alter_configs_v1_brokers,
    "describe_configs_v4_type_64_from_a_remote_address": describe_configs_v4_type64,
    "incremental_alter_configs_log_retention_ms": incremental_alter_log_retention,
}


@pytest.fixture(scope="module")
def limited_proxy(destination, workdir):
    with running_proxy(destination, workdir, WILDCARD, listen_host="0.0.0.0",
                       wrapper=["prlimit", f"--as={ADDRESS_SPACE}", "--"]) as proxy:
        yield proxy


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_8_mib_config_request_neither_kills_nor_bloats_the_proxy(limited_proxy, attack):
    build = ATTACKS[attack]
    per_resource = len(build(2)) - len(build(1))
    frame = build((FRAME_BYTES - 64) // per_resource)
    assert len(frame) <= FRAME_BYTES + 64, f"precondition: the {attack} frame is about 8 MiB ({len(frame)} bytes)"
    host = non_loopback_ipv4() if "remote" in attack else "127.0.0.1"
    proxy = limited_proxy
    before = proc_status(proxy.pid, "VmRSS")
    started = time.time()
    body = send_and_read(host, proxy.port, frame)
    took = time.time() - started
    assert_alive(proxy, f"after one {len(frame) >> 20} MiB {attack} frame")
    grown = proc_status(proxy.pid, "VmHWM") - before
    print(f"{attack}: {len(frame)} bytes, peak resident growth {grown // 1024} MiB, answer "
          f"{'closed' if body is None else f'{len(body)} bytes'}, {took:.2f} s")
    assert grown < GROWTH_BOUND_KB, (f"one {len(frame) >> 20} MiB {attack} frame grew the proxy's peak resident memory by "
                                     f"{grown // 1024} MiB (bound {GROWTH_BOUND_KB // 1024} MiB)")
    assert took < 30, f"the proxy took {took:.1f} s to answer or refuse one {attack} frame"
    if body is not None:
        assert len(body) < ANSWER_BOUND, f"the answer to {attack} is {len(body)} bytes"
    client_round_trip(proxy.bootstrap, f"after {attack}")
