"""Issue 35, findings N3 and N7: the engine's own identities on the destination are not the clients'.

N3: the HA election group of `engine.role = "auto"` (`kmp-engine.<state topic>`, protocol type
`kmp-mirror-engine`) was reachable on the client port: DescribeGroups listed its members, a client
that joined claiming `{"active": true}` became the active engine (mirroring froze), LeaveGroup of
the real members forced takeovers. Through the proxy every group API naming it now gets
GROUP_AUTHORIZATION_FAILED (30), ListGroups does not list it, and an auto proxy keeps mirroring while
a hostile client tries all of that.

N7: AlterClientQuotas naming the engine's client id (`kafka-mirror-proxy-engine`) throttled mirroring
to a standstill; through the proxy it gets POLICY_VIOLATION (44), other entities still pass.

Everything is sent as raw Kafka frames (classic encodings), at the group's coordinator through the
proxy's listener for that broker; the same frames sent to the destination directly show the group is
really there. Quota requests use validate_only, so a proxy that wrongly forwards them changes nothing."""

from __future__ import annotations

import json
import re
import struct
import threading
import time

import pytest

import sec_wire as wire
from sec_support import create_topic, metric_series, produce_values, rest, running_proxy, unique, wait_caught_up, wait_until
from sec_wire import array, bytes_field, i8, i16, i32, i64, string

GROUP_AUTHORIZATION_FAILED = 30
POLICY_VIOLATION = 44
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 11, 12, 13, 14, 15, 16
OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT, DELETE_GROUPS, OFFSET_DELETE = 8, 9, 28, 42, 47
ALTER_CLIENT_QUOTAS = 49
PROTOCOL_TYPE = "kmp-mirror-engine"
ENGINE_CLIENT_ID = "kafka-mirror-proxy-engine"
# Sorts before the engine's member ids ("kafka-mirror-proxy-election-…"): on the old code a tie of
# two members claiming to be active went to the lowest id, the intruder's.
INTRUDER = "a-intruder"
ENGINE_LINE = re.compile(r"engine: (active|standby) \(instance ([^\s,]+), generation (-?\d+)")


# ---- frames (classic encodings, request header v1) ---------------------------------------------

def join_group_v5(corr: int, group: str, member_id: str = "", claim_active: bool = True) -> bytes:
    metadata = json.dumps({"instance": "intruder", "active": claim_active, "round": 0, "share_work": False}).encode()
    body = (string(group) + i32(6000) + i32(6000) + string(member_id) + string(None) + string(PROTOCOL_TYPE)
            + array([string("active-standby-v1") + bytes_field(metadata)]))
    return wire.request(JOIN_GROUP, 5, corr, body, client_id=INTRUDER)


def parse_join_group_v5(body: bytes) -> tuple[int, int, str, str]:
    """(error code, generation, leader, member id)."""
    r = wire.Reader(body)
    r.i32()
    code, generation = r.i16(), r.i32()
    r.string()
    leader, member = r.string(), r.string()
    return code, generation, leader or "", member or ""


def sync_group_v3(corr: int, group: str, generation: int, member_id: str, assignment: bytes | None = None) -> bytes:
    assignments = [string(member_id) + bytes_field(assignment)] if assignment is not None else []
    body = string(group) + i32(generation) + string(member_id) + string(None) + array(assignments)
    return wire.request(SYNC_GROUP, 3, corr, body, client_id=INTRUDER)


def heartbeat_v3(corr: int, group: str, generation: int, member_id: str) -> bytes:
    return wire.request(HEARTBEAT, 3, corr, string(group) + i32(generation) + string(member_id) + string(None), client_id=INTRUDER)


def leave_group_v3(corr: int, group: str, member_ids: list[str]) -> bytes:
    return wire.request(LEAVE_GROUP, 3, corr, string(group) + array([string(m) + string(None) for m in member_ids]), client_id=INTRUDER)


def throttle_then_code(body: bytes) -> int:
    """The error code of a response that starts with throttle_time_ms, error_code."""
    r = wire.Reader(body)
    r.i32()
    return r.i16()


def describe_groups_v4(corr: int, groups: list[str]) -> bytes:
    return wire.request(DESCRIBE_GROUPS, 4, corr, array([string(g) for g in groups]) + i8(0))


def parse_describe_groups_v4(body: bytes) -> dict[str, tuple[int, str, list[str]]]:
    """group -> (error code, state, member ids)."""
    r = wire.Reader(body)
    r.i32()
    out = {}
    for _ in range(r.i32()):
        code, group, state = r.i16(), r.string(), r.string()
        r.string(), r.string()  # protocol type, protocol data
        members = []
        for _ in range(r.i32()):
            members.append(r.string())
            r.string(), r.string(), r.string()  # group instance id, client id, client host
            r.bytes(), r.bytes()  # metadata, assignment
        r.i32()  # authorized operations
        out[group] = (code, state, members)
    return out


def list_groups_v2(corr: int) -> bytes:
    return wire.request(LIST_GROUPS, 2, corr, b"")


def parse_list_groups_v2(body: bytes) -> tuple[int, list[tuple[str, str]]]:
    """(error code, [(group, protocol type)])."""
    r = wire.Reader(body)
    r.i32()
    code = r.i16()
    return code, [(r.string(), r.string()) for _ in range(r.i32())]


def offset_commit_v7(corr: int, group: str, topic: str) -> bytes:
    partitions = array([i32(0) + i64(0) + i32(-1) + string(None)])
    body = string(group) + i32(-1) + string("") + string(None) + array([string(topic) + partitions])
    return wire.request(OFFSET_COMMIT, 7, corr, body)


def parse_partition_codes(body: bytes) -> list[int]:
    """Every partition's error code of an OffsetCommit v7 / TxnOffsetCommit v2 answer."""
    r = wire.Reader(body)
    r.i32()
    codes = []
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32()
            codes.append(r.i16())
    return codes


def offset_fetch_v5(corr: int, group: str, topic: str) -> bytes:
    return wire.request(OFFSET_FETCH, 5, corr, string(group) + array([string(topic) + array([i32(0)])]))


def parse_offset_fetch_v5(body: bytes) -> tuple[int, list[int]]:
    """(top-level error code, every partition's error code)."""
    r = wire.Reader(body)
    r.i32()
    codes = []
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32(), r.i64(), r.i32(), r.string()
            codes.append(r.i16())
    return r.i16(), codes


def txn_offset_commit_v2(corr: int, group: str, topic: str) -> bytes:
    partitions = array([i32(0) + i64(0) + i32(-1) + string(None)])
    body = string(unique("txn")) + string(group) + i64(1) + i16(0) + array([string(topic) + partitions])
    return wire.request(TXN_OFFSET_COMMIT, 2, corr, body)


def offset_delete_v0(corr: int, group: str, topic: str) -> bytes:
    return wire.request(OFFSET_DELETE, 0, corr, string(group) + array([string(topic) + array([i32(0)])]))


def parse_offset_delete_v0(body: bytes) -> int:
    return wire.Reader(body).i16()


def delete_groups_v1(corr: int, groups: list[str]) -> bytes:
    return wire.request(DELETE_GROUPS, 1, corr, array([string(g) for g in groups]))


def parse_delete_groups_v1(body: bytes) -> dict[str, int]:
    r = wire.Reader(body)
    r.i32()
    return {r.string(): r.i16() for _ in range(r.i32())}


def alter_client_quotas_v0(corr: int, entities: list[tuple[str, str | None]]) -> bytes:
    """One entry per entity (type, name): producer_byte_rate 1024, validate_only."""
    entries = [array([string(kind) + string(name)]) + array([string("producer_byte_rate") + struct.pack(">d", 1024.0) + i8(0)])
               for kind, name in entities]
    return wire.request(ALTER_CLIENT_QUOTAS, 0, corr, array(entries) + i8(1))


def parse_alter_client_quotas_v0(body: bytes) -> dict[tuple[str, str | None], tuple[int, str | None]]:
    r = wire.Reader(body)
    r.i32()
    out = {}
    for _ in range(r.i32()):
        code, message = r.i16(), r.string()
        entity = [(r.string(), r.string()) for _ in range(r.i32())]
        out[entity[0]] = (code, message)
    return out


def ask(host: str, port: int, frame: bytes) -> bytes:
    """The body of the answer to one frame on a fresh connection."""
    return wire.roundtrip(host, port, frame)


# ---- the proxy under test -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def auto_proxy(clusters, workdir):
    """One proxy with engine.role = "auto": alone in its election group, so it is the active engine."""
    _, destination = clusters
    sections = {"engine": {"role": "auto", "session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "state_flush_interval_ms": 500}}
    with running_proxy(destination, workdir, sections=sections) as proxy:
        proxy.group = f"kmp-engine.{proxy.state_topic}"
        wait_until(lambda: engine_role(proxy)[0] == "active", 60, "the auto proxy elected itself the active engine")
        yield proxy


def engine_role(proxy) -> tuple[str, int]:
    """(active|standby|<what /readyz said>, generation)."""
    status, body = proxy.http("/readyz")
    m = ENGINE_LINE.search(body)
    return (m.group(1), int(m.group(3))) if m else (f"no engine line ({status}): {body[:200]!r}", -1)


def takeovers_total(proxy) -> float:
    return sum(metric_series(proxy, "kmp_engine_takeovers_total").values())


def coordinator(destination, group: str) -> tuple[int, str, int]:
    """(node id, host, port) of ``group``'s coordinator, asked of the destination directly."""
    host, port = destination.bootstrap.split(",")[0].rsplit(":", 1)

    def found():
        code, node, chost, cport = wire.parse_find_coordinator_v1(ask(host, int(port), wire.find_coordinator_v1(1, group, 0)))
        return (node, chost, cport) if code == 0 else None
    return wait_until(found, 30, f"the destination names the coordinator of {group}")


# ---- N3: the election group -----------------------------------------------------------------------

def test_every_group_api_naming_the_engine_group_is_refused_through_the_proxy(auto_proxy, clusters):
    _, destination = clusters
    group = auto_proxy.group
    node, chost, cport = coordinator(destination, group)
    direct = parse_describe_groups_v4(ask(chost, cport, describe_groups_v4(1, [group])))[group]
    assert direct[0] == 0 and direct[2], f"control: the destination itself describes {group} with its members, got {direct}"

    at = ("127.0.0.1", auto_proxy.node_port(node))
    code, msg_node, _, _ = wire.parse_find_coordinator_v1(ask(*at, wire.find_coordinator_v1(1, group, 0)))
    got = {"FindCoordinator": code}
    got["JoinGroup"] = parse_join_group_v5(ask(*at, join_group_v5(2, group)))[0]
    got["JoinGroup (another name, the engine's protocol type)"] = parse_join_group_v5(ask(*at, join_group_v5(3, unique("elsewhere"))))[0]
    got["SyncGroup"] = throttle_then_code(ask(*at, sync_group_v3(4, group, 1, direct[2][0])))
    got["Heartbeat"] = throttle_then_code(ask(*at, heartbeat_v3(5, group, 1, direct[2][0])))
    got["LeaveGroup"] = throttle_then_code(ask(*at, leave_group_v3(6, group, direct[2])))
    other = unique("sec-plain-group")
    described = parse_describe_groups_v4(ask(*at, describe_groups_v4(7, [other, group])))
    got["DescribeGroups"] = described.get(group, ("missing",))[0]
    commit = parse_partition_codes(ask(*at, offset_commit_v7(8, group, "t")))
    got["OffsetCommit"] = commit[0] if len(set(commit)) == 1 else commit
    top, _ = parse_offset_fetch_v5(ask(*at, offset_fetch_v5(9, group, "t")))
    got["OffsetFetch"] = top
    txn = parse_partition_codes(ask(*at, txn_offset_commit_v2(10, group, "t")))
    got["TxnOffsetCommit"] = txn[0] if len(set(txn)) == 1 else txn
    got["OffsetDelete"] = parse_offset_delete_v0(ask(*at, offset_delete_v0(11, group, "t")))
    got["DeleteGroups"] = parse_delete_groups_v1(ask(*at, delete_groups_v1(12, [group]))).get(group, "missing")

    wrong = {api: code for api, code in got.items() if code != GROUP_AUTHORIZATION_FAILED}
    assert not wrong, (f"through the proxy these group APIs naming the engine's election group {group} were not refused with "
                       f"GROUP_AUTHORIZATION_FAILED (30): {wrong}")
    # The broker's answer for the other group: described (0), or NOT_COORDINATOR (16) when another
    # broker coordinates it; either way it was forwarded, not refused.
    assert described.get(other, ("missing",))[0] in (0, 16), (
        f"DescribeGroups of another group {other} in the same request must still reach the broker, got {described}")
    after = parse_describe_groups_v4(ask(chost, cport, describe_groups_v4(13, [group])))[group]
    assert after[2] == direct[2], f"the refused requests changed the engine group's members: before {direct[2]}, after {after[2]}"
    assert engine_role(auto_proxy)[0] == "active", f"the proxy stopped being the active engine: {engine_role(auto_proxy)}"


def test_list_groups_through_the_proxy_does_not_list_the_engine_group(auto_proxy, clusters):
    _, destination = clusters
    group = auto_proxy.group
    node, chost, cport = coordinator(destination, group)
    _, direct = parse_list_groups_v2(ask(chost, cport, list_groups_v2(1)))
    assert (group, PROTOCOL_TYPE) in direct, f"control: the coordinator itself lists {group}: {direct}"
    code, listed = parse_list_groups_v2(ask("127.0.0.1", auto_proxy.node_port(node), list_groups_v2(2)))
    assert code == 0, f"ListGroups through the proxy failed with {code}"
    leaked = [g for g in listed if g[0] == group or g[1] == PROTOCOL_TYPE]
    assert not leaked, f"ListGroups through the proxy lists the engine's election group: {leaked}"


def _attack(proxy, group: str, host: str, port: int, stop: threading.Event, seen: dict) -> None:
    """A hostile client, as long as ``stop`` is not set: joins the election group claiming to be
    active (keeping its membership with SyncGroup and heartbeats when it gets in), and every second
    asks the group's members through DescribeGroups and makes them leave."""
    corr = 100
    last_leave = 0.0
    while not stop.is_set():
        try:
            with wire.connect(host, port, timeout=15) as s:
                member, generation = "", -1
                while not stop.is_set():
                    corr += 1
                    if time.time() - last_leave >= 1:
                        last_leave = time.time()
                        s.sendall(describe_groups_v4(corr, [group]))
                        code, _, members = parse_describe_groups_v4(wire.read_response(s)[1]).get(group, (-1, "", []))
                        seen["describe"].append(code)
                        victims = [m for m in members if m != member]
                        if victims:
                            s.sendall(leave_group_v3(corr, group, victims))
                            seen["leave"].append(throttle_then_code(wire.read_response(s)[1]))
                        continue
                    if generation < 0:
                        s.sendall(join_group_v5(corr, group, member))
                        code, gen, leader, member_id = parse_join_group_v5(wire.read_response(s)[1])
                        seen["join"].append(code)
                        if code == 79:  # MEMBER_ID_REQUIRED: join again with it
                            member = member_id
                        elif code == 0:
                            member, generation = member_id, gen
                            choice = json.dumps({"active_member": member, "active_instance": "intruder", "members": []}).encode()
                            s.sendall(sync_group_v3(corr, group, generation, member, choice if leader == member else None))
                            seen["sync"].append(throttle_then_code(wire.read_response(s)[1]))
                        else:
                            time.sleep(0.2)
                        continue
                    s.sendall(heartbeat_v3(corr, group, generation, member))
                    code = throttle_then_code(wire.read_response(s)[1])
                    if code != 0:
                        generation = -1
                    time.sleep(0.3)
        except (OSError, ValueError):
            time.sleep(0.2)


def test_an_auto_proxy_keeps_mirroring_while_a_hostile_client_tries_to_take_over_its_election(auto_proxy, clusters):
    source, destination = clusters
    topic, mirror = unique("sec-ha-attacked"), unique("sec-ha-m")
    create_topic(source.bootstrap, topic)
    produce_values(source.bootstrap, topic, [f"before-{i}".encode() for i in range(20)])
    status, body = rest(auto_proxy, "POST", "/v1/mirrors", {"name": mirror, "configs": {"bootstrap.servers": source.bootstrap}})
    assert status == 201, f"creating mirror {mirror} on the active auto proxy: {status} {body}"
    status, body = rest(auto_proxy, "POST", f"/v1/mirrors/{mirror}/start", {"topics": [topic]})
    assert status == 200 and body["results"][0]["error_code"] == 0, f"starting {topic}: {status} {body}"
    wait_caught_up(source, destination, topic, 1)
    role, generation = engine_role(auto_proxy)
    takeovers = takeovers_total(auto_proxy)

    node, _, _ = coordinator(destination, auto_proxy.group)
    stop, seen = threading.Event(), {"join": [], "sync": [], "leave": [], "describe": []}
    attacker = threading.Thread(target=_attack, args=(auto_proxy, auto_proxy.group, "127.0.0.1", auto_proxy.node_port(node), stop, seen),
                                daemon=True)
    attacker.start()
    roles = []
    try:
        deadline = time.time() + 20
        batch = 0
        while time.time() < deadline:
            produce_values(source.bootstrap, topic, [f"during-{batch}-{i}".encode() for i in range(10)])
            batch += 1
            roles.append(engine_role(auto_proxy))
            time.sleep(0.5)
        # Still under attack: the mirror keeps up with the source.
        wait_caught_up(source, destination, topic, 1, timeout=30)
        roles.append(engine_role(auto_proxy))
    finally:
        stop.set()
        attacker.join(20)
    lost = [r for r in roles if r != (role, generation)]
    assert not lost, (f"while a client attacked the election group through the proxy the engine left its role {role} "
                      f"(generation {generation}): {lost[:5]}; the attacker saw joins {seen['join'][:10]}, syncs {seen['sync'][:5]}, "
                      f"leaves {seen['leave'][:5]}")
    assert takeovers_total(auto_proxy) == takeovers, f"the attack caused takeovers: {takeovers} before, {takeovers_total(auto_proxy)} after"
    answered = seen["join"] + seen["leave"] + seen["describe"]
    assert answered and set(answered) == {GROUP_AUTHORIZATION_FAILED}, (
        f"every JoinGroup, LeaveGroup and DescribeGroups of the attacker must get 30: joins {sorted(set(seen['join']))}, "
        f"leaves {sorted(set(seen['leave']))}, describes {sorted(set(seen['describe']))}")


# ---- N7: quotas on the engine's identity ---------------------------------------------------------

def test_alter_client_quotas_naming_the_engines_client_id_is_refused_and_other_entities_pass(auto_proxy):
    host, port = auto_proxy.bootstrap.rsplit(":", 1)
    app = unique("sec-app")
    entities = [("client-id", ENGINE_CLIENT_ID), ("client-id", "kafka-mirror-proxy-election"), ("client-id", app)]
    got = parse_alter_client_quotas_v0(ask(host, int(port), alter_client_quotas_v0(1, entities)))
    refused = {e: got.get(e, ("missing", None))[0] for e in entities[:2]}
    assert all(c == POLICY_VIOLATION for c in refused.values()), (
        f"AlterClientQuotas on the engine's client ids through the proxy must get POLICY_VIOLATION (44): {refused}")
    assert got.get(("client-id", app), ("missing",))[0] == 0, (
        f"a quota (validate_only) on another client id {app} in the same request must still reach the broker: {got}")
