"""The mirror engine's state topic (`__kmp_mirror_state` on the destination): mirror definitions,
topic ownership and per-partition progress are stored there; a destination topic holding data the
mirror did not write is refused (never appended to) while an empty one is adopted; after a restart
the stored progress continues and a partition FAILED for a lasting reason stays FAILED."""

import json
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import ProxyProcess, unique
from mirror import (
    assert_equal, cli, create, high_watermarks, mirror_config, produce_plain, read_all, wait_caught_up, wait_for_metric_line,
    wait_for_records_metric,
)

STATE_TOPIC = "__kmp_mirror_state"


def read_state(bootstrap: str) -> dict[str, dict | None]:
    """The state topic folded by key (last value wins, None = tombstone)."""
    end = high_watermarks(bootstrap, STATE_TOPIC, 1)[0]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("state"), "enable.auto.commit": False})
    c.assign([TopicPartition(STATE_TOPIC, 0, 0)])
    out, last, deadline = {}, -1, time.time() + 30
    while last < end - 1 and time.time() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error():
                continue
            last = m.offset()
            out[m.key().decode()] = json.loads(m.value()) if m.value() is not None else None
    c.close()
    return {k: v for k, v in out.items() if v is not None}


def test_a_destination_topic_holding_data_the_mirror_did_not_write_is_refused(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-foreign")
    create(source.bootstrap, topic, 2)
    produce_plain(source.bootstrap, topic, 100)
    create(destination.bootstrap, topic, 2)
    produce_plain(destination.bootstrap, topic, 5)
    before = read_all(destination.bootstrap, topic, 2, "read_uncommitted")
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="foreign")).start()
    try:
        failed = wait_for_metric_line(proxy, "kmp_mirror_failed{", topic, " 1", 1)
        assert any('partition="-1"' in l for l in failed), f"the topic is FAILED as a whole: {failed}"
        assert "refusing to append" in proxy.log() and "this mirror did not write" in proxy.log(), "the log says why"
        time.sleep(2)
        assert read_all(destination.bootstrap, topic, 2, "read_uncommitted") == before, "nothing was appended to the foreign topic"
    finally:
        assert proxy.stop() == 0
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="foreign")).start()
    try:
        assert wait_for_metric_line(proxy, "kmp_mirror_failed{", topic, " 1", 1), "still refused after a restart (never recorded as owned)"
        assert f"topic/{topic}" not in read_state(destination.bootstrap), "a refused topic is not recorded as the mirror's"
    finally:
        assert proxy.stop() == 0


def test_an_existing_empty_destination_topic_is_adopted_and_mirrored(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-empty")
    create(source.bootstrap, topic, 2)
    produce_plain(source.bootstrap, topic, 300)
    create(destination.bootstrap, topic, 2)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="adopt")).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2})
        assert_equal(source, destination, topic, 2)
    finally:
        assert proxy.stop() == 0
    owner = read_state(destination.bootstrap).get(f"topic/{topic}")
    assert owner and owner["mirror"] == "adopt" and owner["how"] == "adopted", f"ownership recorded as adopted: {owner}"


def test_an_empty_destination_topic_with_fewer_partitions_than_the_source_is_grown_and_adopted(clusters, workdir):
    """What a proxy killed between creating a mirror topic and recording it leaves when the source
    grows meanwhile (the 200-seed run's seed 89: created with 3 partitions, the source at 4)."""
    source, destination = clusters
    topic = unique("mir-grown")
    create(source.bootstrap, topic, 4)
    produce_plain(source.bootstrap, topic, 400)
    create(destination.bootstrap, topic, 3)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="grown")).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 4})
        assert_equal(source, destination, topic, 4)
    finally:
        assert proxy.stop() == 0
    owner = read_state(destination.bootstrap).get(f"topic/{topic}")
    assert owner and owner["how"] == "adopted" and owner["partitions"] == 4, f"ownership recorded as adopted with 4 partitions: {owner}"


def test_a_destination_topic_with_fewer_partitions_holding_data_is_refused_and_not_grown(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-fewer")
    create(source.bootstrap, topic, 3)
    produce_plain(source.bootstrap, topic, 90)
    create(destination.bootstrap, topic, 2)
    produce_plain(destination.bootstrap, topic, 5)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="fewer")).start()
    try:
        failed = wait_for_metric_line(proxy, "kmp_mirror_failed{", topic, " 1", 1)
        assert any('partition="-1"' in l for l in failed), f"the topic is FAILED as a whole: {failed}"
        assert "it has 2 partitions, the source has 3" in proxy.log() and "this mirror did not write" in proxy.log(), "the log says why"
        # A script can tell: --describe shows the table and exits 1, saying why on stderr.
        code, out, err = cli(proxy, "--describe", "--mirror", "fewer")
        assert code == 1, f"--describe exits 1 while a partition has failed (exit {code}, stderr {err!r})"
        assert "1 partition(s) failed" in err and topic in out and "FAILED" in out, f"stdout:\n{out}\nstderr:\n{err}"
        assert len(high_watermarks(destination.bootstrap, topic, 2)) == 2
        admin = AdminClient({"bootstrap.servers": destination.bootstrap})
        count = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
        assert count == 2, f"a topic holding data the mirror did not write is not grown: {count} partitions"
    finally:
        assert proxy.stop() == 0


def test_state_topic_holds_definitions_ownership_and_progress_that_survive_a_restart(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-state")
    create(source.bootstrap, topic, 3)
    produce_plain(source.bootstrap, topic, 600)
    args = mirror_config(workdir, source, [topic], name="stateful")
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 3})
        assert wait_for_records_metric(proxy, "stateful", topic, 3, 600) == 600, "600 records mirrored according to the metrics"
    finally:
        assert proxy.stop() == 0, "clean stop writes the final state"
    state = read_state(destination.bootstrap)
    definition = state.get("mirror/stateful")
    assert definition and definition["origin"] == "config" and definition["definition"]["topics"] == [topic], f"definition stored: {definition}"
    assert state.get(f"topic/{topic}", {}).get("how") == "created", f"ownership stored: {state.get(f'topic/{topic}')}"
    ends = high_watermarks(destination.bootstrap, topic, 3)
    for p in range(3):
        r = state.get(f"partition/{topic}/{p}")
        assert r and r["state"] == "mirroring" and r["next_offset"] == ends[p], f"partition {p} progress stored (end {ends[p]}): {r}"
    assert sum(state[f"partition/{topic}/{p}"]["records"] for p in range(3)) == 600

    produce_plain(source.bootstrap, topic, 90, start=600)
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 3})
        assert_equal(source, destination, topic, 3)
        total = wait_for_records_metric(proxy, "stateful", topic, 3, 690)
        assert total == 690, f"counters continue from the stored state: 600 + 90, got {total}"
    finally:
        assert proxy.stop() == 0


def test_a_partition_failed_for_a_deleted_source_topic_stays_failed_after_a_restart(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-gone")
    create(source.bootstrap, topic, 2)
    produce_plain(source.bootstrap, topic, 50)
    args = mirror_config(workdir, source, [topic], name="gone")
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2})
        admin = AdminClient({"bootstrap.servers": source.bootstrap})  # kept alive until the result arrives
        admin.delete_topics([topic])[topic].result(30)
        assert len(wait_for_metric_line(proxy, "kmp_mirror_failed{", topic, " 1", 2)) == 2, "both partitions FAILED"
    finally:
        assert proxy.stop() == 0
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        failed = wait_for_metric_line(proxy, "kmp_mirror_failed{", topic, " 1", 2, timeout=30)
        assert len(failed) == 2, f"both partitions are FAILED again after the restart: {failed}"
        assert "was deleted" in proxy.log(), "with the stored reason"
    finally:
        assert proxy.stop() == 0
