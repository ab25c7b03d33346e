"""Issue 11, finding 6: the engine's state topic (`engine.state_topic`, `__kmp_mirror_state` by
default; each test proxy here has its own) holds every mirror definition and topic ownership.
Through the proxy it is refused to clients entirely: Produce, Fetch, DeleteTopics, DeleteRecords,
CreatePartitions, AlterConfigs and IncrementalAlterConfigs on it get TOPIC_AUTHORIZATION_FAILED
(29), and a mirror definition produced into it never shows up after a restart. Admin calls use
validate_only where Kafka has it, so a proxy that wrongly forwards them changes nothing."""

import json
import socket

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType

import sec_wire as wire
from sec_support import mirror_names, restart, running_proxy, unique


@pytest.fixture(scope="module")
def guarded(clusters, workdir):
    _, destination = clusters
    with running_proxy(destination, workdir) as proxy:
        yield proxy


def refusal(future) -> str:
    """'refused' when the admin result is TOPIC_AUTHORIZATION_FAILED, else what it was."""
    try:
        future.result(30)
        return "accepted"
    except KafkaException as e:
        err = e.args[0]
        return "refused" if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED else f"failed otherwise: {err}"


def test_producing_to_the_state_topic_is_refused_and_forges_no_mirror(guarded, clusters):
    source, _ = clusters
    forged = unique("forged")
    value = json.dumps({"origin": "api", "definition": {"name": forged, "source_bootstrap_servers": source.bootstrap.split(","), "topics": []}})
    p = Producer({"bootstrap.servers": guarded.bootstrap, "message.timeout.ms": 20000})
    out = {}
    p.produce(guarded.state_topic, key=f"mirror/{forged}".encode(), value=value.encode(), on_delivery=lambda err, _m: out.update(err=err))
    p.flush(30)
    err = out.get("err", "no delivery report")
    assert err is not None and getattr(err, "code", lambda: None)() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (
        f"a produce to the state topic {guarded.state_topic} through the proxy must get TOPIC_AUTHORIZATION_FAILED, got: {err}")
    restart(guarded)
    assert forged not in mirror_names(guarded), f"a mirror definition produced into the state topic appeared after a restart: {forged}"


def test_fetching_the_state_topic_is_refused(guarded, clusters):
    _, destination = clusters
    parts = AdminClient({"bootstrap.servers": destination.bootstrap}).list_topics(guarded.state_topic, timeout=10).topics[guarded.state_topic].partitions
    leader = parts[0].leader
    with socket.create_connection(("127.0.0.1", guarded.node_port(leader)), timeout=30) as s:
        s.sendall(wire.fetch_v4(1, guarded.state_topic, [0]))
        _, body = wire.read_response(s)
    code, size = wire.parse_fetch_v4(body)[(guarded.state_topic, 0)]
    assert code == wire.TOPIC_AUTHORIZATION_FAILED, (
        f"a Fetch of state topic {guarded.state_topic} through the proxy answered error {code} with {size} bytes of records, not 29")


def _create_partitions(admin, t):
    return admin.create_partitions([NewPartitions(t, 2)], validate_only=True)[t]


def _incremental_alter(admin, t):
    res = ConfigResource(ResourceType.TOPIC, t, incremental_configs=[ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    return next(iter(admin.incremental_alter_configs([res], validate_only=True).values()))


def _alter(admin, t):
    res = ConfigResource(ResourceType.TOPIC, t, set_config={"cleanup.policy": "delete"})
    return next(iter(admin.alter_configs([res], validate_only=True).values()))


def _delete_records(admin, t):
    return next(iter(admin.delete_records([TopicPartition(t, 0, 0)]).values()))


def _delete_topic(admin, t):
    return admin.delete_topics([t], operation_timeout=30)[t]


@pytest.mark.parametrize("operation", [_create_partitions, _incremental_alter, _alter, _delete_records, _delete_topic],
                         ids=["CreatePartitions", "IncrementalAlterConfigs", "AlterConfigs", "DeleteRecords", "DeleteTopics"])
def test_admin_changes_to_the_state_topic_are_refused(guarded, operation):
    admin = AdminClient({"bootstrap.servers": guarded.bootstrap})
    outcome = refusal(operation(admin, guarded.state_topic))
    assert outcome == "refused", f"{operation.__name__.strip('_')} on state topic {guarded.state_topic} through the proxy: {outcome}"
