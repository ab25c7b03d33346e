#!/usr/bin/env bash
# The README "Run" command: a local source and destination Kafka (KRaft, on loopback), the proxy
# in front of the destination, a cluster mirror created through the proxy copying a source topic
# at identical offsets, Kafka's own tools talking to the destination *through* the proxy, the
# read-only refusal, a failover and a consumer group resuming on the destination at its source offset. Leaves everything running with KMP_DEMO_KEEP=1; otherwise stops it all at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${KMP_DEMO_DIR:-/tmp/kmp-demo}
listen_port=${KMP_DEMO_PORT:-9192}
admin_port=${KMP_DEMO_ADMIN_PORT:-9180}
admin=127.0.0.1:$admin_port
source_port=${KMP_DEMO_SOURCE_PORT:-19092}
dest_port=${KMP_DEMO_DEST_PORT:-29092}
src=127.0.0.1:$source_port
upstream=127.0.0.1:$dest_port,127.0.0.1:$((dest_port + 1)),127.0.0.1:$((dest_port + 2))

# Every port the demo listens on, checked before anything starts: the proxy's bootstrap, its
# node listeners (brokers 1-3 at the default node_port_base, the bootstrap port + 1, plus the node
# id: bootstrap + 2 .. bootstrap + 4) and admin endpoint, and each
# broker's client and controller port (controller = client port + 100).
declare -A uses=(
  [$listen_port]="the proxy's bootstrap listener (KMP_DEMO_PORT)"
  [$admin_port]="the proxy's admin endpoint (KMP_DEMO_ADMIN_PORT)"
  [$source_port]="the source broker (KMP_DEMO_SOURCE_PORT)"
  [$((source_port + 100))]="the source controller (KMP_DEMO_SOURCE_PORT + 100)"
)
for i in 1 2 3; do
  uses[$((listen_port + 1 + i))]="the proxy's listener for destination broker $i (KMP_DEMO_PORT + $((1 + i)))"
  uses[$((dest_port + i - 1))]="destination broker $i (KMP_DEMO_DEST_PORT + $((i - 1)))"
  uses[$((dest_port + 100 + i - 1))]="destination controller $i (KMP_DEMO_DEST_PORT + $((100 + i - 1)))"
done
taken=0
for port in $(printf '%s\n' "${!uses[@]}" | sort -n); do
  if ! python3 -c 'import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "$port" 2>/dev/null; then
    echo "demo: port $port is already in use; it is needed for ${uses[$port]}" >&2
    taken=1
  fi
done
if [[ $taken == 1 ]]; then
  echo "demo: free the port(s) above or choose others with KMP_DEMO_PORT, KMP_DEMO_ADMIN_PORT, KMP_DEMO_SOURCE_PORT, KMP_DEMO_DEST_PORT" >&2
  exit 1
fi

cleanup() {
  status=$?
  [[ -n "${proxy_pid:-}" ]] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null || true
  # `down` waits until every broker has exited (killing what does not stop in time).
  python3 tests/harness/kafka_cluster.py down --dir "$dir"
  if [[ $status != 0 ]]; then echo "demo: failed (exit $status); brokers and proxy stopped; logs in $dir" >&2; fi
}
if [[ "${KMP_DEMO_KEEP:-0}" != 1 ]]; then
  trap cleanup EXIT
else
  trap '[[ $? == 0 ]] || { echo "demo: failed; left running for inspection (KMP_DEMO_KEEP=1): stop with python3 tests/harness/kafka_cluster.py down --dir $dir" >&2; }' EXIT
fi

echo "==> building kafka-mirror-proxy (release)"
cargo build --release --locked -p kafka-mirror-proxy
libs=$(tests/harness/kafka-jars.sh)
kt() { java -cp "$libs/*" "$@"; }

echo "==> starting source (1 broker, :$source_port) and destination (3 brokers, :$dest_port-$((dest_port + 2))) clusters"
python3 tests/harness/kafka_cluster.py down --dir "$dir"
rm -rf "$dir"  # a fresh start: the demo's topics are created below
python3 tests/harness/kafka_cluster.py up --dir "$dir" --source-port "$source_port" --dest-port "$dest_port"

echo "==> creating topic 'orders' on the source and producing 6 records to it"
kt org.apache.kafka.tools.TopicCommand --bootstrap-server $src --create --topic orders --partitions 1 --replication-factor 1
printf 'order-1\norder-2\norder-3\n' | kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server $src --topic orders
printf 'order-4\norder-5\norder-6\n' | kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server $src --topic orders
echo "==> starting the proxy on 127.0.0.1:$listen_port in front of the destination (admin http://$admin)"
KMP_MIRROR_SOURCE_ALLOW="$src" ./target/release/kafka-mirror-proxy run --upstream "$upstream" \
  --listen "127.0.0.1:$listen_port" --admin-listen "$admin" >"$dir/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 100); do
  curl -sf "http://$admin/readyz" >/dev/null && break
  if ! kill -0 "$proxy_pid" 2>/dev/null; then
    echo "demo: the proxy exited at start; its log ($dir/proxy.log):" >&2
    tail -5 "$dir/proxy.log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! curl -sf "http://$admin/readyz"; then
  echo "demo: the proxy is not ready after 10 s; /readyz says: $(curl -s "http://$admin/readyz")" >&2
  exit 1
fi

bs=127.0.0.1:$listen_port
echo "==> creating the cluster mirror 'demo' and starting 'orders' (KIP-1279 CLI flags, Kafka RPCs answered by the proxy)"
printf 'bootstrap.servers=%s\n' "$src" >"$dir/demo-mirror.properties"
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
kt org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server $src --topic orders --from-beginning \
  --max-messages 6 --property print.offset=true 2>/dev/null
echo "--- destination, through the proxy:"
kt org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$bs" --topic orders --from-beginning \
  --max-messages 6 --property print.offset=true 2>/dev/null
echo "==> the mirror as the KIP-1279 CLI shows it (kafka-mirror-proxy mirrors, Kafka RPCs to the proxy)"
./target/release/kafka-mirror-proxy mirrors --bootstrap-server "$bs" --list
./target/release/kafka-mirror-proxy mirrors --bootstrap-server "$bs" --describe --mirror demo
echo "==> producing to the mirror topic through the proxy is refused (read-only until failover)"
printf 'not-allowed\n' | kt org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$bs" --topic orders \
  --producer-property retries=0 2>&1 | grep -m1 -o 'PolicyViolationException.*' || true
echo "==> consumer group 'billing' has processed 'orders' up to offset 4 on the source (committed there)"
kt org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server $src --group billing \
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
