#!/usr/bin/env bash
# The test command (README "Test"): Rust unit and property tests, then the real-Kafka suites
# (tests/integration, tests/security) that start two KRaft clusters on loopback once per session
# and drive Java, librdkafka, kafka-python, franz-go, Kafka's own tools and hand-built hostile
# frames through the proxy binary; tests/tls does the same over TLS and SASL against two more
# clusters with secure listeners.
#
#   tests/run.sh [extra pytest args]          the quick tier: every submission, what .ci/run runs
#   tests/run.sh --long [extra pytest args]   the long tier: everything at full length (nightly,
#                                             before a release); --all is the same
#
# Two tiers, the same tests (tests/harness/tier.py):
#   * quick (KMP_TIER=quick): tests marked `long` are deselected (-m "not long"; pytest reports
#     them as deselected) and the dialled tests run with smaller knobs: chaos windows of 20 s
#     instead of 120, 3 proxy SIGKILLs instead of 10, 2 start-up restarts instead of 8, 300
#     connections per fleet instead of 800, a 500-partition mirror instead of 2,000, and the
#     differential test's regression cases plus 3 seeds that rotate with the date instead of 200.
#   * long (KMP_TIER=long): every test, every dial at full length; the `long` tests are the
#     container image (built by the test itself with docker/build-image.sh; podman and buildah are
#     needed only then) and the Kafka 4.4 clusters (version clamping, share-group sync).
#     Afterwards the fresh-install proof (.ci/fresh-install-proof.sh: root, debootstrap and
#     network) runs unless KMP_FRESH_INSTALL_PROOF=0.
# A dial's environment variable (KMP_CHAOS_SECONDS, ...) overrides the tier's value. Extra
# arguments go to pytest after the tier's -m, so `tests/run.sh -m long` runs only the long tests
# (with quick dials), and `python3 -m pytest tests/integration/test_x.py::test_y` (no -m) runs a
# long test by name.
# Measured on the 2-core machine: README "Test".
set -euo pipefail
cd "$(dirname "$0")/.."
tier=quick
case "${1:-}" in
  --long|--all) tier=long; shift ;;
  -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
esac
export KMP_TIER=$tier
# One build of every target (binary, tests, benches), so that cargo test only runs.
cargo build --locked --workspace --all-targets
cargo test --locked --workspace
tests/harness/kafka-jars.sh >/dev/null   # fetch Kafka's jars once (cached) before the clock starts
select=()
[[ $tier == quick ]] && select=(-m "not long")
# Two pytest processes at once, each with the clusters of its own tests and its own half of the
# port range (tests/harness/ports.py): the plain client and engine suites (tests/integration), and
# the TLS suite with the security suite, the differential histories, the engine memory budget and
# the engine takeover tests (tests/tls, tests/security, test_mirror_differential.py,
# test_mirror_budget.py, test_engine_takeover.py). They share nothing, and both spend most of their time waiting on
# brokers (the load average of the serial run stayed near 1 on 2 cores), so side by side they take
# about the time of the longer one. The second process's output is written to a log and printed
# after the first's; the exit status is the worse of the two. Arguments that name tests (paths,
# node ids) run in one process, as given; KMP_SERIAL=1 runs everything in one process. Each
# process's per-test times go to target/test-times/{first,second}.xml (JUnit XML), which is what
# the split is balanced by: .ci/test-times.py sums them per file and per process.
differential=tests/integration/test_mirror_differential.py
# in the second process too: they balance the two halves
budget=tests/integration/test_mirror_budget.py
takeover=tests/integration/test_engine_takeover.py
names_tests=0
for a in "$@"; do [[ $a == tests/* || $a == *.py || $a == *::* ]] && names_tests=1; done
status=0
if ((names_tests)); then
  python3 -m pytest "${select[@]}" "$@" || status=$?
elif [[ "${KMP_SERIAL:-0}" == 1 ]]; then
  python3 -m pytest tests/integration tests/security tests/tls "${select[@]}" "$@" || status=$?
else
  tls_log=$(mktemp -t kmp-second-XXXXXX.log)
  KMP_PORT_RANGE=21500-32000 python3 -m pytest tests/tls tests/security "$differential" "$budget" "$takeover" --junitxml=target/test-times/second.xml \
    "${select[@]}" "$@" >"$tls_log" 2>&1 &
  tls_pid=$!
  KMP_PORT_RANGE=10000-21499 python3 -m pytest tests/integration --ignore="$differential" --ignore="$budget" --ignore="$takeover" --junitxml=target/test-times/first.xml \
    "${select[@]}" "$@" || status=$?
  tls_status=0
  wait "$tls_pid" || tls_status=$?
  echo "==> tests/run.sh: tests/tls, tests/security and $differential, run beside tests/integration (pytest exit status $tls_status)"
  cat "$tls_log"
  rm -f "$tls_log"
  # 5 is pytest's "no tests collected": fine for one half when a -k or -m selects only the other
  if ((status == 5 || status == 0)) && ((tls_status != 5)); then status=$tls_status; fi
fi
((status == 0)) || exit "$status"
if [[ $tier == long && "${KMP_FRESH_INSTALL_PROOF:-1}" != 0 ]]; then
  if ((EUID != 0)) || ! command -v debootstrap >/dev/null; then
    echo "tests/run.sh --long: the fresh-install proof needs root and debootstrap (apt-get install debootstrap);" \
         "KMP_FRESH_INSTALL_PROOF=0 leaves it out" >&2
    exit 1
  fi
  .ci/fresh-install-proof.sh
fi
