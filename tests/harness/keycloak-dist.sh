#!/usr/bin/env bash
# Fetch Keycloak's server distribution (org.keycloak:keycloak-quarkus-dist, tar.gz) from Maven
# Central once, unpack it into a cache directory, and print the unpacked Keycloak home
# (the directory holding bin/kc.sh). Later calls reuse the cache.
#
#   tests/harness/keycloak-dist.sh [VERSION]   (VERSION default: $KMP_KEYCLOAK_VERSION or 26.5.6)
#
# Cache: ${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/keycloak-<version>/keycloak-<version>
# Keycloak 26 needs Java 21+ to run (tests/harness/oidc_idp.py picks the JDK).
set -euo pipefail
version="${1:-${KMP_KEYCLOAK_VERSION:-26.5.6}}"
cache="${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/keycloak-$version"
home="$cache/keycloak-$version"
if [[ -f "$cache/.complete" ]]; then
  echo "$home"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dependency:copy needs no project; run it from an empty directory so no pom is picked up.
(cd "$work" && mvn -q -B dependency:copy \
  -Dartifact="org.keycloak:keycloak-quarkus-dist:$version:tar.gz" -DoutputDirectory="$work/dl" >&2)
rm -rf "$home" "$cache/unpack.tmp"
mkdir -p "$cache/unpack.tmp"
tar -xzf "$work/dl/keycloak-quarkus-dist-$version.tar.gz" -C "$cache/unpack.tmp"
mv "$cache/unpack.tmp/keycloak-$version" "$home"
rm -rf "$cache/unpack.tmp"
touch "$cache/.complete"
echo "$home"
