"""Issue 35, N4: termination mode must not lend every user the proxy's identity for security
administration. Before, an ordinary user got a delegation token owned by the proxy, created a
destination user (AlterUserScramCredentials) and granted it ALL on a mirror topic (CreateAcls).
Now those APIs — and broker-level config changes — are refused through a terminating proxy unless
the client authenticated as one of `listener.auth.admin_principals`; an admin principal still
uses them, and ordinary requests of the same users are untouched."""

import struct

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import sec_wire as wire
from sec_support import create_topic, terminating_proxy, unique, wait_until

USERS = {"alice": "alice-pw-123", "ops": "ops-pw-12345"}
CLUSTER_AUTHORIZATION_FAILED = 31
DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65


def admin(proxy, user: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": proxy.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                        "sasl.username": user, "sasl.password": USERS[user]})


def scram_users(bootstrap: str) -> set[str]:
    """The SCRAM users the destination knows, asked directly (not through the proxy)."""
    direct = AdminClient({"bootstrap.servers": bootstrap})
    return set(direct.describe_user_scram_credentials().result(30))


def error_code(exc: BaseException) -> int | None:
    err = exc.args[0] if exc.args else None
    return err.code() if hasattr(err, "code") else None


def upsert(client: AdminClient, user: str):
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    return client.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, b"pw-of-" + user.encode())])[user]


def raw_authenticated(proxy, user: str):
    """A raw socket to the proxy that completed SASL PLAIN as ``user``."""
    s = wire.connect("127.0.0.1", proxy.port)
    s.sendall(wire.sasl_handshake_v1(1, "PLAIN"))
    _, body = wire.read_response(s)
    assert wire.parse_error_first(body) == 0, "PLAIN handshake"
    s.sendall(wire.sasl_authenticate_v1(2, user, USERS[user]))
    _, body = wire.read_response(s)
    assert wire.parse_error_first(body) == 0, f"PLAIN login of {user}"
    return s


def test_an_ordinary_user_cannot_administer_security_through_a_terminating_proxy(destination, workdir):
    with terminating_proxy(destination, workdir, USERS, admin_principals=["User:ops"]) as proxy:
        alice = admin(proxy, "alice")
        victim = unique("mallory")
        try:
            upsert(alice, victim).result(30)
            raise AssertionError("AlterUserScramCredentials by an ordinary user was accepted")
        except KafkaException as e:
            assert error_code(e) == CLUSTER_AUTHORIZATION_FAILED, f"refused with CLUSTER_AUTHORIZATION_FAILED, got {e}"
        assert victim not in scram_users(destination.bootstrap), "the refused SCRAM user exists on the destination"

        acl = AclBinding(ResourceType.TOPIC, "mirrored", ResourcePatternType.LITERAL, f"User:{victim}", "*", AclOperation.ALL,
                         AclPermissionType.ALLOW)
        try:
            alice.create_acls([acl])[acl].result(30)
            raise AssertionError("CreateAcls by an ordinary user was accepted")
        except KafkaException as e:
            assert error_code(e) == CLUSTER_AUTHORIZATION_FAILED, f"CreateAcls refused with CLUSTER_AUTHORIZATION_FAILED, got {e}"

        # CreateDelegationToken v1: no renewers, default lifetime. The destination has no token
        # secret (it would answer DELEGATION_TOKEN_AUTH_DISABLED); the proxy's refusal comes first.
        s = raw_authenticated(proxy, "alice")
        try:
            s.sendall(wire.request(38, 1, 3, wire.i32(0) + wire.i64(-1)))
            _, body = wire.read_response(s)
        finally:
            s.close()
        assert struct.unpack(">h", body[:2])[0] == DELEGATION_TOKEN_AUTHORIZATION_FAILED, "CreateDelegationToken refused by the proxy"

        # A broker default changed through the proxy would act as the proxy too; the topic
        # resource of the same request goes on.
        topic = unique("admin-apis")
        create_topic(destination.bootstrap, topic)
        broker = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
            ConfigEntry("log.cleaner.threads", "2", incremental_operation=AlterConfigOpType.SET)])
        own = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
        futures = alice.incremental_alter_configs([broker, own])
        try:
            futures[broker].result(30)
            raise AssertionError("a BROKER config change by an ordinary user was accepted")
        except KafkaException as e:
            assert error_code(e) == CLUSTER_AUTHORIZATION_FAILED, f"BROKER resource refused with CLUSTER_AUTHORIZATION_FAILED, got {e}"
        futures[own].result(30)  # the topic's own config is the user's to change


def test_an_admin_principal_administers_security_through_a_terminating_proxy(destination, workdir):
    with terminating_proxy(destination, workdir, USERS, admin_principals=["User:ops"]) as proxy:
        user, ops = unique("app"), admin(proxy, "ops")
        upsert(ops, user).result(30)
        # The controller acknowledged the upsertion; the broker that answers a describe applies the
        # metadata record a moment later.
        wait_until(lambda: user in scram_users(destination.bootstrap), 30, "the admin principal's SCRAM upsertion reached the destination")
