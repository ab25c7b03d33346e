#!/usr/bin/env bash
# Fetch Apache Kafka's jars from Maven Central once, into a cache directory, and print that
# directory. Later calls reuse the cache.
#
#   tests/harness/kafka-jars.sh [VERSION] [SET]   (VERSION default: $KMP_KAFKA_VERSION or 4.1.2)
#
# SET: `kafka` (default: broker, tools, clients and their runtime dependencies) or `mm2`
# (MirrorMaker 2: connect-mirror, connect-runtime, clients; used by bench/mirror_bench.py).
# Cache: ${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/<kafka|mm2>-<version>/libs
set -euo pipefail
version="${1:-${KMP_KAFKA_VERSION:-4.1.2}}"
set_name="${2:-kafka}"
case "$set_name" in
  kafka) artifacts="kafka_2.13 kafka-tools kafka-clients" ;;
  mm2) artifacts="connect-mirror connect-mirror-client connect-runtime connect-json connect-transforms kafka-clients" ;;
  *) echo "unknown jar set $set_name (kafka|mm2)" >&2; exit 2 ;;
esac
cache="${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/$set_name-$version"
libs="$cache/libs"
if [[ -f "$cache/.complete" ]]; then
  echo "$libs"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
deps=""
for a in $artifacts; do
  deps+="<dependency><groupId>org.apache.kafka</groupId><artifactId>$a</artifactId><version>$version</version></dependency>"
done
cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kmp.harness</groupId><artifactId>kafka-$set_name</artifactId><version>1</version>
  <dependencies>
    $deps
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>2.0.17</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
rm -rf "$libs.tmp"
mvn -q -B -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs.tmp" >&2
rm -rf "$libs"
mv "$libs.tmp" "$libs"
touch "$cache/.complete"
echo "$libs"
