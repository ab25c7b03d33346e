"""Issue 35, finding N11: a lying source. One Fetch answer whose batches claimed a base offset
5,000,000 ahead made the engine write 5 million fillers (161 MB) before failing; batches
relabelled 1,000 offsets back were written at those offsets (destination offsets holding other
offsets' records) and the partition stayed mirroring.

A relay in front of the real source broker (``fetch_relay``) rewrites the base offsets of the
batches in its Fetch answers. Now an answer whose batches do not start at or after the offset
asked (other than the one batch holding it), or whose data lies beyond the end offsets the source
reports, fails the partition with the reason before anything of it is written. And a true answer
that only looks like a lie is not refused: a broker notes a partition's high watermark before it
reads the log, so a batch committed in between arrives beyond the answer's own high watermark."""

from __future__ import annotations

import time

from fetch_relay import partition_status, relayed_mirror
from sec_support import produce_values, read_records, wait_caught_up, wait_until, watermarks


def destination_end(destination, topic: str) -> int:
    try:
        return watermarks(destination.bootstrap, topic, 1)[0][1]
    except Exception:  # noqa: BLE001 - not created yet
        return 0


def test_an_answer_relabelled_5_million_offsets_ahead_fails_the_partition_before_any_filler(clusters, workdir):
    _, destination = clusters
    values = [f"r{i}".encode() for i in range(30)]
    with relayed_mirror(clusters, workdir, "lying-ahead", "lying", values, shift=5_000_000) as (proxy, relay, name, topic):
        deadline = time.time() + 90
        while time.time() < deadline:
            st = partition_status(proxy, name, topic)
            if st.get("state") == "failed" or destination_end(destination, topic) > 30:
                break
            time.sleep(0.5)
        st = partition_status(proxy, name, topic)
        end = destination_end(destination, topic)
        assert relay.shifted_batches > 0, "the relay never relabelled a batch (the engine did not fetch through it)"
        assert end == 0, (f"the destination holds {end} offsets after an answer relabelled 5,000,000 ahead of a source "
                          f"that ends at 30: fillers were written for offsets the source never had ({st})")
        assert st.get("state") == "failed", f"the partition must be FAILED by a lying answer, got {st}"
        assert "cannot be true" in (st.get("last_error") or ""), f"the reason names the lie: {st}"


def test_batches_relabelled_1000_offsets_back_fail_the_partition_and_are_not_written_at_other_offsets(clusters, workdir):
    source, destination = clusters
    values = [f"a{i}".encode() for i in range(1500)]
    with relayed_mirror(clusters, workdir, "lying-back", "lying", values) as (proxy, relay, name, topic):
        wait_caught_up(source, destination, topic, 1)
        # From now on every batch the source holds at 1500 and after comes back 1000 offsets
        # lower; one batch of 1500 records (1500..3000) then claims 500..2000 and "holds" 1500.
        relay.shift, relay.shift_from = -1000, 1500
        produce_values(source.bootstrap, topic, [f"b{i}".encode() for i in range(1500)],
                       **{"linger.ms": 2000, "batch.num.messages": 100000, "batch.size": 8_000_000})
        wait_until(lambda: relay.shifted_batches > 0, 30, "a relabelled batch sent to the engine")
        deadline = time.time() + 60
        while time.time() < deadline and partition_status(proxy, name, topic).get("state") != "failed":
            time.sleep(0.5)
        st = partition_status(proxy, name, topic)
        src = {o: v for _, o, _, v in read_records(source.bootstrap, topic, 1)}
        wrong = [(o, v, src.get(o)) for _, o, _, v in read_records(destination.bootstrap, topic, 1) if src.get(o) != v]
        assert not wrong, (f"{len(wrong)} destination offsets hold another offset's record (first: offset "
                           f"{wrong[0][0]} holds {wrong[0][1]!r}, the source has {wrong[0][2]!r}); partition {st}")
        assert st.get("state") == "failed", f"batches relabelled before the offset asked must fail the partition, got {st}"
        assert "cannot be true" in (st.get("last_error") or ""), f"the reason names the lie: {st}"
        assert destination_end(destination, topic) == 1500, "nothing of the lying answers was written"


def test_batches_beyond_the_answers_own_high_watermark_are_confirmed_and_copied_not_refused(clusters, workdir):
    """Seen in the quick tier under load: a hedged partition went FAILED on a batch over 2018..2020
    in an answer whose high watermark said 2018. The relay lowers every answer's marks to where its
    last batch begins; the source's ListOffsets shows the batch is there, so it is copied."""
    source, destination = clusters
    values = [f"s{i}".encode() for i in range(200)]
    with relayed_mirror(clusters, workdir, "stale-marks", "stale", values) as (proxy, relay, name, topic):
        relay.stale_marks = True

        def caught_up_unless_failed() -> None:
            wait_until(lambda: partition_status(proxy, name, topic).get("state") == "failed"
                       or destination_end(destination, topic) == watermarks(source.bootstrap, topic, 1)[0][1],
                       60, "the mirror caught up or failed")
            st = partition_status(proxy, name, topic)
            assert st.get("state") != "failed", f"a true answer with a stale high watermark failed the partition: {st}"

        caught_up_unless_failed()
        for n in range(5):  # more answers, each with its marks behind its last batch
            produce_values(source.bootstrap, topic, [f"t{n}-{i}".encode() for i in range(50)])
            caught_up_unless_failed()
        st = partition_status(proxy, name, topic)
        assert relay.staled_answers > 0, "the relay never lowered an answer's marks (the engine did not fetch through it)"
        assert st.get("state") != "failed", f"a true answer with a stale high watermark failed the partition: {st}"
        src = [(o, v) for _, o, _, v in read_records(source.bootstrap, topic, 1)]
        dst = [(o, v) for _, o, _, v in read_records(destination.bootstrap, topic, 1)]
        assert dst == src, f"the destination ({len(dst)} records) equals the source ({len(src)}) at the same offsets"
