"""Issue 38, part 1: a source partition whose log starts far from 0 (a topic that ran for years
under retention). Every offset below the source's log start becomes a filler on the destination
so that records keep their offsets; the engine writes a long prefix as zstd batches of 100,000
fillers and deletes it from the destination every few seconds while it goes, and the proxy shows
consumers none of it. The quick tier uses a 3·10^7-offset prefix, the long tier 10^9
(KMP_PREFIX_OFFSETS overrides; the suite runs the debug build on a 3-broker destination beside
the other suite, where a consumer reading through the proxy during the fill makes the proxy check
every compressed filler batch, so the long tier's test may take up to 40 minutes);
bench/prefix_bench.py measures 10^7..10^9 with the release build."""

import re
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import tier
from conftest import unique
from mirror import assert_equal, mirroring_proxy, produce_plain, read_all, wait_caught_up
from prefix import make_prefix

PREFIX = tier.dial("retention prefix of the prefix test (offsets)", 30_000_000, 1_000_000_000, "KMP_PREFIX_OFFSETS")
# The fill of the long tier's 10^9 prefix with the debug build, beside the other suite.
FILL_LIMIT_S = 2100
# Segments roll every 16 MiB (copied to the destination with the topic's configs), so what the
# fill deletes leaves the destination's disk as it goes (the harness checks retention every second).
SEGMENT_BYTES = 16 * 1024 * 1024
# A filler is about 34 bytes uncompressed: the whole prefix uncompressed would be PREFIX * 34.
UNCOMPRESSED_FILLER_BYTES = 34


def partition_bytes(cluster, topic: str) -> int:
    """Bytes of the partition's log on the broker holding the most of it (all replicas alike)."""
    sizes = []
    for data in Path(cluster.dir).glob("data-*"):
        d = data / f"{topic}-0"
        sizes.append(sum(f.stat().st_size for f in d.glob("*") if f.is_file()) if d.is_dir() else 0)
    return max(sizes, default=0)


def deletions(cluster, topic: str) -> list[int]:
    """The offsets the partition's log start was moved to by DeleteRecords, from the brokers' logs
    (the leader logs each request it applies)."""
    pattern = re.compile(rf"partition={re.escape(topic)}-0, .*Incremented log start offset to (\d+) due to client delete records request")
    found = set()
    for log in Path(cluster.dir).glob("broker-*.log"):
        with open(log, errors="replace") as f:
            found.update(int(m.group(1)) for line in f if (m := pattern.search(line)))
    return sorted(found)


def low_watermark(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("lw")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        c.close()


@pytest.mark.long  # a 10^8-offset fill (67 s); the quick tier fills small prefixes (test_mirror_faults) and shifts large ones (test_mirror_offset_shift)
@pytest.mark.timeout(2400)
def test_a_long_retention_prefix_is_filled_compressed_deleted_as_it_goes_and_never_shown_to_consumers(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-long-prefix")
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": str(SEGMENT_BYTES)})])[topic].result(30)
    started = time.time()
    log_start = make_prefix(source.bootstrap, topic, 0, PREFIX)
    print(f"\nsource prefix of {log_start:,} offsets made in {time.time() - started:.1f}s")
    produce_plain(source.bootstrap, topic, 10)
    expected = read_all(source.bootstrap, topic, 1, "read_uncommitted")
    assert [r[1] for r in expected] == list(range(log_start, log_start + 10)), "the 10 records follow the prefix"

    # Filled, not shifted (shift_prefix_from is 10^9 by default; test_mirror_offset_shift covers shifts).
    with mirroring_proxy(source, destination, workdir, [topic], extra="shift_prefix_from = 9223372036854775807\n") as proxy:
        # A consumer through the proxy from the earliest offset while the prefix is being filled.
        seen, stop = [], threading.Event()

        def consume():
            c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": unique("during-fill"), "auto.offset.reset": "earliest",
                          "isolation.level": "read_uncommitted", "enable.auto.commit": False})
            c.subscribe([topic])
            try:
                while not stop.is_set() and len(seen) < 10:
                    m = c.poll(0.5)
                    if m is not None and not m.error():
                        seen.append((m.partition(), m.offset(), m.key(), m.value()))
            finally:
                c.close()

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        fill_started, peak_bytes, low_watermarks = time.time(), 0, set()
        deadline = fill_started + FILL_LIMIT_S
        while True:
            peak_bytes = max(peak_bytes, partition_bytes(destination, topic))
            try:
                low_watermarks.add(low_watermark(destination.bootstrap, topic))
            except Exception:  # noqa: BLE001 - the destination topic is not created yet
                pass
            hw = None
            try:
                c = Consumer({"bootstrap.servers": destination.bootstrap, "group.id": unique("hw")})
                hw = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
                c.close()
            except Exception:  # noqa: BLE001
                pass
            if hw == log_start + 10:
                break
            assert time.time() < deadline, f"the destination reached the source's end {log_start + 10} within {FILL_LIMIT_S} s (at {hw})"
            time.sleep(0.5)
        elapsed = time.time() - fill_started
        print(f"filled {log_start:,} offsets in {elapsed:.1f}s ({log_start / elapsed / 1e6:.1f} M offsets/s, proxy start included); "
              f"peak partition size {peak_bytes / 1e6:.1f} MB per replica (uncompressed fillers: "
              f"{log_start * UNCOMPRESSED_FILLER_BYTES / 1e9:.1f} GB); destination log starts seen: {sorted(low_watermarks)[:8]}...")
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        reader.join(120)
        stop.set()
        assert seen == [r[:4] for r in expected], (
            f"a consumer through the proxy from the earliest offset during the fill gets exactly the source's 10 records "
            f"at their offsets and no filler: {seen[:3]}... ({len(seen)} records)")
        assert peak_bytes < 200_000_000, (
            f"the prefix is written compressed and deleted as it goes: at most {peak_bytes / 1e6:.0f} MB of it on a replica "
            f"at once (uncompressed it would be {log_start * UNCOMPRESSED_FILLER_BYTES / 1e9:.1f} GB)")
        # The leader logs each DeleteRecords it applies; sampling the log start from a client misses
        # the intermediate ones on a loaded machine (a fill of 10 s, a sample every few seconds).
        deleted_to = deletions(destination, topic)
        inside = [o for o in deleted_to if 0 < o < log_start]
        assert inside, (f"the destination's log start moved while the prefix was being filled, not only at its end: "
                        f"DeleteRecords to {deleted_to} (sampled log starts {sorted(low_watermarks)[:8]})")
        wait_until_low_watermark = time.time() + 30
        while low_watermark(destination.bootstrap, topic) != log_start:
            assert time.time() < wait_until_low_watermark, "the destination's log start reaches the source's"
            time.sleep(0.3)
        assert_equal(source, destination, topic, 1)
        _, text = proxy.http("/metrics")
        # Only this topic: the session's state topic also holds other tests' mirror "faults", some
        # of whose topics were failed on purpose.
        failed = [line for line in text.splitlines()
                  if line.startswith("kmp_mirror_failed{") and f'topic="{topic}"' in line and line.endswith(" 1")]
        assert not failed, f"no partition of {topic} failed: {failed}"
