"""The monitoring bundle in docker/ against a real Prometheus (Debian package `prometheus`):
`promtool` checks the alert rules and runs their unit tests (each alert firing on synthetic series
and silent on healthy ones); a Prometheus started here scrapes a proxy that mirrors real topics
from the source cluster, and then every query of the Grafana dashboard returns data, every rule
is loaded with health ok, deleting a mirrored source topic fires KmpMirrorPartitionsFailed while
the healthy proxy fires nothing else, and a second proxy whose engine cannot open its state topic
fires KmpMirrorEngineNotRunning. Grafana itself is not installed (not packaged in
Debian): the dashboard's proof is Prometheus answering each of its queries."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from conftest import REPO, ProxyProcess, free_port, unique
from kmp_common import wait_until
from mirror import create, produce_plain, wait_caught_up

DOCKER = REPO / "docker"
ALERTS = DOCKER / "prometheus" / "alerts.yml"
ALERTS_TEST = DOCKER / "prometheus" / "alerts_test.yml"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "kafka-mirror-proxy.json"
JOB = "kafka-mirror-proxy"
MIRROR = "mon"
# Grafana's built-in interval variables, as Grafana would expand them for a 1 s scrape interval.
GRAFANA_BUILTINS = {"$__rate_interval": "15s", "$__interval": "5s", "$__range": "5m"}


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"`{name}` not found: install the Debian package `prometheus` (listed in .ci/apt-packages.txt)"
    return path


def run_promtool(*args: str) -> str:
    r = subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"promtool {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def alert_names() -> list[str]:
    return re.findall(r"^\s*- alert: (\S+)", ALERTS.read_text(), re.M)


def test_promtool_checks_the_rules_config_and_runs_the_rule_unit_tests():
    out = run_promtool("check", "rules", str(ALERTS))
    assert f"SUCCESS: {len(alert_names())} rules found" in out, out
    assert "SUCCESS" in run_promtool("check", "config", str(DOCKER / "prometheus" / "prometheus.yml"))
    out = run_promtool("test", "rules", str(ALERTS_TEST))
    assert "SUCCESS" in out, out
    tested = set(re.findall(r"alertname: (\S+)", ALERTS_TEST.read_text()))
    assert tested == set(alert_names()), f"every alert has unit tests: untested {set(alert_names()) - tested}"
    for rule in re.split(r"\n\s*- alert: ", ALERTS.read_text())[1:]:
        name = rule.split()[0]
        assert re.search(r"\n\s+for: \d+[smh]", rule), f"{name} has a `for:`"
        assert re.search(r"\n\s+severity: (critical|warning)", rule), f"{name} has a severity label"
        assert "summary:" in rule and "description:" in rule, f"{name} has summary and description annotations"


class Prometheus:
    """A Prometheus process of its own: free port, temporary storage, config scraping ``targets``
    every second with a copy of the alert rules (``for:`` of the listed alerts shortened)."""

    def __init__(self, targets: list[str], short_for: dict[str, str]):
        self.dir = Path(tempfile.mkdtemp(prefix="kmp-prom-"))
        self.port = free_port()
        rules = ALERTS.read_text()
        for alert, duration in short_for.items():
            rules, n = re.subn(rf"(- alert: {alert}\n(?:.*\n)*?\s+for: )\S+", rf"\g<1>{duration}", rules)
            assert n == 1, f"alert {alert} with a `for:` in {ALERTS}"
        (self.dir / "alerts.yml").write_text(rules)
        (self.dir / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - alerts.yml\n"
            f"scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: {json.dumps(targets)}\n")
        self.log_path = self.dir / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Prometheus":
        args = [tool("prometheus"), f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(args, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT)

        def ready():
            assert self.proc.poll() is None, f"prometheus exited with {self.proc.returncode}:\n{self.log()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until("prometheus ready", ready, timeout=60, interval=0.2)
        return self

    def api(self, path: str, **params) -> dict | list:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body.get("status") == "success", f"{url}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] == "vector" else ([data["result"]] if data["result"] else [])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def consume_some(bootstrap: str, topic: str, partitions: int, n: int) -> int:
    """Reads ``n`` records through ``bootstrap`` (requests on the proxy's own metrics)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("mon-reader"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got, deadline = 0, time.time() + 30
    while got < n and time.time() < deadline:
        got += sum(1 for m in c.consume(100, 0.5) if not m.error())
    c.close()
    return got


def start_unbooted_proxy(workdir: Path) -> ProxyProcess:
    """A proxy whose destination does not answer (port 1): its engine never loads its state, so it
    never becomes ready; started without waiting for /readyz, up once /healthz answers."""
    proxy = ProxyProcess("127.0.0.1:1", workdir)
    proxy.proc = subprocess.Popen(proxy.args, stdout=open(proxy.log_path, "ab"), stderr=subprocess.STDOUT, env=proxy.env)
    wait_until("the unbooted proxy's /healthz", lambda: proxy.alive() and proxy.http("/healthz")[0] == 200, timeout=30)
    return proxy


@pytest.fixture(scope="module")
def monitored(clusters, workdir):
    """(source, proxy mirroring two topics, Prometheus scraping it and an unbooted proxy,
    {topic: partitions}, the unbooted proxy)."""
    source, destination = clusters
    topics = {unique("mon-kept"): 2, unique("mon-doomed"): 1}
    for t, n in topics.items():
        create(source.bootstrap, t, n)
        produce_plain(source.bootstrap, t, 200)
    config = workdir / "monitoring.toml"
    topic_list = ", ".join(f'"{t}"' for t in topics)
    # Its own state topic: mirrors other tests created in the default one would add series.
    config.write_text(f'[engine]\nstate_topic = "{unique("mon-state")}"\n\n[[mirrors]]\nname = "{MIRROR}"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = [{topic_list}]\n'
                      "group_offset_sync_interval_ms = 1000\ntopic_config_sync_interval_ms = 1000\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]).start()
    prometheus, unbooted = None, None
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, topics)
        kept = next(iter(topics))
        assert consume_some(proxy.bootstrap, kept, topics[kept], 50) >= 50, "records read through the proxy"
        # Short `for:` so that the real FAILED state fires within the test.
        unbooted = start_unbooted_proxy(workdir)
        prometheus = Prometheus([f"127.0.0.1:{proxy.admin_port}", f"127.0.0.1:{unbooted.admin_port}"],
                                {"KmpMirrorPartitionsFailed": "2s", "KmpMirrorEngineNotRunning": "2s"}).start()
        wait_until("Prometheus scraped both proxies", lambda: len(prometheus.query(f'up{{job="{JOB}"}} == 1')) == 2, timeout=60, interval=0.5)
        yield source, proxy, prometheus, topics, unbooted
    finally:
        if prometheus:
            prometheus.stop()
        if unbooted:
            assert unbooted.stop() == 0, f"the unbooted proxy exited badly on SIGTERM:\n{unbooted.log()[-3000:]}"
        assert proxy.stop() == 0, f"proxy exited badly on SIGTERM:\n{proxy.log()[-3000:]}"


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, expr) of every query in the dashboard, rows' nested panels included."""
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
    walk(dash["panels"])
    return out


def expand(expr: str) -> str:
    """The query as Grafana sends it: built-in intervals expanded, `$mirror` at its All value."""
    for var, value in GRAFANA_BUILTINS.items():
        expr = expr.replace(var, value)
    expr = expr.replace("$mirror", ".*")
    assert "$" not in expr, f"unexpanded variable in {expr}"
    return expr


def test_the_dashboard_is_grafana_json_bound_to_the_prometheus_datasource_variable():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["schemaVersion"] >= 36 and dash["uid"] and dash["title"], {k: dash.get(k) for k in ("schemaVersion", "uid", "title")}
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus", variables
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), f"panel ids are unique: {ids}"
    for p in dash["panels"]:
        assert {"h", "w", "x", "y"} <= p["gridPos"].keys(), p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, f"{p['title']}: {p['datasource']}"
            assert p["targets"], f"{p['title']} has queries"
    assert len(dashboard_targets()) >= 20, "lag, states, throughput, sync and proxy panels"


def test_every_dashboard_query_returns_data_from_a_real_prometheus(monitored):
    _, _, prometheus, topics, _ = monitored
    values = prometheus.api("label/mirror/values", **{"match[]": "kmp_mirror_lag_records"})
    assert MIRROR in values, f"the dashboard's `mirror` variable (label_values(kmp_mirror_lag_records, mirror)) lists {MIRROR}: {values}"
    pending = {(title, expand(expr)) for title, expr in dashboard_targets()}
    # Rates need two scrapes inside their window: poll until every query has answered once.
    deadline = time.time() + 60
    while pending and time.time() < deadline:
        pending = {(title, expr) for title, expr in pending if not prometheus.query(expr)}
        if pending:
            time.sleep(1)
    assert not pending, "dashboard queries that returned no series from Prometheus scraping the proxy:\n" + \
        "\n".join(f"  panel {title!r}: {expr}" for title, expr in sorted(pending))
    lag = prometheus.query(expand('sum by (mirror, topic) (kmp_mirror_lag_records{mirror=~"$mirror"})'))
    assert {s["metric"]["topic"] for s in lag} == set(topics), f"one lag series per mirrored topic: {lag}"


def test_prometheus_loads_every_rule_with_health_ok(monitored):
    _, _, prometheus, _, _ = monitored

    def rules():
        groups = prometheus.api("rules")["groups"]
        found = {r["name"]: r for g in groups for r in g["rules"]}
        return found if found and all(r["health"] != "unknown" for r in found.values()) else None
    found = wait_until("every rule evaluated once", rules, timeout=30, interval=0.5)
    assert set(found) == set(alert_names()), f"loaded {sorted(found)}, in alerts.yml {alert_names()}"
    bad = {n: (r["health"], r.get("lastError")) for n, r in found.items() if r["health"] != "ok" or r.get("lastError")}
    assert not bad, f"rules not healthy in Prometheus: {bad}"


def firing(prometheus: Prometheus, proxy: ProxyProcess) -> list[dict]:
    """Alerts firing for ``proxy``'s instance."""
    return [a for a in active(prometheus, proxy) if a["state"] == "firing"]


def active(prometheus: Prometheus, proxy: ProxyProcess) -> list[dict]:
    """Alerts pending or firing for ``proxy``'s instance."""
    instance = f"127.0.0.1:{proxy.admin_port}"
    return [a for a in prometheus.api("alerts")["alerts"] if a["labels"].get("instance") == instance]


def test_a_failed_partition_fires_its_alert_and_a_healthy_proxy_fires_nothing_else(monitored):
    source, proxy, prometheus, topics, _ = monitored
    kept, doomed = topics
    # Healthy first: an engine that runs (the real gauge is 1) and no FAILED partition, so no alert
    # is even pending after the rules ran with live data for a while.
    assert prometheus.query(f'kmp_mirror_engine_booted{{instance="127.0.0.1:{proxy.admin_port}"}} == 1'), "the engine's gauge says it runs"
    wait_until("the rules evaluated with live data", lambda: prometheus.query(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 10'), timeout=30)
    assert not active(prometheus, proxy), f"a healthy mirroring proxy fires or pends no alert: {active(prometheus, proxy)}"

    admin = AdminClient({"bootstrap.servers": source.bootstrap})  # kept alive until the result is in
    admin.delete_topics([doomed])[doomed].result(30)
    wait_until("the deleted source topic's partition is FAILED on /metrics",
               lambda: proxy.metric("kmp_mirror_failed", f'mirror="{MIRROR}",topic="{doomed}",partition="0"') == 1, timeout=60, interval=0.5)
    alerts = wait_until("KmpMirrorPartitionsFailed firing in Prometheus",
                        lambda: [a for a in firing(prometheus, proxy) if a["labels"]["alertname"] == "KmpMirrorPartitionsFailed"], timeout=60, interval=0.5)
    labels = alerts[0]["labels"]
    assert (labels["mirror"], labels["topic"], labels["severity"]) == (MIRROR, doomed, "critical"), alerts
    assert doomed in alerts[0]["annotations"]["summary"] and "1 FAILED" in alerts[0]["annotations"]["summary"], alerts[0]["annotations"]
    assert len(alerts) == 1, f"only the deleted topic's partitions, not {kept}'s: {alerts}"
    others = [a["labels"]["alertname"] for a in firing(prometheus, proxy) if a["labels"]["alertname"] != "KmpMirrorPartitionsFailed"]
    assert not others, f"nothing else fires: {others}"


def test_an_engine_that_cannot_load_its_state_fires_engine_not_running(monitored):
    _, proxy, prometheus, _, unbooted = monitored
    assert unbooted.http("/readyz")[0] == 503 and unbooted.metric("kmp_mirror_engine_booted") == 0, "the engine is not running"
    alerts = wait_until("KmpMirrorEngineNotRunning firing for the unbooted proxy",
                        lambda: [a for a in firing(prometheus, unbooted) if a["labels"]["alertname"] == "KmpMirrorEngineNotRunning"],
                        timeout=60, interval=0.5)
    assert alerts[0]["labels"]["severity"] == "critical", alerts
    assert f"127.0.0.1:{unbooted.admin_port}" in alerts[0]["annotations"]["summary"], alerts[0]["annotations"]
    assert not [a for a in active(prometheus, proxy) if a["labels"]["alertname"] == "KmpMirrorEngineNotRunning"], \
        "the mirroring proxy's engine runs: no alert for it"
