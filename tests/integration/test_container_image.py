"""The container image, built here without a registry and run with podman: docker/build-image.sh
builds the static binary and assembles the image on `scratch` with buildah (once per run: it skips
when its OCI archive is newer than every source); the image then runs, as user 65532, in front of
the suite's real destination cluster with confluent-kafka producing and consuming through it and
a mirror from the real source cluster catching up; a second container on a private network shows
the image's defaults (admin on 0.0.0.0) and the token from KMP_ADMIN_TOKEN_FILE enforced for a
caller that is not loopback. The compose file for Docker users is checked for its wiring (it cannot
run here: its Kafka, Prometheus and Grafana images come from a registry).

How podman runs here (a sandbox without CAP_SYS_RESOURCE and with hybrid cgroups): runc, the
cgroupfs manager and rlimits no higher than this process's hard limits; see ``Podman``."""

from __future__ import annotations

import json
import os
import re
import resource
import secrets
import shutil
import subprocess
import tarfile
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import REPO, free_port, free_port_block, unique
from kmp_common import wait_until
from mirror import create, produce_plain, read_all, wait_caught_up

# Long tier only (tests/run.sh --long): a cold build compiles the release binary (minutes on 2
# cores); the module's first test pays it. podman and buildah are needed only here.
pytestmark = [pytest.mark.long, pytest.mark.timeout(3000)]
# Only this module reads YAML (docker/compose.yaml): without pyyaml it is skipped, saying so.
yaml = pytest.importorskip("yaml", reason="pyyaml is not installed (pip install -r tests/requirements.txt): "
                                          "the compose file check reads docker/compose.yaml with it")

BUILD_SCRIPT = REPO / "docker" / "build-image.sh"
IMAGE_MAX_BYTES = 50 * 1000 * 1000  # the target: at most 50 MB
USER = "65532"
READY_TIMEOUT_S = 60
TOOLS = ("podman", "buildah", "runc", "slirp4netns", "file")


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")).resolve()


@pytest.fixture(scope="module")
def image(workdir) -> dict[str, str]:
    """docker/build-image.sh's image.env (IMAGE, STORAGE_ROOT, ...) after running the script."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    assert not missing, (f"container tools missing: {missing} (Debian: apt-get install podman buildah runc slirp4netns file; "
                         ".ci/apt-packages.txt lists them)")
    log = Path(workdir) / "build-image.log"
    started = time.time()
    with open(log, "wb") as out:
        code = subprocess.run([str(BUILD_SCRIPT)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=2700).returncode
    text = log.read_text(errors="replace")
    assert code == 0, f"docker/build-image.sh exited {code}:\n{text[-6000:]}"
    print(f"\nbuild-image.sh took {time.time() - started:.0f}s: {text.strip().splitlines()[-1]}")
    env = dict(line.split("=", 1) for line in (_target_dir() / "container" / "image.env").read_text().splitlines() if "=" in line)
    return env


class Podman:
    """podman on the build script's private storage. Flags this sandbox needs (harmless elsewhere):
    runc (crun 1.8 refuses hybrid cgroup v1/v2 hosts), the cgroupfs manager (no systemd), and
    nofile/nproc limits within this process's hard limits (podman's defaults are higher and raising
    a hard limit needs CAP_SYS_RESOURCE, which the sandbox does not grant)."""

    def __init__(self, image: dict[str, str]):
        self.image = image["IMAGE"]
        self.base = ["podman", "--root", image["STORAGE_ROOT"], "--runroot", image["RUN_ROOT"],
                     "--storage-driver", image["STORAGE_DRIVER"], "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        nofile = 65536 if nofile == resource.RLIM_INFINITY else min(nofile, 65536)
        nproc = 4096 if nproc == resource.RLIM_INFINITY else min(nproc, 4096)
        self.limits = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        assert not check or out.returncode == 0, f"podman {' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}"
        return out

    def start(self, name: str, *run_args: str, command: tuple[str, ...] = ()) -> "Container":
        self("run", "-d", "--name", name, *self.limits, *run_args, self.image, *command, timeout=180)
        return Container(self, name)

    def inspect_image(self) -> dict:
        return json.loads(self("image", "inspect", self.image).stdout)[0]


class Container:
    def __init__(self, podman: Podman, name: str):
        self.podman, self.name = podman, name

    def state(self) -> dict:
        return json.loads(self.podman("inspect", "--format", "{{json .State}}", self.name).stdout)

    def logs(self) -> str:
        out = self.podman("logs", self.name, check=False)
        return (out.stdout + out.stderr)[-6000:]

    def running(self) -> bool:
        state = self.state()
        assert state["Running"], f"container {self.name} is not running (exit code {state['ExitCode']}):\n{self.logs()}"
        return True

    def stop(self, timeout_s: int = 40) -> int:
        self.podman("stop", "-t", str(timeout_s), self.name, timeout=timeout_s + 60)
        return self.state()["ExitCode"]

    def remove(self) -> None:
        self.podman("rm", "-f", "-t", "0", self.name, check=False)


def http(port: int, path: str, method: str = "GET", token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def secret_file(workdir: Path, name: str, content: str) -> Path:
    """A file the container's user (65532, not the file's owner) can read when bind-mounted."""
    path = Path(workdir) / name
    path.write_text(content)
    path.chmod(0o444)
    return path


def wait_ready(container: Container, admin_port: int) -> None:
    wait_until(f"the container's /readyz (port {admin_port}) answering 200",
               lambda: container.running() and http(admin_port, "/readyz")[0] == 200, READY_TIMEOUT_S, 0.25)


def process_ids(pid: int) -> tuple[list[str], list[str]]:
    """Real, effective, saved and filesystem uids and gids of a host process, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return fields["Uid"].split(), fields["Gid"].split()


def test_the_image_fronts_real_kafka_as_a_non_root_user_and_a_mirror_catches_up(image, clusters, workdir):
    source, destination = clusters
    podman = Podman(image)
    mirrored = unique("ctr-mirrored")
    create(source.bootstrap, mirrored, 2)
    produce_plain(source.bootstrap, mirrored, 150)
    port, node_base, admin_port = free_port(), free_port_block(16), free_port()
    token = secrets.token_hex(16)
    token_file = secret_file(workdir, f"token-{port}", token + "\n")
    props = secret_file(workdir, f"source-{port}.properties", f"bootstrap.servers={source.bootstrap}\n")
    # Host networking: the suite's brokers listen on (and advertise) 127.0.0.1 only. The upstream
    # comes by flag (after the image name); everything else by environment.
    container = podman.start(
        unique("kmp-front"), "--network", "host",
        "-e", f"KMP_LISTEN=127.0.0.1:{port}", "-e", f"KMP_NODE_PORT_BASE={node_base}",
        "-e", f"KMP_ADMIN_LISTEN=127.0.0.1:{admin_port}", "-e", "KMP_ADMIN_TOKEN_FILE=/run/secrets/kmp_admin_token",
        "-e", "KMP_MIRROR_SOURCE_ALLOW=127.0.0.1:*",
        "-v", f"{token_file}:/run/secrets/kmp_admin_token:ro", "-v", f"{props}:/etc/kmp/source.properties:ro",
        command=("--upstream", destination.bootstrap))
    bootstrap = f"127.0.0.1:{port}"
    try:
        wait_ready(container, admin_port)
        pid = container.state()["Pid"]
        uids, gids = process_ids(pid)
        assert uids == [USER] * 4 and gids == [USER] * 4, f"the proxy in the container runs as uid {uids} gid {gids}, not {USER}"

        # A real client through the container: topic created, records produced and consumed.
        topic = unique("ctr-client")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
        brokers = admin.list_topics(timeout=10).brokers
        assert {(b.host, b.port) for b in brokers.values()} == {("127.0.0.1", node_base + n) for n in (1, 2, 3)}, \
            f"brokers as the container advertises them: {brokers}"
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        sent = {f"value-{i}".encode() for i in range(300)}
        for i, value in enumerate(sorted(sent)):
            producer.produce(topic, key=f"k{i % 17}".encode(), value=value)
        assert producer.flush(30) == 0, "records produced through the container not acknowledged within 30 s"
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("ctr-group"), "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got, partitions, deadline = set(), set(), time.time() + 60
        while len(got) < len(sent) and time.time() < deadline:
            for m in consumer.consume(500, 0.5):
                assert not m.error(), f"consuming through the container: {m.error()}"
                got.add(m.value())
                partitions.add(m.partition())
        consumer.close()
        assert got == sent, f"consumed through the container {len(got)} of {len(sent)} records; missing e.g. {sorted(sent - got)[:3]}"
        assert partitions == {0, 1, 2}, f"records came from partitions {partitions} (each led by some broker's node port)"

        # A mirror from the real source cluster, created and started with the CLI inside the image.
        def cli(*args: str) -> dict:
            out = podman("exec", container.name, "kafka-mirror-proxy", "mirrors", "--bootstrap-server", bootstrap, *args,
                         "--output", "json", check=False)
            assert out.returncode == 0, f"`mirrors {' '.join(args)}` in the container exited {out.returncode}: {out.stdout} {out.stderr}"
            return json.loads(out.stdout)
        created = cli("--create", "--mirror", "ctr", "--mirror-config", "/etc/kmp/source.properties")
        assert created["error"] == "NONE", created
        started = cli("--start", "--mirror", "ctr", "--topics", mirrored)
        assert [(r["topic"], r["error_code"]) for r in started["results"]] == [(mirrored, 0)], started
        wait_caught_up(source.bootstrap, destination.bootstrap, {mirrored: 2})
        produce_plain(source.bootstrap, mirrored, 70, start=1000)
        wait_caught_up(source.bootstrap, destination.bootstrap, {mirrored: 2})
        at_source = [r[:4] for r in read_all(source.bootstrap, mirrored, 2, "read_committed")]
        through_container = [r[:4] for r in read_all(bootstrap, mirrored, 2, "read_committed")]
        assert len(at_source) == 220 and through_container == at_source, \
            f"the mirror read through the container ({len(through_container)} records) differs from the source ({len(at_source)})"

        status, metrics = http(admin_port, "/metrics")
        assert status == 200 and "kmp_" in metrics, f"/metrics from loopback answered {status}"
        assert token not in container.logs(), "the admin token appears in the container's log"
        code = container.stop()
        assert code == 0, f"the container exited {code} on SIGTERM (podman stop):\n{container.logs()}"
    finally:
        container.remove()


def test_the_image_defaults_serve_admin_on_all_interfaces_with_the_token_file_enforced_for_remote_callers(image, workdir):
    """A private network namespace (slirp4netns): the host reaches the container only through
    published ports, so the proxy sees a peer that is not loopback. The upstream is given by
    KMP_UPSTREAM and points at a closed port of the container itself (no traffic leaves it)."""
    podman = Podman(image)
    admin_port, boot_port = free_port(), free_port()
    token = secrets.token_hex(16)
    token_file = secret_file(workdir, f"remote-token-{admin_port}", token + "\n")
    container = podman.start(
        unique("kmp-defaults"), "--network", "slirp4netns:port_handler=slirp4netns",
        "-p", f"127.0.0.1:{admin_port}:9180", "-p", f"127.0.0.1:{boot_port}:9192",
        "-e", "KMP_UPSTREAM=127.0.0.1:9", "-e", "KMP_ADMIN_TOKEN_FILE=/run/secrets/kmp_admin_token",
        "-v", f"{token_file}:/run/secrets/kmp_admin_token:ro")
    try:
        wait_until("the container's /healthz through the published port 9180 answering 200",
                   lambda: container.running() and http(admin_port, "/healthz")[0] == 200, READY_TIMEOUT_S, 0.25)
        status, body = http(admin_port, "/readyz")
        assert status == 503, f"/readyz with an unreachable upstream answered {status}: {body}"
        assert http(admin_port, "/metrics")[0] == 401, "a remote /metrics without the token is refused (401)"
        assert http(admin_port, "/metrics", token="not-" + token)[0] == 401, "a remote /metrics with a wrong token is refused"
        status, metrics = http(admin_port, "/metrics", token=token)
        assert status == 200 and "kmp_" in metrics, f"a remote /metrics with the token from the file answered {status}"
        assert http(admin_port, "/v1/mirrors/none", method="DELETE")[0] == 403, "a remote mutation without the token is refused (403)"
        status, body = http(admin_port, "/v1/mirrors/none", method="DELETE", token=token)
        assert status not in (401, 403), f"a remote mutation with the token was refused: {status} {body}"
        assert token not in container.logs(), "the admin token appears in the container's log"
        code = container.stop()
        assert code == 0, f"the container exited {code} on SIGTERM:\n{container.logs()}"
    finally:
        container.remove()


def dockerfile_directives(path: Path) -> dict[str, str]:
    """The last value of each directive of the Dockerfile's final stage."""
    final: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#") or line.startswith(" "):
            continue
        word, _, rest = line.partition(" ")
        if word == "FROM":
            final = {}
        final[word] = rest.strip()
    return final


def test_the_image_is_a_small_static_binary_on_scratch_that_the_dockerfile_describes_too(image, workdir):
    podman = Podman(image)
    size = int(image["IMAGE_BYTES"])
    assert size <= IMAGE_MAX_BYTES, f"image is {size / 1e6:.1f} MB, more than {IMAGE_MAX_BYTES / 1e6:.0f} MB"
    config = podman.inspect_image()["Config"]
    assert config["User"] == f"{USER}:{USER}", f"image user: {config.get('User')}"
    ports = set(config["ExposedPorts"])
    expected = {"9192/tcp", "9180/tcp", *(f"{p}/tcp" for p in range(9200, 9300))}
    assert ports == expected, f"exposed ports differ: extra {sorted(ports - expected)[:5]}, missing {sorted(expected - ports)[:5]}"
    entrypoint = config["Entrypoint"]
    assert entrypoint == ["/usr/local/bin/kafka-mirror-proxy", "run", "--config", "/etc/kafka-mirror-proxy/config.toml"], entrypoint
    assert not config.get("Cmd"), f"no default arguments after the entry point: {config.get('Cmd')}"

    # What is in it: the binary (static) and docker/rootfs, nothing else (no shell, no libc).
    name = unique("kmp-files")
    podman("create", "--name", name, podman.image)
    archive = Path(workdir) / f"{name}.tar"
    try:
        podman("export", "-o", str(archive), name)
    finally:
        podman("rm", "-f", name, check=False)
    with tarfile.open(archive) as tar:
        files = sorted(m.name.lstrip("./") for m in tar.getmembers() if m.isfile())
        (Path(workdir) / name).mkdir()
        tar.extract("usr/local/bin/kafka-mirror-proxy", Path(workdir) / name, filter="data")
    rootfs = sorted(str(p.relative_to(REPO / "docker" / "rootfs")) for p in (REPO / "docker" / "rootfs").rglob("*") if p.is_file())
    assert files == sorted([*rootfs, "usr/local/bin/kafka-mirror-proxy"]), f"files in the image: {files}"
    kind = subprocess.run(["file", "-b", str(Path(workdir) / name / "usr/local/bin/kafka-mirror-proxy")], capture_output=True, text=True).stdout
    assert re.search(r"static(-pie)? linked", kind), f"the binary in the image is not static: {kind}"

    # docker/Dockerfile (for Docker users; its base image cannot be pulled here) builds the same image.
    d = dockerfile_directives(REPO / "docker" / "Dockerfile")
    assert d["FROM"] == "scratch" and d["USER"] == f"{USER}:{USER}", d
    assert json.loads(d["ENTRYPOINT"]) == entrypoint, d["ENTRYPOINT"]
    assert set(d["EXPOSE"].split()) == {"9192", "9180", "9200-9299"}, d["EXPOSE"]
    assert d["COPY"].startswith("--from=build /kafka-mirror-proxy /usr/local/bin/kafka-mirror-proxy"), d["COPY"]


def test_the_compose_file_wires_two_clusters_the_proxy_prometheus_and_grafana():
    """Structure only: the stack's images come from a registry this machine cannot reach."""
    docker = REPO / "docker"
    compose = yaml.safe_load((docker / "compose.yaml").read_text())
    services = compose["services"]
    assert {"kafka-src", "kafka-dst", "proxy", "prometheus", "grafana"} <= set(services), sorted(services)
    for name in ("kafka-src", "kafka-dst"):
        env = services[name]["environment"]
        assert services[name]["image"].startswith("apache/kafka:") and env["KAFKA_PROCESS_ROLES"] == "broker,controller", name
    assert services["kafka-src"]["environment"]["CLUSTER_ID"] != services["kafka-dst"]["environment"]["CLUSTER_ID"], "two clusters"
    proxy = services["proxy"]
    assert (REPO / proxy["build"]["dockerfile"]).resolve() == (docker / "Dockerfile").resolve(), proxy["build"]
    assert proxy["environment"]["KMP_UPSTREAM"] == "kafka-dst:9092", proxy["environment"]
    for service in services.values():
        for volume in service.get("volumes", []):
            host = volume.split(":", 1)[0]
            assert (docker / host).exists(), f"compose mounts {host}, which is not in docker/"
    for secret in compose["secrets"].values():
        assert (docker / secret["file"]).is_file(), secret
    config = tomllib.loads((docker / "compose" / "proxy.toml").read_text())
    admin_port = config["admin"]["listen"].rsplit(":", 1)[1]
    assert f"{admin_port}:{admin_port}" in proxy["ports"], proxy["ports"]
    assert f"{config['listener']['node_port_base'] + 1}:{config['listener']['node_port_base'] + 1}" in proxy["ports"], \
        "kafka-dst (node id 1) is published at node_port_base + 1"
    assert config["mirrors"][0]["source_bootstrap_servers"] == ["kafka-src:9092"], config["mirrors"]
    scrape = yaml.safe_load((docker / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert f"proxy:{admin_port}" in targets, f"Prometheus scrapes {targets}, not the proxy's admin port"
    assert config["security"]["admin_read_open"] or any("authorization" in job for job in scrape["scrape_configs"]), \
        "Prometheus (not loopback) can read /metrics: admin_read_open or a bearer token"
