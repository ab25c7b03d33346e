"""Several mirrors of one source cluster share the engine's source connections and fetch
sessions. A source broker answers one connection's requests one at a time, so if each mirror kept
its own fetch sessions on the shared connections, a busy mirror's Fetch would wait behind an idle
mirror's long poll (500 ms) every round: CI saw a 1 KiB-per-Fetch copy crawl at ~70 records/s
that way. Here a busy mirror needing ~400 small Fetches must catch up while an idle mirror of the
same source long-polls 24 partitions; at one long poll per round it would need over three
minutes."""

import time

from conftest import ProxyProcess, unique
from kmp_common import established, wait_until
from mirror import cli_json, create, mirror_through_cli, produce_plain, produce_small_batches, wait_caught_up

IDLE_PARTITIONS = 24
RECORDS = 14_000  # ≈ 18 records per 1 KiB batch: ~390 Fetches per partition of 2


def test_a_busy_mirror_never_waits_behind_an_idle_mirrors_long_polls_on_the_same_source(clusters, workdir):
    source, destination = clusters
    idle, busy = unique("shared-idle"), unique("shared-busy")
    create(source.bootstrap, idle, IDLE_PARTITIONS)
    create(source.bootstrap, busy, 2)
    produce_small_batches(source.bootstrap, busy, RECORDS)
    servers = f'["{source.bootstrap}"]'
    conf = workdir / f"{unique('shared')}.toml"
    conf.write_text(
        f'[engine]\nstate_topic = "{unique("kmp-shared-state")}"\n'
        f'[[mirrors]]\nname = "idle"\nsource_bootstrap_servers = {servers}\ntopics = ["{idle}"]\n'
        f'[[mirrors]]\nname = "busy"\nsource_bootstrap_servers = {servers}\ntopics = ["{busy}"]\n'
        "fetch_max_bytes = 1024\nfetch_grow_max_bytes = 1024\n")
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(conf)]).start()
    try:
        started = time.time()
        wait_caught_up(source.bootstrap, destination.bootstrap, {busy: 2})
        took = time.time() - started
        print(f"\n{RECORDS} records in 1 KiB Fetches beside an idle mirror of {IDLE_PARTITIONS} partitions: {took:.1f}s")
        wait_caught_up(source.bootstrap, destination.bootstrap, {idle: IDLE_PARTITIONS})
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly:\n{proxy.log()[-3000:]}"


def test_a_deleted_mirrors_source_connections_are_closed(clusters, workdir):
    """The engine keeps one client per source setting; when the last mirror using it is deleted,
    its connections to the source close (before, they stayed open until a restart)."""
    source, destination = clusters
    topic = unique("gone-src")
    create(source.bootstrap, topic, 1)
    produce_plain(source.bootstrap, topic, 20)
    conf = workdir / f"{unique('gone')}.toml"
    conf.write_text(f'[engine]\nenabled = true\nstate_topic = "{unique("kmp-gone-state")}"\n')
    props = workdir / f"{topic}.properties"
    props.write_text(f"bootstrap.servers={source.bootstrap}\n")
    source_ports = {int(a.rsplit(":", 1)[1]) for a in source.bootstrap.split(",")}
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(conf)]).start()
    try:
        mirror_through_cli(proxy, source, destination, "gone", props, topic)
        assert established(proxy.pid, source_ports) >= 1, "the mirror reaches its source"
        code, r = cli_json(proxy, "--stop", "--mirror", "gone", "--topics", topic)
        assert code == 0, f"topic stopped: {r}"
        code, r = cli_json(proxy, "--delete", "--mirror", "gone")
        assert code == 0, f"mirror deleted: {r}"
        wait_until("every connection to the deleted mirror's source closed", lambda: established(proxy.pid, source_ports) == 0, timeout=30)
    finally:
        assert proxy.stop() == 0, f"proxy exited cleanly:\n{proxy.log()[-3000:]}"
