"""Mirror engine against real clusters: topics declared in the proxy's config are copied from the
1-broker source into the 3-broker destination so that every record keeps its source offset —
plain, keyed and null records with headers, all four codecs, and committed and aborted
transactions (markers and aborted data become fillers) — and mirroring continues while the
source keeps producing."""


import pytest

from conftest import ProxyProcess, unique
from mirror import (
    FILLER_KEY, create, high_watermarks, produce_plain, produce_transactions, read_all, strip_fillers, wait_caught_up,
)


@pytest.fixture(scope="module")
def mirrored(clusters, workdir):
    source, destination = clusters
    topics = {unique("mir-plain"): 3, unique("mir-codecs"): 4, unique("mir-txn"): 2}
    plain, codecs, txn = topics
    for t, n in topics.items():
        create(source.bootstrap, t, n)
    produce_plain(source.bootstrap, plain, 300, **{"compression.type": "lz4"})
    for i, codec in enumerate(["gzip", "snappy", "lz4", "zstd", "none"]):
        produce_plain(source.bootstrap, codecs, 100, start=i * 100, **{"compression.type": codec})
    produce_transactions(source.bootstrap, txn)
    config = workdir / "mirror.toml"
    topic_list = ", ".join(f'"{t}"' for t in topics)
    config.write_text(f'[[mirrors]]\nname = "dr"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = [{topic_list}]\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, topics)
        yield source, destination, proxy, topics
    finally:
        assert proxy.stop() == 0


def test_mirrored_records_keep_their_offsets_keys_values_headers_and_timestamps(mirrored):
    source, destination, _, topics = mirrored
    for topic, n in topics.items():
        src = read_all(source.bootstrap, topic, n, "read_committed")
        assert src, f"{topic} has source data"
        for isolation in ("read_committed", "read_uncommitted"):
            dst = read_all(destination.bootstrap, topic, n, isolation)
            assert strip_fillers(dst) == src, f"{topic} ({isolation}) equals the source record by record, fillers aside"
        assert high_watermarks(destination.bootstrap, topic, n) == high_watermarks(source.bootstrap, topic, n)


def test_transaction_markers_and_aborted_data_become_fillers(mirrored):
    source, destination, _, topics = mirrored
    txn = [t for t in topics if t.startswith("mir-txn")][0]
    dst = read_all(destination.bootstrap, txn, 2, "read_uncommitted")
    fillers = [r for r in dst if r[2] == FILLER_KEY]
    assert fillers, "markers and aborted records occupy their offsets as fillers"
    assert all(r[3] is None and r[4] == (("kmp-filler", b"1"),) for r in fillers), "fillers are keyed tombstones with the filler header"
    aborted = [r for r in read_all(source.bootstrap, txn, 2, "read_uncommitted") if r[3] and r[3].startswith(b"txn-1-")]
    assert aborted and not any(r[3] and r[3].startswith(b"txn-1-") for r in dst), "aborted data is not copied"


def test_mirroring_continues_while_the_source_keeps_producing(mirrored):
    source, destination, proxy, topics = mirrored
    plain = [t for t in topics if t.startswith("mir-plain")][0]
    produce_plain(source.bootstrap, plain, 500, start=1000, **{"compression.type": "zstd"})
    wait_caught_up(source.bootstrap, destination.bootstrap, {plain: 3})
    assert strip_fillers(read_all(destination.bootstrap, plain, 3, "read_committed")) == read_all(source.bootstrap, plain, 3, "read_committed")
    _, text = proxy.http("/metrics")
    lags = [float(l.split()[-1]) for l in text.splitlines() if l.startswith('kmp_mirror_lag_records{mirror="dr"')]
    assert lags and max(lags) == 0, f"lag is exported and zero once caught up: {lags}"
    lag_s = [float(l.split()[-1]) for l in text.splitlines() if l.startswith('kmp_mirror_lag_seconds{mirror="dr"')]
    assert lag_s and max(lag_s) == 0, f"time lag is exported and zero once caught up: {lag_s}"
    latency = [float(l.split()[-1]) for l in text.splitlines() if l.startswith("kmp_mirror_replication_latency_ms{") and f'topic="{plain}"' in l]
    assert latency and all(0 <= v < 60_000 for v in latency), f"replication latency of freshly produced records: {latency}"
    assert 'kmp_mirror_failed{mirror="dr"' in text and not any(
        l.startswith('kmp_mirror_failed{mirror="dr"') and not l.endswith(" 0") for l in text.splitlines()), "no partition failed"
