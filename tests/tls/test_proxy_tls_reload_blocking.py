"""Issue 35, finding L-b: a certificate reload whose files block or are huge. Before, the reload
read the files on a runtime worker: a FIFO in place of the certificate (as a hung network mount
behaves) parked that worker, and TLS handshakes and `/healthz` timed out; a 1 GiB certificate
file was read whole. Now reloads read on a thread of their own (the proxy keeps serving and the
log says the reload is still waiting) and no file longer than `limits.max_security_file_bytes`
(default 16 MiB) is read: such a reload is refused with the reason and the previous certificate
stays in use."""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path

from tls.proxy_tls import (  # noqa: F401  (suite_env is a fixture)
    assert_alive,
    common_name,
    issue_server_cert,
    listener_tls,
    log_tail,
    running_proxy,
    served_certificate,
    suite_env,
    upstream_properties,
)

PROBES = 20


def proxy_files(env, name: str) -> tuple[Path, Path]:
    """A copy of the proxy's certificate chain and key the test may replace."""
    d = env.path(name)
    d.mkdir()
    cert, key = d / "proxy.pem", d / "proxy.key"
    shutil.copy(env.certs.proxy.chain, cert)
    shutil.copy(env.certs.proxy.key, key)
    key.chmod(0o600)
    return cert, key


def wait_for_log(proxy, text: str, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in proxy.log():
            return True
        time.sleep(0.1)
    return False


def release_fifo(path: Path) -> None:
    """Lets a reader blocked opening the FIFO ``path`` go on (it reads EOF at once)."""
    for _ in range(50):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader (yet)
                raise
            time.sleep(0.1)
            continue
        os.close(fd)
        return


def test_a_certificate_file_that_blocks_on_reload_stalls_neither_healthz_nor_new_handshakes(suite_env, secure_destination):
    env = suite_env
    ca = env.certs.ca.cert
    cert, key = proxy_files(env, "reload-fifo")
    sections = {"listener.tls": listener_tls(env.certs, reload_interval_ms=300, cert_file=cert, key_file=key),
                "upstream.properties": upstream_properties(env.certs, "INTERNAL")}
    with running_proxy(env, secure_destination.bootstrap_for("INTERNAL"), sections, "reload-fifo") as proxy:
        fifo = cert.with_suffix(".fifo")
        os.mkfifo(fifo)
        os.replace(fifo, cert)  # the next poll sees a new mtime and opens it: no writer ever comes
        try:
            time.sleep(2)  # several polls: the reload is blocked by now
            failures = []
            for i in range(PROBES):
                status, _ = proxy.http("/healthz")  # 2 s timeout
                if status != 200:
                    failures.append(f"/healthz #{i}: {status}")
                try:
                    cn = common_name(served_certificate("127.0.0.1", proxy.port, ca, timeout=3))
                    if cn != "kmp-proxy":
                        failures.append(f"handshake #{i}: CN={cn}")
                except OSError as e:
                    failures.append(f"handshake #{i}: {type(e).__name__}: {e}")
            assert not failures, (
                f"with the certificate file a FIFO no writer opens (the reload blocks), {len(failures)} of {2 * PROBES} "
                f"/healthz requests and new TLS handshakes failed: {failures[:6]}\n{log_tail(proxy)}")
            assert wait_for_log(proxy, "reload still reading its files", timeout=15), (
                f"the log says a reload is still waiting for its files:\n{log_tail(proxy)}")
        finally:
            release_fifo(cert)
            shutil.copy(env.certs.proxy.chain, cert.with_suffix(".good"))
            os.replace(cert.with_suffix(".good"), cert)
        assert_alive(proxy, "after a blocked reload")


def test_an_oversized_certificate_file_is_refused_on_reload_and_the_old_certificate_kept(suite_env, secure_destination):
    env = suite_env
    ca = env.certs.ca.cert
    cert, key = proxy_files(env, "reload-huge")
    sections = {"listener.tls": listener_tls(env.certs, reload_interval_ms=300, cert_file=cert, key_file=key),
                "upstream.properties": upstream_properties(env.certs, "INTERNAL")}
    with running_proxy(env, secure_destination.bootstrap_for("INTERNAL"), sections, "reload-huge") as proxy:
        fresh = issue_server_cert(env, "kmp-proxy-huge")
        # A valid new chain followed by 17 MiB of text outside any PEM block (which PEM parsers skip).
        tmp = cert.with_suffix(".pem.tmp")
        with open(tmp, "wb") as f:
            f.write(Path(fresh.chain).read_bytes())
            line = b"padding outside any PEM block " * 3 + b"\n"
            f.write(line * ((17 * 1024 * 1024) // len(line) + 1))
        shutil.copy(fresh.key, key.with_suffix(".key.tmp"))
        os.replace(key.with_suffix(".key.tmp"), key)
        os.replace(tmp, cert)
        assert wait_for_log(proxy, "larger than limits.max_security_file_bytes", timeout=10), (
            f"the reload of a 17 MiB certificate file is refused, naming limits.max_security_file_bytes:\n{log_tail(proxy)}")
        seen = common_name(served_certificate("127.0.0.1", proxy.port, ca))
        assert seen == "kmp-proxy", f"after the refused reload new connections still get the previous certificate; saw CN={seen}"
        assert "reload failed; the previous version stays in use" in proxy.log(), f"the log says the old version stays:\n{log_tail(proxy)}"
        assert_alive(proxy, "after an oversized certificate file")
