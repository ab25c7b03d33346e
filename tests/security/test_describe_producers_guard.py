"""Issue 35, L-f: DescribeProducers on a mirror topic showed the engine's producer id and epoch —
the identity its conditional writes rely on. Through the proxy it is now refused for mirror
topics (TOPIC_AUTHORIZATION_FAILED with the mirror named; the source shows the mirrored
producers), while the other topics of the same request still reach the broker."""

import sec_wire as wire
from sec_support import create_topic, mirror_decl, mirrored_topic, running_proxy, unique, wait_caught_up

TOPIC_AUTHORIZATION_FAILED = 29


def describe_producers_v0(correlation_id: int, topics: list[str]) -> bytes:
    body = wire.carray([wire.cstring(t) + wire.carray([wire.i32(0)]) + wire.TAGS for t in topics]) + wire.TAGS
    return wire.request(61, 0, correlation_id, body, flexible=True)


def parse(body: bytes) -> dict[str, tuple[int, int]]:
    """topic -> (error code of partition 0, active producers shown)."""
    r = wire.Reader(body)
    r.i32()
    out = {}
    for _ in range(r.carray_len()):
        name = r.cstring()
        for _ in range(r.carray_len()):
            r.i32()
            code = r.i16()
            r.cstring()
            producers = r.carray_len()
            for _ in range(max(producers, 0)):
                r.i64(), r.i32(), r.i32(), r.i64(), r.i32(), r.i64(), r.tags()
            r.tags()
            out[name] = (code, producers)
        r.tags()
    return out


def test_describe_producers_of_a_mirror_topic_is_refused_and_other_topics_go_on(clusters, workdir):
    source, destination = clusters
    mirrored = mirrored_topic(source, records=10, prefix="sec-lf")
    plain = unique("sec-lf-plain")
    create_topic(destination.bootstrap, plain)
    with running_proxy(destination, workdir, mirrors=[mirror_decl("lf", source, [mirrored])]) as proxy:
        wait_caught_up(source, destination, mirrored, 1)
        body = wire.roundtrip("127.0.0.1", proxy.port, describe_producers_v0(5, [mirrored, plain]), flexible_header=True)
        got = parse(body)
        assert got.get(mirrored, (None, None))[0] == TOPIC_AUTHORIZATION_FAILED, (
            f"DescribeProducers of the mirror topic must be refused, got {got.get(mirrored)} (producers shown: the engine's identity)")
        assert got.get(mirrored)[1] == 0, "no producer of the mirror topic is shown"
        assert plain in got and got[plain][0] != TOPIC_AUTHORIZATION_FAILED, f"the other topic reached the broker: {got.get(plain)}"
