"""A mirror topic the stored state owns but the destination does not have (deleted there behind
the proxy, its source out of reach so nothing re-creates it) has no topic id yet. Two things
went wrong around such a topic (found by CI, where earlier tests leave such state behind):

* While its id was unknown, filler masking treated *every* topic read by id (Fetch v13+, which
  librdkafka uses) as one that may hold fillers, for as long as the topic stayed absent: records
  of a plain topic keyed like the engine's fillers vanished for librdkafka consumers.
* When the topic is created again, the proxy learned its id only on its id learner's next poll
  (up to 5 s later); a Produce v13 by the new id in between was appended to the read-only mirror
  topic. The proxy now learns ids from the Metadata answers it forwards, which is where a client
  gets the id from."""

import struct

from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import sec_wire as wire
from kmp_common import unique
from sec_support import mirror_decl, mirrored_topic, running_proxy, wait_caught_up, wait_until
from sec_wire import produce_v13, produce_v13_error

FILLER_KEY = b"__kmp_filler"
FILLER_HEADERS = [("kmp-filler", b"1")]


def create_direct(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer is in
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def delete_direct(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 30, f"{topic} deleted on the destination")


def describe_through(bootstrap: str, topic: str):
    """DescribeTopics through ``bootstrap``: librdkafka asks with a Metadata request."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    d = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    tid = struct.pack(">qq", d.topic_id.get_most_significant_bits(), d.topic_id.get_least_significant_bits())
    return tid, d.partitions[0].leader.id


def produce_filler_lookalikes(bootstrap: str, topic: str) -> list[tuple]:
    """One record per batch: an ordinary record, then two keyed and headed exactly like fillers."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False})
    want = [(b"k0", b"v0", []), (FILLER_KEY, None, FILLER_HEADERS), (FILLER_KEY, b"a value", [("h", b"x")]), (b"k1", None, [])]
    for key, value, headers in want:
        p.produce(topic, key=key, value=value, headers=headers, partition=0)
        p.flush(30)
    return [(i, k, v, tuple(h)) for i, (k, v, h) in enumerate(want)]


def consume_librdkafka(bootstrap: str, topic: str, expected: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("absent"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        empty = 0
        while len(got) < expected and empty < 20:
            m = c.poll(0.5)
            if m is None:
                empty += 1
                continue
            assert not m.error(), f"consume error: {m.error()}"
            got.append((m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
        # Anything beyond the expected records would be a failure too.
        m = c.poll(1.0)
        if m is not None and not m.error():
            got.append((m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
    finally:
        c.close()
    return got


def test_a_mirror_topic_absent_on_the_destination_masks_no_other_topic_and_is_protected_once_created(clusters, workdir):
    source, destination = clusters
    topic = mirrored_topic(source, records=10, prefix="sec-absent")
    mirror = "absent"
    with running_proxy(destination, workdir, mirrors=[mirror_decl(mirror, source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)
        state_topic = proxy.state_topic
    # Behind the proxy: the mirror topic is deleted, and the source is out of reach from now on.
    delete_direct(destination.bootstrap, topic)
    unreachable = {"name": mirror, "source_bootstrap_servers": ["127.0.0.1:9"], "topics": [topic]}
    with running_proxy(destination, workdir, sections={"engine": {"state_topic": state_topic}}, mirrors=[unreachable]) as proxy:
        plain = unique("sec-plain-fillerkeys")
        create_direct(destination.bootstrap, plain)
        want = produce_filler_lookalikes(destination.bootstrap, plain)
        got = consume_librdkafka(proxy.bootstrap, plain, len(want))
        assert got == want, f"a plain topic read by id through the proxy is delivered as produced:\n  want {want}\n  got  {got}"

        # The mirror topic appears again; a client learns its id through the proxy and writes by it.
        create_direct(destination.bootstrap, topic)
        tid, leader = describe_through(proxy.bootstrap, topic)
        with wire.connect("127.0.0.1", proxy.node_port(leader), timeout=10) as s:
            s.sendall(produce_v13(1, tid, wire.record_batch([b"EVIL-BY-NEW-ID"])))
            error = produce_v13_error(wire.read_response(s, flexible_header=True)[1])
        assert error == wire.READ_ONLY_MIRROR_TOPIC, \
            f"a Produce v13 by the re-created mirror topic's id answered {error}, not POLICY_VIOLATION (read-only mirror topic)"
        c = Consumer({"bootstrap.servers": destination.bootstrap, "group.id": unique("wm")})
        _, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.close()
        assert hi == 0, f"nothing was written into the re-created mirror topic (end offset {hi})"
