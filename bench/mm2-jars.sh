#!/usr/bin/env bash
# Fetch Apache Kafka MirrorMaker 2 (connect-mirror, connect-runtime and their runtime dependencies) from
# Maven Central once, into a cache directory, and print that directory. Used by bench/mirror_bench.py only;
# the test suite does not need it.
#
#   bench/mm2-jars.sh [VERSION]      (default: $KMP_KAFKA_VERSION or 4.1.2)
#
# Cache: ${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/mm2-<version>/libs
set -euo pipefail
version="${1:-${KMP_KAFKA_VERSION:-4.1.2}}"
cache="${KMP_CACHE_DIR:-$HOME/.cache/kafka-mirror-proxy}/mm2-$version"
libs="$cache/libs"
if [[ -f "$cache/.complete" ]]; then
  echo "$libs"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kmp.bench</groupId><artifactId>mm2-dist</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-mirror</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-mirror-client</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-transforms</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-clients</artifactId><version>$version</version></dependency>
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
