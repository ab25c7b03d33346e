"""Mirror topic life cycle through the admin REST API (`/v1`), against real clusters: list and
describe, pause (copying stops, still read-only), resume (catches up), graceful stop = failover
(copying stops at zero lag, the topic becomes writable and a producer continues at the next
offset), each state surviving a proxy restart, the KIP-1279 error codes of invalid transitions,
and the loopback-or-token rule for mutating routes."""

import socket
import time

import pytest
from confluent_kafka import KafkaError

from conftest import ProxyProcess, unique
from mirror import (
    assert_equal, call, create, describe, high_watermarks, mirror_config, produce_one, produce_plain,
    produce_transactions, states, wait_caught_up,
)

PARTITIONS = 2


def local_ip() -> str | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        ip = s.getsockname()[0]
        return None if ip.startswith("127.") else ip
    except OSError:
        return None
    finally:
        s.close()


def test_pause_resume_and_graceful_stop_with_restarts_in_each_state(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-failover")
    create(source.bootstrap, topic, PARTITIONS)
    produce_plain(source.bootstrap, topic, 200)
    produce_transactions(source.bootstrap, topic)
    args = mirror_config(workdir, source, [topic], name="fo")
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        status, listing = call(proxy, "GET", "/v1/mirrors")
        assert status == 200 and any(m["name"] == "fo" and topic in m["topics"] for m in listing["mirrors"]), listing
        d = describe(proxy, "fo", topic)
        ends = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        assert d["desired"] == "mirroring" and [p["destination_offset"] for p in sorted(d["partitions"], key=lambda p: p["partition"])] == ends, d
        assert all(p["lag"] == 0 and p["state"] == "mirroring" for p in d["partitions"]), d

        status, r = call(proxy, "POST", "/v1/mirrors/fo/pause", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        assert states(proxy, "fo", topic) == ["paused"] * PARTITIONS
        paused_at = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        produce_plain(source.bootstrap, topic, 50, start=1000)
        time.sleep(3)
        assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == paused_at, "a paused topic is not copied"
        err, _ = produce_one(proxy.bootstrap, topic, 0)
        assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, f"a paused topic stays read-only: {err}"

        # Invalid transitions carry KIP-1279 codes.
        _, r = call(proxy, "POST", "/v1/mirrors/fo/pause", {"topics": [topic]})
        assert r["results"][0]["error_code"] == 0, "pausing a paused topic is not an error"
        _, r = call(proxy, "POST", "/v1/mirrors/fo/stop", {"topics": ["not-a-mirror-topic"]})
        assert r["results"][0]["error_code"] == 139, f"TOPIC_NOT_IN_CLUSTER_MIRROR: {r}"
        status, r = call(proxy, "POST", "/v1/mirrors/nope/stop", {"topics": [topic]})
        assert status == 404 and r["error_code"] == 137, f"UNKNOWN_CLUSTER_MIRROR: {r}"
        status, r = call(proxy, "GET", "/v1/mirrors/nope")
        assert status == 404 and r["error_code"] == 137
    finally:
        assert proxy.stop() == 0

    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        time.sleep(2)
        assert states(proxy, "fo", topic) == ["paused"] * PARTITIONS, "paused survives a restart"
        assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == paused_at
        status, r = call(proxy, "POST", "/v1/mirrors/fo/resume", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert_equal(source, destination, topic, PARTITIONS)

        produce_plain(source.bootstrap, topic, 40, start=2000)
        status, r = call(proxy, "POST", "/v1/mirrors/fo/stop", {"topics": [topic], "graceful_timeout_ms": 30000})
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        assert states(proxy, "fo", topic) == ["stopped"] * PARTITIONS
        assert_equal(source, destination, topic, PARTITIONS)  # graceful: nothing left behind
        stopped_at = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        assert [p["destination_offset"] for p in sorted(describe(proxy, "fo", topic)["partitions"], key=lambda p: p["partition"])] == stopped_at

        err, offset = produce_one(proxy.bootstrap, topic, 1)
        assert err is None and offset == stopped_at[1], f"after failover a producer writes at the next offset {stopped_at[1]}: {err} {offset}"
        produce_plain(source.bootstrap, topic, 20, start=3000)
        time.sleep(2)
        assert high_watermarks(destination.bootstrap, topic, PARTITIONS)[0] == stopped_at[0], "a stopped topic is not copied"

        _, r = call(proxy, "POST", "/v1/mirrors/fo/pause", {"topics": [topic]})
        assert r["results"][0]["error_code"] == 142, f"MIRROR_TOPIC_BEING_STOPPED: {r}"
        _, r = call(proxy, "POST", "/v1/mirrors/fo/resume", {"topics": [topic]})
        assert r["results"][0]["error_code"] == 141, f"MIRROR_TOPIC_NOT_PAUSED: {r}"
        _, r = call(proxy, "POST", "/v1/mirrors/fo/stop", {"topics": [topic]})
        assert r["results"][0]["error_code"] == 0, "stopping a stopped topic is not an error"
    finally:
        assert proxy.stop() == 0

    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        time.sleep(2)
        assert states(proxy, "fo", topic) == ["stopped"] * PARTITIONS, "stopped survives a restart"
        err, offset = produce_one(proxy.bootstrap, topic, 1)
        assert err is None and offset == stopped_at[1] + 1, f"still writable after a restart: {err} {offset}"
    finally:
        assert proxy.stop() == 0


def test_graceful_stop_of_a_topic_that_is_not_caught_up_is_refused_and_leaves_it_as_it_was(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-lagging")
    create(source.bootstrap, topic, 1)
    produce_plain(source.bootstrap, topic, 50)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="lag")).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        _, r = call(proxy, "POST", "/v1/mirrors/lag/pause", {"topics": [topic]})
        assert r["results"][0]["error_code"] == 0
        produce_plain(source.bootstrap, topic, 50, start=100)  # the paused copy falls behind
        _, r = call(proxy, "POST", "/v1/mirrors/lag/stop", {"topics": [topic], "graceful_timeout_ms": 1500})
        result = r["results"][0]
        assert result["error_code"] == 7 and "zero lag" in result["message"], f"REQUEST_TIMED_OUT with the reason: {r}"
        assert describe(proxy, "lag", topic)["desired"] == "paused" and states(proxy, "lag", topic) == ["paused"], "left as it was"
        err, _ = produce_one(proxy.bootstrap, topic, 0)
        assert err is not None, "still read-only"
        _, r = call(proxy, "POST", "/v1/mirrors/lag/stop", {"topics": [topic]})
        assert r["results"][0]["error_code"] == 0, "a forced stop fails over at once"
        assert states(proxy, "lag", topic) == ["stopped"]
    finally:
        assert proxy.stop() == 0


def test_non_loopback_callers_need_the_admin_token_to_read_and_to_mutate(clusters, workdir):
    ip = local_ip()
    assert ip, "the machine needs a non-loopback address for this test"
    source, destination = clusters
    topic = unique("mir-auth")
    create(source.bootstrap, topic, 1)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="auth"),
                         admin_host="0.0.0.0", env={"KMP_ADMIN_TOKEN": "let-me-in"}).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        status, _ = call(proxy, "GET", "/v1/mirrors/auth", host=ip)
        assert status == 401, f"reading from a non-loopback address needs the token (got {status})"
        status, _ = call(proxy, "GET", "/v1/mirrors/auth", host=ip, token="let-me-in")
        assert status == 200, f"reading with the token from a non-loopback address is allowed (got {status})"
        status, _ = call(proxy, "POST", "/v1/mirrors/auth/pause", {"topics": [topic]}, host=ip)
        assert status == 403, "no token from a non-loopback address"
        status, _ = call(proxy, "POST", "/v1/mirrors/auth/pause", {"topics": [topic]}, host=ip, token="wrong")
        assert status == 403, "a wrong token"
        status, r = call(proxy, "POST", "/v1/mirrors/auth/pause", {"topics": [topic]}, host=ip, token="let-me-in")
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        assert "let-me-in" not in proxy.log(), "the token never shows in the log"
        status, doc = call(proxy, "GET", "/v1/openapi.json")
        assert status == 200 and "/v1/mirrors/{name}/stop" in doc["paths"]
    finally:
        assert proxy.stop() == 0


def test_rest_creates_starts_fails_over_and_deletes_a_mirror(clusters, workdir):
    source, destination = clusters
    topic = unique("rest-rt")
    create(source.bootstrap, topic, 1)
    produce_plain(source.bootstrap, topic, 30)
    proxy = ProxyProcess(destination.bootstrap, workdir).start()
    try:
        status, r = call(proxy, "POST", "/v1/mirrors", {"name": "restmirror", "configs": {"bootstrap.servers": source.bootstrap}})
        assert status == 201 and r["error_code"] == 0, r
        status, r = call(proxy, "POST", "/v1/mirrors", {"name": "restmirror", "configs": {"bootstrap.servers": source.bootstrap}})
        assert status == 409 and r["error_code"] == 136, r
        status, r = call(proxy, "POST", "/v1/mirrors", {"name": "bad", "configs": {"bootstrap.servers": source.bootstrap,
                                                                                 "sasl.kerberos.service.name": "kafka"}})
        assert status == 400 and r["error_code"] == 40 and "sasl.kerberos.service.name" in r["message"], f"INVALID_CONFIG names what is unsupported: {r}"
        # Several topics are looked up on the source at once; a topic named twice is answered twice.
        missing = unique("rest-missing")
        status, r = call(proxy, "POST", "/v1/mirrors/restmirror/start", {"topics": [topic, missing, topic]})
        codes = [(x["topic"], x["error_code"]) for x in r.get("results", [])]
        assert codes == [(topic, 0), (missing, 3), (topic, 0)], f"start answered {status}: {r}"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        status, r = call(proxy, "DELETE", "/v1/mirrors/restmirror")
        assert status == 409 and r["error_code"] == 143, r
        status, r = call(proxy, "POST", "/v1/mirrors/restmirror/stop", {"topics": [topic], "graceful_timeout_ms": 30000})
        assert status == 200 and r["results"][0]["error_code"] == 0, r
        status, r = call(proxy, "DELETE", "/v1/mirrors/restmirror")
        assert status == 200 and r["error_code"] == 0, r
        status, r = call(proxy, "GET", "/v1/mirrors/restmirror")
        assert status == 404 and r["error_code"] == 137
        err, offset = produce_one(proxy.bootstrap, topic, 0)
        assert err is None and offset == 30, f"the topic is an ordinary topic after the delete: {err} {offset}"
    finally:
        assert proxy.stop() == 0


@pytest.mark.long  # 33 s; quick tier: test_mirror_clients' readers never see fillers
def test_a_deleted_mirrors_topic_keeps_its_fillers_masked_after_a_restart(clusters, workdir):
    """Fillers stay in a former mirror topic's log: the state topic remembers the topic, so a
    restarted proxy still masks them (by name and by topic id), while the topic is writable. The
    fillers stand in for the records a compacted source topic's cleaner removed."""
    from kafka import KafkaConsumer, TopicPartition as KpTopicPartition
    from compaction import create_with_compaction_gaps
    from mirror import FILLER_KEY, read_all

    source, destination = clusters
    topic = unique("former")
    create_with_compaction_gaps(source.bootstrap, topic, 2)  # compaction gaps: fillers on the destination
    expected = read_all(source.bootstrap, topic, 2, "read_uncommitted")
    assert expected == read_all(source.bootstrap, topic, 2, "read_committed"), "no transactions: both isolation levels read the same"
    proxy = ProxyProcess(destination.bootstrap, workdir).start()
    try:
        assert call(proxy, "POST", "/v1/mirrors", {"name": "former", "configs": {"bootstrap.servers": source.bootstrap}})[0] == 201
        assert call(proxy, "POST", "/v1/mirrors/former/start", {"topics": [topic]})[0] == 200
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2})
        assert call(proxy, "POST", "/v1/mirrors/former/stop", {"topics": [topic]})[0] == 200
        status, r = call(proxy, "DELETE", "/v1/mirrors/former")
        assert status == 200 and r["error_code"] == 0, r
    finally:
        assert proxy.stop() == 0
    direct = read_all(destination.bootstrap, topic, 2, "read_uncommitted")
    assert any(r[2] == FILLER_KEY for r in direct), "the destination log holds fillers (the premise of this test)"
    proxy = ProxyProcess(destination.bootstrap, workdir).start()
    try:
        for isolation in ("read_committed", "read_uncommitted"):
            got = read_all(proxy.bootstrap, topic, 2, isolation)
            assert got == read_all(source.bootstrap, topic, 2, isolation), \
                f"librdkafka ({isolation}) through the restarted proxy sees the source's records only, no fillers"
        kc = KafkaConsumer(bootstrap_servers=proxy.bootstrap, enable_auto_commit=False, isolation_level="read_committed",
                           consumer_timeout_ms=5000)
        kc.assign([KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)])
        kc.seek_to_beginning()
        seen = sorted((m.partition, m.offset, m.key, m.value) for m in kc)
        kc.close()
        assert seen == [(r[0], r[1], r[2], r[3]) for r in expected], "kafka-python (Fetch by topic name) sees no fillers either"
        err, offset = produce_one(proxy.bootstrap, topic, 0)
        assert err is None and offset == high_watermarks(destination.bootstrap, topic, 2)[0] - 1, f"the former mirror topic is writable: {err} {offset}"
    finally:
        assert proxy.stop() == 0
