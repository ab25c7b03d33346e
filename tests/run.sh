#!/usr/bin/env bash
# The test command (README "Test"): Rust unit and property tests, then the real-Kafka suite
# (tests/integration) that starts two KRaft clusters on loopback once and drives Java,
# librdkafka, kafka-python, franz-go and Kafka's own tools through the proxy binary.
#   tests/run.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --workspace
cargo test --locked --workspace
tests/harness/kafka-jars.sh >/dev/null   # fetch Kafka's jars once (cached) before the clock starts
python3 -m pytest tests/integration "$@"
