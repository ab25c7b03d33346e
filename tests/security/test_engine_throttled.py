"""Issue 35, N7 (throttling): a quota on the engine's client id, set on the destination's brokers
directly (through the proxy it is refused), must slow mirroring, be shown while it does — lag above
0, never "mirroring, lag 0" — and, once removed, let the mirror catch up without a restart. Before,
after such a quota was removed two topics stayed frozen for over 6 minutes while every partition
said mirroring with no lag; the engine ignored `throttle_time_ms`."""

import time

import pytest

from sec_support import metric_series, mirror_decl, mirrored_topic, produce_values, running_proxy, wait_caught_up, watermarks

ENGINE_CLIENT_ID = "kafka-mirror-proxy-engine"
VALUE_BYTES, RECORDS_PER_S, TRICKLE_S = 1024, 10, 20


def config_command(classpath: str, bootstrap: str, *args: str) -> None:
    import subprocess
    out = subprocess.run(["java", "-cp", classpath, "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--entity-type", "clients",
                          "--entity-name", ENGINE_CLIENT_ID, "--alter", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kafka-configs {' '.join(args)} failed: {out.stderr[-2000:]}"


def lag_of(proxy, topic: str) -> float:
    series = metric_series(proxy, "kmp_mirror_lag_records")
    return sum(v for k, v in series.items() if f'topic="{topic}"' in k)


@pytest.mark.long  # a broker quota on the engine and its removal (31 s)
def test_a_quota_on_the_engine_slows_mirroring_visibly_and_its_removal_lets_it_catch_up_without_a_restart(clusters, workdir, kafka_classpath):
    source, destination = clusters
    topic = mirrored_topic(source, records=10, prefix="sec-throttle")
    with running_proxy(destination, workdir, mirrors=[mirror_decl("throttle", source, [topic])]) as proxy:
        wait_caught_up(source, destination, topic, 1)
        config_command(kafka_classpath, destination.bootstrap, "--add-config", "producer_byte_rate=2048")
        try:
            time.sleep(3)  # the brokers apply the quota
            # A steady trickle: the first writes pass, then the broker throttles the engine's
            # connection (Kafka throttles after the fact, by throttle_time_ms).
            for _ in range(TRICKLE_S):
                produce_values(source.bootstrap, topic, [b"x" * VALUE_BYTES] * RECORDS_PER_S)
                time.sleep(0.5)
            source_end = watermarks(source.bootstrap, topic, 1)[0][1]
            dest_end = watermarks(destination.bootstrap, topic, 1)[0][1]
            assert dest_end < source_end, (f"precondition: a 2 KiB/s quota on {ENGINE_CLIENT_ID} slows the copy "
                                           f"(destination {dest_end}, source {source_end})")
            lag = lag_of(proxy, topic)
            assert lag > 0, (f"the destination is {source_end - dest_end} records behind under the quota, but kmp_mirror_lag_records "
                             f"says {lag}")
        finally:
            config_command(kafka_classpath, destination.bootstrap, "--delete-config", "producer_byte_rate")
        started = time.time()
        wait_caught_up(source, destination, topic, 1, timeout=90)
        assert proxy.alive(), "the proxy kept running"
        print(f"caught up {time.time() - started:.1f} s after the quota was removed")
