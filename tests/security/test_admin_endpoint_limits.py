"""Issue 35, finding N9: unfinished HTTP requests from one remote host must not take the admin
endpoint from health probes. Before, 300 connections from one non-loopback address that never
finished their request headers held all 256 admin connections, and loopback `/healthz` failed
53 of 54 times (a liveness probe would restart the pod). Now one address holds at most
`limits.max_admin_connections_per_ip` (default 32) and non-loopback callers together leave
`limits.admin_loopback_reserve` (default 16) to loopback ones. The remote peer is simulated by
connecting from the machine's own non-loopback address to an admin endpoint bound to 0.0.0.0.
The reserve and a freed slot are checked in-process with smaller caps:
proxy/tests/admin_endpoint_limits.rs."""

import socket
import time
import urllib.error
import urllib.request
from contextlib import ExitStack

from sec_support import non_loopback_ipv4, running_proxy

HOLDERS = 300
PROBES = 50
# The holders' headers never end; the header-read timeout must not free them during the test.
HOLD_SECTIONS = {"limits": {"http_header_read_timeout_ms": 120_000}}


def hold_unfinished_requests(stack: ExitStack, source_ip: str, port: int, count: int) -> list[socket.socket]:
    """``count`` connections from ``source_ip`` to the admin port, each with request headers that
    never end (a slowloris); kept open until ``stack`` closes."""
    held = []
    for _ in range(count):
        s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        s.settimeout(5)
        s.bind((source_ip, 0))
        s.connect((source_ip, port))
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: kmp\r\n")
        except OSError:
            pass  # already closed by the proxy: refused at accept
        held.append(s)
    return held


def still_open(sockets: list[socket.socket], settle_s: float = 3.0) -> int:
    """How many of ``sockets`` the proxy has not closed after ``settle_s``."""
    time.sleep(settle_s)
    open_count = 0
    for s in sockets:
        s.setblocking(False)
        try:
            data = s.recv(1)
            if data:
                open_count += 1  # an answer would mean the request finished; count it as held
        except BlockingIOError:
            open_count += 1
        except OSError:
            pass
    return open_count


def healthz_from_loopback(port: int, path: str = "/healthz") -> tuple[int, str]:
    """The status of one loopback request (0 with the error when it failed)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError as e:
        return 0, f"{type(e).__name__}: {e}"


def probe_health(port: int) -> list[str]:
    """``PROBES`` loopback health requests (alternating /healthz and /readyz); the failures."""
    failures = []
    for i in range(PROBES):
        path = "/healthz" if i % 2 == 0 else "/readyz"
        status, why = healthz_from_loopback(port, path)
        if status != 200:
            failures.append(f"{path}: {status or why}")
    return failures


def test_300_unfinished_requests_from_one_remote_host_leave_loopback_healthz_answering(destination, workdir):
    remote = non_loopback_ipv4()
    with running_proxy(destination, workdir, HOLD_SECTIONS, admin_host="0.0.0.0") as proxy, ExitStack() as stack:
        held = hold_unfinished_requests(stack, remote, proxy.admin_port, HOLDERS)
        kept = still_open(held)
        failures = probe_health(proxy.admin_port)
        assert not failures, (
            f"loopback health probes failed {len(failures)} of {PROBES} times while {HOLDERS} unfinished requests from "
            f"{remote} were open ({kept} of them still held by the proxy): {failures[:5]}")
        assert kept <= 32, (
            f"one remote address holds at most limits.max_admin_connections_per_ip = 32 admin connections; "
            f"{kept} of {HOLDERS} unfinished requests from {remote} were still open")
        assert kept >= 16, f"the remote host's own first connections are served, not refused: only {kept} still open"
