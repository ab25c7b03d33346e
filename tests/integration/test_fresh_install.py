"""What a user meets first: `.ci/run`'s Rust version check, the suite's temporary-directory
cleanup, the README and docs/ links, and the README's quick start run as written against the
session's two real clusters. The install itself on a clean Debian 12 root filesystem is proven by
.ci/fresh-install-proof.sh (docs/fresh-install.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import PROXY_BIN, ProxyProcess, unique
from mirror import create, high_watermarks, produce_one, produce_plain, wait_caught_up

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


# --- .ci/run ----------------------------------------------------------------------------------------

def rust_min() -> str:
    m = re.search(r'^rust-version\s*=\s*"([0-9.]+)"', (REPO / "Cargo.toml").read_text(), re.M)
    assert m, "Cargo.toml has no rust-version"
    return m.group(1)


def run_ci_with_fake_rustc(tmp_path: Path, version_line: str | None) -> subprocess.CompletedProcess:
    """.ci/run with HOME in tmp_path (no ~/.cargo/bin) and a PATH whose only rustc prints
    version_line (or no rustc at all)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    if version_line is not None:
        (fake / "rustc").write_text(f"#!/bin/sh\necho '{version_line}'\n")
        (fake / "rustc").chmod(0o755)
    path = [str(fake)] + [p for p in os.environ["PATH"].split(":") if not (Path(p) / "rustc").exists()]
    env = {"PATH": ":".join(path), "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    return subprocess.run(["bash", str(REPO / ".ci/run"), "--install-only"], env=env, capture_output=True,
                          text=True, timeout=60)


def test_ci_run_stops_on_a_rustc_older_than_rust_version_and_says_how_to_install_it(tmp_path):
    r = run_ci_with_fake_rustc(tmp_path, "rustc 1.63.0 (Debian)")
    assert r.returncode == 1, f".ci/run accepted rustc 1.63 (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
    msg = r.stderr
    for needed in (f"Rust {rust_min()} or newer", "found: 1.63.0", "static.rust-lang.org", "KMP_CI_INSTALL_RUST=1"):
        assert needed in msg, f"the message lacks {needed!r}:\n{msg}"
    assert "apt-get" not in r.stdout, f".ci/run installed packages before failing the Rust check:\n{r.stdout}"


def test_ci_run_names_a_missing_rustc(tmp_path):
    r = run_ci_with_fake_rustc(tmp_path, None)
    assert r.returncode == 1 and "no rustc on PATH" in r.stderr, f"exit {r.returncode}:\n{r.stderr}"


# --- temporary directories of the suite ---------------------------------------------------------------

PROBE = '''
def test_probe(workdir):
    (workdir / "broker.log").write_text("x" * 1000)
    assert {ok}, "probe failed on purpose"
'''


def run_probe_session(tmp_path: Path, ok: bool, keep: bool = False) -> tuple[subprocess.CompletedProcess, list[Path]]:
    """A pytest session in a subprocess with tests/conftest.py loaded as a plugin and its own
    TMPDIR, running one test that uses the `workdir` fixture; returns what is left in TMPDIR."""
    session = tmp_path / "session"
    session.mkdir()
    (session / "test_probe.py").write_text(PROBE.format(ok=ok))
    (session / "pytest.ini").write_text("[pytest]\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(TESTS)}
    env.pop("KMP_KEEP_WORKDIR", None)
    if keep:
        env["KMP_KEEP_WORKDIR"] = "1"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
                        "--rootdir", str(session), str(session / "test_probe.py")],
                       cwd=session, env=env, capture_output=True, text=True, timeout=120)
    return r, sorted(tmp.glob("kmp-it-*"))


def test_a_passing_session_removes_its_kmp_it_directory(tmp_path):
    r, left = run_probe_session(tmp_path, ok=True)
    assert r.returncode == 0, f"probe session failed:\n{r.stdout}\n{r.stderr}"
    assert left == [], f"a passing session left {left} behind"


def test_a_failing_session_keeps_its_directory_and_names_it_in_the_summary(tmp_path):
    r, left = run_probe_session(tmp_path, ok=False)
    assert r.returncode == 1, f"probe session should fail:\n{r.stdout}"
    assert len(left) == 1 and (left[0] / "broker.log").exists(), f"a failing session's directory and logs are gone: {left}"
    assert f"{left[0]} kept because the run did not pass" in r.stdout, f"the summary does not name {left[0]}:\n{r.stdout}"


def test_kmp_keep_workdir_keeps_the_directory_of_a_passing_session(tmp_path):
    r, left = run_probe_session(tmp_path, ok=True, keep=True)
    assert r.returncode == 0 and len(left) == 1, f"KMP_KEEP_WORKDIR=1 did not keep it: {left}\n{r.stdout}"
    assert "kept (KMP_KEEP_WORKDIR=1)" in r.stdout, r.stdout


# --- README and docs -------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def user_docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    broken = []
    for doc in user_docs():
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(REPO)} -> {target}")
            elif not path.is_relative_to(REPO):
                broken.append(f"{doc.relative_to(REPO)} -> {target} (outside the repository)")
    assert not broken, "links that do not resolve inside the repository:\n" + "\n".join(broken)


def test_the_readme_speaks_to_users_without_issue_numbers():
    text = (REPO / "README.md").read_text()
    found = re.findall(r"(?i)\bissues?\s*#?\d+|(?<![\w&/])#\d+\b", text)
    assert not found, f"README.md mentions issue numbers: {found}"
    for section in ("## The two commands", "### Prerequisites", "## Quick start", "## Configuration", "## Operations", "## Limits"):
        assert section in text, f"README.md lost its section {section!r}"
    assert f"**{rust_min()}**" in text, f"the README's Rust minimum differs from Cargo.toml's rust-version {rust_min()}"


# --- the README's quick start, as written ------------------------------------------------------------------

def readme_block(after: str, lang: str) -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(re.escape(after) + r".*?```" + lang + r"\n(.*?)```", text, re.S)
    assert m, f"README.md has no ```{lang} block after {after!r}"
    return m.group(1)


def readme_cli(proxy, command: str) -> subprocess.CompletedProcess:
    """A `target/release/kafka-mirror-proxy mirrors ...` line of the README, run with this build
    against this proxy."""
    args = command.split()
    assert args[0] == "target/release/kafka-mirror-proxy" and args[1:3] == ["mirrors", "--bootstrap-server"], command
    args[3] = proxy.bootstrap
    return subprocess.run([str(PROXY_BIN), *args[1:]], capture_output=True, text=True, timeout=120)


def test_the_readme_quick_start_mirrors_a_topic_and_fails_over_as_written(clusters, workdir):
    source, destination = clusters
    topic = unique("orders")
    create(source.bootstrap, topic, 2)
    produce_plain(source.bootstrap, topic, 60)

    config = readme_block("**2. Configure**", "toml")
    substitutions = {  # the README's example hosts -> this session's clusters
        '["dest-1:9092", "dest-2:9092"]': json.dumps(destination.bootstrap.split(",")),
        '["source-1:9092"]': json.dumps(source.bootstrap.split(",")),
        '"proxy-host"': '"127.0.0.1"',
        'topics = ["orders"]': f'topics = ["{topic}"]',
    }
    for example, real in substitutions.items():
        assert example in config, f"the README's quick-start config lost {example!r}:\n{config}"
        config = config.replace(example, real)
    path = workdir / "readme-quickstart.toml"
    path.write_text(config)
    # ProxyProcess adds --listen/--node-port-base/--admin-listen flags (free ports; flags win over the file)
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(path)]).start()
    try:
        status, body = proxy.http("/readyz")
        assert status == 200, f"step 3: /readyz {status}: {body}"
        wait_caught_up(source.bootstrap, destination.bootstrap, {topic: 2})

        describe, stop = (line for line in readme_block("**4. Watch the copy.**", "sh").splitlines() + readme_block("**5. Fail over.**", "sh").splitlines()
                          if line.startswith("target/release/kafka-mirror-proxy mirrors"))
        r = readme_cli(proxy, describe)
        assert r.returncode == 0 and topic in r.stdout and "MIRRORING" in r.stdout, f"step 4 describe (exit {r.returncode}):\n{r.stdout}{r.stderr}"
        status, body = proxy.http("/v1/mirrors")
        assert status == 200 and '"dc1"' in body, f"step 4 REST /v1/mirrors {status}: {body[:500]}"
        err, _ = produce_one(proxy.bootstrap, topic, 0)
        assert err is not None, "a mirrored topic accepted a produce through the proxy"

        r = readme_cli(proxy, stop.replace("--topics orders", f"--topics {topic}"))
        assert r.returncode == 0, f"step 5 stop (exit {r.returncode}):\n{r.stdout}{r.stderr}"
        ends = high_watermarks(destination.bootstrap, topic, 2)
        assert ends == high_watermarks(source.bootstrap, topic, 2), "after a graceful stop the destination holds everything"
        err, offset = produce_one(proxy.bootstrap, topic, 0)
        assert err is None and offset == ends[0], f"step 5: the topic is writable at the next offset after failover: {err} {offset}"
    finally:
        assert proxy.stop() == 0, f"proxy did not exit cleanly:\n{proxy.log()[-3000:]}"
