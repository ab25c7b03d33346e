"""Requests that name a mirror topic by its topic id, and requests that move its replicas, must not
get through the proxy (found by a hostile review, reproduced against real brokers):

* Produce v13 names topics by id only. After a restart the proxy knew its mirror topics by name at
  once but learned their ids a moment later, so a Produce v13 sent during the restart was
  appended to a read-only mirror topic (and the partition then FAILED on the offset drift). Until
  every mirror topic's id is known, requests by an unknown id are now refused retriably
  (UNKNOWN_TOPIC_ID), and by a mirror topic's id for good (POLICY_VIOLATION, read-only mirror topic).
* DeleteTopics v6 by id, and AlterPartitionReassignments of a mirror topic, were forwarded."""

import struct
import threading
import time

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

import sec_wire as wire
from sec_support import mirror_decl, mirrored_topic, read_records, restart, running_proxy, wait_caught_up
from sec_wire import produce_v13, produce_v13_error

RECORDS = 20
UNKNOWN_TOPIC_ID = 100


def describe(bootstrap: str, topic: str):
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer is in
    return admin.describe_topics(TopicCollection([topic]))[topic].result(30)


def topic_id(bootstrap: str, topic: str) -> bytes:
    d = describe(bootstrap, topic)
    return struct.pack(">qq", d.topic_id.get_most_significant_bits(), d.topic_id.get_least_significant_bits())


def delete_topics_v6_by_id(correlation_id: int, tid: bytes) -> bytes:
    body = wire.carray([wire.cstring(None) + tid + wire.TAGS]) + wire.i32(10000) + wire.TAGS
    return wire.request(20, 6, correlation_id, body, flexible=True)


def delete_topics_v6_error(body: bytes) -> int:
    r = wire.Reader(body)
    r.i32()  # throttle
    assert r.carray_len() == 1
    r.cstring()
    r._take(16)
    return r.i16()


def reassign_v0(correlation_id: int, topic: str, replicas: list[int]) -> bytes:
    partition = wire.i32(0) + wire.carray([wire.i32(b) for b in replicas]) + wire.TAGS
    body = wire.i32(10000) + wire.carray([wire.cstring(topic) + wire.carray([partition]) + wire.TAGS]) + wire.TAGS
    return wire.request(45, 0, correlation_id, body, flexible=True)


def reassign_v0_errors(body: bytes) -> list[int]:
    r = wire.Reader(body)
    r.i32()  # throttle
    top = r.i16()
    r.cstring()
    out = [top]
    for _ in range(r.carray_len()):
        r.cstring()
        for _ in range(r.carray_len()):
            r.i32()
            out.append(r.i16())
            r.cstring()
            r.tags()
        r.tags()
    return out


@pytest.fixture(scope="module")
def mirrored(clusters, workdir):
    source, destination = clusters
    topic = mirrored_topic(source, records=RECORDS, prefix="sec-topicid")
    with running_proxy(destination, workdir, mirrors=[mirror_decl("topicid", source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)
        proxy.topic = topic
        proxy.topic_id = topic_id(destination.bootstrap, topic)
        proxy.leader = describe(destination.bootstrap, topic).partitions[0].leader.id
        yield proxy


def test_produce_by_topic_id_sent_throughout_a_proxy_restart_never_lands_in_the_mirror_topic(mirrored, clusters):
    source, destination = clusters
    batch = wire.record_batch([b"EVIL-BY-ID"])
    answers: list[int] = []
    stop = threading.Event()

    def attack():
        n = 0
        while not stop.is_set():
            n += 1
            try:
                with wire.connect("127.0.0.1", mirrored.node_port(mirrored.leader), timeout=5) as s:
                    s.sendall(produce_v13(n, mirrored.topic_id, batch))
                    answers.append(produce_v13_error(wire.read_response(s, flexible_header=True)[1]))
            except OSError:
                time.sleep(0.005)  # the listener is down while the proxy restarts

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    try:
        restart(mirrored)
        # Until the restarted proxy has learned the id and refuses it for good (bounded).
        deadline = time.time() + 30
        first = len(answers)
        while time.time() < deadline and not (len(answers) > first + 10 and answers[-1] == wire.READ_ONLY_MIRROR_TOPIC):
            time.sleep(0.1)
    finally:
        stop.set()
        attacker.join(30)
    assert answers, "no Produce v13 was answered around the restart"
    assert 0 not in answers, f"a Produce v13 by the mirror topic's id was appended: answers {sorted(set(answers))}"
    assert answers[-1] == wire.READ_ONLY_MIRROR_TOPIC, f"once the proxy runs, refused for good: answers {sorted(set(answers))}"
    wait_caught_up(source, destination, mirrored.topic, 1)
    ours = read_records(destination.bootstrap, mirrored.topic, 1)
    theirs = read_records(source.bootstrap, mirrored.topic, 1)
    assert ours == theirs, f"the mirror topic differs from the source after the restart: {ours[-3:]} vs {theirs[-3:]}"


def test_delete_topics_by_the_mirror_topics_id_is_refused(mirrored, clusters):
    _, destination = clusters
    body = wire.roundtrip("127.0.0.1", mirrored.port, delete_topics_v6_by_id(7, mirrored.topic_id), flexible_header=True)
    assert delete_topics_v6_error(body) == wire.TOPIC_AUTHORIZATION_FAILED, "DeleteTopics v6 by the mirror topic's id was not refused"
    assert topic_id(destination.bootstrap, mirrored.topic) == mirrored.topic_id, "the mirror topic is still there"


def test_reassigning_a_mirror_topics_replicas_is_refused(mirrored):
    body = wire.roundtrip("127.0.0.1", mirrored.port, reassign_v0(8, mirrored.topic, [1]), flexible_header=True)
    errors = reassign_v0_errors(body)
    assert errors[1:] == [wire.TOPIC_AUTHORIZATION_FAILED], f"AlterPartitionReassignments of a mirror topic answered {errors}"
