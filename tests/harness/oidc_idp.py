"""A real OpenID Connect identity provider for OAUTHBEARER tests: Keycloak (``start-dev``, plain
HTTP on 127.0.0.1) with a realm ``kmp`` of confidential clients that get tokens with the OAuth
client-credentials grant (KIP-768), as Kafka's ``OAuthBearerLoginCallbackHandler`` does.

    from oidc_idp import OidcProvider
    idp = OidcProvider(workdir, port).start()       # start() waits until the realm answers
    idp.token_endpoint, idp.jwks_url, idp.issuer     # what Kafka clients and brokers are given
    idp.secrets["app-client"]                        # client id -> client secret
    jwt = idp.token("app-client")                    # a fresh access token (for tests)
    idp.stop()

Keycloak's distribution comes from Maven Central through ``keycloak-dist.sh`` (cached, unpacked).
It needs Java 21+: :func:`java_home` picks one (``KMP_KEYCLOAK_JAVA_HOME``, else a Temurin 25/21
JDK). Every instance runs from its own Keycloak home under ``workdir`` (the shared distribution is
symlinked in; only ``data/`` is the instance's own), so instances do not share a database.

Start-up is kept short on a small machine (2 cores: ~3.5 s from launch to the realm answering,
against ~13-24 s for a plain ``kc.sh start-dev --import-realm``) by doing once per machine, in the
cache (:func:`prepare`), what every start would otherwise repeat: the Quarkus re-augmentation for
:data:`BUILD_OPTIONS` (~5-15 s, then a relaunch), the database schema and master realm (~5 s) and
the import of the ``kmp`` realm (~2-3 s) -- kept as a seed dev-file (H2) database per realm shape
that each start copies -- and, on Java 25+, an AOT cache (JEP 483/514, ~1.5 s) trained by that
same seeding run. Keycloak is launched with ``java`` directly (what kc.sh runs), so the class path
is the shared distribution's and the AOT cache matches. ``start-dev`` implies
``--hostname-strict=false``; ``--hostname=http://127.0.0.1:<port>`` pins ``iss``.

Tokens (the claims each client's access token carries):
  ``iss``  = :attr:`issuer` (pinned with ``--hostname``, whatever host name a client used);
  ``aud``  = ``"kafka"`` (an audience mapper; the client ``wrong-audience`` gets ``"not-kafka"``);
  ``sub``  = the client's service-account user id: a UUID derived from the client id, so it is the
             same at every start (``sub_is_client_id=True`` makes it the client id itself);
  ``azp``, ``client_id``, ``preferred_username`` = the client id (so
             ``sasl.oauthbearer.sub.claim.name=preferred_username`` makes Kafka's principal
             ``User:<client id>``);
  ``exp - iat`` = ``token_lifetime_s``.

CLI smoke test: ``python3 tests/harness/oidc_idp.py [--port N] [--dir DIR]`` starts it, prints the
token endpoint, fetches a token for ``app-client``, prints its claims and stops.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import hashlib
import json
import os
import secrets as _secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from ports import free_port  # noqa: E402  (tests/harness/ports.py)

KEYCLOAK_VERSION = os.environ.get("KMP_KEYCLOAK_VERSION", "26.5.6")
REALM = "kmp"
AUDIENCE = "kafka"
DEFAULT_CLIENTS = ("kmp-proxy", "kmp-mirror", "app-client")
# A client whose tokens are valid in every other way but carry the audience "not-kafka": brokers
# that expect the audience "kafka" must refuse them.
WRONG_AUDIENCE_CLIENT = "wrong-audience"
READY_TIMEOUT_S = 180

# Build-time options: passed to every start-dev identically (the distribution is augmented for them
# once, by the seeding run). Features a client-credentials IdP does not use are off (admin-api,
# login and account were left on, untried); health and metrics endpoints are off.
BUILD_OPTIONS = (
    "--db=dev-file",
    "--health-enabled=false",
    "--metrics-enabled=false",
    "--features-disabled=admin,admin-fine-grained-authz,authorization,ciba,device-flow,impersonation,kerberos,organization,"
    "par,web-authn,passkeys,step-up-authentication,client-policies,recovery-codes",
)
# JVM options (kc.sh's defaults, less G1 and its default heap) for a short-lived test IdP: C1 only
# (start-up over peak throughput), a small serial-GC heap; java.lang opened so JBoss threads do not
# fail at shutdown on Java 24+. KMP_KEYCLOAK_JAVA_OPTS replaces them.
JAVA_OPTS = os.environ.get("KMP_KEYCLOAK_JAVA_OPTS", (
    "-XX:MetaspaceSize=96M -XX:MaxMetaspaceSize=256m -Dfile.encoding=UTF-8 -Dsun.stdout.encoding=UTF-8 "
    "-Dsun.err.encoding=UTF-8 -Dstdout.encoding=UTF-8 -Dstderr.encoding=UTF-8 -XX:+ExitOnOutOfMemoryError "
    "-Djava.security.egd=file:/dev/urandom -Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"))
JAVA_ADD_OPENS = ("--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED "
                  "--add-opens=java.base/java.security=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED")


def keycloak_home(version: str = KEYCLOAK_VERSION) -> Path:
    """The unpacked Keycloak distribution ``version`` (downloaded from Maven Central once)."""
    out = subprocess.run([str(HERE / "keycloak-dist.sh"), version], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def _java_major(home: Path) -> int:
    try:
        release = (home / "release").read_text()
        ver = release.split('JAVA_VERSION="', 1)[1].split('"', 1)[0]
        return int(ver.split(".")[0])
    except (OSError, IndexError, ValueError):
        return 0


def java_home() -> Path:
    """A JDK of Java 21 or later for Keycloak: ``KMP_KEYCLOAK_JAVA_HOME``, else the newest of
    /usr/lib/jvm that is 21+, else ``JAVA_HOME`` if it is 21+."""
    env = os.environ.get("KMP_KEYCLOAK_JAVA_HOME")
    if env:
        return Path(env)
    candidates = sorted(Path("/usr/lib/jvm").glob("*"), key=_java_major, reverse=True) if Path("/usr/lib/jvm").is_dir() else []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    for c in candidates:
        if _java_major(c) >= 21 and (c / "bin" / "java").exists():
            return c
    raise RuntimeError("Keycloak needs Java 21+: none found under /usr/lib/jvm; set KMP_KEYCLOAK_JAVA_HOME")


def _instance_home(dist: Path, root: Path) -> Path:
    """A Keycloak home at ``root`` (``kc.home.dir``): the shared distribution's lib, conf,
    providers and themes symlinked in, its own ``data/`` (database, import directory, tmp)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("lib", "conf", "providers", "themes"):
        link = root / name
        if not link.is_symlink():
            link.symlink_to(dist / name)
    (root / "data").mkdir(exist_ok=True)
    return root


def _kc_command(dist: Path, home: Path, args: list[str], built: bool = True, aot: Path | None = None,
                aot_out: Path | None = None) -> list[str]:
    """What ``kc.sh`` runs, with the instance's home and this module's JVM options.

    ``built``: ``-Dkc.config.built=true``, i.e. the distribution is already augmented for
    :data:`BUILD_OPTIONS` (else Keycloak checks, and exits with 10 after re-augmenting, as kc.sh
    expects). ``aot`` / ``aot_out``: use / write a Java 25 AOT cache (JEP 483/514)."""
    jvm = [str(java_home() / "bin" / "java"),
           "-Djava.util.concurrent.ForkJoinPool.common.threadFactory=io.quarkus.bootstrap.forkjoin.QuarkusForkJoinWorkerThreadFactory",
           *JAVA_OPTS.split(), *JAVA_ADD_OPENS.split(), "-Duser.language=en", "-Duser.country=US"]
    if aot_out:
        jvm.append(f"-XX:AOTCacheOutput={aot_out}")
    elif aot and aot.exists():
        jvm.append(f"-XX:AOTCache={aot}")
    jvm += [f"-Dkc.home.dir={home}", f"-Djboss.server.config.dir={dist / 'conf'}",
            "-Djava.util.logging.manager=org.jboss.logmanager.LogManager", "-Dpicocli.disable.closures=true",
            "-Dquarkus-log-max-startup-records=10000"]
    if built:
        jvm.append("-Dkc.config.built=true")
    return [*jvm, "-cp", str(dist / "lib" / "quarkus-run.jar"), "io.quarkus.bootstrap.runner.QuarkusEntryPoint", *args]


def _start_dev_args(port: int, base_url: str) -> list[str]:
    return ["start-dev", *BUILD_OPTIONS, f"--http-port={port}", "--http-host=127.0.0.1",
            f"--hostname={base_url}", "--log-console-color=false"]


def _popen(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _stop_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM to the process group of ``proc``; SIGKILL to what is left after ``timeout`` s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:  # whatever is left of the group (e.g. the AOT cache assembler), and the leader if still there
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def _aot_path(dist: Path) -> Path | None:
    """Where the AOT cache for this distribution, build and JVM lives (None before Java 25)."""
    jh = java_home()
    if _java_major(jh) < 25 or os.environ.get("KMP_KEYCLOAK_NO_AOT"):
        return None
    release = (jh / "release").read_text() if (jh / "release").exists() else str(jh)
    return dist.parent / f"aot-{_key(*BUILD_OPTIONS, JAVA_OPTS, JAVA_ADD_OPENS, release)}.aot"


def prepare(realm: dict, version: str = KEYCLOAK_VERSION) -> tuple[Path, Path, dict[str, str]]:
    """Makes, once per machine (in the cache, under a file lock), what every start of a realm of
    this shape reuses; returns (distribution home, seed database file, client id -> secret).

    ``realm``: the realm representation with the client secrets left out. The first call for a
    shape runs Keycloak once on an empty database: it augments the distribution for
    :data:`BUILD_OPTIONS` if needed (exit 10 and relaunch, as kc.sh does), creates the schema and
    the master realm, imports ``realm`` with freshly drawn random secrets, serves a token to every
    client (which also trains the Java 25 AOT cache, when there is none yet), and stops; its
    database file becomes the seed."""
    dist = keycloak_home(version)
    build_key = _key(*BUILD_OPTIONS)
    seed_dir = dist.parent / f"seed-{build_key}-{_key(json.dumps(realm, sort_keys=True))}"
    seed, secrets_file = seed_dir / "keycloakdb.mv.db", seed_dir / "secrets.json"
    with open(dist.parent / ".prepare.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not seed.exists():
            _make_seed(dist, build_key, realm, seed_dir)
    return dist, seed, json.loads(secrets_file.read_text())


def _with_secrets(realm: dict, secrets: dict[str, str]) -> dict:
    realm = json.loads(json.dumps(realm))
    for c in realm["clients"]:
        c["secret"] = secrets[c["clientId"]]
    return realm


def _make_seed(dist: Path, build_key: str, realm: dict, seed_dir: Path) -> None:
    secrets = {c["clientId"]: _secrets.token_urlsafe(24) for c in realm["clients"]}
    marker = dist.parent / ".built"
    built = marker.exists() and marker.read_text() == build_key
    aot = _aot_path(dist)
    train = aot if aot and not aot.exists() else None
    tmp = Path(tempfile.mkdtemp(prefix="seed-", dir=dist.parent))
    try:
        home = _instance_home(dist, tmp / "kc")
        (home / "data" / "import").mkdir(parents=True)
        (home / "data" / "import" / f"{realm['realm']}-realm.json").write_text(json.dumps(_with_secrets(realm, secrets)))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        args = [*_start_dev_args(port, base), "--import-realm"]
        log = tmp / "seed.log"
        aot_tmp = train.with_name(train.name + ".tmp") if train else None
        url = f"{base}/realms/{realm['realm']}/.well-known/openid-configuration"
        proc = _popen(_kc_command(dist, home, args, built=built, aot_out=aot_tmp if built else None), log)
        try:
            try:
                _wait_http(url, proc, log, READY_TIMEOUT_S)
            except RuntimeError:
                if built or proc.returncode != 10:
                    raise
                # Keycloak re-augmented the distribution for BUILD_OPTIONS and wants a relaunch.
                proc = _popen(_kc_command(dist, home, args, built=True, aot_out=aot_tmp), log)
                _wait_http(url, proc, log, READY_TIMEOUT_S)
            for cid, secret in secrets.items():  # every client can get a token (and the AOT cache sees it)
                _client_credentials(f"{base}/realms/{realm['realm']}/protocol/openid-connect/token", cid, secret)
        finally:
            _stop_group(proc, timeout=300)  # the JVM writes the AOT cache as it exits
        marker.write_text(build_key)
        if aot_tmp and aot_tmp.exists() and proc.returncode in (0, 130, 143):
            aot_tmp.rename(train)
        db = home / "data" / "h2" / "keycloakdb.mv.db"
        if not db.exists():
            raise RuntimeError(f"Keycloak seed run left no database at {db}:\n{log.read_text()[-4000:]}")
        out = tmp / "seed"
        out.mkdir()
        shutil.copy2(db, out / "keycloakdb.mv.db")
        shutil.copy2(log, out / "seed.log")
        (out / "secrets.json").write_text(json.dumps(secrets, indent=1))
        out.rename(seed_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for f in dist.parent.glob("aot-*.tmp*"):
            f.unlink(missing_ok=True)


def _client_credentials(token_endpoint: str, client_id: str, secret: str, **form) -> dict:
    """The token endpoint's JSON answer to a client-credentials grant request."""
    body = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": client_id,
                                   "client_secret": secret, **form})
    req = urllib.request.Request(token_endpoint, data=body.encode(),
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"token request for {client_id} refused: {e.code} {e.read().decode(errors='replace')}") from None


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"Keycloak exited with {proc.returncode}; see {log}:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.time() > deadline:
            raise TimeoutError(f"Keycloak not answering {url} after {timeout}s; see {log}")
        time.sleep(0.1)


def decode_jwt(token: str) -> tuple[dict, dict]:
    """(header, claims) of a JWS compact token, without verifying it."""
    def part(s: str) -> dict:
        return json.loads(base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
    header, payload, _sig = token.split(".")
    return part(header), part(payload)


def service_account_id(client_id: str) -> str:
    """The stable ``sub`` of ``client_id``'s tokens (its service-account user id)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kmp-test-idp/{REALM}/{client_id}"))


class OidcProvider:
    """Keycloak on ``127.0.0.1:port`` with realm ``kmp`` (see the module doc for the claims).

    ``clients``: client ids whose tokens carry ``aud`` = ``kafka`` (default :data:`DEFAULT_CLIENTS`);
    :data:`WRONG_AUDIENCE_CLIENT` is always added. ``token_lifetime_s``: the realm's access-token
    lifespan (``exp - iat``). Secrets (:attr:`secrets`) and the realm's RS256 signing key are
    random, drawn when the cached seed database of this realm shape (clients, lifetime, ``sub``
    style) is made (see :func:`prepare`): every provider of the same shape on this machine shares
    them, and they survive :meth:`stop` / :meth:`start` (tokens issued before a restart stay valid;
    their ``iss`` names the port, so a broker of one provider never accepts another's tokens)."""

    def __init__(self, workdir: Path, port: int, token_lifetime_s: int = 60, clients=DEFAULT_CLIENTS,
                 version: str = KEYCLOAK_VERSION, sub_is_client_id: bool = False):
        self.workdir = Path(workdir)
        self.port = port
        self.token_lifetime_s = int(token_lifetime_s)
        self.version = version
        self.sub_is_client_id = sub_is_client_id
        self.audiences = {c: AUDIENCE for c in clients}
        self.audiences[WRONG_AUDIENCE_CLIENT] = "not-kafka"
        self.home = self.workdir / f"keycloak-{port}"
        self.log_path = self.workdir / f"keycloak-{port}.log"
        self.proc: subprocess.Popen | None = None
        self.start_seconds: float | None = None  # how long the last start() took (launch to realm answering)
        self._prepared: tuple[Path, Path, dict[str, str]] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/realms/{REALM}"

    @property
    def token_endpoint(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/protocol/openid-connect/certs"

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    @property
    def secrets(self) -> dict[str, str]:
        """Client id -> client secret (prepares the cached seed on first use)."""
        return dict(self._prepare()[2])

    def sub(self, client_id: str) -> str:
        """The ``sub`` claim of ``client_id``'s tokens."""
        return client_id if self.sub_is_client_id else service_account_id(client_id)

    def realm(self) -> dict:
        """The realm representation (without the client secrets, which :func:`prepare` adds)."""
        def mapper(name: str, kind: str, config: dict) -> dict:
            return {"name": name, "protocol": "openid-connect", "protocolMapper": kind,
                    "config": {"access.token.claim": "true", "id.token.claim": "false",
                               "introspection.token.claim": "true", "userinfo.token.claim": "false", **config}}
        clients, users = [], []
        for cid, aud in self.audiences.items():
            clients.append({
                "clientId": cid, "enabled": True, "protocol": "openid-connect", "publicClient": False,
                "clientAuthenticatorType": "client-secret",
                "serviceAccountsEnabled": True, "standardFlowEnabled": False, "implicitFlowEnabled": False,
                "directAccessGrantsEnabled": False, "fullScopeAllowed": False,
                "protocolMappers": [
                    mapper("audience", "oidc-audience-mapper", {"included.custom.audience": aud}),
                    mapper("client_id", "oidc-hardcoded-claim-mapper",
                           {"claim.name": "client_id", "claim.value": cid, "jsonType.label": "String"}),
                    mapper("preferred_username", "oidc-usermodel-property-mapper",
                           {"user.attribute": "username", "claim.name": "preferred_username", "jsonType.label": "String"}),
                ],
            })
            # The service-account user: its id is the tokens' ``sub``, its username their
            # ``preferred_username`` (Keycloak itself would name it ``service-account-<client id>``).
            users.append({"id": self.sub(cid), "username": cid, "enabled": True, "serviceAccountClientId": cid})
        return {"realm": REALM, "enabled": True, "accessTokenLifespan": self.token_lifetime_s,
                "sslRequired": "none", "clients": clients, "users": users}

    def _prepare(self) -> tuple[Path, Path, dict[str, str]]:
        if self._prepared is None:
            self._prepared = prepare(self.realm(), self.version)
        return self._prepared

    def start(self, wait: bool = True, timeout: float = READY_TIMEOUT_S) -> "OidcProvider":
        """Starts Keycloak on a fresh copy of the seed database (the realm is in it already);
        with ``wait`` returns once the realm's discovery document is served."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        dist, seed, _ = self._prepare()
        home = _instance_home(dist, self.home)
        data = home / "data"
        for sub in ("h2", "import", "tmp", "transaction-logs"):
            shutil.rmtree(data / sub, ignore_errors=True)
        (data / "h2").mkdir(parents=True)
        shutil.copy2(seed, data / "h2" / "keycloakdb.mv.db")
        self._t0 = time.time()
        self.proc = _popen(_kc_command(dist, home, _start_dev_args(self.port, self.base_url), aot=_aot_path(dist)),
                           self.log_path)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        assert self.proc is not None, "not started"
        _wait_http(self.discovery_url, self.proc, self.log_path, timeout)
        self.start_seconds = time.time() - self._t0

    def stop(self) -> None:
        """Stops Keycloak (SIGTERM to its process group, SIGKILL after 30 s)."""
        if self.proc is not None:
            _stop_group(self.proc)
            self.proc = None

    def token_response(self, client_id: str, secret: str | None = None, **form) -> dict:
        """The token endpoint's JSON answer to a client-credentials request of ``client_id``
        (``secret`` defaults to the right one; RuntimeError if refused)."""
        return _client_credentials(self.token_endpoint, client_id, self.secrets[client_id] if secret is None else secret, **form)

    def token(self, client_id: str) -> str:
        """A fresh access token (JWT) of ``client_id`` by the client-credentials grant."""
        return self.token_response(client_id)["access_token"]

    def __enter__(self) -> "OidcProvider":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _main() -> int:
    ap = argparse.ArgumentParser(description="Start the test IdP, fetch and decode a token, stop.")
    ap.add_argument("--port", type=int, default=0, help="default: a free port (tests/harness/ports.py)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--lifetime", type=int, default=60)
    ap.add_argument("--client", default="app-client")
    args = ap.parse_args()
    port = args.port or free_port()
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="kmp-idp-"))
    workdir.mkdir(parents=True, exist_ok=True)
    idp = OidcProvider(workdir, port, token_lifetime_s=args.lifetime)
    t = time.time()
    idp.secrets  # noqa: B018  (download, build, seed: cached after the first time)
    print(f"prepared (download/build/seed, cached after the first time) in {time.time() - t:.1f}s")
    try:
        idp.start()
        print(f"Keycloak {idp.version} ready in {idp.start_seconds:.1f}s (log {idp.log_path})")
        print(f"token endpoint: {idp.token_endpoint}\njwks: {idp.jwks_url}\nissuer: {idp.issuer}")
        t = time.time()
        jwt = idp.token(args.client)
        print(f"token for {args.client} in {(time.time() - t) * 1000:.0f} ms")
        header, claims = decode_jwt(jwt)
        print("header:", json.dumps(header))
        print("claims:", json.dumps(claims, indent=1))
        print(f"exp - iat = {claims['exp'] - claims['iat']} s")
    finally:
        idp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
