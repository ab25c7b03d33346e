"""What a connection costs the proxy in resident memory: a fleet of clients that connect, ask
ApiVersions and stay (the first thing every client does after a restart) must cost a few KiB
each, not the megabyte a streamed large response needs. Fleets come and go before the measured
one: a fresh allocation of untouched pages costs no resident memory even when it is large, but
once earlier fleets' buffers were freed the allocator hands out recycled memory and clears it,
and then a per-connection megabyte shows in the resident size (720 MiB after six fleets of
1,000 before the buffer started small)."""

import resource
import socket
import struct

import tier
from sec_support import assert_alive, proc_status, running_proxy

# Connections per fleet (below the default max_connections_per_ip, 1,000): 300 in the quick tier,
# 800 in the long; a megabyte per connection would show as 300 MiB even in the quick one.
CLIENTS = tier.dial("connections per fleet (connection memory)", quick=300, long=800, env="KMP_MEMORY_CLIENTS")
PER_CONNECTION_BOUND_KB = 128
WARM_FLEETS = 3
# ApiVersions v0, correlation id 1, client id "mem".
REQUEST = struct.pack(">hhih", 18, 0, 1, 3) + b"mem"
FRAME = struct.pack(">i", len(REQUEST)) + REQUEST


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "the proxy closed a connection in the middle of an ApiVersions answer"
        out += chunk
    return out


def fleet(port: int) -> list[socket.socket]:
    socks = []
    for _ in range(CLIENTS):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(FRAME)
        socks.append(s)
    for s in socks:
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        body = recv_exact(s, size)
        assert struct.unpack(">i", body[:4])[0] == 1, "ApiVersions answered with its correlation id"
    return socks


def test_hundreds_of_connections_that_asked_apiversions_cost_a_few_kib_each(destination, workdir):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * CLIENTS)), hard))
    with running_proxy(destination, workdir) as proxy:
        for n in range(WARM_FLEETS):
            for s in fleet(proxy.port):
                s.close()
            assert_alive(proxy, f"after fleet {n + 1} of {CLIENTS} connections came and went")
        before = proc_status(proxy.pid, "VmRSS")
        socks = fleet(proxy.port)
        try:
            assert_alive(proxy, f"with {CLIENTS} connections open")
            grown = proc_status(proxy.pid, "VmRSS") - before
        finally:
            for s in socks:
                s.close()
        assert grown < CLIENTS * PER_CONNECTION_BOUND_KB, (
            f"{CLIENTS} open connections that asked ApiVersions grew the proxy's resident memory by {grown // 1024} MiB "
            f"({grown // CLIENTS} KiB each; bound {PER_CONNECTION_BOUND_KB} KiB)")
