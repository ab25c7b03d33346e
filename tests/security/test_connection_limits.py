"""Issue 11, finding 9: connection limits and slowloris. With `max_connections_per_ip = 5` the
sixth concurrent connection from one address is closed at once and counted in
`kmp_connections_refused_total`, and a closed connection frees its slot; a connection that sent
half a frame is closed after `frame_read_timeout_ms`, an idle one after `idle_timeout_ms`, and the
admin endpoint closes an HTTP client that sends its headers too slowly
(`http_header_read_timeout_ms`). The proxy raises its soft open-file limit to the hard limit."""

import resource
import struct
import time
from pathlib import Path

import sec_wire as wire
from sec_support import metric_series, running_proxy, wait_until

REFUSED = "kmp_connections_refused_total"


def test_the_sixth_connection_from_one_address_is_closed_at_once_counted_and_a_closed_one_frees_its_slot(destination, workdir):
    with running_proxy(destination, workdir, {"limits": {"max_connections_per_ip": 5}}) as proxy:
        held = []
        try:
            for i in range(5):
                s = wire.connect("127.0.0.1", proxy.port)
                assert wire.api_versions_ok(s, i + 1), f"connection {i + 1} of 5 is served"
                held.append(s)
            refused_before = sum(metric_series(proxy, REFUSED).values())
            sixth = wire.connect("127.0.0.1", proxy.port)
            started = time.monotonic()
            try:
                sixth.sendall(wire.api_versions_v0(9))
            except OSError:
                pass
            closed = wire.closed_by_peer(sixth, timeout=5)
            sixth.close()
            assert closed, "the 6th concurrent connection from 127.0.0.1 (max_connections_per_ip = 5) was not closed within 5 s"
            assert time.monotonic() - started < 2, f"the 6th connection was closed only after {time.monotonic() - started:.1f} s, not at once"
            try:
                wait_until(lambda: sum(metric_series(proxy, REFUSED).values()) > refused_before, 5, "", interval=0.2)
            except AssertionError:
                raise AssertionError(f"{REFUSED} did not count the refused connection: {metric_series(proxy, REFUSED) or 'no series'}; "
                                     f"similar: {[k for k in proxy.http('/metrics')[1].split() if 'refused' in k]}") from None
            assert wire.api_versions_ok(held[0], 20), "the five admitted connections keep being served"

            held.pop().close()

            def sixth_admitted():
                try:
                    with wire.connect("127.0.0.1", proxy.port, timeout=3) as s:
                        return wire.api_versions_ok(s, 30)
                except (OSError, ConnectionError):
                    return False
            wait_until(sixth_admitted, 10, "a new connection to be served once one of the five closed", interval=0.2)
        finally:
            for s in held:
                s.close()


def test_a_connection_that_sent_half_a_frame_is_closed_after_the_frame_read_timeout(destination, workdir):
    with running_proxy(destination, workdir, {"limits": {"frame_read_timeout_ms": 1000}}) as proxy:
        with wire.connect("127.0.0.1", proxy.port) as s:
            frame = wire.api_versions_v0(1)
            s.sendall(struct.pack(">i", 100) + frame[4:10])  # announces 100 bytes, sends 6
            started = time.monotonic()
            closed = wire.closed_by_peer(s, timeout=8)
        assert closed, "a connection holding half a frame was still open 8 s after its first bytes (frame_read_timeout_ms = 1000)"
        assert time.monotonic() - started < 6, "closed, but far later than frame_read_timeout_ms"


def test_an_idle_connection_is_closed_after_the_idle_timeout(destination, workdir):
    with running_proxy(destination, workdir, {"limits": {"idle_timeout_ms": 1500}}) as proxy:
        with wire.connect("127.0.0.1", proxy.port) as s:
            assert wire.api_versions_ok(s), "the connection is served before it goes idle"
            closed = wire.closed_by_peer(s, timeout=8)
        assert closed, "an idle connection was still open 8 s after its last response (idle_timeout_ms = 1500)"


def test_the_admin_endpoint_closes_a_client_that_sends_its_headers_too_slowly(destination, workdir):
    with running_proxy(destination, workdir, {"limits": {"http_header_read_timeout_ms": 1000}}) as proxy:
        with wire.connect("127.0.0.1", proxy.admin_port) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: kmp\r\n")  # never the blank line that ends the headers
            closed = wire.closed_by_peer(s, timeout=8)
        assert closed, "the admin endpoint kept a connection with unfinished headers open 8 s (http_header_read_timeout_ms = 1000)"


def open_files_limits(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"/proc/{pid}/limits has no open-files line")


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit(destination, workdir):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    low = min(1024, hard // 2)
    assert low >= 64, f"precondition: the hard open-file limit ({hard}) leaves room to start the proxy with a lower soft limit"
    with running_proxy(destination, workdir, wrapper=["prlimit", f"--nofile={low}:{hard}", "--"]) as proxy:
        soft_now, hard_now = open_files_limits(proxy.pid)
        assert hard_now == hard, f"precondition: the proxy runs with the hard limit {hard} ({hard_now})"
        assert soft_now == hard_now, f"the proxy started with a soft open-file limit of {low} kept {soft_now}; it must raise it to the hard limit {hard_now}"
