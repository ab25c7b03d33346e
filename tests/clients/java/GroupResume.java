// A Java consumer group before and after a failover; run by tests/integration/test_mirror_sync.py
// with Kafka's own jars on the classpath:
//   java -cp "<kafka libs>/*" GroupResume.java commit <bootstrap> <group> <classic|consumer> <topic:partition:offset,...>
//   java -cp "<kafka libs>/*" GroupResume.java resume <bootstrap> <group> <classic|consumer> <topic,...> <expected>
// commit: joins the group (subscribe), consumes until every listed partition's position has
// reached its offset, then commits exactly those offsets (commitSync) and leaves; prints
// "C <topic> <partition> <offset>" per committed offset.
// resume: joins the group, starts at its committed offsets, prints "S <topic> <partition> <position>"
// once assigned and "R <topic> <partition> <offset> <value hex|->" per record until <expected>
// records arrived (or 60 s), then commits and leaves. read_committed in both modes.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupResume {
    static String hex(byte[] b) {
        if (b == null) return "-";
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.length() == 0 ? "_" : s.toString();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], group = args[2], protocol = args[3];
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", protocol);
        c.put("isolation.level", "read_committed");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            long deadline = System.currentTimeMillis() + 60_000;
            if (mode.equals("commit")) {
                Map<TopicPartition, OffsetAndMetadata> targets = new HashMap<>();
                Set<String> topics = new TreeSet<>();
                for (String spec : args[4].split(",")) {
                    String[] f = spec.split(":");
                    targets.put(new TopicPartition(f[0], Integer.parseInt(f[1])), new OffsetAndMetadata(Long.parseLong(f[2]), "from-source"));
                    topics.add(f[0]);
                }
                consumer.subscribe(topics);
                while (System.currentTimeMillis() < deadline) {
                    consumer.poll(Duration.ofMillis(200));
                    boolean reached = consumer.assignment().containsAll(targets.keySet());
                    for (TopicPartition tp : targets.keySet()) {
                        reached = reached && consumer.position(tp) >= targets.get(tp).offset();
                    }
                    if (reached) break;
                }
                consumer.commitSync(targets);
                for (Map.Entry<TopicPartition, OffsetAndMetadata> e : targets.entrySet()) {
                    System.out.println("C " + e.getKey().topic() + " " + e.getKey().partition() + " " + e.getValue().offset());
                }
                return;
            }
            consumer.subscribe(Arrays.asList(args[4].split(",")));
            int expected = Integer.parseInt(args[5]), seen = 0;
            boolean started = false;
            while (seen < expected && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                if (!started && !consumer.assignment().isEmpty()) {
                    started = true;
                    for (TopicPartition tp : consumer.assignment()) {
                        OffsetAndMetadata committed = consumer.committed(Collections.singleton(tp)).get(tp);
                        System.out.println("S " + tp.topic() + " " + tp.partition() + " " + (committed == null ? -1 : committed.offset()));
                    }
                }
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    seen++;
                    System.out.println("R " + r.topic() + " " + r.partition() + " " + r.offset() + " " + hex(r.value()));
                }
            }
            // Linger briefly: anything beyond <expected> would be a duplicate.
            long quiet = System.currentTimeMillis() + 2_000;
            while (System.currentTimeMillis() < quiet) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("R " + r.topic() + " " + r.partition() + " " + r.offset() + " " + hex(r.value()));
                }
            }
            consumer.commitSync();
        }
    }
}
