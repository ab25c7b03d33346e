"""Headless Chromium for the dashboard test (tests/integration/test_dashboard.py): Debian's
``chromium`` driven by Debian's ``chromium-driver`` through Selenium (no Selenium Manager, no
downloads), full-page screenshots into ``target/dashboard-screenshots/``, and the admin REST calls
the test makes next to the browser. A missing browser, driver or Selenium fails the test with the
package to install; nothing here skips."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from kmp_common import REPO

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = REPO / "target" / "dashboard-screenshots"


def chromium():
    """A headless Chromium session (1400 px wide); the caller quits it."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:  # pragma: no cover - the message is the point
        raise AssertionError(f"selenium is not installed ({e}): pip install -r tests/requirements.txt") from e
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        assert os.access(path, os.X_OK), f"{path} missing: apt-get install {package} (listed in .ci/apt-packages.txt)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000",
                "--disable-extensions", "--no-first-run", "--disable-background-networking", "--hide-scrollbars",
                "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    env = {**os.environ, "SE_AVOID_STATS": "true", "SE_OFFLINE": "true"}
    service = Service(CHROMEDRIVER, env=env)
    return webdriver.Chrome(service=service, options=opts)


def screenshot(driver, name: str) -> Path:
    """A full-page PNG of what the browser shows, kept under target/dashboard-screenshots/ (its
    path is printed so that it appears in the test output)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    driver.set_window_size(1400, min(max(int(height) + 40, 600), 4000))
    path = SCREENSHOTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"screenshot {path} could not be written"
    size = path.stat().st_size
    assert size > 10_000, f"screenshot {path} is only {size} bytes (blank page?)"
    print(f"\nscreenshot: {path} ({size} bytes)")
    return path


def console_errors(driver) -> list[str]:
    """Severe browser console entries (script errors, CSP violations) since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def http(host: str, port: int, method: str, path: str, body: dict | None = None, token: str | None = None) -> tuple[int, dict, dict]:
    """(status, headers with lower-case names, JSON body or {"raw": text}) of one admin endpoint
    call from ``host``."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(f"http://{host}:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, hdrs, raw = r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as e:
        status, hdrs, raw = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = {"raw": raw}
    return status, hdrs, parsed


def non_loopback_ipv4() -> str:
    """This host's first non-loopback IPv4 address (a browser connecting to it is not a loopback
    caller for the proxy); fails the test when there is none."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))  # sends nothing: picks the outgoing address
        ip = s.getsockname()[0]
        if not ip.startswith("127."):
            return ip
    except OSError:
        pass
    finally:
        s.close()
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10).stdout.split() if shutil.which("hostname") else []
    ips = [a for a in out if "." in a and not a.startswith("127.")]
    assert ips, "the host has no non-loopback IPv4 address to reach the admin endpoint as a remote caller"
    return ips[0]


def wait_dom(what: str, check, timeout: float = 30, interval: float = 0.2):
    """Polls ``check`` (which reads the DOM) until it returns something truthy; fails naming
    ``what`` and the last value seen. Stale elements (the page re-rendered between find and read)
    count as "not yet"."""
    from selenium.common.exceptions import StaleElementReferenceException
    deadline, last = time.time() + timeout, None
    while True:
        try:
            last = check()
        except StaleElementReferenceException:
            last = None
        if last:
            return last
        assert time.time() < deadline, f"{what}: not within {timeout}s (last: {last!r})"
        time.sleep(interval)
