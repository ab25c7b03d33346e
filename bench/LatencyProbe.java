// Produce round-trip latency at microsecond resolution (Kafka's perf tool reports whole ms):
// sends 1 KiB records one at a time (acks=1, send().get()) and prints percentiles.
//   java -cp "<kafka libs>/*" bench/LatencyProbe.java <bootstrap> <topic> <count>
// Output: "p50_us=… p99_us=… avg_us=…"
import java.util.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class LatencyProbe {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        int count = Integer.parseInt(args[2]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "1");
        p.put("linger.ms", "0");
        byte[] value = new byte[1024];
        new Random(1).nextBytes(value);
        long[] us = new long[count];
        try (Producer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < 2000; i++) producer.send(new ProducerRecord<>(topic, 0, null, value)).get();  // warm-up
            for (int i = 0; i < count; i++) {
                long t = System.nanoTime();
                producer.send(new ProducerRecord<>(topic, 0, null, value)).get();
                us[i] = (System.nanoTime() - t) / 1000;
            }
        }
        Arrays.sort(us);
        double avg = Arrays.stream(us).average().orElse(0);
        System.out.printf("p50_us=%d p99_us=%d avg_us=%.1f%n", us[count / 2], us[(int) (count * 0.99)], avg);
    }
}
