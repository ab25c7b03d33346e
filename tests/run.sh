#!/usr/bin/env bash
# The test command (README "Test"): Rust unit and property tests, then the real-Kafka suites
# (tests/integration, tests/security) that start two KRaft clusters on loopback once per session
# and drive Java, librdkafka, kafka-python, franz-go, Kafka's own tools and hand-built hostile
# frames through the proxy binary; tests/tls does the same over TLS and SASL against two more
# clusters with secure listeners.
#   tests/run.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --workspace
cargo test --locked --workspace
tests/harness/kafka-jars.sh >/dev/null   # fetch Kafka's jars once (cached) before the clock starts
tests/harness/toxiproxy.sh >/dev/null    # the WAN test's latency relay (built once from the Go module proxy)
docker/build-image.sh >/dev/null         # the container image (a static release binary on scratch; skipped when up to date)
python3 -m pytest tests/integration tests/security tests/tls "$@"
