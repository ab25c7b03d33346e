"""The admin endpoint's live dashboard (/dashboard/) in headless Chromium against a running mirror:
the page shows the mirror, its topics and partitions with the offsets and lag the clusters have,
a lag chart that grows every second, pause / resume clicked on the page change the state live
(no reload), a partition FAILED by a deleted source topic shows its reason, and with an admin
token a remote browser sees nothing until it gives the token, whose Bearer header its buttons then
carry (a wrong or missing one is refused). Screenshots go to target/dashboard-screenshots/."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

# Only this module needs selenium: without it (a Python without tests/requirements.txt) this module
# is skipped, saying so, and every other module still runs.
pytest.importorskip("selenium", reason="selenium is not installed (pip install -r tests/requirements.txt): "
                                       "the dashboard tests drive headless Chromium with it")
from selenium.webdriver.common.by import By  # noqa: E402

from conftest import ProxyProcess, unique  # noqa: E402
from dashboard_browser import chromium, console_errors, http, non_loopback_ipv4, screenshot, wait_dom  # noqa: E402
from mirror import create, high_watermarks, produce_plain, wait_caught_up  # noqa: E402

TOKEN = "dash-Xq81-admin-token"
PARTITIONS = 3

# Everything the page shows about one topic, read from the DOM in one go (no stale elements).
READ_TOPIC = """
const [mirror, topic] = arguments;
const m = [...document.querySelectorAll('section.mirror')].find((s) => s.dataset.mirror === mirror);
if (!m) return null;
const t = [...m.querySelectorAll('.topic')].find((e) => e.dataset.topic === topic);
if (!t) return null;
return {
  name: m.querySelector('.mirror-name').textContent,
  source: m.querySelector('.source').textContent,
  desired: t.querySelector('.desired').textContent,
  rows: [...t.querySelectorAll('tbody tr')].map((r) => ({
    partition: Number(r.dataset.partition),
    state: r.querySelector('.state').textContent,
    source: r.querySelector('.source-offset').textContent,
    destination: r.querySelector('.destination-offset').textContent,
    lag: r.querySelector('.lag-records').textContent,
    lag_seconds: r.querySelector('.lag-seconds').textContent,
    reason: r.querySelector('.reason').textContent,
  })),
};
"""

READ_CHART = """
const m = [...document.querySelectorAll('section.mirror')].find((s) => s.dataset.mirror === arguments[0]);
if (!m) return null;
return [...m.querySelectorAll('figure.chart')].map((f) => ({
  series: f.dataset.series, samples: Number(f.dataset.points || 0),
  points: (f.querySelector('polyline').getAttribute('points') || '').trim().split(/\\s+/).filter(Boolean).length,
}));
"""


@pytest.fixture(scope="module")
def dashboard(clusters, workdir):
    """A mirror of two fresh source topics (3 partitions and 1) through a proxy whose admin
    endpoint listens on every address with an admin token: loopback callers need no token, remote
    ones do."""
    source, destination = clusters
    mirror, topic, doomed = unique("dash"), unique("dash-orders"), unique("dash-doomed")
    create(source.bootstrap, topic, PARTITIONS)
    create(source.bootstrap, doomed, 1)
    produce_plain(source.bootstrap, topic, 240)
    produce_plain(source.bootstrap, doomed, 20)
    config = workdir / f"{mirror}.toml"
    config.write_text(f'[[mirrors]]\nname = "{mirror}"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = ["{topic}", "{doomed}"]\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)], admin_host="0.0.0.0", env={"KMP_ADMIN_TOKEN": TOKEN}).start()
    try:
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS, doomed: 1})
        yield source, destination, proxy, mirror, topic, doomed
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly on SIGTERM:\n{proxy.log()[-3000:]}"


@pytest.fixture
def browser():
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def open_dashboard(driver, host: str, port: int) -> None:
    driver.get(f"http://{host}:{port}/dashboard")  # the redirect to /dashboard/ included
    assert driver.current_url.endswith("/dashboard/"), f"/dashboard redirects to /dashboard/: {driver.current_url}"
    driver.execute_script("window.__kmpNoReload = true;")  # gone if the page ever reloads


def not_reloaded(driver) -> None:
    assert driver.execute_script("return window.__kmpNoReload === true;"), "the page was reloaded; it must update live"


def shown(driver, mirror: str, topic: str):
    return driver.execute_script(READ_TOPIC, mirror, topic)


def matches_clusters(view, source_ends: list[int], destination_ends: list[int]) -> bool:
    """Every partition row MIRRORING with the clusters' offsets and no lag."""
    return bool(view) and sorted((r["partition"], r["state"], r["source"], r["destination"], r["lag"]) for r in view["rows"]) == [
        (p, "MIRRORING", str(source_ends[p]), str(destination_ends[p]), "0") for p in range(PARTITIONS)]


def click(driver, topic: str, action: str) -> None:
    topics = [t for t in driver.find_elements(By.CSS_SELECTOR, ".topic") if t.get_attribute("data-topic") == topic]
    assert len(topics) == 1, f"one block for topic {topic} on the page, found {len(topics)}"
    button = topics[0].find_element(By.CSS_SELECTOR, f'button[data-action="{action}"]')
    assert button.is_enabled(), f"the {action} button of {topic} is enabled"
    button.click()


def rest_states(proxy, mirror: str, topic: str) -> set[str]:
    status, _, body = http("127.0.0.1", proxy.admin_port, "GET", f"/v1/mirrors/{mirror}")
    assert status == 200, f"GET /v1/mirrors/{mirror}: {status} {body}"
    return {p["state"] for t in body["topics"] if t["topic"] == topic for p in t["partitions"]}


def test_the_page_shows_the_mirror_partitions_offsets_lag_and_a_chart_that_update_live(dashboard, browser):
    source, destination, proxy, mirror, topic, _ = dashboard
    status, headers, _ = http("127.0.0.1", proxy.admin_port, "GET", "/dashboard/")
    csp = headers.get("content-security-policy", "")
    assert status == 200 and "script-src 'self'" in csp and "connect-src 'self'" in csp, f"the page is served with a same-origin CSP: {status} {csp!r}"
    open_dashboard(browser, "127.0.0.1", proxy.admin_port)
    src, dst = high_watermarks(source.bootstrap, topic, PARTITIONS), high_watermarks(destination.bootstrap, topic, PARTITIONS)
    assert src == dst and sum(src) == 240, f"the mirror caught up before the page is read: {src} vs {dst}"
    view = wait_dom(f"{topic}: every partition MIRRORING with source {src} = destination {dst} offsets and 0 lag on the page",
                    lambda: (v := shown(browser, mirror, topic)) and matches_clusters(v, src, dst) and v)
    assert view["name"] == mirror and source.bootstrap in view["source"], f"mirror name and source shown: {view}"
    assert "MIRRORING" in view["desired"], f"the topic's desired state is shown: {view['desired']}"
    assert all(r["lag_seconds"] == "0.0 s" for r in view["rows"]), f"lag in seconds is 0 once caught up: {view['rows']}"
    charts = wait_dom("both lag charts (records, seconds) with at least 3 one-second samples drawn",
                      lambda: (c := browser.execute_script(READ_CHART, mirror)) and len(c) == 2 and all(x["points"] >= 3 for x in c) and c)
    assert {c["series"] for c in charts} == {"records", "seconds"}, charts
    sync = browser.execute_script("return [...document.querySelectorAll('.sync tbody tr')].map((r) => r.dataset.kind);")
    assert "group_offsets" in sync, f"the metadata sync status is shown per kind: {sync}"

    produce_plain(source.bootstrap, topic, 90, start=1000)
    wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
    src2, dst2 = high_watermarks(source.bootstrap, topic, PARTITIONS), high_watermarks(destination.bootstrap, topic, PARTITIONS)
    assert sum(src2) == 330, f"90 more records on the source: {src2}"
    wait_dom(f"the page follows the new offsets {src2} without a reload", lambda: matches_clusters(shown(browser, mirror, topic), src2, dst2))
    not_reloaded(browser)
    assert console_errors(browser) == [], "no script error or CSP violation in the browser console"
    screenshot(browser, "01-mirroring")


def test_pause_and_resume_clicked_on_the_page_change_the_partition_states_live(dashboard, browser):
    source, destination, proxy, mirror, topic, _ = dashboard
    open_dashboard(browser, "127.0.0.1", proxy.admin_port)
    wait_dom(f"{topic} shown MIRRORING", lambda: (v := shown(browser, mirror, topic)) and {r["state"] for r in v["rows"]} == {"MIRRORING"})

    click(browser, topic, "pause")
    view = wait_dom(f"{topic}: every partition PAUSED on the page after clicking pause",
                    lambda: (v := shown(browser, mirror, topic)) and len(v["rows"]) == PARTITIONS and {r["state"] for r in v["rows"]} == {"PAUSED"} and v)
    assert "PAUSED" in view["desired"], f"desired state PAUSED shown: {view['desired']}"
    assert rest_states(proxy, mirror, topic) == {"paused"}, "the page's pause reached the engine (REST describe agrees)"
    not_reloaded(browser)
    wait_dom("the page says the pause was accepted", lambda: "pause accepted" in browser.find_element(By.ID, "notice").text, timeout=10)

    produce_plain(source.bootstrap, topic, 60, start=2000)
    src = high_watermarks(source.bootstrap, topic, PARTITIONS)
    dst = high_watermarks(destination.bootstrap, topic, PARTITIONS)
    assert src != dst, f"nothing is copied while paused: source {src}, destination {dst}"
    screenshot(browser, "02-paused")

    click(browser, topic, "resume")
    wait_caught_up(source.bootstrap, destination.bootstrap, {topic: PARTITIONS})
    src, dst = high_watermarks(source.bootstrap, topic, PARTITIONS), high_watermarks(destination.bootstrap, topic, PARTITIONS)
    wait_dom(f"{topic}: MIRRORING again on the page with the caught-up offsets {src}", lambda: matches_clusters(shown(browser, mirror, topic), src, dst))
    assert rest_states(proxy, mirror, topic) == {"mirroring"}
    not_reloaded(browser)
    assert console_errors(browser) == [], "no script error or CSP violation in the browser console"


def test_a_partition_failed_by_a_deleted_source_topic_is_listed_with_its_reason(dashboard, browser):
    source, _, proxy, mirror, topic, doomed = dashboard
    open_dashboard(browser, "127.0.0.1", proxy.admin_port)
    wait_dom(f"{doomed} shown MIRRORING", lambda: (v := shown(browser, mirror, doomed)) and [r["state"] for r in v["rows"]] == ["MIRRORING"])
    assert not browser.find_element(By.ID, "failed").is_displayed(), "no failed-partitions panel while nothing failed"
    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.delete_topics([doomed])[doomed].result(30)
    failed = wait_dom(f"{doomed}-0 listed in the failed-partitions panel with a reason", lambda: browser.execute_script(
        "const p = document.getElementById('failed'); if (p.classList.contains('hidden')) return null;"
        "return [...p.querySelectorAll('tbody tr')].map((r) => ({topic: r.dataset.topic, partition: r.dataset.partition,"
        " reason: r.querySelector('.reason').textContent}));"), timeout=60)
    mine = [f for f in failed if f["topic"] == doomed]
    assert len(mine) == 1 and mine[0]["partition"] == "0", f"exactly {doomed}-0 is failed: {failed}"
    assert "deleted" in mine[0]["reason"], f"the reason says the source topic was deleted: {mine[0]['reason']!r}"
    view = shown(browser, mirror, doomed)
    assert [r["state"] for r in view["rows"]] == ["FAILED"] and "deleted" in view["rows"][0]["reason"], f"the row says FAILED with the reason: {view}"
    assert {r["state"] for r in shown(browser, mirror, topic)["rows"]} == {"MIRRORING"}, "the other topic keeps mirroring"
    not_reloaded(browser)
    screenshot(browser, "03-failed-partition")


def test_a_remote_browser_needs_the_admin_token_and_its_buttons_send_it(dashboard, browser):
    _, _, proxy, mirror, topic, _ = dashboard
    ip = non_loopback_ipv4()
    port = proxy.admin_port
    for token, expected in ((None, 401), ("wrong-token", 401), (TOKEN, 200)):
        status, _, body = http(ip, port, "GET", "/dashboard/api/state", token=token)
        assert status == expected, f"GET /dashboard/api/state from {ip} with token {token!r}: {status} (expected {expected}) {body}"
    for token in (None, "wrong-token"):
        status, _, body = http(ip, port, "POST", f"/v1/mirrors/{mirror}/pause", {"topics": [topic]}, token=token)
        assert status == 403, f"a remote pause with token {token!r} is refused: {status} {body}"

    open_dashboard(browser, ip, port)
    wait_dom("the token prompt shown to a remote browser without a token", lambda: browser.find_element(By.ID, "auth").is_displayed())
    assert browser.find_elements(By.CSS_SELECTOR, "section.mirror") == [], "no mirror data shown without the token"
    assert browser.find_element(By.ID, "connection").text == "token needed"
    screenshot(browser, "04-token-prompt")

    browser.find_element(By.ID, "token-input").send_keys("wrong-token")
    browser.find_element(By.CSS_SELECTOR, "#auth-form button[type=submit]").click()
    reason = wait_dom("the prompt again, saying the token was refused",
                      lambda: browser.find_element(By.ID, "auth").is_displayed() and "refused the token" in (t := browser.find_element(By.ID, "auth-reason").text) and t)
    assert browser.find_elements(By.CSS_SELECTOR, "section.mirror") == [], f"no mirror data with a wrong token ({reason})"

    browser.find_element(By.ID, "token-input").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#auth-form button[type=submit]").click()
    wait_dom(f"{topic} shown once the right token is given", lambda: (v := shown(browser, mirror, topic)) and {r["state"] for r in v["rows"]} == {"MIRRORING"})
    assert browser.execute_script("return sessionStorage.getItem('kmp-admin-token');") == TOKEN, "the token is kept in sessionStorage"
    click(browser, topic, "pause")
    wait_dom(f"{topic} PAUSED: the remote page's POST carried the token", lambda: {r["state"] for r in shown(browser, mirror, topic)["rows"]} == {"PAUSED"})
    assert rest_states(proxy, mirror, topic) == {"paused"}
    click(browser, topic, "resume")
    wait_dom(f"{topic} MIRRORING again", lambda: {r["state"] for r in shown(browser, mirror, topic)["rows"]} == {"MIRRORING"})
    assert TOKEN not in proxy.log(), "the token never appears in the proxy log"
    not_reloaded(browser)
    errors = console_errors(browser)
    assert all("status of 401" in e for e in errors), f"nothing in the console but the expected 401s of the refused tokens: {errors}"
