"""Issue 35, finding N8: a source that dribbled its Fetch answers (20 B/s) stalled every partition
behind it indefinitely, with ``kmp_mirror_lag_records`` 0 and status mirroring on stale offsets,
and the mirror did not recover when the source became normal again.

A relay in front of the real source broker (``fetch_relay``) sends its Fetch answers at 20 B/s.
Now source requests have a read timeout (a late response closes the connection), the source's
real end is read with ListOffsets when no answer brings it (so the lag is real), a partition
making no progress while the source holds more is reported (``kmp_mirror_stalled``, the reason
in the partition's last error), and once the source answers normally again the mirror catches
up by itself."""

from __future__ import annotations

import time

from fetch_relay import partition_status, relayed_mirror
from sec_support import produce_values, read_records, wait_caught_up

BEHIND = 2000


def stalled_metric(proxy, mirror: str, topic: str) -> float | None:
    """kmp_mirror_stalled of the partition (None: not exported, as before this finding)."""
    return proxy.metric_or_absent("kmp_mirror_stalled", f'mirror="{mirror}",topic="{topic}",partition="0"')


def test_a_source_dribbling_its_fetch_answers_is_reported_with_its_real_lag_and_recovers_without_a_restart(clusters, workdir):
    source, destination = clusters
    values = [f"r{i}".encode() for i in range(50)]
    with relayed_mirror(clusters, workdir, "dribbled", "dribble", values) as (proxy, relay, name, topic):
        wait_caught_up(source, destination, topic, 1)
        relay.dribble_bps = 20
        produce_values(source.bootstrap, topic, [f"late-{i}".encode() * 20 for i in range(BEHIND)])
        dribbling = time.time()

        # The source's real end is shown within a minute (the copy loop's last answer said 50).
        seen = []
        while time.time() < dribbling + 60:
            st = partition_status(proxy, name, topic)
            seen.append((round(time.time() - dribbling), st.get("state"), st.get("lag")))
            if (st.get("lag") or 0) >= BEHIND:
                break
            time.sleep(2)
        assert (st.get("lag") or 0) >= BEHIND, (
            f"60 s after {BEHIND} records reached a source dribbling its answers, the lag shown is "
            f"{st.get('lag')} (state {st.get('state')}); seen (s, state, lag): {seen[-8:]}")

        # ... and the partition is reported as not progressing, not "mirroring" with no word.
        while time.time() < dribbling + 120:
            st = partition_status(proxy, name, topic)
            if stalled_metric(proxy, name, topic) == 1 and st.get("last_error"):
                break
            time.sleep(2)
        assert stalled_metric(proxy, name, topic) == 1, (
            f"120 s without progress while {BEHIND} records wait: kmp_mirror_stalled is {stalled_metric(proxy, name, topic)}, "
            f"status {st}")
        assert st.get("last_error"), f"a stalled partition says why: {st}"

        relay.dribble_bps = 0
        recovered = time.time()
        wait_caught_up(source, destination, topic, 1, timeout=120)
        took = time.time() - recovered
        src = [v for _, _, _, v in read_records(source.bootstrap, topic, 1)]
        dst = [v for _, _, _, v in read_records(destination.bootstrap, topic, 1)]
        assert dst == src, "the destination equals the source after recovering"
        deadline = time.time() + 30
        while time.time() < deadline and (stalled_metric(proxy, name, topic) != 0 or partition_status(proxy, name, topic).get("last_error")):
            time.sleep(1)
        st = partition_status(proxy, name, topic)
        assert stalled_metric(proxy, name, topic) == 0 and st.get("state") == "mirroring" and not st.get("last_error"), (
            f"after catching up ({took:.0f} s after the source became normal) the partition is healthy again: {st}, "
            f"kmp_mirror_stalled {stalled_metric(proxy, name, topic)}")
