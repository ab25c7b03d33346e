// A Java share group (KIP-932) on one cluster; run by tests/integration/test_mirror_sync.py with
// Kafka's own jars on the classpath:
//   java -cp "<kafka libs>/*" ShareCheck.java consume <bootstrap> <group> <topic> <n>
//   java -cp "<kafka libs>/*" ShareCheck.java offsets <bootstrap> <group> <topic> <partitions>
//   java -cp "<kafka libs>/*" ShareCheck.java alter <bootstrap> <group> <topic> <partition:offset,...>
// consume: sets the group's share.auto.offset.reset to earliest, reads at least <n> records with a
// KafkaShareConsumer (implicit acknowledgement), commits the acknowledgements and leaves; prints
// "R <partition> <offset> <key hex|->" per record and "N <records>".
// alter: resets the (empty) group's start offsets (Admin.alterShareGroupOffsets); prints "OK".
// offsets: prints "O <partition> <start offset|-1>" per partition (Admin.listShareGroupOffsets).
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareCheck {
    static String hex(byte[] b) {
        if (b == null) return "-";
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.length() == 0 ? "_" : s.toString();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], group = args[2], topic = args[3];
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            if (mode.equals("offsets")) {
                int partitions = Integer.parseInt(args[4]);
                List<TopicPartition> tps = new ArrayList<>();
                for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
                Map<TopicPartition, OffsetAndMetadata> got = admin
                    .listShareGroupOffsets(Map.of(group, new ListShareGroupOffsetsSpec().topicPartitions(tps)))
                    .partitionsToOffsetAndMetadata(group).get();
                for (TopicPartition tp : tps) {
                    OffsetAndMetadata o = got.get(tp);
                    System.out.println("O " + tp.partition() + " " + (o == null ? -1 : o.offset()));
                }
                return;
            }
            if (mode.equals("alter")) {
                Map<TopicPartition, Long> offsets = new HashMap<>();
                for (String spec : args[4].split(",")) {
                    String[] f = spec.split(":");
                    offsets.put(new TopicPartition(topic, Integer.parseInt(f[0])), Long.parseLong(f[1]));
                }
                admin.alterShareGroupOffsets(group, offsets).all().get();
                System.out.println("OK");
                return;
            }
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(res, List.of(op))).all().get();
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        int n = Integer.parseInt(args[4]), seen = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    seen++;
                    System.out.println("R " + r.partition() + " " + r.offset() + " " + hex(r.key()));
                }
            }
            consumer.commitSync();
        }
        System.out.println("N " + seen);
    }
}
