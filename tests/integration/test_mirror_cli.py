"""`kafka-mirror-proxy mirrors …` (the KIP-1279 CLI flags) speaking the KIP-1279 Kafka RPCs to a
proxy in front of real clusters: the RPCs are advertised in ApiVersions, list/describe show the
mirror, pause/resume/stop (by name and by regex) drive the topic through its life cycle with a
failover at the end, and the KIP error codes come back for invalid requests."""

import socket
import struct

from confluent_kafka import KafkaError

import kafka_wire
from conftest import ProxyProcess, unique
from kmp_common import wait_until
from mirror import (
    cli, cli_json, create, high_watermarks, mirror_config, mirror_through_cli, produce_one, produce_plain,
    wait_caught_up,
)

PARTITIONS = 2


def api_versions_keys(proxy) -> dict[int, tuple[int, int]]:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
        s.sendall(kafka_wire.api_versions_v0(1))
        _, body = kafka_wire.read_response(s)
    (err, n) = struct.unpack_from(">hi", body, 0)
    keys = {}
    for i in range(n):
        k, lo, hi = struct.unpack_from(">hhh", body, 6 + 6 * i)
        keys[k] = (lo, hi)
    return keys


def test_the_cli_drives_a_mirror_topic_through_pause_resume_and_failover(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-cli")
    create(source.bootstrap, topic, PARTITIONS)
    produce_plain(source.bootstrap, topic, 100)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="cli")).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
        keys = api_versions_keys(proxy)
        for k in (94, 95, 96, 98, 99, 102, 103, 104):
            assert keys.get(k) == (0, 0), f"mirror RPC {k} advertised in ApiVersions: {keys.get(k)}"

        code, listing = cli_json(proxy, "--list")
        assert code == 0 and any(m["mirror"] == "cli" and topic in m["topics"] for m in listing["mirrors"]), listing
        code, out, _ = cli(proxy, "--list")
        assert "MIRROR" in out and "SOURCE-BOOTSTRAP-SERVER" in out and "cli" in out, out

        code, d = cli_json(proxy, "--describe", "--mirror", "cli")
        mine = [p for p in d["partitions"] if p["topic"] == topic]
        ends = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        assert code == 0 and sorted((p["partition"], p["state"], p["lag"], p["destination_offset"]) for p in mine) == \
            [(p, "mirroring", 0, ends[p]) for p in range(PARTITIONS)], mine
        code, out, _ = cli(proxy, "--describe", "--mirror", "cli")
        assert "SOURCE-OFFSET" in out and "DESTINATION-OFFSET" in out and "MIRRORING" in out

        pattern = topic.split("-")[0] + "-cli-.*"  # a regex matching the topic
        code, r = cli_json(proxy, "--pause", "--mirror", "cli", "--topics", pattern)
        assert code == 0 and r["results"] == [{"topic": topic, "error_code": 0, "error": "NONE", "message": None}], r
        code, d = cli_json(proxy, "--describe", "--mirror", "cli")
        assert {p["state"] for p in d["partitions"] if p["topic"] == topic} == {"paused"}

        code, r = cli_json(proxy, "--resume", "--mirror", "cli", "--topics", topic)
        assert code == 0, r
        produce_plain(source.bootstrap, topic, 30, start=500)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})

        err, _ = produce_one(proxy.bootstrap, topic, 0)
        assert err is not None and err.code() == KafkaError.POLICY_VIOLATION
        code, r = cli_json(proxy, "--stop", "--mirror", "cli", "--topics", topic, "--graceful-timeout-ms", "30000")
        assert code == 0 and r["results"][0]["error_code"] == 0, r
        stopped = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        assert stopped == high_watermarks(source.bootstrap, topic, PARTITIONS), "graceful: the destination had everything"
        err, offset = produce_one(proxy.bootstrap, topic, 0)
        assert err is None and offset == stopped[0], f"writable after failover, at the next offset: {err} {offset}"

        # Error codes of the KIP, through the CLI (exit 1) and its JSON.
        code, r = cli_json(proxy, "--resume", "--mirror", "cli", "--topics", topic)
        assert code == 1 and r["results"][0]["error"] == "MIRROR_TOPIC_NOT_PAUSED" and r["results"][0]["error_code"] == 141, r
        code, r = cli_json(proxy, "--pause", "--mirror", "cli", "--topics", topic)
        assert code == 1 and r["results"][0]["error_code"] == 142, r
        code, r = cli_json(proxy, "--pause", "--mirror", "cli", "--topics", "no-such-topic")
        assert code == 1 and r["results"][0]["error_code"] == 139, r
        code, r = cli_json(proxy, "--pause", "--mirror", "nope", "--topics", topic)
        assert code == 1 and r["error_code"] == 137 and r["results"][0]["error_code"] == 137, r
        code, d = cli_json(proxy, "--describe", "--mirror", "nope")
        assert code == 1 and d["partitions"] == []
        # The text form: what was refused goes to stderr with its reason, nothing to stdout.
        code, out, err = cli(proxy, "--describe", "--mirror", "nope")
        assert (code, out) == (1, ""), f"an unknown mirror prints no empty table (exit {code}):\n{out}"
        assert "mirror nope: UNKNOWN_CLUSTER_MIRROR: this proxy has no mirror of that name" in err, err
        code, out, err = cli(proxy, "--pause", "--mirror", "cli", "--topics", "no-such-topic")
        assert (code, out) == (1, ""), f"a refused pause writes nothing to stdout (exit {code}):\n{out}"
        assert "mirror cli: topic no-such-topic not paused: TOPIC_NOT_IN_CLUSTER_MIRROR" in err, err
        code, _, err = cli(proxy, "--create", "--mirror", "x")
        assert code == 2 and "--mirror-config" in err, "usage errors exit 2"
    finally:
        assert proxy.stop() == 0


def test_a_mirror_created_through_the_cli_lives_through_start_failover_restart_and_delete(clusters, workdir):
    source, destination = clusters
    first, later = unique("rt-first"), unique("rt-later")
    create(source.bootstrap, first, 1)
    produce_plain(source.bootstrap, first, 40)
    props = workdir / f"{first}.properties"
    props.write_text(f"# the source\nbootstrap.servers={source.bootstrap}\n")
    args = ["--config", str(workdir / "empty.toml")]
    (workdir / "empty.toml").write_text("[engine]\nenabled = true\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        code, r = cli_json(proxy, "--create", "--mirror", "rt", "--mirror-config", str(props))
        assert code == 0 and r["error"] == "NONE", r
        code, r = cli_json(proxy, "--create", "--mirror", "rt", "--mirror-config", str(props))
        assert code == 1 and r["error_code"] == 136, f"CLUSTER_MIRROR_ALREADY_EXISTS: {r}"

        prefix = later.rsplit("-", 2)[0]
        code, r = cli_json(proxy, "--start", "--mirror", "rt", "--topics", f"{first},{prefix}-.*")
        assert code == 0 and [(x["topic"], x["error_code"]) for x in r["results"]] == [(first, 0)], r
        wait_caught_up(source.bootstrap, destination.bootstrap, {first: 1})
        create(source.bootstrap, later, 1)  # matches the include pattern saved by --start
        produce_plain(source.bootstrap, later, 25)
        wait_caught_up(source.bootstrap, destination.bootstrap, {later: 1})

        code, r = cli_json(proxy, "--start", "--mirror", "rt", "--topics", first)
        assert code == 1 and r["results"][0]["error_code"] == 146, f"MIRROR_TOPIC_NOT_STOPPED: {r}"
        code, r = cli_json(proxy, "--start", "--mirror", "rt", "--topics", "no-such-topic")
        assert code == 1 and r["results"][0]["error_code"] == 3, f"UNKNOWN_TOPIC_OR_PARTITION: {r}"
        code, r = cli_json(proxy, "--start", "--mirror", "nope", "--topics", first)
        assert code == 1 and r["results"][0]["error_code"] == 137, r
        code, r = cli_json(proxy, "--create", "--mirror", "rt2", "--mirror-config", str(props))
        assert code == 0, r
        code, r = cli_json(proxy, "--start", "--mirror", "rt2", "--topics", first)
        assert code == 1 and r["results"][0]["error_code"] == 138, f"TOPIC_ALREADY_IN_CLUSTER_MIRROR: {r}"
        code, r = cli_json(proxy, "--delete", "--mirror", "rt")
        assert code == 1 and r["error_code"] == 143, f"CLUSTER_MIRROR_NOT_EMPTY: {r}"

        code, r = cli_json(proxy, "--stop", "--mirror", "rt", "--topics", ".*")
        assert code == 0 and sorted(x["topic"] for x in r["results"]) == sorted([first, later]), r
        code, r = cli_json(proxy, "--start", "--mirror", "rt", "--topics", first)
        assert code == 1 and r["results"][0]["error_code"] == 145, f"INVALID_CLUSTER_MIRROR_STATES (re-mirroring a failed-over topic): {r}"
    finally:
        assert proxy.stop() == 0

    proxy = ProxyProcess(destination.bootstrap, workdir, args).start()
    try:
        code, listing = cli_json(proxy, "--list")
        rt = [m for m in listing["mirrors"] if m["mirror"] == "rt"]
        assert rt and sorted(rt[0]["topics"]) == sorted([first, later]), f"the API-created mirror survives a restart: {listing}"
        # The partition states come from the topics' tasks, which start just after boot.
        wait_until("the restarted proxy describes the stopped topics' partitions as stopped",
                   lambda: {p["state"] for p in cli_json(proxy, "--describe", "--mirror", "rt")[1]["partitions"]} == {"stopped"}, timeout=60)
        code, r = cli_json(proxy, "--delete", "--mirror", "rt")
        assert code == 0 and r["error_code"] == 0, r
        code, listing = cli_json(proxy, "--list")
        assert not [m for m in listing["mirrors"] if m["mirror"] == "rt"], listing
        code, d = cli_json(proxy, "--describe", "--mirror", "rt")
        assert code == 1, "a deleted mirror is unknown"
        end = high_watermarks(destination.bootstrap, first, 1)[0]
        err, offset = produce_one(proxy.bootstrap, first, 0)
        assert err is None and offset == end, f"the detached topic is an ordinary writable topic: {err} {offset}"
        code, r = cli_json(proxy, "--delete", "--mirror", "rt2")
        assert code == 0, "a mirror without topics can be deleted"
    finally:
        assert proxy.stop() == 0


def test_a_stored_mirror_not_started_after_a_restart_still_owns_its_topics(clusters, workdir):
    """A restarted proxy knows a stored mirror's topics from the moment it is ready, before (or
    without) the mirror's tasks taking them up: here the source is no longer allowed, so the
    mirror is not started at all, and its topic must still be listed, read-only, and keep the
    mirror from being deleted."""
    source, destination = clusters
    topic = unique("held")
    create(source.bootstrap, topic, 1)
    produce_plain(source.bootstrap, topic, 30)
    state = unique("kmp-held-state")
    conf = workdir / f"{state}.toml"
    conf.write_text(f'[engine]\nenabled = true\nstate_topic = "{state}"\n')
    props = workdir / f"{state}.properties"
    props.write_text(f"bootstrap.servers={source.bootstrap}\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(conf)]).start()
    try:
        mirror_through_cli(proxy, source, destination, "held", props, topic)
    finally:
        assert proxy.stop() == 0

    # Restarted with an allow-list that excludes the source: the stored mirror is not started.
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(conf)], env={"KMP_MIRROR_SOURCE_ALLOW": "192.0.2.1:9092"}).start()
    try:
        code, listing = cli_json(proxy, "--list")
        held = [m for m in listing["mirrors"] if m["mirror"] == "held"]
        assert held and held[0]["topics"] == [topic], f"the stored mirror lists its topic as soon as the proxy is ready: {listing}"
        code, r = cli_json(proxy, "--delete", "--mirror", "held")
        assert code == 1 and r["error_code"] == 143, f"CLUSTER_MIRROR_NOT_EMPTY: a mirror whose topic is still mirroring is not deleted: {r}"
        err, _ = produce_one(proxy.bootstrap, topic, 0)
        assert err is not None, "the stored mirror topic stays read-only"
    finally:
        assert proxy.stop() == 0


def describe_configs_v1(resources: list[tuple[int, str]]) -> bytes:
    body = struct.pack(">i", len(resources))
    for kind, name in resources:
        body += struct.pack(">b", kind) + kafka_wire._str(name) + struct.pack(">i", -1)
    return kafka_wire.request(32, 1, 11, body + b"\x00")


def parse_describe_configs_v1(body: bytes) -> dict[tuple[int, str], tuple[int, dict]]:
    pos = 4
    out = {}

    def string(at):
        (n,) = struct.unpack_from(">h", body, at)
        return (None, at + 2) if n < 0 else (body[at + 2:at + 2 + n].decode(), at + 2 + n)
    (n,) = struct.unpack_from(">i", body, pos)
    pos += 4
    for _ in range(n):
        (err,) = struct.unpack_from(">h", body, pos)
        _, pos = string(pos + 2)
        (kind,) = struct.unpack_from(">b", body, pos)
        name, pos = string(pos + 1)
        (count,) = struct.unpack_from(">i", body, pos)
        pos += 4
        configs = {}
        for _ in range(count):
            k, pos = string(pos)
            v, pos = string(pos)
            pos += 1 + 1 + 1  # read_only, config_source, is_sensitive
            (syn,) = struct.unpack_from(">i", body, pos)
            pos += 4
            for _ in range(max(syn, 0)):
                _, pos = string(pos)
                _, pos = string(pos)
                pos += 1
            configs[k] = v
        out[(kind, name)] = (err, configs)
    return out


def incremental_alter_v0(kind: int, name: str, ops: list[tuple[str, int, str | None]]) -> bytes:
    body = struct.pack(">i", 1) + struct.pack(">b", kind) + kafka_wire._str(name) + struct.pack(">i", len(ops))
    for k, op, v in ops:
        body += kafka_wire._str(k) + struct.pack(">b", op) + (kafka_wire._str(v) if v is not None else struct.pack(">h", -1))
    return kafka_wire.request(44, 0, 12, body + b"\x00")


def alter_error(body: bytes) -> tuple[int, str | None]:
    (err,) = struct.unpack_from(">h", body, 8)
    (n,) = struct.unpack_from(">h", body, 10)
    return err, (None if n < 0 else body[12:12 + n].decode())


def roundtrip(proxy, frame: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
        s.sendall(frame)
        _, body = kafka_wire.read_response(s)
    return body


def test_cluster_mirror_configs_are_described_and_altered_as_config_resources_of_type_64(clusters, workdir):
    source, destination = clusters
    auto = unique("cfgauto")
    props = workdir / f"{auto}.properties"
    props.write_text(f"bootstrap.servers={source.bootstrap}\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [unique("declared")], name="declared")).start()
    try:
        plain = unique("cfg-plain")
        create(destination.bootstrap, plain, 1)
        code, r = cli_json(proxy, "--create", "--mirror", "cfg", "--mirror-config", str(props))
        assert code == 0, r
        got = parse_describe_configs_v1(roundtrip(proxy, describe_configs_v1([(64, "cfg"), (2, plain), (64, "nope")])))
        err, configs = got[(64, "cfg")]
        assert err == 0 and configs["bootstrap.servers"] == source.bootstrap and configs["mirror.topics.include"] == "", got
        assert got[(2, plain)][0] == 0 and "retention.ms" in got[(2, plain)][1], "the topic resource in the same request is answered by the broker"
        assert got[(64, "nope")][0] == 137, "UNKNOWN_CLUSTER_MIRROR"

        prefix = auto.rsplit("-", 2)[0]
        assert alter_error(roundtrip(proxy, incremental_alter_v0(64, "cfg", [("mirror.topics.include", 2, f"{prefix}-.*")]))) == (0, None)
        create(source.bootstrap, auto, 1)
        produce_plain(source.bootstrap, auto, 12)
        wait_caught_up(source.bootstrap, destination.bootstrap, {auto: 1})  # picked up through the altered pattern
        _, configs = parse_describe_configs_v1(roundtrip(proxy, describe_configs_v1([(64, "cfg")])))[(64, "cfg")]
        assert configs["mirror.topics.include"] == f"{prefix}-.*"

        # Source security properties are alterable, but secrets only by reference (never stored in clear).
        err, msg = alter_error(roundtrip(proxy, incremental_alter_v0(64, "cfg", [("sasl.jaas.config", 0, "inline-s3cret")])))
        assert err == 40 and "by reference" in msg and "inline-s3cret" not in msg, (err, msg)
        err, msg = alter_error(roundtrip(proxy, incremental_alter_v0(64, "cfg", [("mirror.source.cluster.id", 0, "x")])))
        assert err == 40 and "cannot be changed" in msg, (err, msg)
        err, msg = alter_error(roundtrip(proxy, incremental_alter_v0(64, "declared", [("mirror.topics.include", 0, "x")])))
        assert err == 42 and "config file" in msg, (err, msg)
        # Leave no API-created mirror behind for the proxies of later tests.
        assert cli_json(proxy, "--stop", "--mirror", "cfg", "--topics", ".*")[0] == 0
        assert cli_json(proxy, "--delete", "--mirror", "cfg")[0] == 0
    finally:
        assert proxy.stop() == 0
