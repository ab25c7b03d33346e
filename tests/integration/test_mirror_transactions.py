"""Issue 38, parts 2 and 3: source transactions replayed in destination transactions. The engine
reads the source read_uncommitted up to its high watermark, writes each source transaction's
records inside a destination transaction of its own and ends it where the source's marker is, so:

* a transaction left open on the source does not hold back other producers' records (they reach
  the destination within the usual lag), while read_committed readers through the proxy see what
  the source's see at every moment (the destination's last stable offset follows the source's);
* read_uncommitted readers through the proxy see what the source's see, aborted records included;
* a stop (failover) aborts a destination transaction whose source transaction is still open;
* a proxy killed (kill -9) in the middle of a source transaction continues the destination
  transaction after its restart instead of aborting it.

The transaction stays open 30 s in the quick tier and 5 minutes in the long tier."""

import time

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

import tier
from conftest import unique
from kmp_common import ProxyProcess
from mirror import call, mirror_config, read_all, states, strip_fillers

HOLD_OPEN_S = tier.dial("how long the transaction test keeps a source transaction open (s)", 30, 300)
# A plain producer's record must be on the destination this soon after the source acknowledged it.
USUAL_LAG_S = 15


def ends(bootstrap: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)
    out = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        r = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=15)
        out.append(r[tp].result().offset)
    return out[0], out[1]


def same_view(source, proxy, topic: str, when: str) -> None:
    """Source and proxy readers see the same records at both isolation levels, and the same ends."""
    for isolation in ("read_uncommitted", "read_committed"):
        src = read_all(source.bootstrap, topic, 1, isolation)
        got = read_all(proxy.bootstrap, topic, 1, isolation)
        assert got == src, (f"{when}: {isolation} through the proxy equals the source ({len(got)} vs {len(src)} records; "
                            f"first offsets {[r[1] for r in got[:3]]} vs {[r[1] for r in src[:3]]})")
    assert ends(proxy.bootstrap, topic) == ends(source.bootstrap, topic), f"{when}: (last stable offset, high watermark)"


def open_transaction(bootstrap: str, topic: str, n: int, tag: str) -> Producer:
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("held-open"), "transaction.timeout.ms": 900_000})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(n):
        tx.produce(topic, key=f"{tag}-{i}".encode(), value=b"inside a transaction", partition=0)
    assert tx.flush(30) == 0
    return tx


def produce_acked(p: Producer, topic: str, key: str) -> float:
    """Produces one record and returns when the source acknowledged it."""
    done = {}
    p.produce(topic, key=key.encode(), value=b"plain", partition=0, on_delivery=lambda err, msg: done.update(err=err))
    p.flush(30)
    assert done.get("err") is None, done
    return time.time()


def wait_for(what: str, check, timeout: float) -> None:
    deadline = time.time() + timeout
    while not check():
        assert time.time() < deadline, f"{what} within {timeout} s"
        time.sleep(0.2)


def destination_end(destination, topic: str) -> int:
    try:
        return ends(destination.bootstrap, topic)[1]
    except Exception:  # noqa: BLE001 - the destination topic does not exist yet
        return -1


def create(source, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def test_an_open_source_transaction_holds_back_no_other_producer_and_every_reader_sees_what_the_source_shows(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-open-txn")
    create(source, topic)
    tx = open_transaction(source.bootstrap, topic, 20, "open")
    plain = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 0})
    for i in range(1000):
        plain.produce(topic, key=f"p{i}".encode(), value=b"plain", partition=0)
    assert plain.flush(30) == 0
    assert ends(source.bootstrap, topic) == (0, 1020), "the open transaction holds the source's last stable offset at 0"
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="txn")).start()
    try:
        started = time.time()
        wait_for("the 1,000 plain records behind the open transaction on the destination",
                 lambda: destination_end(destination, topic) == 1020, 60)
        print(f"\n1,020 offsets (20 in an open transaction) on the destination {time.time() - started:.1f} s after the proxy started")
        same_view(source, proxy, topic, "with the transaction open")

        # Other producers keep writing while the transaction stays open; each of their records
        # reaches the destination within the usual lag.
        lags, until = [], time.time() + HOLD_OPEN_S
        while time.time() < until:
            acked = produce_acked(plain, topic, f"during-{len(lags)}")
            want = ends(source.bootstrap, topic)[1]
            wait_for("a plain record written during the open transaction on the destination",
                     lambda: destination_end(destination, topic) >= want, USUAL_LAG_S)
            lags.append(time.time() - acked)
            time.sleep(0.5)
        lags.sort()
        print(f"{len(lags)} records written while the transaction stayed open {HOLD_OPEN_S} s: lag p50 "
              f"{lags[len(lags) // 2] * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms")
        assert ends(source.bootstrap, topic)[0] == 0, "the transaction was still open on the source"
        same_view(source, proxy, topic, f"after {HOLD_OPEN_S} s with the transaction open")

        tx.abort_transaction(30)
        wait_for("the abort marker on the destination", lambda: destination_end(destination, topic) == ends(source.bootstrap, topic)[1], 30)
        same_view(source, proxy, topic, "after the transaction aborted")
        aborted = [r for r in read_all(proxy.bootstrap, topic, 1, "read_uncommitted") if r[2].startswith(b"open-")]
        assert len(aborted) == 20, f"read_uncommitted through the proxy shows the 20 aborted records, as the source does: {len(aborted)}"

        tx.begin_transaction()
        for i in range(5):
            tx.produce(topic, key=f"second-{i}".encode(), value=b"committed", partition=0)
            produce_acked(plain, topic, f"between-{i}")
        tx.commit_transaction(30)
        wait_for("the commit marker on the destination", lambda: destination_end(destination, topic) == ends(source.bootstrap, topic)[1], 30)
        same_view(source, proxy, topic, "after a second transaction committed")
        # The partition ends with a marker: it is caught up (lag 0), and a graceful stop completes.
        status, r = call(proxy, "POST", "/v1/mirrors/txn/stop", {"topics": [topic], "graceful_timeout_ms": 30000})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"a graceful stop of a partition ending with a marker completes: {r}"
        _, text = proxy.http("/metrics")
        failed = [line for line in text.splitlines() if line.startswith("kmp_mirror_failed{") and f'topic="{topic}"' in line and line.endswith(" 1")]
        assert not failed, failed
    finally:
        assert proxy.stop() == 0, proxy.log()[-3000:]


@pytest.mark.parametrize("paused_first", [False, True], ids=["stop", "pause-then-stop"])
def test_a_stop_aborts_on_the_destination_a_transaction_still_open_on_the_source(clusters, workdir, paused_first):
    source, destination = clusters
    topic = unique("mir-stop-txn")
    create(source, topic)
    tx = open_transaction(source.bootstrap, topic, 7, "undecided")
    plain = Producer({"bootstrap.servers": source.bootstrap})
    for i in range(10):
        produce_acked(plain, topic, f"p{i}")
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="txstop")).start()
    try:
        wait_for("the source's 17 offsets on the destination", lambda: destination_end(destination, topic) == 17, 60)
        assert ends(destination.bootstrap, topic) == (0, 17), "the destination's transaction is open like the source's"
        if paused_first:
            # The usual failover: pause (copying stops, transactions stay open), then stop.
            status, r = call(proxy, "POST", "/v1/mirrors/txstop/pause", {"topics": [topic]})
            assert status == 200 and r["results"][0]["error_code"] == 0, r
            wait_for("the pause", lambda: states(proxy, "txstop", topic) == ["paused"], 60)
            assert ends(destination.bootstrap, topic) == (0, 17), "a pause keeps the destination's transaction open"
        body = {"topics": [topic]} if paused_first else {"topics": [topic], "graceful_timeout_ms": 30000}
        status, r = call(proxy, "POST", "/v1/mirrors/txstop/stop", body)
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        wait_for("the stop", lambda: states(proxy, "txstop", topic) == ["stopped"], 60)
        lso, hw = ends(destination.bootstrap, topic)
        assert (lso, hw) == (18, 18), f"the open transaction was aborted at stop: its marker at 17, nothing open ({lso}, {hw})"
        committed = strip_fillers(read_all(proxy.bootstrap, topic, 1, "read_committed"))
        assert [r[2] for r in committed] == [f"p{i}".encode() for i in range(10)], "read_committed readers never see the undecided records"
        assert ends(source.bootstrap, topic)[0] == 0, "the source's transaction is still open"
        tx.abort_transaction(30)
    finally:
        assert proxy.stop() == 0, proxy.log()[-3000:]


def test_a_proxy_killed_in_the_middle_of_a_source_transaction_continues_it_after_a_restart(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-kill-txn")
    create(source, topic)
    tx = open_transaction(source.bootstrap, topic, 10, "before-kill")
    plain = Producer({"bootstrap.servers": source.bootstrap})
    for i in range(5):
        produce_acked(plain, topic, f"p{i}")
    args = mirror_config(workdir, source, [topic], name="txkill")
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_for("the first 15 offsets on the destination", lambda: destination_end(destination, topic) == 15, 60)
    finally:
        proxy.stop(sig=9)
    for i in range(10):
        tx.produce(topic, key=f"after-kill-{i}".encode(), value=b"inside a transaction", partition=0)
    assert tx.flush(30) == 0
    tx.commit_transaction(30)
    produce_acked(plain, topic, "last")
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        want = ends(source.bootstrap, topic)
        wait_for("the destination at the source's end", lambda: ends(destination.bootstrap, topic) == want, 90)
        same_view(source, proxy, topic, "after the restart")
        committed = [r[2] for r in read_all(proxy.bootstrap, topic, 1, "read_committed")]
        assert sum(k.startswith(b"before-kill") for k in committed) == 10, "the records written before the kill committed with the rest"
    finally:
        assert proxy.stop() == 0, proxy.log()[-3000:]


def test_a_client_cannot_use_the_engines_transactional_ids_through_the_proxy(proxy):
    from confluent_kafka import KafkaError, KafkaException

    engine = Producer({"bootstrap.servers": proxy.bootstrap, "transactional.id": "kmp-engine.txn.00000000000000000000000000000000.0.1"})
    try:
        engine.init_transactions(20)
        raise AssertionError("InitProducerId for an engine transactional id was accepted through the proxy")
    except KafkaException as e:
        err = e.args[0]
        assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, f"refused as not authorized: {err}"
    own = Producer({"bootstrap.servers": proxy.bootstrap, "transactional.id": unique("kmp-engine-lookalike")})
    own.init_transactions(30)  # any other transactional id works
