"""Safe scale-out by default (issue #37). What a platform team does on day one — a Deployment with
`replicas: 3` and one ConfigMap — must never corrupt a mirror: three proxies started with one
identical configuration that names no role elect one engine among themselves, every one of them
refuses writes to the mirror topic, and after two are killed (the active one among them) the
survivor takes over and the destination converges with the source. An instance configured as the
only engine (`engine.role = "engine"`) that finds another active engine on its state topic fences
itself: it says so in /readyz, /metrics and its log, writes nothing, and runs the mirror only once
the other one is gone."""

import time

from confluent_kafka import KafkaError

from kmp_common import unique, wait_until
from instances import (
    ELECTION_BOUND_S, TAKEOVER_BOUND_S, Instance, assert_same_log, lists_topic, partition_states, shut_down, start_mirror,
    wait_one_active,
)
from mirror import create, high_watermarks, produce_one, produce_plain, wait_caught_up

PARTITIONS = 3


def one_config(workdir, state_topic: str, extra: str = "") -> list[str]:
    """The configuration every instance gets: no role, no election settings — the defaults — and a
    state topic of this test's own (the only thing a second deployment would change)."""
    path = workdir / f"{unique('scale-cfg')}.toml"
    path.write_text(f'[engine]\nstate_topic = "{state_topic}"\n{extra}')
    return ["--config", str(path)]


def assert_refused_everywhere(instances, topic: str, destination, context: str) -> None:
    """A produce to ``topic`` through each instance is refused, and the destination log did not grow."""
    before = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    for inst in instances:
        # A standby enforces what it read from the state topic: wait until it knows the topic.
        wait_until(f"{inst.instance_id} lists {topic} as mirrored ({context})", lambda: lists_topic(inst, inst.mirror, topic), 30)
        for partition in range(PARTITIONS):
            err, offset = produce_one(inst.bootstrap, topic, partition)
            assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, \
                f"a produce to mirror topic {topic}[{partition}] through {inst.instance_id} is refused ({context}); got {err} at offset {offset}"
    after = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    assert after == before, f"the refused produces wrote nothing to the destination ({context}): {before} -> {after}"


def test_three_instances_with_one_default_configuration_refuse_writes_and_the_survivor_converges(clusters, workdir):
    source, destination = clusters
    topic, mirror = unique("scale"), unique("scale-m")
    create(source.bootstrap, topic, PARTITIONS)
    produce_plain(source.bootstrap, topic, 300)
    args = one_config(workdir, unique("kmp-state-scale"))
    prefix = unique("kmp-scale")
    instances = [Instance(destination, workdir, args, f"{prefix}-{i}") for i in range(3)]
    for inst in instances:
        inst.mirror = mirror
    survivor = instances[-1]
    try:
        for inst in instances:
            inst.start()
        active, _ = wait_one_active(instances, "three instances with the default configuration elect exactly one engine", ELECTION_BOUND_S)
        # Created through the first instance, whichever is active (a standby hands it over).
        start_mirror(instances[0], source, mirror, topic)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert_refused_everywhere(instances, topic, destination, "three instances running")

        # Kill the active one and one standby; the source keeps taking records meanwhile.
        survivor = next(i for i in instances if i is not active)
        for inst in instances:
            if inst is not survivor:
                inst.proxy.proc.kill()
        produce_plain(source.bootstrap, topic, 200, start=300)
        killed_at = time.time()
        wait_one_active([survivor], "the survivor takes over the engine", TAKEOVER_BOUND_S)
        took_over = time.time() - killed_at
        wait_until(f"every partition of {topic} mirroring on the survivor",
                   lambda: partition_states(survivor, mirror, topic) == [(p, "mirroring") for p in range(PARTITIONS)], 60)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert_same_log(source, destination, topic, PARTITIONS, f"survivor {survivor.instance_id} after two instances were killed")
        assert_refused_everywhere([survivor], topic, destination, "the survivor alone")
        print(f"default scale-out: survivor took over {took_over:.1f}s after the kill")
    finally:
        codes = shut_down(instances)
    assert codes[survivor.instance_id] == 0, f"the survivor exits 0 on SIGTERM: {codes}"


def fenced_view(inst) -> tuple[int, str, float]:
    """(/readyz status, /readyz body, kmp_engine_fenced) of ``inst``; the gauge reads NaN while
    /metrics has no election yet (before the instance took part in it)."""
    status, body = inst.proxy.http("/readyz")
    labels = f'engine_instance="{inst.instance_id}",group="kmp-engine.{inst.state_topic}"'
    fenced = inst.proxy.metric_or_absent("kmp_engine_fenced", labels)
    return status, body, float("nan") if fenced is None else fenced


def test_an_instance_configured_as_the_only_engine_fences_itself_while_another_engine_is_active(clusters, workdir):
    source, destination = clusters
    topic, mirror = unique("fence"), unique("fence-m")
    create(source.bootstrap, topic, PARTITIONS)
    produce_plain(source.bootstrap, topic, 200)
    state_topic = unique("kmp-state-fence")
    args = one_config(workdir, state_topic, 'role = "engine"\n')
    prefix = unique("kmp-fixed")
    first, second = (Instance(destination, workdir, args, f"{prefix}-{i}") for i in range(2))
    for inst in (first, second):
        inst.mirror, inst.state_topic = mirror, state_topic
    try:
        first.start()
        wait_until("the first fixed engine elects itself", lambda: "engine: active" in first.proxy.http("/readyz")[1], ELECTION_BOUND_S)
        start_mirror(first, source, mirror, topic)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})

        second.start()
        wait_until("the second fixed engine reports kmp_engine_fenced 1", lambda: fenced_view(second)[2] == 1, ELECTION_BOUND_S)
        status, body, _ = fenced_view(second)
        assert f"engine: fenced (instance {second.instance_id}" in body and f"active: {first.instance_id}" in body \
            and 'engine.role = "engine" expects this instance to be the only engine' in body, f"/readyz of the fenced instance: {status} {body}"
        assert fenced_view(first)[2] == 0, "the active fixed engine is not fenced"
        log = second.proxy.log()
        assert "expects this instance to be the only engine" in log and "ERROR" in log, f"the fenced instance logs an error:\n{log[-3000:]}"
        assert "active: the mirror engine runs on this instance" not in log, f"the fenced instance never ran the engine:\n{log[-3000:]}"

        produce_plain(source.bootstrap, topic, 100, start=200)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert_refused_everywhere([first, second], topic, destination, "one fixed engine active, one fenced")
        assert "active: the mirror engine runs on this instance" not in second.proxy.log(), "the fenced instance still never ran the engine"

        # The other engine gone, the fenced one is the only engine: it runs the mirror.
        first.proxy.proc.kill()
        produce_plain(source.bootstrap, topic, 100, start=300)
        wait_until("the fenced instance takes over once no other engine is active",
                   lambda: fenced_view(second)[2] == 0 and "engine: active" in fenced_view(second)[1], TAKEOVER_BOUND_S)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        assert_same_log(source, destination, topic, PARTITIONS, "after the fenced instance took over")
    finally:
        codes = shut_down([first, second])
    assert codes[second.instance_id] == 0, f"the remaining instance exits 0 on SIGTERM: {codes}"
