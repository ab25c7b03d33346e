"""Failback: the way back after a failover, with a proxy in front of each cluster (PA in front of
A, PB in front of B). A → B runs on PB with PA as its source; failover stops it there (B's topic
writable, the line recorded); clients write on B; then a mirror B → A started on PA (source: PB)
takes A's topic back. PA asks PB for the line (DescribeClusterMirrors with A's cluster id and
topic id) and, per partition, continues incrementally where A ends at the line, or keeps what A
holds past it in a quarantine topic and restores A's topic from B at identical offsets. A loop
(B still copying the topic from A) is refused without stopping A's writers. Issue #39."""

from __future__ import annotations

import time
from contextlib import contextmanager

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import ProxyProcess, unique
from kmp_common import wait_until
from mirror import call, commit, committed, create, describe, high_watermarks, produce_one, produce_plain, read_all, strip_fillers, wait_caught_up

PARTITIONS = 2
QUARANTINE_PREFIX = "kmp-quarantine."


def own_state(workdir, name: str) -> list[str]:
    """Arguments giving a proxy a state topic of its own: its mirrors point at proxies that live
    only as long as the test, and a proxy of a later test on the same cluster (on the default
    state topic) must not take them up."""
    path = workdir / f"{name}.toml"
    path.write_text(f'[engine]\nstate_topic = "kmp-state-{name}"\n')
    return ["--config", str(path)]


def create_mirror(proxy, name: str, source_bootstrap: str) -> None:
    status, r = call(proxy, "POST", "/v1/mirrors", {"name": name, "configs": {"bootstrap.servers": source_bootstrap}})
    assert status == 201 and r["error_code"] == 0, f"create mirror {name}: {r}"


def start_mirror(proxy, name: str, source_bootstrap: str, topic: str, create: bool = True) -> None:
    if create:
        create_mirror(proxy, name, source_bootstrap)
    status, r = call(proxy, "POST", f"/v1/mirrors/{name}/start", {"topics": [topic]})
    assert status == 200 and [x["error_code"] for x in r["results"]] == [0], f"start {topic} on {name}: {r}"


def states(proxy, mirror: str, topic: str) -> set[str]:
    """The states the topic's partitions show (none while the topic is being prepared)."""
    status, body = call(proxy, "GET", f"/v1/mirrors/{mirror}")
    assert status == 200, body
    return {p["state"] for t in body["topics"] if t["topic"] == topic for p in t["partitions"]}


def quarantine_topics(bootstrap: str, topic: str) -> list[str]:
    names = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    return sorted(t for t in names if t.startswith(QUARANTINE_PREFIX) and t.endswith(f".{topic}"))


def names(topic: str) -> tuple[str, str]:
    """The mirrors A → B (on PB) and B → A (on PA) of a test (proxies of the suite share state
    topics, so each test names its own)."""
    return f"fwd-{topic}", f"back-{topic}"


def tail_past_the_line(a_bootstrap: str, pb, fwd: str, topic: str) -> list[tuple]:
    """A's records past the line PB's stop recorded, as `read_all` gives them."""
    lines = {p["partition"]: p["destination_offset"] for p in describe(pb, fwd, topic)["partitions"]}
    return [r for r in read_all(a_bootstrap, topic, PARTITIONS, "read_uncommitted") if r[1] >= lines[r[0]]]


def assert_restored_and_quarantined(a, b, topic: str, tail: list[tuple]) -> None:
    """A equals B record for record (fillers aside), and A's quarantine topic holds every record
    of `tail` exactly once: where it was, key, value, its own headers and timestamp."""
    on_a = strip_fillers(read_all(a.bootstrap, topic, PARTITIONS, "read_uncommitted"))
    assert on_a == read_all(b.bootstrap, topic, PARTITIONS, "read_uncommitted"), "A restored from B record for record"
    [quarantine] = quarantine_topics(a.bootstrap, topic)
    kept = read_all(a.bootstrap, quarantine, PARTITIONS, "read_uncommitted")

    def where(r) -> tuple:
        h = dict(r[4])
        assert r[5] == int(h["kmp.quarantine.timestamp"]), f"a quarantined record keeps its timestamp: {r}"
        return (int(h["kmp.quarantine.partition"]), int(h["kmp.quarantine.offset"]), r[2], r[3],
                tuple(x for x in r[4] if not x[0].startswith("kmp.quarantine.")), r[5])
    moved = sorted(where(r) for r in kept)
    assert len(moved) == len(set(moved)) == len(tail), f"every record of A's tail quarantined once: {len(moved)} kept ({len(set(moved))} distinct), tail {len(tail)}"
    assert moved == tail, "the quarantine holds exactly A's tail"


def fail_over(proxy, mirror: str, topic: str, graceful: bool = True) -> None:
    """Stops `topic` of `mirror` on `proxy` (gracefully: lag 0 first) and waits until it shows
    stopped (writable there)."""
    body = {"topics": [topic], "graceful_timeout_ms": 30000} if graceful else {"topics": [topic]}
    status, r = call(proxy, "POST", f"/v1/mirrors/{mirror}/stop", body)
    assert status == 200 and [x["error_code"] for x in r["results"]] == [0], f"failover of {topic} on {mirror}: {r}"
    wait_until(f"{topic} stopped on {mirror}", lambda: states(proxy, mirror, topic) == {"stopped"}, 30)


@contextmanager
def failed_over(clusters, workdir, topic: str, unmirrored_on_a: int):
    """A's `topic` (100 records) mirrored to B by PB (source PA), `unmirrored_on_a` more written
    on A while PB's copy is paused, then stopped on PB (the failover) and 30 written on B through
    PB. Yields [PA, PB] (a test that restarts PA puts the new one there); stops both after."""
    fwd, _ = names(topic)
    a, b = clusters
    create(a.bootstrap, topic, PARTITIONS)
    pa = ProxyProcess(a.bootstrap, workdir, own_state(workdir, f"pa-{topic}")).start()
    pb = ProxyProcess(b.bootstrap, workdir, own_state(workdir, f"pb-{topic}")).start()
    proxies = [pa, pb]
    try:
        produce_plain(pa.bootstrap, topic, 100)
        start_mirror(pb, fwd, pa.bootstrap, topic)
        wait_caught_up(a.bootstrap, b.bootstrap, {topic: PARTITIONS})
        if unmirrored_on_a:
            status, r = call(pb, "POST", f"/v1/mirrors/{fwd}/pause", {"topics": [topic]})
            assert status == 200, r
            wait_until("paused on PB", lambda: states(pb, fwd, topic) == {"paused"}, 30)
            produce_plain(pa.bootstrap, topic, unmirrored_on_a, start=1000)
        fail_over(pb, fwd, topic, graceful=not unmirrored_on_a)
        produce_plain(pb.bootstrap, topic, 30, start=2000)
        yield proxies
    finally:
        for p in proxies:
            p.stop()


def test_a_planned_failover_fails_back_incrementally_and_a_is_b_record_for_record(clusters, workdir):
    a, b = clusters
    topic = unique("fb-planned")
    fwd, back = names(topic)
    with failed_over(clusters, workdir, topic, unmirrored_on_a=0) as proxies:
        pa, pb = proxies
        # The application's group moved to B with the failover and committed there.
        group = unique("fb-group")
        ends = high_watermarks(b.bootstrap, topic, PARTITIONS)
        on_b = {p: ends[p] - 3 - p for p in range(PARTITIONS)}
        commit(pb.bootstrap, group, topic, on_b)
        before = read_all(a.bootstrap, topic, PARTITIONS, "read_uncommitted")
        start_mirror(pa, back, pb.bootstrap, topic)
        wait_caught_up(b.bootstrap, a.bootstrap, {topic: PARTITIONS})
        wait_until("mirroring back on PA", lambda: states(pa, back, topic) == {"mirroring"}, 30)
        on_a = read_all(a.bootstrap, topic, PARTITIONS, "read_uncommitted")
        assert on_a == read_all(b.bootstrap, topic, PARTITIONS, "read_uncommitted"), "A equals B record for record after the failback"
        assert set(before) <= set(on_a) and len(on_a) == len(before) + 30, "A's own records stayed where they were; B's 30 followed them"
        assert quarantine_topics(a.bootstrap, topic) == [], "nothing to quarantine after a planned failover"
        wait_until("the group's offsets back on A as committed on B", lambda: committed(a.bootstrap, group, topic, PARTITIONS) == on_b, 60)
        err, _ = produce_one(pa.bootstrap, topic, 0)
        assert err is not None, "A's topic is read-only through PA while it mirrors B"
        # B's clients keep writing; they reach A.
        produce_plain(pb.bootstrap, topic, 10, start=3000)
        wait_caught_up(b.bootstrap, a.bootstrap, {topic: PARTITIONS})
        # Back on A: stop the way back (failover to A).
        fail_over(pa, back, topic)
        err, offset = produce_one(pa.bootstrap, topic, 0)
        assert err is None and offset >= 0, f"A's topic is writable again: {err}"


def test_a_disaster_fails_back_with_as_unmirrored_tail_quarantined_and_a_restored_from_b(clusters, workdir):
    a, b = clusters
    topic = unique("fb-disaster")
    fwd, back = names(topic)
    with failed_over(clusters, workdir, topic, unmirrored_on_a=40) as proxies:
        pa, pb = proxies
        lines = {p["partition"]: p["destination_offset"] for p in describe(pb, fwd, topic)["partitions"]}
        tail = tail_past_the_line(a.bootstrap, pb, fwd, topic)
        assert len(tail) == 40, f"A holds the 40 records B never got past the line {lines}: {len(tail)}"
        # The dry run says what the start would do, and does nothing.
        create_mirror(pa, back, pb.bootstrap)
        ends = high_watermarks(a.bootstrap, topic, PARTITIONS)
        status, r = call(pa, "POST", f"/v1/mirrors/{back}/start", {"topics": [topic], "dry_run": True})
        assert status == 200 and r["dry_run"] is True, r
        [preview] = r["topics"]
        assert preview["outcome"] == "restore" and preview["source_mirror"] == fwd, preview
        assert [(p["partition"], p["path"], p["line"], p["end"], p["quarantined_from"], p["quarantined_offsets"]) for p in preview["partitions"]] == \
            [(p, "restore" if ends[p] > lines[p] else "incremental", lines[p], ends[p], lines[p], ends[p] - lines[p]) for p in range(PARTITIONS)], \
            f"per partition: the path, the line, A's end and what would be quarantined: {preview}"
        assert quarantine_topics(a.bootstrap, topic) == [] and high_watermarks(a.bootstrap, topic, PARTITIONS) == ends, "the dry run changed nothing"
        assert states(pa, back, topic) == set(), "nor started the topic"
        start_mirror(pa, back, pb.bootstrap, topic, create=False)
        wait_until("a quarantine topic on A", lambda: quarantine_topics(a.bootstrap, topic), 60)
        wait_until("mirroring back on PA", lambda: states(pa, back, topic) == {"mirroring"}, 90)
        wait_caught_up(b.bootstrap, a.bootstrap, {topic: PARTITIONS})
        assert_restored_and_quarantined(a, b, topic, tail)


def test_mirroring_a_topic_back_while_the_other_side_still_copies_it_is_a_loop_refused_until_that_side_fails_over(clusters, workdir):
    a, b = clusters
    topic = unique("fb-loop")
    fwd, back = names(topic)
    create(a.bootstrap, topic, PARTITIONS)
    pa = ProxyProcess(a.bootstrap, workdir, own_state(workdir, f"pa-{topic}")).start()
    pb = ProxyProcess(b.bootstrap, workdir, own_state(workdir, f"pb-{topic}")).start()
    try:
        produce_plain(pa.bootstrap, topic, 20)
        start_mirror(pb, fwd, pa.bootstrap, topic)
        wait_caught_up(a.bootstrap, b.bootstrap, {topic: PARTITIONS})
        start_mirror(pa, back, pb.bootstrap, topic)
        wait_until("the way back FAILED", lambda: "failed" in states(pa, back, topic), 60)
        reason = " ".join(str(p.get("last_error")) for p in describe(pa, back, topic)["partitions"])
        assert "loop" in reason and fwd in reason, f"the reason names the loop and the other side's mirror: {reason}"
        err, _ = produce_one(pa.bootstrap, topic, 0)
        assert err is None, f"A's writers were never stopped: {err}"
        time.sleep(1)
        wait_caught_up(a.bootstrap, b.bootstrap, {topic: PARTITIONS})
        # The cause removed (B failed over), the refused topic is started again — no restart.
        fail_over(pb, fwd, topic)
        start_mirror(pa, back, pb.bootstrap, topic, create=False)
        wait_until("the way back mirroring after the start", lambda: states(pa, back, topic) == {"mirroring"}, 60)
        produce_plain(pb.bootstrap, topic, 10, start=500)
        wait_caught_up(b.bootstrap, a.bootstrap, {topic: PARTITIONS})
        assert read_all(a.bootstrap, topic, PARTITIONS, "read_uncommitted") == read_all(b.bootstrap, topic, PARTITIONS, "read_uncommitted")
    finally:
        pa.stop()
        pb.stop()


def test_a_second_failback_takes_the_topic_home_again_incrementally_both_ways(clusters, workdir):
    a, b = clusters
    topic = unique("fb-twice")
    fwd, back = names(topic)
    with failed_over(clusters, workdir, topic, unmirrored_on_a=0) as proxies:
        pa, pb = proxies
        start_mirror(pa, back, pb.bootstrap, topic)  # B → A
        wait_caught_up(b.bootstrap, a.bootstrap, {topic: PARTITIONS})
        fail_over(pa, back, topic)
        produce_plain(pa.bootstrap, topic, 25, start=4000)
        # A → B again: the stopped topic of PB's first mirror is started again there.
        status, r = call(pb, "POST", f"/v1/mirrors/{fwd}/start", {"topics": [topic]})
        assert status == 200 and [x["error_code"] for x in r["results"]] == [0], f"start the stopped topic again on PB: {r}"
        wait_until("mirroring A → B again", lambda: states(pb, fwd, topic) == {"mirroring"}, 60)
        wait_caught_up(a.bootstrap, b.bootstrap, {topic: PARTITIONS})
        assert read_all(a.bootstrap, topic, PARTITIONS, "read_uncommitted") == read_all(b.bootstrap, topic, PARTITIONS, "read_uncommitted"), \
            "B equals A record for record after the second failback"
        assert quarantine_topics(a.bootstrap, topic) == quarantine_topics(b.bootstrap, topic) == [], "planned both ways: nothing quarantined"
        err, _ = produce_one(pb.bootstrap, topic, 0)
        assert err is not None, "B's topic is read-only through PB again"
        produce_plain(pa.bootstrap, topic, 5, start=5000)
        wait_caught_up(a.bootstrap, b.bootstrap, {topic: PARTITIONS})


def test_a_restore_killed_with_sigkill_while_quarantining_and_once_the_quarantine_is_recorded_resumes_without_a_duplicate(clusters, workdir):
    a, b = clusters
    topic = unique("fb-kill")
    fwd, back = names(topic)
    with failed_over(clusters, workdir, topic, unmirrored_on_a=20_000) as proxies:
        pa, pb = proxies
        tail = tail_past_the_line(a.bootstrap, pb, fwd, topic)
        start_mirror(pa, back, pb.bootstrap, topic)
        consumer_conf = {"bootstrap.servers": a.bootstrap, "group.id": unique("q")}

        def quarantining() -> bool:
            found = quarantine_topics(a.bootstrap, topic)
            if not found:
                return False
            c = Consumer(consumer_conf)
            try:
                return any(c.get_watermark_offsets(TopicPartition(found[0], p), timeout=10)[1] > 0 for p in range(PARTITIONS))
            finally:
                c.close()
        wait_until("the quarantine copy under way", quarantining, 60, interval=0.05)
        assert pa.stop(9) != 0
        pa = proxies[0] = ProxyProcess(a.bootstrap, workdir, own_state(workdir, f"pa-{topic}")).start()

        # Killed again as soon as the quarantine is recorded complete: in its delete or restore step.
        wait_until("the quarantine recorded complete", lambda: "the records past the line are in the quarantine topic" in pa.log(), 90,
                   interval=0.02)
        assert pa.stop(9) != 0
        pa = proxies[0] = ProxyProcess(a.bootstrap, workdir, own_state(workdir, f"pa-{topic}")).start()
        wait_until("mirroring back on PA", lambda: states(pa, back, topic) == {"mirroring"}, 90)
        wait_caught_up(b.bootstrap, a.bootstrap, {topic: PARTITIONS})
        assert_restored_and_quarantined(a, b, topic, tail)
