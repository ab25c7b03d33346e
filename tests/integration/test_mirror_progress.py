"""Initial-copy progress through the CLI against real clusters: `mirrors --describe` shows each
topic's records remaining, ≈bytes remaining, rate and ETA while a 60k-record backlog is copied
(and "caught up" afterwards), and a graceful stop run on a terminal redraws a progress line with
the remaining records before it fails over. The copy is slowed by 1 KiB per-partition Fetches of
small source batches so it lasts long enough to be watched (tens of seconds idle; a loaded CI
machine copied only 350-900 records/s this way, so the graceful stop gets four minutes)."""

import json
import os
import pty
import select
import subprocess
import time


from conftest import PROXY_BIN, ProxyProcess, unique
from kmp_common import wait_until
from mirror import create, high_watermarks, produce_small_batches

PARTITIONS = 2
RECORDS = 60_000


def slow_mirror_config(workdir, source, topic: str, name: str) -> list[str]:
    """A mirror of `topic` fetching at most 1 KiB per partition per request (never growing)."""
    path = workdir / f"{name}-{unique('cfg')}.toml"
    path.write_text(f'[[mirrors]]\nname = "{name}"\nsource_bootstrap_servers = ["{source.bootstrap}"]\ntopics = ["{topic}"]\n'
                    "fetch_max_bytes = 1024\nfetch_grow_max_bytes = 1024\n")
    return ["--config", str(path)]


def cli(proxy, *args: str) -> tuple[int, str, str]:
    out = subprocess.run([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, *args], capture_output=True, text=True, timeout=120)
    return out.returncode, out.stdout, out.stderr


def topic_progress(proxy, mirror: str, topic: str) -> dict | None:
    """The `--describe --output json` progress entry of `topic` (None while the engine has not
    described the topic yet, right after the proxy started)."""
    code, out, err = cli(proxy, "--describe", "--mirror", mirror, "--output", "json")
    assert code == 0, f"describe failed (exit {code}): {err}"
    mine = [t for t in json.loads(out)["topics"] if t["topic"] == topic]
    assert len(mine) <= 1, f"at most one progress entry for {topic}: {out}"
    return mine[0] if mine else None


def run_on_terminal(args: list[str], timeout: float) -> tuple[int, str]:
    """Runs `args` with stderr on a pseudo-terminal (stdout captured apart); returns the exit code
    and everything written to the terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the terminal's last writer is gone
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.time()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, seen.decode(errors="replace")


def test_describe_shows_the_initial_copy_draining_and_a_graceful_stop_shows_progress_on_a_terminal(clusters, workdir):
    source, destination = clusters
    topic = unique("progress")
    create(source.bootstrap, topic, PARTITIONS)
    produce_small_batches(source.bootstrap, topic, RECORDS)
    assert sum(high_watermarks(source.bootstrap, topic, PARTITIONS)) == RECORDS
    proxy = ProxyProcess(destination.bootstrap, workdir, slow_mirror_config(workdir, source, topic, "prog")).start()
    try:
        # Mid-copy: something mirrored, something remaining, a measured rate and hence an ETA.
        started = time.time()
        mid = wait_until("the initial copy under way with a measured rate",
                         lambda: (t := topic_progress(proxy, "prog", topic)) and t["records_mirrored"] > 0 and t["records_per_sec"] > 0
                         and (t["records_remaining"] or 0) > 0 and t,
                         timeout=60, interval=0.3)
        assert 0 < mid["records_remaining"] <= RECORDS, f"remaining within what was produced: {mid}"
        assert mid["records_remaining"] + mid["records_mirrored"] <= RECORDS + 1_000, f"remaining + mirrored ≈ produced: {mid}"
        assert mid["eta_seconds"] is not None and mid["eta_seconds"] > 0, f"an ETA while copying at a rate: {mid}"
        assert mid["bytes_remaining_estimate"] is not None and mid["bytes_remaining_estimate"] > 0, f"≈bytes remaining: {mid}"
        assert not mid["caught_up"], mid
        code, table, err = cli(proxy, "--describe", "--mirror", "prog")
        assert code == 0, err
        assert all(h in table for h in ("RECORDS-REMAINING", "BYTES-REMAINING", "RATE", "ETA")), f"progress columns:\n{table}"
        row = next((line for line in table.splitlines() if topic in line and "rec/s" in line), None)
        assert row is not None and "≈" in row, f"a progress row for {topic} with an estimated byte count:\n{table}"

        # A graceful stop waits for the rest of the copy, drawing the progress on the terminal.
        code, shown = run_on_terminal([str(PROXY_BIN), "mirrors", "--bootstrap-server", proxy.bootstrap, "--stop", "--mirror", "prog",
                                       "--topics", topic, "--graceful-timeout-ms", "240000"], timeout=260)
        copy_s = time.time() - started
        assert code == 0, f"graceful stop succeeded:\n{shown}"
        waits = [s for s in shown.split("\r") if "records remaining" in s]
        assert waits, f"at least one progress line on the terminal:\n{shown!r}"
        counts = [int(s.split("waiting to catch up: ")[1].split(" ")[0]) for s in waits if "waiting to catch up: " in s]
        assert counts and all(0 <= c <= RECORDS for c in counts) and max(counts) > 0, f"remaining records in the lines: {counts}"
        assert "ETA" in waits[0] and "caught up" in shown, f"an ETA while waiting, 'caught up' at the end:\n{shown!r}"
        assert high_watermarks(destination.bootstrap, topic, PARTITIONS) == high_watermarks(source.bootstrap, topic, PARTITIONS), \
            "the destination had everything before the failover"

        done = topic_progress(proxy, "prog", topic)
        assert done is not None, "the stopped topic is still described"
        assert done["records_remaining"] == 0 and done["caught_up"] and done["eta_seconds"] == 0, f"caught up after the copy: {done}"
        assert done["records_mirrored"] == RECORDS, f"every record counted once: {done}"
        code, table, _ = cli(proxy, "--describe", "--mirror", "prog")
        row = next((line for line in table.splitlines() if topic in line and "rec/s" in line), "")
        assert "caught up" in row, f"the table says caught up:\n{table}"
        print(f"initial copy of {RECORDS} records observed for {copy_s:.1f}s; mid-copy {mid}; {len(waits)} progress redraws")
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly:\n{proxy.log()[-3000:]}"
