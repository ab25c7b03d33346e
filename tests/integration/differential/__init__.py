"""The randomized differential test of the mirror engine (issue #10).

A seeded generator writes a *history* — source topics and a list of operations with their
parameters — and the test runs it against the real source cluster, the proxy's mirror engine and
the 3-broker destination, then compares what consumers of the proxy see with what consumers of
the source see. One concern per module:

* ``history``     — the history model and the seeded generator (same seed, same history), with
                    whether the mirror shifts prefixes (``shift_prefix_from``; every generated
                    history does with ``KMP_DIFF_FORCE_SHIFT=1``);
* ``content``     — the records of a produce operation, derived from the operation alone;
* ``kafka_io``    — reading records and watermarks, admin calls, bounded polling;
* ``source_ops``  — operations on the source cluster (produce, transactions, DeleteRecords,
                    compaction, time retention, partitions added) and the model of what was
                    produced;
* ``mirror_ops``  — operations on the mirror and the destination side (start, pause/resume,
                    proxy ``kill -9``, a destination partition leader killed and restarted);
* ``compare``     — the comparator (records, log starts, high watermarks, ``/metrics``) and its
                    readable diff;
* ``runner``      — runs one history end to end and reports the seed, the history and the diff;
* ``regressions`` — histories that once failed, kept as fixed cases.
"""
