"""Issue 11, finding 3: the KIP-1279 mirror RPCs and cluster-mirror config resources (type 64) on
the Kafka port follow the REST rule. With the default config only loopback peers may manage
mirrors: from the machine's non-loopback address StopMirrorTopics, DeleteClusterMirror,
CreateClusterMirror and IncrementalAlterConfigs on a type-64 resource get
CLUSTER_MIRROR_AUTHORIZATION_FAILED (144) and change nothing, while the same calls from loopback
(the CLI on the proxy's host) keep working. `mirror_admin_networks` admits a remote network;
`kafka_mirror_admin = false` refuses the RPCs to everyone, loopback included."""

import pytest
from confluent_kafka import KafkaError

import sec_wire as wire
from sec_support import (
    cli,
    mirror_decl,
    mirror_names,
    mirrored_topic,
    non_loopback_ipv4,
    partition_states,
    produce_error,
    rest,
    running_proxy,
    unique,
    wait_caught_up,
)

WILDCARD = {"listener": {"advertised_host": "127.0.0.1"}}


def rpc(host: str, port: int, frame: bytes) -> bytes:
    """Body of the answer to one mirror RPC (flexible response header) on a new connection from
    ``host``'s side: connecting to the host's own non-loopback address makes it the peer address."""
    return wire.roundtrip(host, port, frame, flexible_header=True)


def alter_mirror_config(host: str, port: int, mirror: str, include: str) -> tuple[int, str | None]:
    frame = wire.incremental_alter_configs_v0(7, [(wire.CLUSTER_MIRROR_RESOURCE, mirror, [("mirror.topics.include", 0, include)])])
    return wire.parse_alter_configs_v0(wire.roundtrip(host, port, frame))[(wire.CLUSTER_MIRROR_RESOURCE, mirror)]


def mirror_include(proxy, mirror: str) -> str | None:
    body = wire.roundtrip("127.0.0.1", proxy.port, wire.describe_configs_v1(8, [(wire.CLUSTER_MIRROR_RESOURCE, mirror)]))
    code, configs = wire.parse_describe_configs_v1(body)[(wire.CLUSTER_MIRROR_RESOURCE, mirror)]
    assert code == 0, f"describing cluster mirror {mirror} from loopback failed with {code}"
    return configs.get("mirror.topics.include")


@pytest.fixture(scope="module")
def remote_ip() -> str:
    return non_loopback_ipv4()


@pytest.fixture(scope="module")
def guarded(clusters, workdir, remote_ip):
    """A proxy on 0.0.0.0 with the default [security] settings: a config-declared mirror with one
    read-only topic, and two API-created mirrors (one empty, one to alter)."""
    source, destination = clusters
    topic = mirrored_topic(source, records=20, prefix="sec-auth")
    with running_proxy(destination, workdir, WILDCARD, mirrors=[mirror_decl("auth-cfg", source, [topic])], listen_host="0.0.0.0") as proxy:
        wait_caught_up(source, destination, topic, 1)
        for name in ("auth-empty", "auth-api"):
            status, body = rest(proxy, "POST", "/v1/mirrors", {"name": name, "configs": {"bootstrap.servers": source.bootstrap}})
            assert status == 201, f"creating mirror {name} over REST from loopback answered {status}: {body}"
        proxy.topic = topic
        yield proxy


def test_stop_mirror_topics_from_a_non_loopback_address_is_refused_and_the_topic_stays_read_only(guarded, remote_ip):
    code, msg, topics = wire.parse_topics_response(rpc(remote_ip, guarded.port, wire.stop_mirror_topics(1, "auth-cfg", [guarded.topic])))
    refused = code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED or (
        topics and all(c == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED for _, c, _ in topics))
    assert refused, (
        f"StopMirrorTopics from {remote_ip} (not loopback, no credentials) was not refused with 144: top-level {code} {msg!r}, topics {topics}")
    assert set(partition_states(guarded, "auth-cfg", guarded.topic)) == {"mirroring"}, "the refused stop changed the topic's state"
    err = produce_error(guarded.bootstrap, guarded.topic)
    assert err is not None and err.code() == KafkaError.POLICY_VIOLATION, (
        f"after a refused StopMirrorTopics the mirror topic must stay read-only, but a produce got: {err}")


def test_delete_cluster_mirror_from_a_non_loopback_address_is_refused_and_the_mirror_stays(guarded, remote_ip):
    code, msg = wire.parse_simple_response(rpc(remote_ip, guarded.port, wire.delete_cluster_mirror(2, "auth-empty")))
    assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, f"DeleteClusterMirror from {remote_ip} answered {code} {msg!r}, not 144"
    assert "auth-empty" in mirror_names(guarded), "the refused DeleteClusterMirror deleted the mirror anyway"


def test_create_cluster_mirror_from_a_non_loopback_address_is_refused_and_creates_nothing(guarded, remote_ip, clusters):
    source, _ = clusters
    name = unique("auth-forged")
    frame = wire.create_cluster_mirror(3, name, {"bootstrap.servers": source.bootstrap})
    code, msg = wire.parse_simple_response(rpc(remote_ip, guarded.port, frame))
    assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, f"CreateClusterMirror from {remote_ip} answered {code} {msg!r}, not 144"
    assert name not in mirror_names(guarded), "the refused CreateClusterMirror created the mirror anyway"


def test_altering_a_cluster_mirror_config_from_a_non_loopback_address_is_refused_and_changes_nothing(guarded, remote_ip):
    before = mirror_include(guarded, "auth-api")
    code, msg = alter_mirror_config(remote_ip, guarded.port, "auth-api", "repointed-.*")
    assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, (
        f"IncrementalAlterConfigs on cluster-mirror resource auth-api from {remote_ip} answered {code} {msg!r}, not 144")
    assert mirror_include(guarded, "auth-api") == before, "the refused IncrementalAlterConfigs changed the mirror's config anyway"


def test_the_same_mirror_rpcs_from_loopback_still_succeed(guarded, clusters):
    source, _ = clusters
    name = unique("auth-local")
    code, msg = wire.parse_simple_response(rpc("127.0.0.1", guarded.port, wire.create_cluster_mirror(4, name, {"bootstrap.servers": source.bootstrap})))
    assert code == 0, f"CreateClusterMirror from loopback answered {code} {msg!r}"
    assert alter_mirror_config("127.0.0.1", guarded.port, name, "local-.*") == (0, None), "IncrementalAlterConfigs type 64 from loopback"
    assert mirror_include(guarded, name) == "local-.*"
    code, msg = wire.parse_simple_response(rpc("127.0.0.1", guarded.port, wire.delete_cluster_mirror(5, name)))
    assert code == 0, f"DeleteClusterMirror from loopback answered {code} {msg!r}"
    out = cli(guarded, "--list")
    assert out.returncode == 0 and "auth-cfg" in out.stdout, f"the CLI on the proxy's host lists mirrors (exit {out.returncode}): {out.stdout} {out.stderr}"


def test_a_listed_network_may_manage_mirrors_from_a_non_loopback_address(clusters, workdir, remote_ip):
    source, destination = clusters
    sections = {**WILDCARD, "security": {"mirror_admin_networks": [f"{remote_ip}/32"]}}
    with running_proxy(destination, workdir, sections, listen_host="0.0.0.0") as proxy:
        name = unique("auth-net")
        code, msg = wire.parse_simple_response(rpc(remote_ip, proxy.port, wire.create_cluster_mirror(1, name, {"bootstrap.servers": source.bootstrap})))
        assert code == 0, f"CreateClusterMirror from {remote_ip}, listed in mirror_admin_networks, answered {code} {msg!r}"
        assert alter_mirror_config(remote_ip, proxy.port, name, "net-.*") == (0, None), "IncrementalAlterConfigs type 64 from a listed network"
        code, msg = wire.parse_simple_response(rpc(remote_ip, proxy.port, wire.delete_cluster_mirror(2, name)))
        assert code == 0, f"DeleteClusterMirror from {remote_ip}, listed in mirror_admin_networks, answered {code} {msg!r}"


def test_kafka_mirror_admin_false_refuses_mirror_rpcs_even_from_loopback(clusters, workdir):
    source, destination = clusters
    with running_proxy(destination, workdir, {"security": {"kafka_mirror_admin": False}}) as proxy:
        name = unique("auth-off")
        code, msg = wire.parse_simple_response(rpc("127.0.0.1", proxy.port, wire.create_cluster_mirror(1, name, {"bootstrap.servers": source.bootstrap})))
        assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, f"CreateClusterMirror from loopback with kafka_mirror_admin = false answered {code} {msg!r}"
        code, msg = wire.parse_simple_response(rpc("127.0.0.1", proxy.port, wire.list_cluster_mirrors(2)))
        assert code == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, f"ListClusterMirrors from loopback with kafka_mirror_admin = false answered {code} {msg!r}"
        assert name not in mirror_names(proxy), "the refused CreateClusterMirror created the mirror anyway"
        assert alter_mirror_config("127.0.0.1", proxy.port, name, "x")[0] == wire.CLUSTER_MIRROR_AUTHORIZATION_FAILED, (
            "IncrementalAlterConfigs on a type-64 resource with kafka_mirror_admin = false")
