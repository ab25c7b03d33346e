"""Issue 38, prefixes at any size: a source partition whose log start is at least the mirror's
``shift_prefix_from`` is not filled. The destination partition starts at offset 0 and the proxy
shows every offset of it plus the source's log start (Δ), in every API that carries one, before
and after failover; clients that reach the destination directly see it unshifted. Here Δ is a
prefix of 2·10^6 (the threshold 10^6), beside an unshifted partition of the same topic: reads at
both isolation levels, watermarks, seeks by time, consumer-group commits and their sync from the
source, and after the stop a producer continuing at the source's next offset — through
librdkafka and kafka-python clients."""

import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import ProxyProcess, unique
from mirror import call, high_watermarks, read_all, strip_fillers, wait_equal_ends
from prefix import make_prefix

PREFIX = 2_000_000
THRESHOLD = 1_000_000


def config(workdir, source, topic) -> list[str]:
    path = workdir / f"shift-{unique('cfg')}.toml"
    servers = ", ".join(f'"{s}"' for s in source.bootstrap.split(","))
    path.write_text(
        f'[[mirrors]]\nname = "shift"\nsource_bootstrap_servers = [{servers}]\ntopics = ["{topic}"]\n'
        f"shift_prefix_from = {THRESHOLD}\ngroup_offset_sync_interval_ms = 1000\n"
    )
    return ["--config", str(path)]


def produce(bootstrap: str, topic: str, partition: int, n: int, tag: str) -> list[int]:
    """``n`` records to the partition, one flush each (distinct timestamps); their offsets."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    offsets = []
    for i in range(n):
        p.produce(topic, key=f"{tag}-{i}".encode(), value=f"v-{tag}-{i}".encode(), partition=partition,
                  on_delivery=lambda err, m: offsets.append(m.offset()) if err is None else offsets.append(err))
        p.flush(30)
        time.sleep(0.002)
    assert all(isinstance(o, int) for o in offsets), f"every record delivered to {topic}-{partition}: {offsets}"
    return offsets


def committed(bootstrap: str, group: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        c.close()


def commit(bootstrap: str, group: str, topic: str, partition: int, offset: int) -> None:
    """Commits ``offset``, retrying what Kafka calls retriable (NOT_COORDINATOR and
    COORDINATOR_LOAD_IN_PROGRESS while a fresh cluster's offsets topic settles: librdkafka hands a
    synchronous commit's error back instead of retrying it)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.time() + 30
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or time.time() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        c.close()


def test_a_partition_past_the_shift_threshold_is_shifted_not_filled_and_every_client_api_shows_source_offsets(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-shift")
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    delta = make_prefix(source.bootstrap, topic, 0, PREFIX)
    assert delta >= THRESHOLD
    first = produce(source.bootstrap, topic, 0, 30, "a")
    assert first[0] == delta, f"the records follow the prefix at {delta}: {first[:3]}"
    produce(source.bootstrap, topic, 1, 20, "b")
    src_group = unique("src-group")
    commit(source.bootstrap, src_group, topic, 0, delta + 12)

    proxy = ProxyProcess(destination.bootstrap, workdir, config(workdir, source, topic)).start()
    try:
        started = time.time()
        ends = wait_equal_ends(source.bootstrap, proxy.bootstrap, topic, 2)
        took = time.time() - started
        direct = high_watermarks(destination.bootstrap, topic, 2)
        assert direct == [ends[0] - delta, ends[1]], \
            f"the destination holds partition 0 from offset 0 (unshifted {direct}, shifted ends {ends}, delta {delta}), partition 1 as the source"
        assert took < 60, f"a shifted prefix costs nothing to mirror: caught up in {took:.1f}s"

        # Reads through the proxy equal the source's, offsets included, at both isolation levels.
        for isolation in ("read_uncommitted", "read_committed"):
            src = read_all(source.bootstrap, topic, 2, isolation)
            via = strip_fillers(read_all(proxy.bootstrap, topic, 2, isolation))
            assert via == src, f"{isolation}: the proxy shows the source's records at the source's offsets ({len(via)} vs {len(src)})"

        # Watermarks and a seek by time (ListOffsets) land where they do on the source.
        c_src = Consumer({"bootstrap.servers": source.bootstrap, "group.id": unique("t")})
        c_via = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("t")})
        try:
            tp = TopicPartition(topic, 0)
            assert c_via.get_watermark_offsets(tp, timeout=10) == c_src.get_watermark_offsets(tp, timeout=10)
            records = read_all(source.bootstrap, topic, 1, "read_uncommitted")
            ts = records[15][5]
            want = c_src.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset
            got = c_via.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)[0].offset
            assert got == want == records[15][1], f"seek by time: proxy {got}, source {want}"
        finally:
            c_src.close()
            c_via.close()

        # A position below Δ is out of range, as on the source: the consumer resets to the start.
        for bootstrap in (source.bootstrap, proxy.bootstrap):
            c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("below"), "auto.offset.reset": "earliest",
                          "enable.auto.commit": False})
            try:
                c.assign([TopicPartition(topic, 0, delta - 5)])
                m, deadline = None, time.time() + 30
                while m is None and time.time() < deadline:
                    m = c.poll(1)
                assert m is not None and not m.error() and m.offset() == delta, \
                    f"via {bootstrap}: a position below the log start resets to it ({m and (m.error() or m.offset())})"
            finally:
                c.close()

        # A commit through the proxy is stored unshifted on the destination and read back shifted.
        group = unique("g")
        commit(proxy.bootstrap, group, topic, 0, delta + 7)
        assert committed(proxy.bootstrap, group, topic, 0) == delta + 7
        assert committed(destination.bootstrap, group, topic, 0) == 7, "stored in destination offsets"

        # A source group's commit is synced: through the proxy it is the source's offset.
        deadline = time.time() + 60
        while committed(proxy.bootstrap, src_group, topic, 0) != delta + 12:
            assert time.time() < deadline, f"the source group's offset synced: {committed(proxy.bootstrap, src_group, topic, 0)}"
            time.sleep(0.5)

        # kafka-python reads the same records at the same offsets.
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP
        kc = KafkaConsumer(bootstrap_servers=proxy.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
        try:
            ktp = KTP(topic, 0)
            kc.assign([ktp])
            kc.seek_to_beginning(ktp)
            got = [(m.offset, m.key) for m in kc]
        finally:
            kc.close()
        want = [(r[1], r[2]) for r in read_all(source.bootstrap, topic, 1, "read_uncommitted")]
        assert got == want, f"kafka-python through the proxy: {got[:3]}… vs {want[:3]}…"

        # Failover: after the stop a producer through the proxy continues at the source's offsets.
        status, r = call(proxy, "POST", "/v1/mirrors/shift/stop", {"topics": [topic], "graceful_timeout_ms": 30000})
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        after = produce(proxy.bootstrap, topic, 0, 3, "after")
        assert after == [ends[0], ends[0] + 1, ends[0] + 2], f"writes after the failover continue at {ends[0]}: {after}"
        via = read_all(proxy.bootstrap, topic, 1, "read_committed")
        assert [r[1] for r in via][-3:] == after and via[-1][2] == b"after-2"
        assert high_watermarks(destination.bootstrap, topic, 1) == [ends[0] - delta + 3], "unshifted on the destination"
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"
