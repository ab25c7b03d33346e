"""The proxy as an operator runs it: SIGTERM drains in-flight requests and exits 0, invalid
configuration is reported all at once, the admin endpoint answers health, readiness and metrics,
and the audited version table covers what the real broker announces."""

import signal
import socket
import subprocess
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import kafka_wire as wire
from conftest import PROXY_BIN, ProxyProcess, free_port, free_port_block, unique, wait_for_leader


def test_sigterm_drains_an_in_flight_long_poll_fetch_and_exits_zero(destination, workdir):
    proxy = ProxyProcess(destination.bootstrap, workdir).start()
    topic = unique("drain")
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    leader = wait_for_leader(admin, topic)
    s = socket.create_connection(("127.0.0.1", proxy.node_port(leader)))
    s.settimeout(20)
    deadline = time.time() + 30
    while True:  # until the leader serves the new partition (no error), so the next Fetch long-polls
        s.sendall(wire.fetch_v4(76, topic, 0, 0, max_wait_ms=10))
        if wire.fetch_v4_error_code(wire.read_response(s)[1]) == 0:
            break
        assert time.time() < deadline, "the new partition became fetchable"
        time.sleep(0.1)
    # An empty partition with min_bytes=1: the broker holds the Fetch for max_wait_ms.
    s.sendall(wire.fetch_v4(77, topic, 0, 0, max_wait_ms=3000))
    time.sleep(0.5)
    sent = time.time()
    proxy.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    try:
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    correlation_id, _ = wire.read_response(s)
    answered_after = time.time() - sent
    assert correlation_id == 77, "the in-flight Fetch gets its own response during the drain"
    assert answered_after > 1.5, f"the response is the broker's long-poll answer ({answered_after:.1f}s), not a cut"
    assert wire.closed_by_peer(s), "the drained connection is closed afterwards"
    assert proxy.proc.wait(timeout=30) == 0, f"exit code 0 after SIGTERM:\n{proxy.log()[-3000:]}"
    assert refused, "no new connections are accepted once the drain has started"
    assert "draining" in proxy.log()


def test_invalid_configuration_reports_every_error_and_exits_2(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[listener]\nlisten = "nonsense"\n[upstream]\nbootstrap_servers = ["no-port"]\nconnect_timeout_ms = 0\n')
    out = subprocess.run([str(PROXY_BIN), "run", "--config", str(cfg), "--admin-listen", "also-bad"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, f"exit 2 on invalid config, got {out.returncode}: {out.stderr}"
    for key in ("listener.listen", "upstream.bootstrap_servers[0]", "upstream.connect_timeout_ms", "admin.listen"):
        assert key in out.stderr, f"{key} reported in one go:\n{out.stderr}"
    typo = tmp_path / "typo.toml"
    typo.write_text('[upstream]\nbootstrap-servers = ["a:1"]\n')
    out = subprocess.run([str(PROXY_BIN), "run", "--config", str(typo)], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "bootstrap-servers" in out.stderr, f"unknown keys are errors: {out.stderr}"


def test_flags_and_env_configure_the_proxy_without_a_file(destination, workdir):
    port, admin = free_port(), free_port()
    # Node ports base+1..base+3, checked free (an arbitrary offset from `port` collided with another
    # suite's listener on a shared machine: that broker was then rightly hidden from clients).
    node_base = free_port_block(3) - 1
    env = {"KMP_UPSTREAM": destination.bootstrap, "KMP_ADVERTISED_HOST": "localhost", "PATH": "/usr/bin:/bin"}
    log = open(workdir / "env-proxy.log", "wb")
    proc = subprocess.Popen([str(PROXY_BIN), "run", "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                             "--node-port-base", str(node_base)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        brokers = {}
        while time.time() < deadline and not brokers:
            try:
                md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=5)
                brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
        assert brokers == {i: ("localhost", node_base + i) for i in (1, 2, 3)}, (
            f"advertised host from env, node ports from the flag: {brokers}")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_admin_endpoint_serves_health_readiness_and_metrics(proxy):
    p = Producer({"bootstrap.servers": proxy.bootstrap})
    p.produce(unique("metrics"), value=b"x")
    assert p.flush(30) == 0
    assert proxy.http("/healthz") == (200, "ok\n")
    assert proxy.http("/readyz")[0] == 200
    status, text = proxy.http("/metrics")
    assert status == 200
    for needle in ('kmp_requests_total{api="Produce"}', 'kmp_requests_total{api="Metadata"}',
                   'kmp_request_duration_seconds_bucket{le=', 'kmp_bytes_total{direction="from_clients"}',
                   'kmp_bytes_total{direction="to_clients"}', "kmp_open_connections", 'kmp_frame_errors_total{side="client"}',
                   "kmp_known_brokers 3"):
        assert needle in text, f"{needle} in /metrics"
    assert proxy.http("/nope")[0] == 404


def test_readyz_is_503_while_the_upstream_is_unreachable(workdir):
    dead = free_port()
    proxy = ProxyProcess(f"127.0.0.1:{dead}", workdir)
    log = open(proxy.log_path, "ab")
    proxy.proc = subprocess.Popen(proxy.args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 10
        while proxy.http("/healthz")[0] != 200 and time.time() < deadline:
            time.sleep(0.1)
        assert proxy.http("/healthz")[0] == 200, "alive even without an upstream"
        assert proxy.http("/readyz")[0] == 503, "not ready while the upstream cannot be reached"
    finally:
        assert proxy.stop() == 0


def test_version_table_covers_everything_the_broker_announces(destination, proxy):
    direct = subprocess.run([str(PROXY_BIN), "versions", "--check-upstream", destination.addr(1)],
                            capture_output=True, text=True, timeout=30)
    assert direct.returncode == 0, f"the broker announces APIs/versions the table has not audited:\n{direct.stdout}"
    proxied = subprocess.run([str(PROXY_BIN), "versions", "--check-upstream", proxy.bootstrap],
                             capture_output=True, text=True, timeout=30)
    assert proxied.returncode == 0, proxied.stdout
    n_direct, n_proxied = (int(o.stdout.split(" announces ")[1].split()[0]) for o in (direct, proxied))
    assert 0 < n_proxied <= n_direct, f"the proxy offers a subset of the broker's APIs ({n_proxied} of {n_direct})"
