"""Issue 11, finding 1: a 21-33-byte frame whose array count claims billions of elements, sent as
the first bytes of a fresh connection (no ApiVersions, no SASL: anyone who can reach the port),
must cost the sender its connection, never the proxy its process. Each frame goes to a proxy that
mirrors a topic, so every request type the proxy decodes for mirroring is really decoded."""

import socket

import pytest

import sec_wire as wire
from sec_support import assert_alive, client_round_trip, mirror_decl, mirrored_topic, running_proxy, wait_caught_up

FRAMES = wire.hostile_frames()


@pytest.fixture(scope="module")
def mirroring_proxy(clusters, workdir):
    source, destination = clusters
    topic = mirrored_topic(source, records=10, prefix="sec-frames")
    with running_proxy(destination, workdir, mirrors=[mirror_decl("frames", source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)
        yield proxy


@pytest.mark.parametrize("name", list(FRAMES))
def test_a_tiny_frame_with_a_huge_array_count_closes_only_its_connection(mirroring_proxy, name):
    proxy = mirroring_proxy
    if not proxy.alive():  # an earlier frame killed it (today's behaviour): judge this frame on its own
        proxy.start()
    frame = FRAMES[name]
    assert len(frame) <= 40, f"the attack frame is tiny ({len(frame)} bytes)"
    errors_before = proxy.metric("kmp_frame_errors_total", 'side="client"')

    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(frame)
        closed = wire.closed_by_peer(s, timeout=10)
    assert_alive(proxy, f"after one {len(frame)}-byte frame: {name}")
    assert closed, f"the connection that sent '{name}' was not closed within 10 s"
    errors_after = proxy.metric("kmp_frame_errors_total", 'side="client"')
    assert errors_after > errors_before, f"kmp_frame_errors_total{{side=\"client\"}} did not count '{name}' ({errors_before} -> {errors_after})"

    client_round_trip(proxy.bootstrap, "after a hostile frame")
    assert_alive(proxy, f"after a client round trip following '{name}'")
