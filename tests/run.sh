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
python3 -m pytest tests/integration tests/security tests/tls "${select[@]}" "$@"
if [[ $tier == long && "${KMP_FRESH_INSTALL_PROOF:-1}" != 0 ]]; then
  if ((EUID != 0)) || ! command -v debootstrap >/dev/null; then
    echo "tests/run.sh --long: the fresh-install proof needs root and debootstrap (apt-get install debootstrap);" \
         "KMP_FRESH_INSTALL_PROOF=0 leaves it out" >&2
    exit 1
  fi
  .ci/fresh-install-proof.sh
fi
