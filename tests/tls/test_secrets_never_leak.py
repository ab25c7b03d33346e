"""No secret the suite used appears anywhere the proxy speaks: every proxy log of the session (the
TLS tests run their proxies with --log debug), and everything the TLS tests collected in the leak
corpus — REST answers, /metrics scrapes, DescribeConfigs and ListClusterMirrors answers, CLI
output, the state topic's records. Runs after every other test (tests/tls/conftest.py orders it)."""

from pathlib import Path


def test_no_secret_of_the_suite_appears_in_any_log_answer_or_metric(workdir, leak_corpus, suite_secrets):
    logs = sorted(Path(workdir).glob("proxy-*.log"))
    corpus = sorted(p for p in Path(leak_corpus).iterdir() if p.is_file())
    assert logs, f"no proxy logs in {workdir}: the grep would prove nothing"
    assert len(corpus) >= 5, f"the leak corpus holds only {[p.name for p in corpus]}: the TLS tests did not record what the proxy showed"
    assert any("listener.auth" in p.read_text(errors="replace") or "TLS" in p.read_text(errors="replace") for p in logs), \
        "no proxy log of a TLS/SASL test found"
    hits = []
    for path in logs + corpus:
        data = path.read_bytes()
        for secret in suite_secrets:
            if secret.encode() in data:
                line = next((l for l in data.splitlines() if secret.encode() in l), b"")
                hits.append(f"{path.name}: {line[:200].replace(secret.encode(), b'<SECRET>')!r}")
    checked = sum(p.stat().st_size for p in logs + corpus)
    assert not hits, f"{len(hits)} secret(s) leaked (of {len(suite_secrets)} secrets, {checked} bytes checked):\n" + "\n".join(hits[:20])
