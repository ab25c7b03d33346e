"""What real clients see of a mirror topic through the proxy (issue #4 items 3 and 5):

* filler records (here: the source topic's compaction gaps — source transactions are replayed,
  not filled) are masked for Java, librdkafka, kafka-python and franz-go consumers, read_committed
  and read_uncommitted: they see exactly what the source's consumers of the same isolation level
  see (aborted transactions' records read_uncommitted, not read_committed) at the source offsets,
  and keep advancing past fillers and past a tail with no record for them (an aborted
  transaction's records and its ABORT markers: control batches, as with any Kafka broker); a
  record produced after that tail still arrives, and positions reach the end offsets;
* a Produce to a mirror topic is refused at once for each client (no retry loop), with
  POLICY_VIOLATION and a message naming the mirror (shown by the clients that show a Produce
  error message), while another topic in the same Produce request is written."""

import socket
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import kafka_wire
from conftest import ProxyProcess, unique
from compaction import create_with_compaction_gaps, fillers
from kmp_common import java_command
from mirror import high_watermarks, mirror_config, produce_plain, produce_transactions, read_all, wait_caught_up

REPO = Path(__file__).resolve().parents[2]
JAVA = REPO / "tests" / "clients" / "java" / "MirrorCheck.java"
GO_DIR = REPO / "tests" / "clients" / "go"
PARTITIONS = 2
REFUSAL_BUDGET_S = 10  # a producer that retried would take its delivery timeout (2 min by default)


@pytest.fixture(scope="module")
def go_mirror_check() -> str:
    out = subprocess.run(["go", "build", "-o", "mirror-check", "./mirrorcheck"], cwd=GO_DIR, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"go build failed:\n{out.stderr}"
    return str(GO_DIR / "mirror-check")


@pytest.fixture(scope="module")
def mirror(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-clients")
    create_with_compaction_gaps(source.bootstrap, topic, PARTITIONS)  # holes in every partition: fillers on the destination
    produce_plain(source.bootstrap, topic, 60)
    produce_transactions(source.bootstrap, topic)  # committed and aborted transactions: replayed, markers at the source offsets
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="clients")).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        held = fillers(read_all(destination.bootstrap, topic, PARTITIONS, "read_uncommitted"))
        assert {p for p, _ in held} == set(range(PARTITIONS)), \
            f"every partition of the destination holds fillers (the premise of the masking checks): {held}"
        yield source, destination, proxy, topic
    finally:
        assert proxy.stop() == 0


def abort_a_transaction_at_the_tail(bootstrap: str, topic: str) -> None:
    """Every partition then ends with an aborted transaction's records and its ABORT marker: no
    record a read_committed consumer sees, and a control batch last for every consumer."""
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tail-tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    for p in range(PARTITIONS):
        for i in range(3):
            tx.produce(topic, key=b"aborted", value=f"tail-{i}".encode(), partition=p)
    tx.flush(30)
    tx.abort_transaction(30)


def parse(lines: str) -> tuple[list[tuple], dict[int, int]]:
    records, positions = [], {}
    for line in lines.splitlines():
        f = line.split()
        if f and f[0] == "R":
            key = None if f[3] == "-" else (b"" if f[3] == "_" else bytes.fromhex(f[3]))
            value = None if f[4] == "-" else (b"" if f[4] == "_" else bytes.fromhex(f[4]))
            records.append((int(f[1]), int(f[2]), key, value))
        elif f and f[0] == "P":
            positions[int(f[1])] = int(f[2])
    return sorted(records), positions


def consume_librdkafka(bootstrap, topic, isolation, expected):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("mask"), "isolation.level": isolation, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out, deadline = [], time.time() + 60
    while len(out) < expected and time.time() < deadline:
        for m in c.consume(500, 0.2):
            if not m.error():
                out.append((m.partition(), m.offset(), m.key(), m.value()))
    positions = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in range(PARTITIONS)])}
    c.close()
    return sorted(out), positions


def consume_kafka_python(bootstrap, topic, isolation, expected):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False, group_id=None)
    tps = [KTP(topic, p) for p in range(PARTITIONS)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    out, deadline = [], time.time() + 60
    while len(out) < expected and time.time() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            out += [(r.partition, r.offset, r.key, r.value) for r in recs]
    positions = {tp.partition: c.position(tp) for tp in tps}
    c.close()
    return sorted(out), positions


def consume_subprocess(cmd: list[str]):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{cmd[0]} failed:\n{out.stderr[-3000:]}"
    return parse(out.stdout)


# Every client at read_committed in the quick tier; the read_uncommitted runs are the long
# tier's (10-15 s each; the differential seeds compare read_uncommitted in the quick tier).
@pytest.mark.parametrize("client,isolation", [
    pytest.param(client, isolation, id=f"{client}-{isolation}",
                 marks=pytest.mark.long if isolation == "read_uncommitted" else ())
    for client in ("java", "librdkafka", "kafka-python", "franz-go") for isolation in ("read_committed", "read_uncommitted")])
def test_consumers_through_the_proxy_never_see_fillers_and_advance_past_them(mirror, client, isolation, kafka_classpath, go_mirror_check):
    source, destination, proxy, topic = mirror
    abort_a_transaction_at_the_tail(source.bootstrap, topic)  # each partition now ends with aborted records and a marker
    wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
    masked_before = proxy.metric("kmp_masked_fetch_responses_total")
    expected = len(read_all(source.bootstrap, topic, PARTITIONS, isolation)) + PARTITIONS
    runs = {
        "java": lambda: consume_subprocess([*java_command(kafka_classpath, JAVA), "consume", proxy.bootstrap, topic, str(PARTITIONS), isolation, str(expected)]),
        "franz-go": lambda: consume_subprocess([go_mirror_check, "consume", proxy.bootstrap, topic, str(PARTITIONS), isolation, str(expected)]),
        "librdkafka": lambda: consume_librdkafka(proxy.bootstrap, topic, isolation, expected),
        "kafka-python": lambda: consume_kafka_python(proxy.bootstrap, topic, isolation, expected),
    }
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(runs[client])
        time.sleep(6)  # the consumer reads up to the aborted tail and keeps fetching there
        produce_plain(source.bootstrap, topic, PARTITIONS, start=10_000 + int(time.time()) % 10_000)
        records, positions = running.result(timeout=150)
    wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
    want = [(p, o, k, v) for p, o, k, v, _, _ in read_all(source.bootstrap, topic, PARTITIONS, isolation)]
    assert not [r for r in records if r[2] == b"__kmp_filler"], f"{client} saw filler records"
    assert records == want, f"{client} {isolation}: records through the proxy equal the source's {isolation} records ({len(records)} vs {len(want)})"
    ends = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    if positions:
        assert [positions[p] for p in range(PARTITIONS)] == ends, f"{client}: position advanced to the end offsets {ends}: {positions}"
    assert proxy.metric("kmp_masked_fetch_responses_total") > masked_before, "filler batches were masked in Fetch responses"


def produce_librdkafka(bootstrap, topic):
    p = Producer({"bootstrap.servers": bootstrap})
    result = {}
    t0 = time.time()
    p.produce(topic, key=b"k", value=b"v", on_delivery=lambda err, msg: result.update(err=err))
    p.flush(150)
    return time.time() - t0, result.get("err")


def produce_kafka_python(bootstrap, topic):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap)
    t0 = time.time()
    try:
        p.send(topic, key=b"k", value=b"v").get(timeout=150)
        return time.time() - t0, None
    except Exception as e:  # noqa: BLE001 - the error class is what the test checks
        return time.time() - t0, e
    finally:
        p.close()


def test_each_client_gets_a_fast_non_retriable_refusal_when_producing_to_a_mirror_topic(mirror, kafka_classpath, go_mirror_check):
    source, destination, proxy, topic = mirror
    before = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    seen = {}

    out = subprocess.run([*java_command(kafka_classpath, JAVA), "produce", proxy.bootstrap, topic], capture_output=True, text=True, timeout=200)
    line = seen["java"] = out.stdout.strip().splitlines()[-1]
    assert line.startswith("E ") and "PolicyViolationException" in line, f"java: {line}"
    assert int(line.split()[1]) < REFUSAL_BUDGET_S * 1000, f"java failed fast: {line}"
    # The Java producer shows a POLICY_VIOLATION's message (unlike TOPIC_AUTHORIZATION_FAILED's).
    assert f"topic {topic} is a read-only mirror topic of cluster mirror clients" in line and "--stop" in line, \
        f"the Java producer shows why the write was refused and how to make the topic writable: {line}"

    out = subprocess.run([go_mirror_check, "produce", proxy.bootstrap, topic], capture_output=True, text=True, timeout=200)
    line = seen["franz-go"] = out.stdout.strip().splitlines()[-1]
    assert line.startswith("E ") and "POLICY_VIOLATION" in line, f"franz-go: {line}"
    assert int(line.split()[1]) < REFUSAL_BUDGET_S * 1000, f"franz-go failed fast: {line}"

    elapsed, err = produce_librdkafka(proxy.bootstrap, topic)
    seen["librdkafka"] = str(err)
    assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, f"librdkafka: {err}"
    assert elapsed < REFUSAL_BUDGET_S, f"librdkafka failed fast ({elapsed:.1f}s)"

    elapsed, err = produce_kafka_python(proxy.bootstrap, topic)
    seen["kafka-python"] = repr(err)
    assert type(err).__name__ == "PolicyViolationError" and "read-only mirror topic of cluster mirror clients" in str(err), \
        f"kafka-python shows the refusal's message: {err!r}"
    assert elapsed < REFUSAL_BUDGET_S, f"kafka-python failed fast ({elapsed:.1f}s)"
    print("what each client shows of a refused produce:", seen)

    # Each refusal is counted for its topic and logged with the client's id and address (the
    # log at most once per topic every 10 s: the four clients within that window make one line).
    assert proxy.metric("kmp_mirror_topic_produces_refused_total", f'topic="{topic}"') >= 4, "counted per topic"
    log = proxy.log()
    lines = [l for l in log.splitlines() if "produce to a read-only mirror topic refused" in l and f"topic={topic}" in l]
    assert lines and "client_id=" in lines[0] and "peer=127.0.0.1:" in lines[0], f"the refusal is logged with client id and address: {lines[:2]}"
    assert len(lines) <= 2, f"refusals within 10 s are logged at most once (plus one at the window's end): {lines}"

    assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == before, "nothing was written to the mirror topic"
    assert proxy.metric("kmp_refused_mirror_topic_changes_total") >= 4


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def raw_batch(bootstrap: str, topic: str) -> bytes:
    """One record batch as the broker stores it (written by a non-idempotent producer)."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False})
    p.produce(topic, key=b"wire", value=b"raw", partition=0)
    assert p.flush(30) == 0
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    leader = leader_of(bootstrap, topic, 0)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    broker = admin.list_topics(timeout=10).brokers[leader]
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(kafka_wire.fetch_v4(1, topic, 0, 0, 100))
        _, body = kafka_wire.read_response(s)
    pos = 4 + 4
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + n + 4 + 4 + 2 + 8 + 8  # name, partition count, index, error, HW, LSO
    (aborted,) = struct.unpack_from(">i", body, pos)
    pos += 4 + max(aborted, 0) * 16
    (size,) = struct.unpack_from(">i", body, pos)
    return body[pos + 4:pos + 4 + size]


def produce_v8(correlation_id: int, topics: dict[str, bytes]) -> bytes:
    """A Produce v8 request (the last non-flexible version; its response has error messages)."""
    body = struct.pack(">hhi", -1, -1, 10_000) + struct.pack(">i", len(topics))
    for name, batch in topics.items():
        body += kafka_wire._str(name) + struct.pack(">i", 1) + struct.pack(">ii", 0, len(batch)) + batch
    return kafka_wire.request(0, 8, correlation_id, body)


def produce_v8_errors(body: bytes) -> dict[str, tuple[int, str | None]]:
    """topic -> (error code, error message) of partition 0 in a Produce v8 response body."""
    pos, out = 4, {}
    (topics,) = struct.unpack_from(">i", body, 0)

    def string(at: int) -> tuple[str | None, int]:
        (n,) = struct.unpack_from(">h", body, at)
        return (None, at + 2) if n < 0 else (body[at + 2:at + 2 + n].decode(), at + 2 + n)
    for _ in range(topics):
        name, pos = string(pos)
        (parts,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(parts):
            _, err = struct.unpack_from(">ih", body, pos)
            pos += 4 + 2 + 8 + 8 + 8  # index, error, base offset, log append time, log start offset
            (record_errors,) = struct.unpack_from(">i", body, pos)
            pos += 4
            for _ in range(max(record_errors, 0)):
                _, pos = string(pos + 4)
            message, pos = string(pos)
            out[name] = (err, message)
    return out


def test_another_topic_in_the_same_produce_request_is_written(mirror):
    source, destination, proxy, topic = mirror
    leader = leader_of(destination.bootstrap, topic, 0)
    other = unique("plain-beside-mirror")
    admin = AdminClient({"bootstrap.servers": destination.bootstrap})
    admin.create_topics([NewTopic(other, num_partitions=1, replica_assignment=[[leader]])])[other].result(30)
    batch = raw_batch(destination.bootstrap, other)
    before_other = high_watermarks(destination.bootstrap, other, 1)[0]
    before_mirror = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    with socket.create_connection(("127.0.0.1", proxy.node_port(leader)), timeout=10) as s:
        s.sendall(produce_v8(7, {other: batch, topic: batch}))
        cid, body = kafka_wire.read_response(s)
    assert cid == 7
    errors = produce_v8_errors(body)
    assert errors[other][0] == 0 and errors[topic][0] == 44, f"the plain topic is written, the mirror topic refused: {errors}"
    assert "read-only mirror topic of cluster mirror clients" in errors[topic][1] and "--stop" in errors[topic][1], \
        f"the message names the mirror and how to make the topic writable: {errors[topic][1]}"
    assert high_watermarks(destination.bootstrap, other, 1)[0] == before_other + 1
    assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == before_mirror


def test_admin_changes_to_a_mirror_topic_are_refused_and_other_topics_in_the_request_are_changed(mirror):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
    source, destination, proxy, topic = mirror
    other = unique("plain-admin")
    direct = AdminClient({"bootstrap.servers": destination.bootstrap})
    direct.create_topics([NewTopic(other, 1, 3)])[other].result(30)
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    before = high_watermarks(destination.bootstrap, topic, PARTITIONS)

    def error_of(fut):
        try:
            fut.result(30)
            return None
        except Exception as e:  # noqa: BLE001 - the Kafka error inside is what is checked
            return e.args[0].code() if e.args and hasattr(e.args[0], "code") else e

    assert error_of(admin.delete_topics([topic])[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert error_of(admin.create_partitions([NewPartitions(topic, PARTITIONS + 2)])[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    records = admin.delete_records([TopicPartition(topic, 0, 1)])
    assert error_of(next(iter(records.values()))) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t, incremental_configs=[ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)])
                 for t in (other, topic)]
    results = {r.name: f for r, f in admin.incremental_alter_configs(resources).items()}
    assert error_of(results[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED, "mirror topic configs are read-only"
    assert error_of(results[other]) is None, "the other topic in the same request is changed"
    # KRaft brokers apply the change from the metadata log asynchronously: wait until it shows.
    deadline, value = time.time() + 30, None
    while value != "123456" and time.time() < deadline:
        described = direct.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, other)])
        value = next(iter(described.values())).result(30)["retention.ms"].value
        time.sleep(0.2)
    assert value == "123456", f"the other topic's config was changed: retention.ms={value}"

    tx = Producer({"bootstrap.servers": proxy.bootstrap, "transactional.id": unique("mirror-tx-refused")})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, value=b"in a transaction", partition=0)
    failed = None
    try:
        tx.commit_transaction(30)
    except Exception as e:  # noqa: BLE001
        failed = e
    assert failed is not None, "a transaction writing to a mirror topic does not commit"

    meta = direct.list_topics(topic, timeout=10).topics[topic]
    assert meta.error is None and len(meta.partitions) == PARTITIONS, "the mirror topic still exists with its partitions"
    assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == before, "and its data is untouched"
    assert proxy.metric("kmp_refused_mirror_topic_changes_total") >= 4
