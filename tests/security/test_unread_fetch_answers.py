"""Issue 35, N6: consumers of mirror topics that never read their answers must not pin memory.
Fetch answers for mirror topics are read whole (fillers are masked in them); before, the write to
the client had no timeout and nothing bounded what such answers held together: 20 connections
pinned 1,324 MiB. Now answers read whole count against `limits.buffered_response_bytes` and a
client that reads nothing of an answer for `limits.client_write_timeout_ms` is disconnected, which
releases what it held; real consumers keep reading meanwhile."""

import socket
import time

import sec_wire as wire
from sec_support import (assert_alive, consume_values, create_topic, metric_series, mirror_decl, proc_status, produce_values, running_proxy,
                         unique, wait_caught_up, wait_until)

RECORDS, VALUE_BYTES = 48, 512 * 1024  # 24 MiB in one partition
STUCK = 20
RESPONSE_BUDGET = 64 * 1024 * 1024
STALL_MS = 3000


def fetch_v4_big(correlation_id: int, topic: str) -> bytes:
    """Fetch v4 of partition 0 from offset 0 with 64 MiB limits: the whole topic in one answer."""
    limit = 64 * 1024 * 1024
    body = wire.i32(-1) + wire.i32(100) + wire.i32(1) + wire.i32(limit) + wire.i8(0)
    body += wire.array([wire.string(topic) + wire.array([wire.i32(0) + wire.i64(0) + wire.i32(limit)])])
    return wire.request(1, 4, correlation_id, body)


def test_consumers_that_never_read_their_fetch_answers_pin_neither_memory_nor_the_connection(clusters, workdir):
    source, destination = clusters
    topic = unique("unread")
    create_topic(source.bootstrap, topic)
    produce_values(source.bootstrap, topic, [bytes([i % 251]) * VALUE_BYTES for i in range(RECORDS)], **{"message.max.bytes": 2 * VALUE_BYTES})
    limits = {"buffered_response_bytes": RESPONSE_BUDGET, "client_write_timeout_ms": STALL_MS}
    with running_proxy(destination, workdir, {"limits": limits}, mirrors=[mirror_decl("unread", source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)
        before = proc_status(proxy.pid, "VmRSS")
        stuck = []
        try:
            for i in range(STUCK):
                s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel keeps little on our side
                s.sendall(fetch_v4_big(i + 1, topic))
                stuck.append(s)
            time.sleep(2)
            peak = proc_status(proxy.pid, "VmHWM") - before
            assert_alive(proxy, f"with {STUCK} connections not reading their Fetch answers")
            # A real consumer is served meanwhile (it may wait for the budget, not forever).
            got = consume_values(proxy.bootstrap, topic, expected=RECORDS, timeout=60)
            assert len(got) == RECORDS, f"a reading consumer got {len(got)} of {RECORDS} records while {STUCK} others read nothing"

            def closed_for_stalling() -> bool:
                return metric_series(proxy, "kmp_connections_closed_by_limit_total").get('{reason="client_write_timeout"}', 0) >= 1
            wait_until(closed_for_stalling, 30, "connections that read nothing to be closed after client_write_timeout_ms")
        finally:
            for s in stuck:
                s.close()
        print(f"{STUCK} unread Fetch answers: peak resident growth {peak // 1024} MiB")
        bound_kb = (RESPONSE_BUDGET + 96 * 1024 * 1024) // 1024
        assert peak < bound_kb, (f"{STUCK} unread {RECORDS * VALUE_BYTES >> 20} MiB Fetch answers grew the proxy's peak memory by "
                                 f"{peak // 1024} MiB (bound: the response budget {RESPONSE_BUDGET >> 20} MiB + 96 MiB)")
