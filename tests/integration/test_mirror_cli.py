"""`kafka-mirror-proxy mirrors …` (the KIP-1279 CLI flags) speaking the KIP-1279 Kafka RPCs to a
proxy in front of real clusters: the RPCs are advertised in ApiVersions, list/describe show the
mirror, pause/resume/stop (by name and by regex) drive the topic through its life cycle with a
failover at the end, and the KIP error codes come back for invalid requests."""

import json
import socket
import struct
import subprocess

from confluent_kafka import KafkaError

import kafka_wire
from conftest import PROXY_BIN, ProxyProcess, unique
from test_mirror_engine import create, high_watermarks, produce_plain, wait_caught_up
from test_mirror_failover import produce_one
from test_mirror_faults import mirror_config

PARTITIONS = 2


def cli(proxy, *args: str) -> tuple[int, str, str]:
    out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, *args], capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout, out.stderr


def cli_json(proxy, *args: str) -> tuple[int, dict]:
    code, out, err = cli(proxy, *args, "--output", "json")
    assert out.strip(), f"no output (exit {code}): {err}"
    return code, json.loads(out)


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
        for k in (96, 98, 99, 102, 103):
            assert keys.get(k) == (0, 0), f"mirror RPC {k} advertised in ApiVersions: {keys.get(k)}"

        code, listing = cli_json(proxy, "--list")
        assert code == 0 and any(m["mirror"] == "cli" and topic in m["topics"] for m in listing["mirrors"]), listing
        code, out, _ = cli(proxy, "--list")
        assert "MIRROR" in out and "SOURCE-BOOTSTRAP-SERVER" in out and "cli" in out, out

        code, d = cli_json(proxy, "--describe", "--mirror", "cli")
        mine = [p for p in d["partitions"] if p["topic"] == topic]
        ends = high_watermarks(destination.bootstrap, topic, PARTITIONS)
        assert code == 0 and sorted((p["partition"], p["state"], p["lag"], p["destination_offset"]) for p in mine) == \
            [(p, "MIRRORING", 0, ends[p]) for p in range(PARTITIONS)], mine
        code, out, _ = cli(proxy, "--describe", "--mirror", "cli")
        assert "SOURCE-OFFSET" in out and "DESTINATION-OFFSET" in out and "MIRRORING" in out

        pattern = topic.split("-")[0] + "-cli-.*"  # a regex matching the topic
        code, r = cli_json(proxy, "--pause", "--mirror", "cli", "--topics", pattern)
        assert code == 0 and r["results"] == [{"topic": topic, "error_code": 0, "error": "NONE", "message": None}], r
        code, d = cli_json(proxy, "--describe", "--mirror", "cli")
        assert {p["state"] for p in d["partitions"] if p["topic"] == topic} == {"PAUSED"}

        code, r = cli_json(proxy, "--resume", "--mirror", "cli", "--topics", topic)
        assert code == 0, r
        produce_plain(source.bootstrap, topic, 30, start=500)
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})

        err, _ = produce_one(proxy.bootstrap, topic, 0)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
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
        code, _, err = cli(proxy, "--create", "--mirror", "x")
        assert code == 2 and "not supported yet" in err
    finally:
        assert proxy.stop() == 0
