"""Every instance enforces (issue #14, first step): two proxies in front of one destination — one
runs the mirror engine, the other is a follower (`engine.role = follower`, here through
KMP_ENGINE_ROLE with the same config file) that copies nothing and follows the engine's state topic.
Through the follower: a produce to a mirror topic is refused as through the engine instance
(librdkafka by topic name, the Java client by topic id), filler batches (the source topic's
compaction gaps) never reach consumers, who see at each isolation level what the source's see,
List/Describe answer what the engine instance answers, mutating mirror RPCs get NOT_CONTROLLER,
and a stop (failover) done through the engine instance makes the topic writable through the follower
within a bounded, measured time."""

import signal
import subprocess
import threading
import time

import pytest

from confluent_kafka import KafkaError, Producer

from conftest import REPO, ProxyProcess, unique
from compaction import create_with_compaction_gaps
from kmp_common import java_command, wait_until
from mirror import (
    FILLER_KEY, call, call_retrying, cli, cli_json, create, high_watermarks, leader_of, produce_one, produce_plain,
    produce_transactions, read_all, wait_caught_up,
)

PARTITIONS = 2
JAVA = REPO / "tests" / "clients" / "java" / "MirrorCheck.java"
FAILOVER_VISIBLE_BOUND_S = 10
NOT_CONTROLLER = 41


def shared_config(workdir, state_topic: str):
    """One config file for both instances (the follower's role comes from the environment)."""
    path = workdir / f"{unique('follow-cfg')}.toml"
    path.write_text(f'[engine]\nstate_topic = "{state_topic}"\nstate_flush_interval_ms = 500\n')
    return ["--config", str(path)]


def described(proxy, mirror: str, topic: str) -> list[tuple]:
    """(partition, state, destination_offset, source_offset) of each partition of ``topic`` (Kafka RPC)."""
    code, d = cli_json(proxy, "--describe", "--mirror", mirror)
    assert code == 0, f"describe through {proxy.bootstrap} failed: {d}"
    return sorted((p["partition"], p["state"], p["destination_offset"], p["source_offset"]) for p in d["partitions"] if p["topic"] == topic)


def listed(proxy) -> list[tuple]:
    code, listing = cli_json(proxy, "--list")
    assert code == 0, f"list through {proxy.bootstrap} failed: {listing}"
    return sorted((m["mirror"], tuple(sorted(m["topics"]))) for m in listing["mirrors"])


def test_a_follower_enforces_what_the_engine_instance_decides_and_sees_a_failover_within_seconds(clusters, workdir, kafka_classpath):
    source, destination = clusters
    topic, mirror, state_topic = unique("follow"), unique("fm"), unique("kmp-state")
    create_with_compaction_gaps(source.bootstrap, topic, PARTITIONS)  # compaction gaps: fillers on the destination
    produce_plain(source.bootstrap, topic, 60)
    produce_transactions(source.bootstrap, topic)  # committed and aborted: replayed, real markers on the destination
    expected = {isolation: read_all(source.bootstrap, topic, PARTITIONS, isolation) for isolation in ("read_committed", "read_uncommitted")}
    args = shared_config(workdir, state_topic)

    # The follower starts first: the state topic does not exist yet, so nothing is a mirror topic.
    follower = ProxyProcess(destination.bootstrap, workdir, args, env={"KMP_ENGINE_ROLE": "follower"}).start()
    engine = None
    try:
        status, body = follower.http("/readyz")
        assert status == 200 and "does not exist yet" in body, f"a follower without a state topic is ready and says why: {status} {body}"
        engine = ProxyProcess(destination.bootstrap, workdir, args).start()
        status, r = call(engine, "POST", "/v1/mirrors", {"name": mirror, "configs": {"bootstrap.servers": source.bootstrap}})
        assert status == 201, f"mirror created through the engine instance: {status} {r}"
        status, r = call(engine, "POST", f"/v1/mirrors/{mirror}/start", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"topic started through the engine instance: {r}"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        direct = read_all(destination.bootstrap, topic, PARTITIONS, "read_uncommitted")
        assert any(r[2] == FILLER_KEY for r in direct), \
            "the destination log holds fillers where the source has compaction gaps (the premise of the masking check)"

        # List: the follower learned the new mirror and its topic from the state topic while running.
        wait_until("the follower lists the mirror the engine instance created", lambda: listed(follower) == listed(engine), timeout=15)
        assert (mirror, (topic,)) in listed(follower), f"the follower lists {mirror} with {topic}: {listed(follower)}"

        # Produce: refused exactly as through the engine instance (by name: librdkafka).
        err, _ = produce_one(follower.bootstrap, topic, 0)
        assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, \
            f"a produce to a mirror topic through the follower is refused with POLICY_VIOLATION, got {err}"
        err_engine, _ = produce_one(engine.bootstrap, topic, 0)
        assert err_engine is not None and err_engine.code() == err.code(), f"same refusal as through the engine instance: {err_engine} vs {err}"
        # By topic id (Produce v13, Java 4.x): the follower looked the destination topic id up.
        out = subprocess.run([*java_command(kafka_classpath, JAVA), "produce", follower.bootstrap, topic], capture_output=True, text=True, timeout=200)
        line = (out.stdout.strip().splitlines() or ["<no output> " + out.stderr[-2000:]])[-1]
        assert line.startswith("E ") and "PolicyViolationException" in line, f"the Java producer (topic ids) is refused through the follower: {line}"
        assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == high_watermarks(source.bootstrap, topic, PARTITIONS), \
            "nothing written through the follower reached the mirror topic"

        # Fetch: no fillers through the follower, at either isolation level.
        masked_before = follower.metric("kmp_masked_fetch_responses_total")
        for isolation in ("read_committed", "read_uncommitted"):
            got = read_all(follower.bootstrap, topic, PARTITIONS, isolation)
            assert not [r for r in got if r[2] == FILLER_KEY], f"fillers reached a consumer of the follower ({isolation})"
            assert got == expected[isolation], \
                f"through the follower ({isolation}) consumers see exactly what the source's {isolation} consumers see ({len(got)} vs {len(expected[isolation])} records)"
        assert follower.metric("kmp_masked_fetch_responses_total") > masked_before, "the follower masked filler batches in Fetch responses"

        # Describe: the follower shows what the engine instance shows (progress as of the engine's
        # last state write, every 500 ms here).
        want = described(engine, mirror, topic)
        assert [p[1] for p in want] == ["mirroring"] * PARTITIONS, f"the engine instance mirrors every partition: {want}"
        wait_until("the follower describes the mirror as the engine instance does", lambda: described(follower, mirror, topic) == want, timeout=15)

        # Hostile state records (written to the destination directly, bypassing the proxies):
        # the follower reads past them, ignores them and changes nothing.
        end_before = follower.metric("kmp_state_follower_end_offset")
        forger = Producer({"bootstrap.servers": destination.bootstrap})
        for key, value in [(b"topic/" + topic.encode(), b"{not json"), (b"\xff\xfe", b"{}"), (b"partition/x/notanumber", b"{}"),
                           (b"topic/bad name", b'{"mirror":"m","partitions":1,"how":"created","at_ms":1,"desired":"stopped","writable":true}'),
                           (f"mirror/{mirror}".encode(), b'{"origin":"api","definition":{"name":"other","source_bootstrap_servers":["x:1"]}}')]:
            forger.produce(state_topic, key=key, value=value)
        assert forger.flush(30) == 0, "the forged records reached the state topic"
        wait_until("the follower read past the forged records",
                 lambda: follower.metric("kmp_state_follower_position") >= end_before + 5 and follower.metric("kmp_state_follower_caught_up") == 1,
                 timeout=30)
        assert "state topic entry ignored" in follower.log(), "ignoring forged entries is logged"
        assert listed(follower) == listed(engine), f"forged records changed nothing: {listed(follower)} vs {listed(engine)}"
        err, _ = produce_one(follower.bootstrap, topic, 0)
        assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, f"an unreadable record for the topic leaves it read-only: {err}"

        # Mutating RPCs through the follower: NOT_CONTROLLER with a message, never a fake success.
        code, r = cli_json(follower, "--pause", "--mirror", mirror, "--topics", topic)
        assert code == 1 and r["error_code"] == NOT_CONTROLLER, f"pause through the follower is refused with NOT_CONTROLLER (41): {r}"
        code, out, err = cli(follower, "--stop", "--mirror", mirror, "--topics", topic)
        # The refusal goes to stderr with its reason.
        assert code == 1 and out == "" and "NOT_CONTROLLER" in err and "does not run the mirror engine" in err, \
            f"stop through the follower: {code} stdout {out!r} stderr {err!r}"
        status, r = call(follower, "POST", f"/v1/mirrors/{mirror}/stop", {"topics": [topic]})
        assert status == 421 and r["error_code"] == NOT_CONTROLLER and "engine.role" in r["message"], f"REST stop through the follower: {status} {r}"
        assert [p[1] for p in described(engine, mirror, topic)] == ["mirroring"] * PARTITIONS, "the refused requests changed nothing"
        status, body = follower.http("/readyz")
        assert status == 200 and "caught up" in body and state_topic in body, f"the follower's readiness says it has caught up: {status} {body}"
        assert follower.metric("kmp_state_follower_caught_up") == 1

        # Failover through the engine instance. A producer keeps trying through the follower from
        # before the stop is sent; the time is measured until its first accepted write.
        ends = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        accepted, refusals = {}, []

        def keep_producing():
            while time.time() - requested < 60 + FAILOVER_VISIBLE_BOUND_S:
                err, offset = produce_one(follower.bootstrap, topic, 1)
                if err is None:
                    accepted.update(at=time.time(), offset=offset)
                    return
                refusals.append(err)
                time.sleep(0.01)

        requested = time.time()
        poller = threading.Thread(target=keep_producing, daemon=True)
        poller.start()
        status, r = call(engine, "POST", f"/v1/mirrors/{mirror}/stop", {"topics": [topic]})
        stopped = time.time()
        assert status == 200 and r["results"][0]["error_code"] == 0, f"stop through the engine instance: {r}"
        poller.join(FAILOVER_VISIBLE_BOUND_S + 5)
        assert "at" in accepted, f"the follower still refused writes {time.time() - stopped:.1f}s after the stop returned: {refusals[-3:]}"
        assert all(e.code() == KafkaError.POLICY_VIOLATION for e in refusals), f"before the follower saw the stop it refused as before: {set(refusals)}"
        visible = accepted["at"]
        print(f"\nfailover visible through the follower {(visible - stopped) * 1000:.0f} ms after the stop returned "
              f"({(visible - requested) * 1000:.0f} ms after it was sent; the stop took {(stopped - requested) * 1000:.0f} ms; "
              f"{len(refusals)} refused produce attempts before)")
        assert visible - stopped <= FAILOVER_VISIBLE_BOUND_S, f"failover visible within {FAILOVER_VISIBLE_BOUND_S}s of the stop"
        assert accepted["offset"] == ends[1], f"the follower's producer writes at the next offset after the mirrored data ({ends[1]}): {accepted}"
        err, offset = produce_one(engine.bootstrap, topic, 1)
        assert err is None and offset == ends[1] + 1, f"the engine instance accepts the next write too: {err} {offset}"
        wait_until("the follower describes the partitions as stopped",
                 lambda: [p[1] for p in described(follower, mirror, topic)] == ["stopped"] * PARTITIONS, timeout=15)
    finally:
        codes = {"follower": follower.stop(), "engine": engine.stop() if engine else 0}
        assert codes == {"follower": 0, "engine": 0}, f"both proxies exit 0 on SIGTERM: {codes}\n{follower.log()[-3000:]}"

    # A follower started after the failover loads the stopped (writable) topic from the state topic.
    follower = ProxyProcess(destination.bootstrap, workdir, args, env={"KMP_ENGINE_ROLE": "follower"}).start()
    try:
        err, offset = produce_one(follower.bootstrap, topic, 0)
        assert err is None and offset == ends[0], f"a restarted follower lets writes to the stopped topic through: {err} {offset}"
        assert not [r for r in read_all(follower.bootstrap, topic, PARTITIONS, "read_committed") if r[2] == FILLER_KEY], \
            "a restarted follower still masks the fillers"
    finally:
        assert follower.stop() == 0


@pytest.mark.long  # a state-topic leader kill; the quick tier keeps the follower's failover test
def test_a_follower_keeps_following_when_the_state_topic_leader_is_killed(clusters, workdir):
    """The state topic's leader broker is SIGKILLed: the follower finds the new leader and still sees
    a stop done through the engine instance afterwards (bounded, measured)."""
    source, destination = clusters
    topic, mirror, state_topic = unique("follow-kill"), unique("fk"), unique("kmp-state")
    create(source.bootstrap, topic, 1)
    produce_plain(source.bootstrap, topic, 20)
    args = shared_config(workdir, state_topic)
    engine = ProxyProcess(destination.bootstrap, workdir, args).start()
    follower = ProxyProcess(destination.bootstrap, workdir, args, env={"KMP_ENGINE_ROLE": "follower"}).start()
    victim = None
    try:
        assert call(engine, "POST", "/v1/mirrors", {"name": mirror, "configs": {"bootstrap.servers": source.bootstrap}})[0] == 201
        status, r = call(engine, "POST", f"/v1/mirrors/{mirror}/start", {"topics": [topic]})
        assert status == 200 and r["results"][0]["error_code"] == 0, f"topic started through the engine instance: {r}"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        wait_until("the follower lists the mirror", lambda: (mirror, (topic,)) in listed(follower), timeout=15)

        victim = leader_of(destination.bootstrap, state_topic, 0)
        destination.kill_broker(victim, signal.SIGKILL)
        killed = time.time()
        # The engine is elected: when the killed broker was also its election's coordinator, the
        # engine stops writing until it is elected again (a new term, which loads its stored state),
        # and a stop meanwhile is answered retriably (15, or HTTP 503) — what an operator retries.
        status, r, retries = call_retrying(engine, "POST", f"/v1/mirrors/{mirror}/stop", {"topics": [topic]}, timeout=30)
        stopped = time.time()
        assert status == 200 and r["results"][0]["error_code"] == 0, f"stop through the engine instance after the state leader died: {r} (after {len(retries)} retriable answers)"
        while True:
            err, offset = produce_one(follower.bootstrap, topic, 0)
            if err is None:
                break
            assert err.code() == KafkaError.POLICY_VIOLATION, f"before the follower sees the stop it refuses as before: {err}"
            assert time.time() - stopped < 30, f"the follower still refuses writes {time.time() - stopped:.1f}s after the stop returned: {err}"
            time.sleep(0.05)
        visible = time.time()
        print(f"\nstate topic leader {victim} killed: the stop took {(stopped - killed) * 1000:.0f} ms ({len(retries)} retriable answers first), visible through the follower "
              f"{(visible - stopped) * 1000:.0f} ms after it returned")
        new_leader = leader_of(destination.bootstrap, state_topic, 0)
        assert new_leader not in (victim, -1), f"the state topic moved to a live broker (was {victim}, now {new_leader})"
        status, body = follower.http("/readyz")
        assert status == 200 and "caught up" in body, f"the follower is caught up again: {status} {body}"
    finally:
        codes = {"follower": follower.stop(), "engine": engine.stop()}
        if victim is not None and victim not in destination.procs:
            destination.start_broker(victim)
        assert codes == {"follower": 0, "engine": 0}, f"both proxies exit 0 on SIGTERM: {codes}\n{follower.log()[-3000:]}"
