"""Issue 11, finding 7: broker-level configs reach every topic without a topic-level value, mirror
topics included (log.retention.ms=1000 on the BROKER resource deleted mirrored data). While the
engine runs, AlterConfigs / IncrementalAlterConfigs on a BROKER resource (the cluster default ""
or a broker id) that set a key deleting, rolling or otherwise changing topic data are refused with
POLICY_VIOLATION (44); harmless broker keys still pass. The values sent are the brokers' own
defaults, so a proxy that wrongly forwards them changes nothing (and the test resets them)."""

import pytest

import sec_wire as wire
from sec_support import mirror_decl, mirrored_topic, running_proxy, wait_caught_up, watermarks

RECORDS = 40
DATA_KEYS = {
    "log.retention.ms": "604800000",
    "log.roll.ms": "604800000",
    "log.segment.bytes": "1073741824",
    "log.cleanup.policy": "delete",
    "unclean.leader.election.enable": "false",
    "log.retention.bytes": "-1",
}
HARMLESS = ("background.threads", "10")  # a dynamic cluster-wide broker config that touches no data


@pytest.fixture(scope="module")
def guarded(clusters, workdir):
    source, destination = clusters
    topic = mirrored_topic(source, records=RECORDS, prefix="sec-brokercfg")
    with running_proxy(destination, workdir, mirrors=[mirror_decl("brokercfg", source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)
        proxy.topic = topic
        yield proxy
    # Whatever a faulty proxy let through is removed again (direct to broker 1).
    resources = [(wire.BROKER_RESOURCE, name, [(k, 1, None) for k in [*DATA_KEYS, HARMLESS[0]]]) for name in ("", "1")]
    wire.roundtrip("127.0.0.1", destination.port(1), wire.incremental_alter_configs_v0(99, resources))


def via_broker_1(proxy, frame: bytes) -> dict:
    """Sends a config request through the proxy's listener of broker 1 (a BROKER resource naming
    a broker id belongs to that broker)."""
    return wire.parse_alter_configs_v0(wire.roundtrip("127.0.0.1", proxy.node_port(1), frame))


@pytest.mark.parametrize("key", list(DATA_KEYS))
def test_incremental_alter_configs_of_a_data_affecting_broker_key_is_refused_with_policy_violation(guarded, key):
    frame = wire.incremental_alter_configs_v0(1, [(wire.BROKER_RESOURCE, name, [(key, 0, DATA_KEYS[key])]) for name in ("", "1")])
    got = via_broker_1(guarded, frame)
    for name in ("", "1"):
        code, msg = got[(wire.BROKER_RESOURCE, name)]
        assert code == wire.POLICY_VIOLATION, (
            f"IncrementalAlterConfigs SET {key} on BROKER resource {name!r} through the proxy answered {code} {msg!r}, not POLICY_VIOLATION (44)")


def test_alter_configs_of_a_data_affecting_broker_key_is_refused_with_policy_violation(guarded):
    frame = wire.alter_configs_v0(2, [(wire.BROKER_RESOURCE, "1", [("log.retention.ms", DATA_KEYS["log.retention.ms"])])])
    code, msg = via_broker_1(guarded, frame)[(wire.BROKER_RESOURCE, "1")]
    assert code == wire.POLICY_VIOLATION, f"AlterConfigs log.retention.ms on BROKER resource '1' through the proxy answered {code} {msg!r}, not 44"


def test_a_harmless_broker_key_is_forwarded_and_mirrored_data_stays_intact(guarded, clusters):
    _, destination = clusters
    frame = wire.incremental_alter_configs_v0(3, [(wire.BROKER_RESOURCE, "", [(HARMLESS[0], 0, HARMLESS[1])])])
    code, msg = via_broker_1(guarded, frame)[(wire.BROKER_RESOURCE, "")]
    assert code == 0, f"IncrementalAlterConfigs {HARMLESS[0]}={HARMLESS[1]} on the cluster-default BROKER resource answered {code} {msg!r}"
    assert watermarks(destination.bootstrap, guarded.topic, 1) == [(0, RECORDS)], "the mirror topic's data is intact"
