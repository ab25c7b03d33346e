"""What an operator reads (issue #15, points 4 to 6): `/readyz` is 503 with the reason while a
broker's node listener cannot be bound (that broker is hidden from clients) and while the mirror
engine cannot open its state topic, and 200 once the cause is gone; the `mirrors` CLI says what a
mutation did (never `NONE`), tells a plain Kafka broker apart from a proxy, and has help for
every flag of every subcommand; the demo names a port it cannot have before starting anything,
and the cluster harness's `down` returns only once every broker has exited."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from confluent_kafka.admin import AdminClient, NewTopic

from conftest import PROXY_BIN, ProxyProcess, free_port_block, unique
from kmp_common import wait_until
from mirror import cli_json, create, mirror_config, produce_plain, wait_caught_up


def spawn(proxy: ProxyProcess) -> ProxyProcess:
    """Starts the proxy without waiting for /readyz (which is the point of these tests)."""
    log = open(proxy.log_path, "ab")
    proxy.proc = subprocess.Popen(proxy.args, stdout=log, stderr=subprocess.STDOUT, env=proxy.env)
    deadline = time.time() + 15
    while proxy.http("/healthz")[0] != 200:
        assert proxy.proc.poll() is None, f"proxy exited early:\n{proxy.log()}"
        assert time.time() < deadline, f"admin endpoint up:\n{proxy.log()}"
        time.sleep(0.1)
    return proxy


def wait_readyz(proxy: ProxyProcess, status: int, needle: str = "", timeout: float = 30) -> str:
    deadline = time.time() + timeout
    while True:
        got, body = proxy.http("/readyz")
        if got == status and needle in body:
            return body
        assert time.time() < deadline, f"/readyz {status} with {needle!r}; last {got}: {body!r}\n{proxy.log()[-3000:]}"
        time.sleep(0.2)


def test_readyz_is_503_naming_the_broker_while_its_node_listener_cannot_bind(destination, workdir):
    config = workdir / f"{unique('refresh')}.toml"
    config.write_text("[upstream]\nmetadata_refresh_interval_ms = 500\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)])
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", proxy.node_port(2)))
    squatter.listen(1)
    try:
        spawn(proxy)
        body = wait_readyz(proxy, 503, "broker 2 is hidden from clients")
        assert f"127.0.0.1:{proxy.node_port(2)}" in body and "in use" in body.lower(), body
        squatter.close()
        body = wait_readyz(proxy, 200)
        assert body.startswith("ready") and "engine: active" in body, body
    finally:
        squatter.close()
        assert proxy.stop() == 0


def test_readyz_is_503_with_the_reason_while_the_state_topic_cannot_be_opened(destination, workdir):
    # Kafka refuses a topic whose name collides with an existing one once '.' and '_' are
    # treated alike: an existing `kmp_state_x` makes `kmp.state.x` impossible to create.
    blocker = unique("kmp_state").replace("-", "_")
    state_topic = blocker.replace("_", ".")
    admin = AdminClient({"bootstrap.servers": destination.bootstrap})
    admin.create_topics([NewTopic(blocker, 1, 1)])[blocker].result(30)
    config = workdir / f"{unique('state')}.toml"
    config.write_text(f'[engine]\nstate_topic = "{state_topic}"\n')
    proxy = spawn(ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]))
    try:
        body = wait_readyz(proxy, 503, "cannot open the mirror state topic")
        assert state_topic in body and "InvalidTopicException" in body, body
        admin.delete_topics([blocker])[blocker].result(30)
        body = wait_readyz(proxy, 200, timeout=60)
        assert body.startswith("ready") and "engine: active" in body, body
    finally:
        assert proxy.stop() == 0


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", bootstrap, *args], capture_output=True, text=True, timeout=60)


def test_the_cli_pointed_at_a_plain_broker_says_it_is_not_a_proxy(destination):
    broker = destination.bootstrap.split(",")[0]
    for action in (["--list"], ["--pause", "--mirror", "m", "--topics", "t"]):
        out = cli(broker, *action)
        assert out.returncode == 1, out
        assert f"{broker} answered as a Kafka broker but does not support the cluster mirror API: it is not a kafka-mirror-proxy" \
            in out.stderr, out.stderr
        assert "closed the connection" not in out.stderr + out.stdout


def test_pause_and_resume_print_what_they_did_never_none(clusters, workdir):
    source, destination = clusters
    topic = unique("mir-msg")
    create(source.bootstrap, topic, 1)
    produce_plain(source.bootstrap, topic, 10)
    proxy = ProxyProcess(destination.bootstrap, workdir, mirror_config(workdir, source, [topic], name="msg")).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 1})
        for action, verb in (("--pause", "paused"), ("--resume", "resumed")):
            out = cli(proxy.bootstrap, action, "--mirror", "msg", "--topics", topic)
            assert out.returncode == 0, out
            assert out.stdout == f"mirror msg: {verb} topics {topic}\n", out.stdout
            assert "NONE" not in out.stdout + out.stderr
        stranger = unique("not-mirrored")
        out = cli(proxy.bootstrap, "--pause", "--mirror", "msg", "--topics", stranger)
        # A refusal goes to stderr with its reason; stdout has nothing.
        assert out.returncode == 1 and out.stdout == "" and re.fullmatch(f"mirror msg: topic {stranger} not paused: [A-Z_]+: .+\n", out.stderr), out
        assert "NONE" not in out.stderr
        out = cli(proxy.bootstrap, "--describe", "--mirror", "msg")
        lines = [l for l in out.stdout.splitlines() if l.strip()]
        header = lines[0]
        row = next(l for l in lines if topic in l)
        # Columns line up: each header word starts where its cell does (left) or ends where it ends (right).
        assert row.index(topic) == header.index("TOPIC"), out.stdout
        at = header.index("STATE")
        assert row[at - 1] == " " and re.match(r"[A-Z_]{4,}\b", row[at:]), out.stdout  # e.g. MIRRORING, starting under STATE
        assert row[header.index("LAG") + len("LAG") - 1] == "0", out.stdout  # lag 0, right-aligned under LAG
    finally:
        assert proxy.stop() == 0


def test_every_flag_of_every_subcommand_has_help():
    top = subprocess.run([str(PROXY_BIN), "--help"], capture_output=True, text=True, check=True).stdout
    subcommands = re.findall(r"^  ([a-z][a-z-]+)\s", top.split("Commands:")[1].split("Options:")[0], re.M)
    assert {"run", "versions", "mirrors", "scram-credential"} <= set(subcommands), top
    for sub in [s for s in subcommands if s != "help"]:
        # --help shows each flag on its own line and its help indented on the next.
        text = subprocess.run([str(PROXY_BIN), sub, "--help"], capture_output=True, text=True, check=True).stdout
        lines = text.split("Options:")[1].splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^\s+(-\w, )?--[a-z]", line):
                flag = line.strip()
                inline = re.split(r"\s{2,}", flag, maxsplit=1)
                described = len(inline) == 2 and inline[1].strip() or (
                    i + 1 < len(lines) and lines[i + 1].startswith(" " * 10) and not lines[i + 1].strip().startswith("-"))
                assert described, f"`{sub} {flag}` has no help:\n{text}"


REPO = Path(__file__).resolve().parents[2]


def run_demo_until_refused(env: dict) -> subprocess.CompletedProcess:
    """scripts/demo.sh with `env`, in a session of its own: a demo that does not refuse within
    60 s (it went on to build and start clusters) is killed with everything it started, and its
    output is returned as it was then, so the assertions say what it did instead."""
    demo = subprocess.Popen(["bash", str(REPO / "scripts/demo.sh")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = demo.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGKILL)
        out, err = demo.communicate()
    return subprocess.CompletedProcess(demo.args, demo.returncode, out, err)


def demo_with_a_port_taken(tmp_path, bootstrap_below: int) -> tuple[int, subprocess.CompletedProcess]:
    """A port held by a listener, and the demo run with its bootstrap port `bootstrap_below`
    ports under it (until it refuses, see run_demo_until_refused)."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen(1)
    port = squatter.getsockname()[1]
    try:
        env = {**os.environ, "KMP_DEMO_PORT": str(port - bootstrap_below), "KMP_DEMO_DIR": str(tmp_path / "demo")}
        return port, run_demo_until_refused(env)
    finally:
        squatter.close()


def test_the_demo_names_a_taken_port_and_starts_nothing(tmp_path):
    port, out = demo_with_a_port_taken(tmp_path, 0)
    assert out.returncode == 1, out
    assert f"demo: port {port} is already in use; it is needed for the proxy's bootstrap listener (KMP_DEMO_PORT)" in out.stderr, out.stderr
    assert "==> building" not in out.stdout and not (tmp_path / "demo").exists(), "nothing built or started"


def test_the_demo_checks_the_node_port_of_destination_broker_3_where_the_proxy_will_listen(tmp_path):
    # The proxy exposes broker N at node_port_base + N, node_port_base defaulting to the bootstrap
    # port + 1: broker 3 at bootstrap + 4 (the demo checked bootstrap + 1..3 and missed it; the
    # demo then failed 46 s later with "broker 3 is hidden from clients").
    port, out = demo_with_a_port_taken(tmp_path, 4)
    assert out.returncode == 1, out
    want = f"demo: port {port} is already in use; it is needed for the proxy's listener for destination broker 3 (KMP_DEMO_PORT + 4)"
    assert want in out.stderr, f"stderr does not say {want!r}:\n{out.stderr}"
    assert "==> building" not in out.stdout and not (tmp_path / "demo").exists(), "nothing built or started"


def test_versions_prints_its_table_under_a_header():
    out = subprocess.run([str(PROXY_BIN), "versions"], capture_output=True, text=True, timeout=30)
    assert (out.returncode, out.stderr) == (0, ""), out
    lines = out.stdout.splitlines()
    assert lines and lines[0].split() == ["KEY", "API", "VERSIONS", "HANDLING"], f"the first line is a header: {lines[:2]}"
    assert any(l.split()[:2] == ["0", "Produce"] for l in lines[1:]), f"Produce has a row: {lines[:3]}"


def test_the_cli_names_an_address_it_cannot_reach_once_on_stderr():
    port = free_port_block(1)
    out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", f"127.0.0.1:{port}", "--list"],
                         capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (1, ""), out
    assert "cannot connect to" in out.stderr and out.stderr.count(f"127.0.0.1:{port}") == 1, f"said once: {out.stderr!r}"


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class BareProxy:
    """The proxy binary in front of a destination address where nothing listens (it starts and
    listens; every client connection is closed when it tries the destination), on free ports."""

    def __init__(self, tmp_path: Path, *extra: str):
        base = free_port_block(6)
        self.dead, self.listen, admin = base, base + 1, base + 5  # node listeners: listen + 1 + N
        self.log_path = tmp_path / "proxy.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([str(PROXY_BIN), "run", "--upstream", f"127.0.0.1:{self.dead}", "--listen", f"127.0.0.1:{self.listen}",
                                      "--admin-listen", f"127.0.0.1:{admin}", *extra], stdout=self._log, stderr=subprocess.STDOUT)
        wait_until("the proxy listens", lambda: self.proc.poll() is None and listening(self.listen), timeout=30)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._log.close()


def test_the_cli_says_why_a_proxy_whose_destination_is_down_closes_its_connection(tmp_path):
    proxy = BareProxy(tmp_path)
    try:
        out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", f"127.0.0.1:{proxy.listen}", "--list"],
                             capture_output=True, text=True, timeout=60)
    finally:
        proxy.stop()
    assert (out.returncode, out.stdout) == (1, ""), out
    err = out.stderr
    assert f"127.0.0.1:{proxy.listen} accepted the connection but did not answer a Kafka ApiVersions request" in err, err
    assert "cannot reach its destination cluster" in err and "/readyz" in err, f"says where to look: {err!r}"
    assert "is it a kafka-mirror-proxy" not in err, f"no guess that it is something else: {err!r}"
    assert err.count("broker closed the connection") == 1, f"each cause once: {err!r}"


def test_an_advertised_host_that_does_not_resolve_is_warned_about_at_start(tmp_path):
    (tmp_path / "unresolvable").mkdir()
    (tmp_path / "resolvable").mkdir()
    unresolvable = BareProxy(tmp_path / "unresolvable", "--advertised-host", "proxy-host.invalid")
    try:
        logged = wait_until("the start-up warning", lambda: [l for l in unresolvable.log().splitlines() if "advertised_host does not resolve" in l],
                            timeout=30)
    finally:
        unresolvable.stop()
    assert "proxy-host.invalid" in logged[0] and "WARN" in logged[0], logged
    resolvable = BareProxy(tmp_path / "resolvable", "--advertised-host", "localhost")
    try:
        wait_until("the proxy started", lambda: "kafka-mirror-proxy started" in resolvable.log(), timeout=30)
        time.sleep(2)  # the lookup runs in the background after that line; localhost answers at once
        log = resolvable.log()
    finally:
        resolvable.stop()
    assert "kafka-mirror-proxy started" in log and "does not resolve" not in log, log


def test_every_unknown_key_of_a_config_file_is_reported_at_once(tmp_path):
    config = tmp_path / "proxy.toml"
    config.write_text('[listener]\nlisen = "127.0.0.1:9192"\n\n[upstream]\nbootstrap_servers = ["127.0.0.1:1"]\nbootstrp = 1\n')
    out = subprocess.run([str(PROXY_BIN), "run", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (2, ""), out
    err = out.stderr
    assert f"cannot parse config file {config}: 2 problems:" in err, err
    assert "  - line 2, column 1: unknown field `lisen`" in err and "  - line 6, column 1: unknown field `bootstrp`" in err, err


def test_a_mirror_whose_source_cannot_be_reached_names_the_source_bootstrap_servers(clusters, workdir):
    _, destination = clusters
    dead = f"127.0.0.1:{free_port_block(1)}"
    topic = unique("unreachable")
    config = mirror_config(workdir, types.SimpleNamespace(bootstrap=dead), [topic], name="gone")
    proxy = ProxyProcess(destination.bootstrap, workdir, config).start()
    try:
        def shown():
            code, d = cli_json(proxy, "--describe", "--mirror", "gone")
            return [p for p in d["partitions"] if p["topic"] == topic and p.get("last_error")]
        rows = wait_until("the topic shows why it is not mirrored", shown, timeout=60)
    finally:
        assert proxy.stop() == 0
    why = rows[0]["last_error"]
    assert rows[0]["state"] == "retrying", rows
    assert why == f"source: no Kafka broker answered at the source address (source bootstrap servers {dead})", \
        f"the reason names the configured source and nothing else: {why!r}"


@pytest.mark.long  # a test of the test harness that starts 4 brokers of its own (54 s)
def test_cluster_harness_down_returns_once_every_broker_has_exited(tmp_path):
    source_port, dest_port = free_port_block(101), free_port_block(104)
    harness = [sys.executable, str(REPO / "tests/harness/kafka_cluster.py")]
    d = str(tmp_path / "clusters")
    subprocess.run([*harness, "up", "--dir", d, "--source-port", str(source_port), "--dest-port", str(dest_port)], check=True, timeout=180)
    pids = [pid for c in json.loads((tmp_path / "clusters" / "clusters.json").read_text()).values() for pid in c["pids"].values()]
    assert len(pids) == 4
    try:
        started = time.time()
        subprocess.run([*harness, "down", "--dir", d], check=True, timeout=120)
        left = [p for p in pids if Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
        assert not left, f"brokers still running after `down` ({time.time() - started:.1f}s): {left}"
    finally:
        for p in pids:
            try:
                os.killpg(p, 9)
            except ProcessLookupError:
                pass
