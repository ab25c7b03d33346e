#!/usr/bin/env python3
"""End-to-end proof (not a pytest test) of OAUTHBEARER against a real IdP: Keycloak
(tests/harness/oidc_idp.py) issues client-credentials JWTs, a 1-broker Kafka cluster with the
OAUTH listener (kafka_cluster.OAuthListener) validates them against the IdP's JWKS.

    python3 tests/harness/oidc_smoke.py [--dir DIR] [--secure] [--reauth-ms 45000]

1. Kafka's own Java console producer and consumer (clientId/clientSecret of ``app-client``,
   OAuthBearerLoginCallbackHandler) produce and consume a few records over OAUTH; the consumer
   bootstraps through a relay that records the client's SASL OAUTHBEARER initial response
   (plaintext run only).
2. A raw Kafka-protocol client (SaslHandshake v1 + SaslAuthenticate v1) shows what the broker
   answers: session_lifetime_ms for a fresh and an older token (min(exp - now, reauth ms)), and for
   a wrong-audience token and a garbage token the server's JSON challenge, then, after the client's
   ``\\x01``, the final error code and message.
3. A Java AdminClient (TopicCommand --list) with the wrong-audience client's credentials is refused.

``--secure``: the cluster is a ``secure`` one (SecureListeners with the test CA), so OAUTH is
SASL_SSL and the clients trust the test CA. Exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from kafka_cluster import (OAUTH_ALLOWED_URLS_PROPERTY, KafkaCluster, OAuthListener, SecureListeners,  # noqa: E402
                           classpath, recv_exact)
from oidc_idp import WRONG_AUDIENCE_CLIENT, OidcProvider, decode_jwt  # noqa: E402
from ports import free_port, free_port_block  # noqa: E402

TOPIC = "oauth-smoke"
RECORDS = [f"record-{i}" for i in range(5)]
TOOLS_LOG4J2 = """status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {what}", flush=True)
    if not ok:
        failures.append(what)


# --- raw Kafka protocol: SaslHandshake v1 + SaslAuthenticate v1 (non-flexible versions) ---

class RawSasl:
    def __init__(self, addr: str, tls_ca: str | None = None):
        host, port = addr.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=15)
        if tls_ca:
            ctx = ssl.create_default_context(cafile=tls_ca)
            sock = ctx.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self.corr = 0

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        self.corr += 1
        cid = b"oidc-smoke"
        msg = struct.pack(">hhih", api_key, version, self.corr, len(cid)) + cid + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        size = struct.unpack(">i", recv_exact(self.sock, 4))[0]
        data = recv_exact(self.sock, size)
        assert struct.unpack_from(">i", data)[0] == self.corr
        return data[4:]

    def handshake(self, mechanism: str = "OAUTHBEARER") -> tuple[int, list[str]]:
        data = self.request(17, 1, struct.pack(">h", len(mechanism)) + mechanism.encode())
        err, n = struct.unpack_from(">hi", data)
        pos, mechs = 6, []
        for _ in range(n):
            (ln,) = struct.unpack_from(">h", data, pos)
            mechs.append(data[pos + 2:pos + 2 + ln].decode())
            pos += 2 + ln
        return err, mechs

    def authenticate(self, auth: bytes) -> dict:
        data = self.request(36, 1, struct.pack(">i", len(auth)) + auth)
        (err, mlen) = struct.unpack_from(">hh", data)
        pos = 4
        msg = None
        if mlen >= 0:
            msg = data[pos:pos + mlen].decode()
            pos += mlen
        (blen,) = struct.unpack_from(">i", data, pos)
        auth_bytes = data[pos + 4:pos + 4 + max(blen, 0)]
        pos += 4 + max(blen, 0)
        (lifetime,) = struct.unpack_from(">q", data, pos)
        return {"error_code": err, "error_message": msg, "auth_bytes": auth_bytes, "session_lifetime_ms": lifetime}

    def close(self) -> None:
        self.sock.close()


def initial_response(token: str) -> bytes:
    """What Kafka's OAuthBearerClientInitialResponse.toBytes() sends (no authzid, no extensions)."""
    return b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"


def sasl_login(addr: str, token: str, tls_ca: str | None) -> list[dict]:
    """The broker's SaslAuthenticate answers to one login with ``token``: one answer if it
    succeeds or fails outright; two if it sends an error challenge, which this client
    acknowledges with ``\\x01`` (RFC 7628 3.2.3) to get the final error."""
    c = RawSasl(addr, tls_ca)
    try:
        err, mechs = c.handshake()
        assert err == 0, f"SaslHandshake error {err} (mechanisms {mechs})"
        answers = [c.authenticate(initial_response(token))]
        if answers[0]["error_code"] == 0 and answers[0]["auth_bytes"]:
            answers.append(c.authenticate(b"\x01"))
        return answers
    finally:
        c.close()


# --- a relay that records the SaslAuthenticate requests a Java client sends ---

class SaslRecordingRelay:
    def __init__(self, upstream: str):
        self.upstream = upstream
        self.port = free_port()
        self.sasl_requests: list[tuple[int, bytes]] = []  # (api version, whole request frame)
        self.srv = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.srv.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            server = socket.create_connection((host, int(port)))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        buf = b""
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                dst.sendall(chunk)
                if record:
                    buf += chunk
                    while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                        size = struct.unpack_from(">i", buf)[0]
                        frame, buf = buf[4:4 + size], buf[4 + size:]
                        api_key, version = struct.unpack_from(">hh", frame)
                        if api_key == 36:
                            self.sasl_requests.append((version, frame))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.srv.close()


# --- Kafka's Java tools ---

def java_tool(workdir: Path, idp: OidcProvider, main: str, args: list[str], stdin: str | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = ["java", "-Xmx256m", f"-D{OAUTH_ALLOWED_URLS_PROPERTY}={idp.token_endpoint}",
           f"-Dlog4j2.configurationFile={workdir / 'tools-log4j2.properties'}", "-cp", classpath(), main, *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)


def write_client_props(path: Path, oauth: OAuthListener, client_id: str, secret: str, protocol: str,
                       ca: str | None) -> Path:
    props = {"security.protocol": protocol, **oauth.client_config(client_id, secret)}
    if ca:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": ca})
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def uvarint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def show(frame_text: bytes, token: str) -> str:
    return repr(frame_text).replace(token, f"<jwt {len(token)} chars>")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--secure", action="store_true", help="OAUTH over SASL_SSL on a secure cluster")
    ap.add_argument("--reauth-ms", type=int, default=45000, help="connections.max.reauth.ms of the OAUTH listener")
    ap.add_argument("--principal-claim", default=None,
                    help="sasl.oauthbearer.sub.claim.name (e.g. preferred_username); also turns on the "
                         "StandardAuthorizer with super.users User:ANONYMOUS and User:app-client, and checks "
                         "that app-client sees the topic and kmp-mirror does not")
    args = ap.parse_args()
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="kmp-oidc-smoke-"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tools-log4j2.properties").write_text(TOOLS_LOG4J2)
    print(f"work directory {workdir}")

    idp = OidcProvider(workdir, free_port(), token_lifetime_s=60)
    cluster = None
    relay = None
    try:
        t = time.time()
        secrets = idp.secrets
        print(f"IdP prepared in {time.time() - t:.1f}s (cached after the first time)")
        idp.start()
        print(f"Keycloak {idp.version} ready in {idp.start_seconds:.1f}s; token endpoint {idp.token_endpoint}")

        secure = None
        ca = None
        if args.secure:
            from certs import generate
            certs = generate(workdir / "certs")
            secure = SecureListeners(certs)
            ca = str(certs.ca.cert)
        oauth = OAuthListener(idp, reauth_ms=args.reauth_ms, principal_claim=args.principal_claim)
        extra = {}
        if args.principal_claim:
            extra = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                     "super.users": "User:ANONYMOUS;User:app-client", "allow.everyone.if.no.acl.found": "false"}
        size = KafkaCluster.port_block_size(1, secure=secure, oauth=oauth)
        cluster = KafkaCluster("oauth", 1, free_port_block(size), workdir, secure=secure, oauth=oauth, extra_config=extra)
        t = time.time()
        cluster.start()
        addr = cluster.addr_for("OAUTH", 1)
        protocol = oauth.protocol(bool(secure))
        print(f"Kafka broker ready in {time.time() - t:.1f}s; OAUTH listener {addr} ({protocol})")

        older_token = idp.token("app-client")
        older_fetched = time.time()
        _, claims = decode_jwt(older_token)
        print("claims of an app-client token:", json.dumps(claims))
        print(f"  exp - iat = {claims['exp'] - claims['iat']} s")

        print("1. Java console producer/consumer as app-client over OAUTH")
        good = write_client_props(workdir / "app-client.properties", oauth, "app-client", secrets["app-client"], protocol, ca)
        t = time.time()
        out = java_tool(workdir, idp, "org.apache.kafka.tools.ConsoleProducer",
                        ["--bootstrap-server", addr, "--topic", TOPIC, "--producer.config", str(good)],
                        stdin="\n".join(RECORDS) + "\n")
        check(out.returncode == 0, f"ConsoleProducer exit {out.returncode} in {time.time() - t:.1f}s {out.stderr.strip()[-1500:]}")
        bootstrap = addr
        if not secure:
            relay = SaslRecordingRelay(addr)
            bootstrap = relay.addr
        t = time.time()
        out = java_tool(workdir, idp, "org.apache.kafka.tools.consumer.ConsoleConsumer",
                        ["--bootstrap-server", bootstrap, "--topic", TOPIC, "--from-beginning", "--max-messages",
                         str(len(RECORDS)), "--timeout-ms", "60000", "--consumer.config", str(good)])
        got = out.stdout.split()
        check(got == RECORDS, f"ConsoleConsumer read {got} in {time.time() - t:.1f}s (exit {out.returncode}) {out.stderr.strip()[-1500:]}")
        if relay:
            check(bool(relay.sasl_requests), f"relay saw {len(relay.sasl_requests)} SaslAuthenticate request(s) of the Java client")
            for version, frame in relay.sasl_requests[:1]:
                start = frame.index(b"n,")
                end = frame.index(b"\x01\x01", start) + 2
                text = frame[start:end]
                jwt = text.split(b"auth=Bearer ", 1)[1].split(b"\x01", 1)[0].decode()
                print(f"  Java client's SaslAuthenticate v{version} auth_bytes ({end - start} bytes): {show(text, jwt)}")
                check(text == initial_response(jwt), "initial response is exactly b'n,,\\x01auth=Bearer ' + jwt + b'\\x01\\x01'")
                if version >= 2:
                    check(frame[:start].endswith(uvarint(len(text) + 1)) and frame[end:] == b"\x00",
                          "flexible v2: auth_bytes is COMPACT_BYTES (uvarint length+1 before it), then empty tagged fields")

        print("2. Raw SaslHandshake/SaslAuthenticate against the OAUTH listener")
        answers = sasl_login(addr, idp.token("app-client"), ca)
        a = answers[0]
        print(f"  fresh token: {a}")
        check(a["error_code"] == 0 and not a["auth_bytes"], "fresh app-client token accepted")
        reauth = args.reauth_ms if args.reauth_ms > 0 else float("inf")  # 0: not set (Kafka's default)
        expect = min(60000, reauth)
        check(abs(a["session_lifetime_ms"] - expect) <= 2000,
              f"session_lifetime_ms {a['session_lifetime_ms']} ~= min(exp - now ~60000, reauth {args.reauth_ms or 'unset'})")
        wait = max(0.0, older_fetched + 25 - time.time())
        time.sleep(wait)
        remaining = claims["exp"] * 1000 - time.time() * 1000
        a = sasl_login(addr, older_token, ca)[0]
        print(f"  token fetched {time.time() - older_fetched:.0f}s ago: {a}")
        check(a["error_code"] == 0 and abs(a["session_lifetime_ms"] - min(remaining, reauth)) <= 2000,
              f"session_lifetime_ms {a['session_lifetime_ms']} ~= min(exp - now {remaining:.0f}, reauth {args.reauth_ms or 'unset'})")
        for label, token in (("wrong audience", idp.token(WRONG_AUDIENCE_CLIENT)),
                             ("garbage", "garbage.not-a.jwt"),
                             ("unsigned copy of a good token", older_token.rsplit(".", 1)[0] + ".")):
            answers = sasl_login(addr, token, ca)
            for i, ans in enumerate(answers):
                print(f"  {label}: answer {i + 1}: {ans}")
            challenge = answers[0]["auth_bytes"]
            check(len(answers) == 2 and answers[0]["error_code"] == 0 and json.loads(challenge) == {"status": "invalid_token"},
                  f"{label}: first answer is error 0 with the challenge {challenge!r}")
            check(len(answers) == 2 and answers[1]["error_code"] == 58,
                  f"{label}: after \\x01 the broker answers SASL_AUTHENTICATION_FAILED (58): {answers[-1]['error_message']!r}")
        c = RawSasl(addr, ca)
        err, mechs = c.handshake("PLAIN")
        c.close()
        check(err == 33 and mechs == ["OAUTHBEARER"], f"SaslHandshake PLAIN: error {err} (UNSUPPORTED_SASL_MECHANISM=33), enabled {mechs}")

        if args.principal_claim:
            print(f"2b. principals from {args.principal_claim}: TopicCommand --list as app-client (super user) and kmp-mirror (no ACLs)")
            for cid, sees in (("app-client", True), ("kmp-mirror", False)):
                props = write_client_props(workdir / f"{cid}.properties", oauth, cid, secrets[cid], protocol, ca)
                out = java_tool(workdir, idp, "org.apache.kafka.tools.TopicCommand",
                                ["--bootstrap-server", addr, "--list", "--command-config", str(props)])
                listed = out.stdout.split()
                check(out.returncode == 0 and (TOPIC in listed) == sees,
                      f"User:{cid} lists {listed} (exit {out.returncode}) {out.stderr.strip()[-300:] if out.returncode else ''}")

        print("3. Java AdminClient with the wrong-audience client's credentials")
        bad = write_client_props(workdir / "wrong-audience.properties", oauth, WRONG_AUDIENCE_CLIENT,
                                 secrets[WRONG_AUDIENCE_CLIENT], protocol, ca)
        out = java_tool(workdir, idp, "org.apache.kafka.tools.TopicCommand",
                        ["--bootstrap-server", addr, "--list", "--command-config", str(bad)], timeout=120)
        msg = [line for line in (out.stdout + out.stderr).splitlines() if "uthentication" in line][:2]
        check(out.returncode != 0 and bool(msg), f"TopicCommand --list refused (exit {out.returncode}): {msg}")
        log = (cluster.dir / "broker-1.log").read_text(errors="replace")
        fails = [line for line in log.splitlines() if "Failed authentication" in line]
        print(f"  broker log: {len(fails)} 'Failed authentication' line(s); first: {fails[0][:400] if fails else None}")
    finally:
        if relay:
            relay.close()
        if cluster:
            cluster.stop()
        idp.stop()
    print(f"{'FAILED: ' + '; '.join(failures) if failures else 'all checks passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
