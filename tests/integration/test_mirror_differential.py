"""The randomized differential test of the mirror engine (issue #10): seeded source histories —
produce with every codec and batch size, idempotent and interleaved transactional producers
(committed and aborted), headers and null keys/values, DeleteRecords anywhere (inside batches
too), compaction with the cleaner running, time retention, partitions added, mirror pause/resume,
the proxy killed with SIGKILL, a destination partition leader killed — each compared, through the
proxy at both isolation levels, with what the source's consumers see (``differential/``).

Every history in ``differential/regressions.json`` (the long tier's) plus generated seeds, one
pytest case each: in the quick tier 3 seeds out of 1..200 that rotate with the UTC date (a different three each day:
67 days of quick runs cover what one long run does), in the long tier seeds 1..200
(tests/harness/tier.py). ``--seeds N`` runs seeds 1..N instead (``--first-seed F`` starts at F);
a regression is not run twice when it is one of those seeds' history; ``--seed S`` replays one
seed. A failure prints the seed, the replay command, the diff, the full history and the execution
log. One proxy (its own state topic) serves every case; each case has its own cluster mirror and topics.

About half of the generated histories mirror with ``shift_prefix_from`` (docs/mirroring.md
"Shifted prefixes"), with prefix jumps at or above it before their topics are started (shifted
partitions) and below it (filled partitions), and jumps on shifted partitions later (filled on
top of Δ); each comparison also reads the destination directly to check that every partition is
shifted or filled as decided (``differential/history.py``, ``differential/runner.py``). Such a
history's mirror cannot be created through REST (it knows no key for the setting), so it is
declared in the config file of a proxy started for that history alone. ``KMP_DIFF_FORCE_SHIFT=1``
in the environment makes every generated history shift (the same draws otherwise; regressions are
replayed as stored, a stored history without ``shift_prefix_from`` never shifts) — to stress the
shifted path, e.g. ``KMP_DIFF_FORCE_SHIFT=1 ... --seeds 20``; the replay command of a failure
carries it.
"""

import datetime
import os
import time

import pytest

import tier

from conftest import PROXY_BIN, ProxyProcess
from differential.history import FORCE_SHIFT_ENV, force_shift, generate
from differential.regressions import REGRESSIONS, duplicates
from differential.runner import Env, Run
from differential.source_ops import close_shared_producers

REPLAY = "flock /tmp/kmp-kafka.lock python3 -m pytest tests/integration/test_mirror_differential.py"


LONG_SEEDS = 200
QUICK_SEEDS = 3


def tier_seeds() -> list[int]:
    """Seeds 1..200 in the long tier; in the quick tier 3 of them chosen by the UTC date (day d
    runs 3d+1..3d+3 modulo 200), printed in the case ids, so a failure names its seed."""
    day = datetime.datetime.now(datetime.timezone.utc).date().toordinal()
    quick = [1 + (day * QUICK_SEEDS + i) % LONG_SEEDS for i in range(QUICK_SEEDS)]
    return tier.dial("differential seeds", quick=quick, long=range(1, LONG_SEEDS + 1))


def pytest_generate_tests(metafunc):
    if "case" not in metafunc.fixturenames:
        return
    seed = metafunc.config.getoption("--seed")
    if seed is not None:
        cases = [("seed", seed)]
    else:
        count, first = metafunc.config.getoption("--seeds"), metafunc.config.getoption("--first-seed")
        seeds = list(range(first, first + count)) if count is not None else tier_seeds()
        cases = [("seed", s) for s in seeds]
        same = duplicates(seeds)  # already run as their generated seed
        cases += [("regression", r["name"]) for r in REGRESSIONS if r["name"] not in same]
    # The regression cases (about 6 minutes together) are the long tier's; the quick tier runs the
    # day's generated seeds. Named on the command line (-k, --seed) they run in either tier.
    metafunc.parametrize("case", [pytest.param((k, v), id=f"{k}-{v}", marks=pytest.mark.long if k == "regression" else ())
                                  for k, v in cases])


@pytest.fixture(scope="module")
def diff_env(clusters, workdir):
    source, destination = clusters
    tag = f"{int(time.time()) % 100000}"
    config = workdir / f"differential-{tag}.toml"
    # Its own state topic: other modules' proxies never run these mirrors, and this one never
    # runs theirs.
    config.write_text(f'[engine]\nenabled = true\nstate_topic = "__kmp_diff_state_{tag}"\n')
    proxy = ProxyProcess(destination.bootstrap, workdir, ["--config", str(config)]).start()
    # A history whose mirror sets shift_prefix_from gets a proxy of its own (runner.Run).
    new_proxy = lambda path: ProxyProcess(destination.bootstrap, workdir, ["--config", str(path)])  # noqa: E731
    yield Env(source, destination, proxy, PROXY_BIN, new_proxy, workdir), tag
    close_shared_producers()
    if proxy.alive():
        code = proxy.stop()
        assert code == 0, f"proxy exited with {code} on SIGTERM:\n{proxy.log()[-3000:]}"


def test_mirror_equals_source_after_a_random_history(diff_env, case):
    env, tag = diff_env
    kind, value = case
    if kind == "seed":
        forced = f"{FORCE_SHIFT_ENV}={os.environ[FORCE_SHIFT_ENV]} " if force_shift() else ""
        history, replay = generate(value), f"{forced}{REPLAY} --seed {value}"
    else:
        history = next(r["history"] for r in REGRESSIONS if r["name"] == value)
        replay = f"{REPLAY} -k '[regression-{value}]'"
    summary = Run(env, history, f"{kind}-{value}", replay, tag).run()
    print(f"\n{summary}")
