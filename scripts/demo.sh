#!/usr/bin/env bash
# The README "Run" command: a local source and destination Kafka (KRaft, on loopback), the proxy
# in front of the destination, a cluster mirror created through the proxy copying a source topic
# at identical offsets, Kafka's own tools talking to the destination *through* the proxy, the
# read-only refusal, a failover and a consumer group resuming on the destination at its source offset. Leaves everything running with KMP_DEMO_KEEP=1; otherwise stops it all at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KMP_DEMO_DIR:-/tmp/kmp-demo}
listen_port=${KMP_DEMO_PORT:-9192}
admin=127.0.0.1:${KMP_DEMO_ADMIN_PORT:-9180}

cleanup() {
  [[ -n "${proxy_pid:-}" ]] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null || true
  python3 tests/harness/kafka_cluster.py down --dir "$dir"
}
if [[ "${KMP_DEMO_KEEP:-0}" != 1 ]]; then trap cleanup EXIT; fi

echo "==> building kafka-mirror-proxy (release)"
cargo build --release --locked -p kafka-mirror-proxy
libs=$(tests/harness/kafka-jars.sh)
kt() { java -cp "$libs/*" "$@"; }

echo "==> starting source (1 broker, :19092) and destination (3 brokers, :29092-29094) clusters"
python3 tests/harness/kafka_cluster.py down --dir "$dir"
rm -rf "$dir"  # a fresh start: the demo's topics are created below
python3 tests/harness/kafka_cluster.py up --dir "$dir" --source-port 19092 --dest-port 29092

echo "==> creating topic 'orders' on the source and producing 6 records to it"
kt org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:19092 --create --topic orders --partitions 1 --replication-factor 1
printf 'order-1\norder-2\norder-3\n' | kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server 127.0.0.1:19092 --topic orders
printf 'order-4\norder-5\norder-6\n' | kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server 127.0.0.1:19092 --topic orders
echo "==> starting the proxy on 127.0.0.1:$listen_port in front of the destination (admin http://$admin)"
KMP_MIRROR_SOURCE_ALLOW="127.0.0.1:19092" ./target/release/kafka-mirror-proxy run --upstream 127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094 \
  --listen "127.0.0.1:$listen_port" --admin-listen "$admin" >"$dir/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 100); do curl -sf "http://$admin/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "http://$admin/readyz"

bs=127.0.0.1:$listen_port
echo "==> creating the cluster mirror 'demo' and starting 'orders' (KIP-1279 CLI flags, Kafka RPCs answered by the proxy)"
printf 'bootstrap.servers=127.0.0.1:19092\n' >"$dir/demo-mirror.properties"
./target/release/kafka-mirror-proxy mirrors --bootstrap-server "$bs" --create --mirror demo --mirror-config "$dir/demo-mirror.properties"
./target/release/kafka-mirror-proxy mirrors --bootstrap-server "$bs" --start --mirror demo --topics orders
echo "==> brokers as clients see them through the proxy (addresses point at the proxy)"
kt org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "$bs" 2>/dev/null | grep -E '^[^ ].*\(id:' || true
echo "==> create a topic, produce 5 lz4-compressed records and consume them, all through the proxy"
kt org.apache.kafka.tools.TopicCommand --bootstrap-server "$bs" --create --topic demo --partitions 3 --replication-factor 3
printf 'hello\nfrom\nkafka-mirror-proxy\nvia\nthe destination\n' |
  kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$bs" --topic demo --producer-property compression.type=lz4
kt org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bs" --topic demo --from-beginning \
  --max-messages 5 --group demo-group --property print.partition=true --property print.offset=true 2>/dev/null
echo "==> 'orders' as mirrored into the destination, read through the proxy: same offsets as on the source"
for _ in $(seq 100); do
  curl -s "http://$admin/metrics" | grep -q '^kmp_mirror_destination_next_offset{mirror="demo",topic="orders",partition="0"} 6' && break
  sleep 0.2
done
echo "--- source:"
kt org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server 127.0.0.1:19092 --topic orders --from-beginning \
  --max-messages 6 --property print.offset=true 2>/dev/null
echo "--- destination, through the proxy:"
kt org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bs" --topic orders --from-beginning \
  --max-messages 6 --property print.offset=true 2>/dev/null
echo "==> the mirror as the KIP-1279 CLI shows it (kafka-mirror-proxy mirrors, Kafka RPCs to the proxy)"
./target/release/kafka-mirror-proxy mirrors --bootstrap-server "$bs" --list
./target/release/kafka-mirror-proxy mirrors --bootstrap-server "$bs" --describe --mirror demo
echo "==> producing to the mirror topic through the proxy is refused (read-only until failover)"
printf 'not-allowed\n' | kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$bs" --topic orders \
  --producer-property retries=0 2>&1 | grep -m1 -o 'TopicAuthorizationException.*' || true
echo "==> consumer group 'billing' has processed 'orders' up to offset 4 on the source (committed there)"
kt org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server 127.0.0.1:19092 --group billing \
  --topic orders --reset-offsets --to-offset 4 --execute 2>/dev/null | grep -E 'GROUP|billing'
echo "==> failover: stop mirroring 'orders' once it has no lag; group offsets are synced once more; it becomes writable"
./target/release/kafka-mirror-proxy mirrors --bootstrap-server "$bs" --stop --mirror demo --topics orders --graceful-timeout-ms 30000
printf 'order-7-after-failover\n' | kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$bs" --topic orders
echo "--- 'orders' through the proxy after failover: the producer continued at offset 6"
kt org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bs" --topic orders --from-beginning \
  --max-messages 7 --property print.offset=true 2>/dev/null
echo "--- group 'billing' through the proxy resumes where it stopped on the source (offset 4), no record twice"
kt org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bs" --topic orders --group billing \
  --max-messages 3 --property print.offset=true 2>/dev/null
curl -s "http://$admin/v1/mirrors/demo"; echo
echo "==> a few proxy metrics"
curl -s "http://$admin/metrics" | grep -E '^kmp_(requests_total|open_connections|known_brokers|bytes_total|mirror_lag_records)' | head -14
if [[ "${KMP_DEMO_KEEP:-0}" == 1 ]]; then
  echo "==> left running: proxy pid $proxy_pid, clusters in $dir (stop: python3 tests/harness/kafka_cluster.py down --dir $dir)"
fi
