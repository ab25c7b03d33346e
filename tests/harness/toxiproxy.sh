#!/usr/bin/env bash
# Build Shopify's toxiproxy server (a latency-injecting TCP relay, Go) once from the Go module
# proxy into a cache directory and print the binary's path. Used by tests/harness/latency.py
# (the WAN test and bench/wan_bench.py). Later calls reuse the cache.
#
#   tests/harness/toxiproxy.sh
#
# Cache: ${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/toxiproxy-<version>/toxiproxy-server
set -euo pipefail
version="v2.5.0"
dir="${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/toxiproxy-$version"
bin="$dir/toxiproxy-server"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "toxiproxy.sh: the go command is needed to build toxiproxy $version" >&2; exit 1; }
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
GOBIN="$work" GOFLAGS=-mod=mod go install "github.com/Shopify/toxiproxy/v2/cmd/server@$version" >&2
mv "$work/server" "$bin"
echo "$bin"
