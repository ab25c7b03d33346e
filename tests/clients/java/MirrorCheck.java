// What a Java client sees of a mirror topic through the proxy; run by
// tests/integration/test_mirror_clients.py with Kafka's own jars on the classpath:
//   java -cp "<kafka libs>/*" MirrorCheck.java consume <bootstrap> <topic> <partitions> <read_committed|read_uncommitted> <expected>
//   java -cp "<kafka libs>/*" MirrorCheck.java produce <bootstrap> <topic>
// consume prints "R <partition> <offset> <key hex|-> <value hex|->" per record until <expected>
// records arrived (or 60 s), then "P <partition> <position>".
// produce sends one record (default retries and delivery timeout) and prints
// "E <elapsed ms> <exception class>: <message>" or "OK <offset>".
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class MirrorCheck {
    static String hex(byte[] b) {
        if (b == null) return "-";
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.length() == 0 ? "_" : s.toString();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1], topic = args[2];
        if (mode.equals("produce")) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
                long t0 = System.currentTimeMillis();
                try {
                    RecordMetadata md = producer.send(new ProducerRecord<>(topic, "k".getBytes(), "v".getBytes())).get();
                    System.out.println("OK " + md.offset());
                } catch (java.util.concurrent.ExecutionException e) {
                    System.out.println("E " + (System.currentTimeMillis() - t0) + " " + e.getCause().getClass().getName() + ": " + e.getCause().getMessage());
                }
            }
            return;
        }
        int partitions = Integer.parseInt(args[3]);
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", args[4]);
        c.put("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            int expected = Integer.parseInt(args[5]), seen = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (seen < expected && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    seen++;
                    System.out.println("R " + r.partition() + " " + r.offset() + " " + hex(r.key()) + " " + hex(r.value()));
                }
            }
            for (TopicPartition tp : tps) System.out.println("P " + tp.partition() + " " + consumer.position(tp));
        }
    }
}
