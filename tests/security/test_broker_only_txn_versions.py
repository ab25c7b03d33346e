"""Issue 11, finding 5: AddPartitionsToTxn v4+ is the broker-to-broker form (KIP-890). The proxy
offers clients versions up to 3 only, and a raw v4 request naming a mirror topic is not forwarded,
so a transaction commit can never write a marker into a read-only mirror topic (which would shift
the destination's offsets and fail the partition for good). Transactions of real clients on plain
topics keep working (librdkafka here; Java in tests/integration/test_java_client.py)."""

import socket
import time

from confluent_kafka import Consumer, Producer, TopicPartition

import sec_wire as wire
from sec_support import (
    create_topic,
    mirror_decl,
    mirrored_topic,
    partition_states,
    produce_values,
    running_proxy,
    unique,
    wait_caught_up,
    wait_until,
)

RETRIABLE = {14, 15, 16, 51}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


def coordinator_port(proxy, txn_id: str) -> int:
    """The proxy port of the transaction coordinator of ``txn_id`` (FindCoordinator through the proxy)."""
    def find():
        body = wire.roundtrip("127.0.0.1", proxy.port, wire.find_coordinator_v1(1, txn_id, 1))
        code, node, _host, port = wire.parse_find_coordinator_v1(body)
        assert code in (0, *RETRIABLE), f"FindCoordinator for {txn_id} through the proxy failed with {code}"
        return port if code == 0 else None
    return wait_until(find, 60, f"a transaction coordinator for {txn_id}", interval=0.3)


def init_producer(port: int, txn_id: str) -> tuple[int, int]:
    def init():
        code, pid, epoch = wire.parse_init_producer_id_v1(wire.roundtrip("127.0.0.1", port, wire.init_producer_id_v1(2, txn_id)))
        assert code in (0, *RETRIABLE), f"InitProducerId for {txn_id} through the proxy failed with {code}"
        return (pid, epoch) if code == 0 else None
    return wait_until(init, 60, f"InitProducerId for {txn_id}", interval=0.3)


def test_add_partitions_to_txn_v4_is_neither_offered_nor_forwarded_and_no_marker_reaches_a_mirror_topic(clusters, workdir):
    source, destination = clusters
    topic = mirrored_topic(source, records=25, prefix="sec-txn")
    with running_proxy(destination, workdir, mirrors=[mirror_decl("txn", source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)

        offered = wire.parse_api_versions_v0(wire.roundtrip("127.0.0.1", proxy.port, wire.api_versions_v0()))
        assert wire.ADD_PARTITIONS_TO_TXN in offered, "AddPartitionsToTxn must still be offered to clients (v0-3)"
        assert offered[wire.ADD_PARTITIONS_TO_TXN][1] == 3, (
            f"ApiVersions through the proxy offers AddPartitionsToTxn up to v{offered[wire.ADD_PARTITIONS_TO_TXN][1]}; "
            "v4+ is broker-to-broker and must not be offered (max 3)")

        txn_id = unique("sec-txn-id")
        port = coordinator_port(proxy, txn_id)
        pid, epoch = init_producer(port, txn_id)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(wire.add_partitions_to_txn_v4(3, txn_id, pid, epoch, topic, [0]))
            try:
                s.settimeout(30)
                _, body = wire.read_response(s, flexible_header=True)
                top, codes = wire.parse_add_partitions_to_txn_v4(body)
                answer = f"top-level error {top}, partition errors {codes}"
                refused = top != 0 or any(c != 0 for c in codes)
            except (ConnectionError, OSError) as e:
                answer, refused = f"connection closed ({e})", True
        assert refused, f"a raw AddPartitionsToTxn v4 adding mirror topic {topic}-0 to a transaction was forwarded and accepted: {answer}"

        # Whatever happened above, committing the transaction must not put a marker into the mirror topic.
        try:
            wire.roundtrip("127.0.0.1", port, wire.end_txn_v1(4, txn_id, pid, epoch, True))
        except (ConnectionError, OSError):
            pass
        # Markers are written after EndTxn answers; a new InitProducerId for the same id gets
        # CONCURRENT_TRANSACTIONS until they are (init_producer retries), so this waits for them.
        init_producer(port, txn_id)
        produce_values(source.bootstrap, topic, [f"after-{i}".encode() for i in range(5)])
        try:
            wait_caught_up(source, destination, topic, 1, timeout=30)
        except AssertionError as e:
            raise AssertionError(f"the mirror topic no longer follows its source (a transaction marker shifted its offsets?): {e}; "
                                 f"partition states {partition_states(proxy, 'txn', topic)}") from None
        states = partition_states(proxy, "txn", topic)
        assert "failed" not in states, f"the mirror partition failed: {states}"


def test_transactions_of_a_real_client_on_a_plain_topic_still_commit_through_the_proxy(clusters, workdir):
    _, destination = clusters
    with running_proxy(destination, workdir) as proxy:
        topic = unique("sec-txn-plain")
        create_topic(proxy.bootstrap, topic, 1, 3)
        p = Producer({"bootstrap.servers": proxy.bootstrap, "transactional.id": unique("sec-txn-client")})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=f"t{i}".encode())
        p.commit_transaction(30)
        c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("sec-txn-read"), "isolation.level": "read_committed",
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.time() + 30
        while len(got) < 5 and time.time() < deadline:
            got += [m.value() for m in c.consume(10, 0.3) if not m.error()]
        c.close()
        assert got == [f"t{i}".encode() for i in range(5)], f"a committed transaction through the proxy is read back (read_committed): {got}"
