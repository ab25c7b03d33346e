"""Management requests through any instance: three `engine.role = "auto"` proxies in front of one
destination, and every mutating mirror RPC (create, start, pause, resume, stop, delete) sent with
the `mirrors` CLI to a *standby* is carried out by the active instance — handed over through the
state topic — with the active instance's answer (KIP error codes included) relayed to the caller.
The effect is checked through the other instances, and a stop through a standby makes the topic
writable through every instance."""

import statistics
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from conftest import unique
from kmp_common import wait_until
from instances import ELECTION_BOUND_S, auto_instances, lists_topic, partition_states, wait_one_active
from mirror import cli_json, create, high_watermarks, produce_one, produce_plain, wait_caught_up

PARTITIONS = 2


def timed(latencies: list, proxy, *args):
    started = time.time()
    out = cli_json(proxy, *args)
    latencies.append(time.time() - started)
    return out


def state_topic_bytes(bootstrap: str, topic: str) -> bytes:
    """Every key and value of partition 0 of ``topic`` up to its end, concatenated (read from the
    broker directly)."""
    end = high_watermarks(bootstrap, topic, 1)[0]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("state-bytes"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out, last, deadline = bytearray(), -1, time.time() + 30
    try:
        while last < end - 1:
            assert time.time() < deadline, f"{topic} read up to offset {last} of {end} within 30 s"
            for m in c.consume(1000, 0.5):
                if m.error():
                    continue
                last = m.offset()
                out += (m.key() or b"") + (m.value() or b"")
    finally:
        c.close()
    return bytes(out)


def test_every_mirror_operation_sent_to_a_standby_is_carried_out_by_the_active_instance(clusters, workdir):
    source, destination = clusters
    topic, mirror = unique("fwd"), unique("fwdm")
    create(source.bootstrap, topic, PARTITIONS)
    produce_plain(source.bootstrap, topic, 60)
    props = workdir / f"{mirror}.properties"
    props.write_text(f"bootstrap.servers={source.bootstrap}\n")
    latencies: list[float] = []
    with auto_instances(destination, workdir) as instances:
        active, _ = wait_one_active(instances, "exactly one of three role-auto instances is active", ELECTION_BOUND_S)
        first, second = [i for i in instances if i is not active]

        # A create the active would refuse whatever its state (a source password given inline,
        # not by reference) is refused by the standby itself: the secret never reaches the state topic.
        secret = unique("inline-s3cret")
        leaky = workdir / f"{mirror}-inline.properties"
        leaky.write_text(f"bootstrap.servers={source.bootstrap}\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                         f"sasl.username=mirror\nsasl.password={secret}\n")
        code, r = cli_json(first.proxy, "--create", "--mirror", mirror, "--mirror-config", str(leaky))
        assert code == 1 and r["error_code"] == 40 and secret not in str(r), \
            f"standby {first.instance_id} refuses an inline source secret with INVALID_CONFIG, without echoing it: {r}"

        code, r = timed(latencies, first.proxy, "--create", "--mirror", mirror, "--mirror-config", str(props))
        assert code == 0 and r["error"] == "NONE", f"a create through standby {first.instance_id} is carried out: {r}"
        stored = state_topic_bytes(destination.bootstrap, first.state_topic)
        assert mirror.encode() in stored, "the state topic is read (it holds the mirror created since)"
        assert secret.encode() not in stored, "the refused create's inline secret was never written to the state topic"
        code, r = timed(latencies, second.proxy, "--create", "--mirror", mirror, "--mirror-config", str(props))
        assert code == 1 and r["error_code"] == 136, f"the active's CLUSTER_MIRROR_ALREADY_EXISTS reaches the caller of standby {second.instance_id}: {r}"
        code, r = timed(latencies, second.proxy, "--start", "--mirror", mirror, "--topics", topic)
        assert code == 0 and [(x["topic"], x["error_code"]) for x in r["results"]] == [(topic, 0)], f"a start through standby {second.instance_id}: {r}"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        for inst in instances:
            wait_until(f"{inst.instance_id} lists {mirror} with {topic}", lambda: lists_topic(inst, mirror, topic), timeout=15)

        code, r = timed(latencies, first.proxy, "--pause", "--mirror", mirror, "--topics", topic)
        assert code == 0 and r["results"][0]["error_code"] == 0, f"a pause through standby {first.instance_id}: {r}"
        wait_until("the active describes the topic as paused",
                   lambda: [s for _, s in partition_states(active, mirror, topic)] == ["paused"] * PARTITIONS, timeout=15)
        code, r = timed(latencies, second.proxy, "--resume", "--mirror", mirror, "--topics", topic)
        assert code == 0 and r["results"][0]["error_code"] == 0, f"a resume through standby {second.instance_id}: {r}"
        wait_until("the active describes the topic as mirroring again",
                   lambda: [s for _, s in partition_states(active, mirror, topic)] == ["mirroring"] * PARTITIONS, timeout=15)
        produce_plain(source.bootstrap, topic, 40, start=60)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})

        code, r = timed(latencies, first.proxy, "--stop", "--mirror", mirror, "--topics", topic)
        assert code == 0 and r["results"][0]["error_code"] == 0, f"a stop (failover) through standby {first.instance_id}: {r}"
        for inst in instances:
            wait_until(f"{topic} is writable through {inst.instance_id} after the stop", lambda: produce_one(inst.bootstrap, topic, 0)[0] is None, timeout=20)
        code, r = timed(latencies, second.proxy, "--delete", "--mirror", mirror)
        assert code == 0 and r["error_code"] == 0, f"a delete through standby {second.instance_id}: {r}"
        for inst in instances:
            wait_until(f"{inst.instance_id} no longer lists {mirror}",
                       lambda: all(m["mirror"] != mirror for m in cli_json(inst.proxy, "--list")[1]["mirrors"]), timeout=15)
        err, _ = produce_one(first.bootstrap, topic, 1)
        assert err is None or err.code() != KafkaError.POLICY_VIOLATION, f"the detached topic stays writable: {err}"
        assert high_watermarks(destination.bootstrap, topic, PARTITIONS) >= high_watermarks(source.bootstrap, topic, PARTITIONS)
        print(f"\nforwarded operations through standbys: {len(latencies)}, median {statistics.median(latencies) * 1000:.0f} ms, "
              f"max {max(latencies) * 1000:.0f} ms (CLI process included)")
