"""Issue 35, N10: idle connections must not exhaust the proxy's descriptors. Before, every client
connection opened a broker connection at accept (in termination mode before authentication too),
so 11,000 idle connections took the 20,000 descriptors before `max_connections` applied, and
`/healthz` and producing failed. Now the broker connection is opened on the first request that
is forwarded, a terminating proxy answers an unauthenticated ApiVersions from its kept answers
without one, and `max_connections` is lowered to what the open-file limit carries (two
descriptors a connection) so it refuses connections first."""

import os
import resource
import socket

import sec_wire as wire
from sec_support import client_round_trip, metric_series, running_proxy, terminating_proxy, wait_until

FD_LIMIT = 3000
IDLE = 1500  # more than the 1,116 connections 3,000 descriptors carry


def sockets(pid: int) -> int:
    """Sockets the process holds open."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:
            pass
    return n


def raise_own_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= need, f"precondition: the test process may open {need} descriptors (hard limit {hard})"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))


def test_idle_connections_hold_no_broker_connection_and_the_connection_limit_trips_before_descriptors_run_out(destination, workdir):
    raise_own_fd_limit(IDLE + 500)
    with running_proxy(destination, workdir, {"limits": {"max_connections_per_ip": 100_000}},
                       wrapper=["prlimit", f"--nofile={FD_LIMIT}:{FD_LIMIT}", "--"]) as proxy:
        before = sockets(proxy.pid)
        held: list[socket.socket] = []
        try:
            for _ in range(IDLE):
                try:
                    held.append(socket.create_connection(("127.0.0.1", proxy.port), timeout=5))
                except OSError:
                    break
            status, _ = proxy.http("/healthz")
            assert status == 200, f"/healthz answered {status} with {len(held)} idle client connections open"
            grown = sockets(proxy.pid) - before
            assert grown < IDLE, f"{IDLE} idle connections grew the proxy's sockets by {grown}: broker connections were opened for them"
            wait_until(lambda: metric_series(proxy, "kmp_connections_refused_total"), 10,
                       "connections beyond what the descriptors carry to be refused and counted")
        finally:
            for s in held:
                s.close()
        client_round_trip(proxy.bootstrap, "after the idle connections closed")
        assert "limits.max_connections lowered" in proxy.log(), "the proxy says it lowered max_connections to what 3,000 descriptors carry"


def test_an_unauthenticated_client_of_a_terminating_proxy_opens_no_broker_connection(destination, workdir):
    with terminating_proxy(destination, workdir, {"alice": "alice-pw-123"}) as proxy:
        # The first ApiVersions ever is forwarded (nothing is kept yet); its answer is kept and
        # answers the next connections' (upstream.api_versions_cache_ms).
        with wire.connect("127.0.0.1", proxy.port) as first:
            assert wire.api_versions_ok(first, 1), "the first ApiVersions is answered"
        before = sockets(proxy.pid)
        held = []
        try:
            for i in range(50):
                s = wire.connect("127.0.0.1", proxy.port)
                assert wire.api_versions_ok(s, i + 2), "ApiVersions is answered before authentication"
                held.append(s)
            grown = sockets(proxy.pid) - before
        finally:
            for s in held:
                s.close()
        assert grown <= 55, f"50 unauthenticated connections that asked ApiVersions grew the proxy's sockets by {grown}, not ~50"
